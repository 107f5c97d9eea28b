/* Throughput mode: split batches and replica runs give the single-device outputs for every
 * batch size (also smaller than the number of devices), in order; a slowed device loses its
 * share of the batch within a few runs; a device failing mid-run fails only that request, is
 * taken out, probed after a back-off and taken back. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
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

#define MODEL TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx"

static tdm_session *open_session(tdm_env *env, const char *devices, int mode) {
    tdm_session *s = NULL;
    tdm_session_options so = {TDM_API_VERSION, devices, 1, 1, false};
    so.mode = mode;
    tdm_status *st = tdm_session_create(env, MODEL, &so, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    return s;
}

static tdm_tensor *make_input(tdm_env *env, tdm_session *s, int64_t batch, int seed) {
    tdm_value_desc d;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &d));
    int64_t dims[TDM_MAX_RANK];
    for (int i = 0; i < d.rank; i++) dims[i] = d.dims[i] < 0 ? 1 : d.dims[i];
    dims[0] = batch;
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, d.rank, dims, &t));
    float *p = tdm_tensor_data(t);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++)
        p[i] = (float)sin((double)(i * 7 + seed)) * 2.0f; /* each row differs */
    return t;
}

static tdm_status *run(tdm_session *s, const tdm_tensor *x, tdm_tensor **y) {
    tdm_value_desc in, out;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    assert_null(tdm_model_output(tdm_session_model(s), 0, &out));
    return tdm_session_run(s, 1, &in.name, &x, 1, &out.name, y);
}

static void assert_close(const tdm_tensor *a, const tdm_tensor *b) {
    assert_int_equal(tdm_tensor_element_count(a), tdm_tensor_element_count(b));
    assert_int_equal(tdm_tensor_dims(a)[0], tdm_tensor_dims(b)[0]);
    const float *x = tdm_tensor_data_const(a), *y = tdm_tensor_data_const(b);
    for (int64_t i = 0; i < tdm_tensor_element_count(a); i++)
        if (fabsf(x[i] - y[i]) > 1e-5f + 1e-4f * fabsf(y[i])) fail_msg("element %lld: %g vs %g", (long long)i, x[i], y[i]);
}

static void test_split_equals_single(void **state) {
    (void)state;
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_session *ref = open_session(env, "cpu", TDM_MODE_LATENCY);
    tdm_session *tp = open_session(env, "cpu,test:0", TDM_MODE_THROUGHPUT);
    assert_int_equal(tdm_session_device_count(tp), 2);
    const int64_t batches[] = {1, 2, 3, 7, 16, 5};
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        tdm_tensor *x = make_input(env, ref, batches[b], (int)b), *y0 = NULL, *y1 = NULL;
        assert_null(run(ref, x, &y0));
        tdm_status *st = run(tp, x, &y1);
        if (st) fail_msg("batch %lld: %s", (long long)batches[b], tdm_status_message(st));
        assert_close(y1, y0); /* same rows in the same order */
        tdm_tensor_free(x);
        tdm_tensor_free(y0);
        tdm_tensor_free(y1);
    }
    /* both replicas did work */
    tdm_device_stats a, c;
    assert_null(tdm_session_device_stats(tp, 0, &a));
    assert_null(tdm_session_device_stats(tp, 1, &c));
    assert_true(a.items > 0 && c.items > 0);
    tdm_session_free(tp);
    tdm_session_free(ref);
    tdm_env_free(env);
}

static void test_rebalance_towards_faster(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    setenv("TANDEM_TEST_DEVICE_DELAY_US", "20000", 1); /* 20 ms per kernel: a slow device */
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_session *tp = open_session(env, "cpu,test:0", TDM_MODE_THROUGHPUT);
    tdm_device_stats st0;
    assert_null(tdm_session_device_stats(tp, 1, &st0));
    assert_true(fabs(st0.share - 0.5) < 1e-9); /* starts even */
    int runs = 0;
    double share = 1;
    for (; runs < 8; runs++) {
        tdm_tensor *x = make_input(env, tp, 64, runs), *y = NULL;
        assert_null(run(tp, x, &y));
        tdm_tensor_free(x);
        tdm_tensor_free(y);
        tdm_device_stats slow;
        assert_null(tdm_session_device_stats(tp, 1, &slow));
        assert_string_equal(slow.device, "test:0");
        share = slow.share;
        if (share < 0.2) break;
    }
    if (share >= 0.2) fail_msg("the slowed device still gets %.0f%% of the batch after %d runs", 100 * share, runs);
    tdm_session_free(tp);
    tdm_env_free(env);
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
}

