/* Tracing a run split across two devices (the CPU and the test device, which has memory of
 * its own): the file parses as JSON, every device has a track, every kernel lies inside its
 * run's span, every copy ends before the kernel that reads it starts, and tracing that is off
 * records nothing. The same checks on the CPU and opencl:0 (asynchronous copies and waits on
 * events, sched/xfer.h) when an OpenCL device exists. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tandem/tandem.h"

#define MODEL TANDEM_SOURCE_DIR "/tests/models/resnet_blocks/model.onnx"

static void run_model(tdm_session *s, tdm_env *env) {
    int64_t dims[4] = {1, 3, 64, 64};
    tdm_tensor *x = NULL, *y = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 4, dims, &x));
    tdm_value_desc in, out;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    assert_null(tdm_model_output(tdm_session_model(s), 0, &out));
    tdm_status *st = tdm_session_run(s, 1, &in.name, (const tdm_tensor *const *)&x, 1, &out.name, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    tdm_tensor_free(x);
    tdm_tensor_free(y);
}

/* Runs the model twice under tracing on `devices` (placement first, `affinity` rules) and
 * checks the trace; `accel` is the track of the device other than the CPU. Returns how many
 * asynchronous copies the trace shows, or -1 when `accel` does not exist here. */
static int check_trace(const char *devices, const char *accel, const char *affinity) {
    char dir[] = "/tmp/tandem-trace-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("TANDEM_CACHE_DIR", dir, 1);
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    assert_null(tdm_env_create(NULL, &env));
    bool found = false;
    for (size_t d = 0; d < tdm_env_device_count(env); d++)
        found |= !strcmp(tdm_env_device_name(env, d), accel);
    if (!found) {
        tdm_env_free(env);
        rmdir(dir);
        return -1;
    }
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = devices, .threads = 1,
                              .opt_level = 1, .placement = "first", .affinity = affinity};
    tdm_status *st = tdm_session_create(env, MODEL, &so, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    char path[256];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    /* off: stop without start is an error, and nothing is written */
    st = tdm_session_trace_stop(s, path);
    assert_non_null(st);
    tdm_status_free(st);
    assert_int_not_equal(access(path, F_OK), 0);
    assert_null(tdm_session_trace_start(s));
    run_model(s, env);
    run_model(s, env);
    assert_null(tdm_session_trace_stop(s, path));

    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) fail_msg("trace is not JSON: %s (line %d)", err.text, err.line);
    json_t *events = json_object_get(root, "traceEvents");
    assert_true(json_is_array(events));
    /* tracks by id */
    char names[64][64] = {{0}};
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (ph && !strcmp(ph, "M") && !strcmp(json_string_value(json_object_get(e, "name")), "thread_name")) {
            int tid = (int)json_integer_value(json_object_get(e, "tid"));
            if (tid > 0 && tid < 64)
                snprintf(names[tid], sizeof names[tid], "%s",
                         json_string_value(json_object_get(json_object_get(e, "args"), "name")));
        }
    }
    bool have_cpu = false, have_test = false, have_copies = false;
    for (int t = 0; t < 64; t++) {
        have_cpu |= !strcmp(names[t], "cpu");
        have_test |= !strcmp(names[t], accel);
        have_copies |= strstr(names[t], "copies") != NULL;
    }
    assert_true(have_cpu && have_test && have_copies);
    /* runs, kernels, copies */
    double runs[8][2];
    int n_runs = 0, n_kernels = 0, n_copies = 0, n_async = 0;
    json_array_foreach(events, i, e) {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (cat && !strcmp(cat, "run") && n_runs < 8) {
            double ts = json_number_value(json_object_get(e, "ts"));
            runs[n_runs][0] = ts;
            runs[n_runs][1] = ts + json_number_value(json_object_get(e, "dur"));
            n_runs++;
        }
    }
    assert_int_equal(n_runs, 2);
    /* copy end times by flow id, then the consumer's start by the same id */
    double copy_end[4096];
    for (int k = 0; k < 4096; k++) copy_end[k] = -1;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (!ph || !cat) continue;
        if (!strcmp(ph, "X") && strcmp(cat, "run") && strcmp(cat, "copy")) {
            n_kernels++;
            double ts = json_number_value(json_object_get(e, "ts"));
            double end = ts + json_number_value(json_object_get(e, "dur"));
            bool inside = false;
            for (int r = 0; r < n_runs; r++) inside |= ts >= runs[r][0] - 1e-3 && end <= runs[r][1] + 1e-3;
            if (!inside) fail_msg("kernel %s lies outside every run", json_string_value(json_object_get(e, "name")));
        }
        if (!strcmp(ph, "X") && !strcmp(cat, "copy")) {
            n_copies++;
            n_async += json_is_true(json_object_get(json_object_get(e, "args"), "async"));
        }
        if (!strcmp(ph, "s")) {
            json_int_t id = json_integer_value(json_object_get(e, "id"));
            if (id > 0 && id < 4096) copy_end[id] = json_number_value(json_object_get(e, "ts"));
        }
    }
    int n_flows = 0;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "f")) continue;
        json_int_t id = json_integer_value(json_object_get(e, "id"));
        assert_true(id > 0 && id < 4096 && copy_end[id] >= 0);
        double consumer_start = json_number_value(json_object_get(e, "ts"));
        if (copy_end[id] > consumer_start + 1e-3)
            fail_msg("copy %lld ends at %.3f after its reader starts at %.3f", (long long)id, copy_end[id],
                     consumer_start);
        n_flows++;
    }
    assert_true(n_kernels >= 2 * 10);
    assert_true(n_copies >= 2);
    assert_true(n_flows >= 2);
    json_decref(root);
    tdm_session_free(s);
    tdm_env_free(env);
    unlink(path);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return n_async;
}

static void test_mixed_device_trace(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    setenv("TANDEM_TEST_DEVICE_OPS", "Conv,FusedConv,Relu,MaxPool,Add", 1);
    assert_int_equal(check_trace("test:0,cpu", "test:0", NULL), 0); /* blocking copies only */
    unsetenv("TANDEM_TEST_DEVICES");
    unsetenv("TANDEM_TEST_DEVICE_OPS");
}

/* opencl:0 with the additions and the pooling on the CPU: copies both ways in the middle of
 * the model, downloads started as soon as their producer is queued */
static void test_opencl_async_trace(void **state) {
    (void)state;
    int n_async = check_trace("opencl:0,cpu", "opencl:0", "Add=cpu;GlobalAveragePool=cpu");
    if (n_async < 0) {
        printf("skipped: no OpenCL device\n");
        return;
    }
    assert_true(n_async >= 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mixed_device_trace),
                                       cmocka_unit_test(test_opencl_async_trace)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