static void test_device_failure_fails_only_its_request(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    /* every 2nd kernel: the first split run (shares 1/2 each, nothing measured yet) runs at
     * least two kernels on test:0 and fails; with a longer period the first run could pass,
     * and a loaded machine could then measure test:0 slow enough to give it no rows at all */
    setenv("TANDEM_TEST_DEVICE_FAIL_EVERY", "2", 1);
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_session *ref = open_session(env, "cpu", TDM_MODE_LATENCY);
    tdm_session *tp = open_session(env, "cpu,test:0", TDM_MODE_THROUGHPUT);
    int failed = 0, ok = 0;
    for (int i = 0; i < 12; i++) {
        tdm_tensor *x = make_input(env, ref, 64, i), *y0 = NULL, *y1 = NULL;
        assert_null(run(ref, x, &y0));
        tdm_status *st = run(tp, x, &y1);
        if (st) {
            assert_int_equal(tdm_status_code(st), TDM_ERR_DEVICE);
            assert_non_null(strstr(tdm_status_message(st), "injected failure"));
            assert_null(y1);
            tdm_status_free(st);
            failed++;
        } else {
            assert_close(y1, y0);
            ok++;
        }
        tdm_tensor_free(x);
        tdm_tensor_free(y0);
        tdm_tensor_free(y1);
    }
    if (!(failed > 0 && ok > 0)) fail_msg("%d runs failed and %d succeeded: want both", failed, ok);
    tdm_session_free(tp);
    tdm_session_free(ref);
    tdm_env_free(env);
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
}

#include "log_box.h"

/* A device that fails is taken out (later runs succeed on the others), probed after the
 * back-off, and taken back when the probe succeeds. Every 11th kernel of the test device
 * fails; a run has 3 to 5 kernels on it (4 today), so the probe after a failure and the run
 * after the probe succeed. */
static void test_failed_device_probed_and_readmitted(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    setenv("TANDEM_TEST_DEVICE_FAIL_EVERY", "11", 1);
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env_options eo = {TDM_API_VERSION, keep_log, &box, TDM_LOG_INFO, {0}, 1};
    tdm_env *env = NULL;
    assert_null(tdm_env_create(&eo, &env));
    tdm_session *ref = open_session(env, "cpu", TDM_MODE_LATENCY);
    tdm_session *tp = NULL;
    tdm_session_options so = {TDM_API_VERSION, "cpu,test:0", 1, 1, false};
    so.mode = TDM_MODE_THROUGHPUT;
    so.probe_ms = 20;
    assert_null(tdm_session_create(env, MODEL, &so, &tp));
    int failed = 0, ok_after_failure = 0;
    int64_t items_at_failure = -1;
    bool readmitted = false;
    for (int i = 0; i < 40 && !readmitted; i++) {
        tdm_tensor *x = make_input(env, ref, 64, i), *y0 = NULL, *y1 = NULL;
        assert_null(run(ref, x, &y0));
        tdm_status *st = run(tp, x, &y1);
        tdm_device_stats ds;
        assert_null(tdm_session_device_stats(tp, 1, &ds));
        if (st) {
            assert_int_equal(tdm_status_code(st), TDM_ERR_DEVICE);
            tdm_status_free(st);
            failed++;
            items_at_failure = ds.items;
            assert_true(logged(&box, "test:0 taken out after a device error"));
        } else {
            assert_close(y1, y0);
            if (failed) ok_after_failure++;
            /* the device computes rows again only after it was taken back */
            if (failed && ds.items > items_at_failure) {
                assert_true(logged(&box, "test:0 is back in service"));
                readmitted = true;
            }
        }
        tdm_tensor_free(x);
        tdm_tensor_free(y0);
        tdm_tensor_free(y1);
        if (failed) usleep(25000); /* past the back-off */
    }
    if (!failed || !ok_after_failure) fail_msg("failed %d, ok after a failure %d; log:\n%s", failed, ok_after_failure, box.text);
    if (!readmitted) fail_msg("test:0 was not taken back; log:\n%s", box.text);
    tdm_session_free(tp);
    tdm_session_free(ref);
    tdm_env_free(env);
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_equals_single),
        cmocka_unit_test(test_rebalance_towards_faster),
        cmocka_unit_test(test_device_failure_fails_only_its_request),
        cmocka_unit_test(test_failed_device_probed_and_readmitted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
