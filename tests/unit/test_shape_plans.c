/* Plans per shape class (sched/strategy_latency.c): with several devices and the cost model's
 * placement, a run whose symbolic dims are much larger than the first plan's gets a plan placed
 * for its own shapes, and the plans share the device copies of their constants.
 *
 * The device profiles are forged in the cache (a fast accelerator with a high fixed cost per
 * kernel and copy, a slow CPU without one), so that a batch of 1 goes to the CPU and a large
 * batch to test:0 whatever this machine measures. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model_builder.h"
#include "tandem/tandem.h"

#define K 256 /* the products' width */

typedef struct fixture {
    char dir[256];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/tandem_shape_plans_XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    setenv("TANDEM_CACHE_DIR", f->dir, 1);
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    unsetenv("TANDEM_TEST_DEVICE_OPS");
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    *state = f;
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state) {
    fixture *f = *state;
    nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    unsetenv("TANDEM_CACHE_DIR");
    unsetenv("TANDEM_TEST_DEVICES");
    free(f);
    return 0;
}

static tdm_env *new_env(void) {
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.threads = 2;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(&o, &env));
    return env;
}

/* Rewrites the numbers of the cached profile whose file name starts with `prefix`:
 * "key=value" pairs in `set` replace those lines. */
static void forge(const fixture *f, const char *prefix, const char *const *set, int n) {
    char dir[300], path[600];
    snprintf(dir, sizeof dir, "%s/profiles", f->dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && strstr(e->d_name, ".txt")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    assert_int_equal(found, 1);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    static char text[8192];
    size_t len = 0;
    char line[512];
    while (fgets(line, sizeof line, in)) {
        for (int i = 0; i < n; i++) {
            const char *eq = strchr(set[i], '=');
            if (!strncmp(line, set[i], (size_t)(eq - set[i]) + 1)) snprintf(line, sizeof line, "%s\n", set[i]);
        }
        size_t l = strlen(line);
        assert_true(len + l < sizeof text);
        memcpy(text + len, line, l);
        len += l;
    }
    fclose(in);
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    assert_int_equal(fwrite(text, 1, len, out), len);
    fclose(out);
}

/* A slow CPU without fixed costs, a fast test:0 with 40 us a kernel and a copy. */
static void forge_profiles(const fixture *f) {
    const char *cpu[] = {"gemm_gflops=5", "conv_gflops=5", "conv1x1_gflops=5",
                         "dwconv_gflops=5", "mem_gbps=5", "launch_us=0.1"};
    const char *acc[] = {"gemm_gflops=100000", "conv_gflops=100000", "conv1x1_gflops=100000",
                         "dwconv_gflops=100000", "mem_gbps=2000", "launch_us=40",
                         "h2d_gbps=50", "d2h_gbps=50", "h2d_pinned_gbps=50", "d2h_pinned_gbps=50",
                         "link_latency_us=40", "h2d_latency_us=40", "d2h_latency_us=40",
                         "h2d_pinned_latency_us=40", "d2h_pinned_latency_us=40",
                         "host_busy_speed=1"};
    forge(f, "cpu-", cpu, (int)(sizeof cpu / sizeof *cpu));
    forge(f, "test_0-", acc, (int)(sizeof acc / sizeof *acc));
}

/* x [N, K] -> MatMul w1 -> Relu -> MatMul w2 -> y, N symbolic */
static void *model(size_t *size) {
    mb_model m;
    mb_init(&m, 17);
    int64_t dx[2] = {-1, K}, dw[2] = {K, K};
    static float w1[K * K], w2[K * K];
    for (int i = 0; i < K * K; i++) {
        w1[i] = (float)((i * 37) % 101 - 50) / 400.0f;
        w2[i] = (float)((i * 53) % 97 - 48) / 400.0f;
    }
    mb_input(&m, "x", 2, dx);
    mb_init_f32(&m, "w1", 2, dw, K * K, w1);
    mb_init_f32(&m, "w2", 2, dw, K * K, w2);
    mb_node(&m, "MatMul:x,w1->h");
    mb_node(&m, "Relu:h->r");
    mb_node(&m, "MatMul:r,w2->y");
    mb_output(&m, "y");
    void *bytes = mb_pack(&m, size);
    mb_free(&m);
    return bytes;
}

/* One run at batch n; *y gets the output (caller frees). */
static void run(tdm_env *env, tdm_session *s, int64_t n, tdm_tensor **y) {
    int64_t dims[2] = {n, K};
    tdm_tensor *x = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 2, dims, &x));
    float *p = tdm_tensor_data(x);
    for (int64_t i = 0; i < n * K; i++) p[i] = (float)((i * 7) % 13 - 6) / 6.0f;
    const char *in = "x", *out = "y";
    *y = NULL;
    assert_null(tdm_session_run(s, 1, &in, (const tdm_tensor *const *)&x, 1, &out, y));
    tdm_tensor_free(x);
}

static tdm_device_monitor watch(tdm_session *s, int index) {
    tdm_device_monitor m;
    assert_null(tdm_session_monitor(s, (size_t)index, &m, sizeof m));
    return m;
}

static void assert_close(const tdm_tensor *a, const tdm_tensor *b) {
    assert_int_equal(tdm_tensor_element_count(a), tdm_tensor_element_count(b));
    const float *p = tdm_tensor_data((tdm_tensor *)a), *q = tdm_tensor_data((tdm_tensor *)b);
    for (int64_t i = 0; i < tdm_tensor_element_count(a); i++)
        assert_true(fabsf(p[i] - q[i]) <= 1e-4f + 1e-4f * fabsf(q[i]));
}

/* The profiles measured, then forged; a new environment that reads them, and the model's
 * session on test:0,cpu (auto placement) and on the CPU alone (the reference). */
static tdm_env *sessions(const fixture *f, tdm_session **s, tdm_session **ref) {
    tdm_env *env = new_env();
    for (size_t i = 0; i < tdm_env_device_count(env); i++) {
        tdm_device_info info;
        assert_null(tdm_env_device_profile(env, i, false, &info));
    }
    tdm_env_free(env);
    forge_profiles(f);
    env = new_env();
    size_t size;
    void *buf = model(&size);
    tdm_session_options so = {0};
    so.api_version = TDM_API_VERSION;
    so.devices = "test:0,cpu";
    so.opt_level = 1;
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, s));
    so.devices = "cpu";
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, ref));
    free(buf);
    return env;
}

static void test_plan_per_shape_class(void **state) {
    tdm_session *s = NULL, *ref = NULL;
    tdm_env *env = sessions(*state, &s, &ref);
    assert_string_equal(watch(s, 0).device, "test:0");

    /* batch 1: the products on the CPU (a kernel on test:0 costs more than they do) */
    tdm_tensor *y = NULL, *yr = NULL;
    run(env, s, 1, &y);
    run(env, ref, 1, &yr);
    assert_close(y, yr);
    tdm_tensor_free(y);
    tdm_tensor_free(yr);
    assert_int_equal(watch(s, 0).kernels, 0);
    assert_true(watch(s, 1).kernels >= 2); /* (MatMul + Relu fuse) */

    /* batch 512: a plan of its own, the products on test:0, the weights uploaded once */
    tdm_session_monitor_reset(s);
    run(env, s, 512, &y);
    run(env, ref, 512, &yr);
    assert_close(y, yr);
    tdm_tensor_free(y);
    tdm_tensor_free(yr);
    tdm_device_monitor m = watch(s, 0);
    assert_true(m.kernels >= 2);
    const int64_t x_bytes = 512 * K * 4, w_bytes = 2 * K * K * 4;
    assert_true(m.bytes_uploaded >= x_bytes + w_bytes);
    int64_t held = m.memory_in_use;

    /* batch 1024 (another class, the same placement as 512's, not the first plan's): the
     * weights on test:0 are the ones uploaded already */
    tdm_session_monitor_reset(s);
    run(env, s, 1024, &y);
    run(env, ref, 1024, &yr);
    assert_close(y, yr);
    tdm_tensor_free(y);
    tdm_tensor_free(yr);
    m = watch(s, 0);
    assert_true(m.kernels >= 2);
    assert_true(m.bytes_uploaded < 2 * x_bytes + w_bytes / 2);
    assert_int_equal(m.memory_in_use, held); /* (activations are released after a run) */

    /* batch 1 again: the first plan, nothing on test:0 */
    tdm_session_monitor_reset(s);
    run(env, s, 1, &y);
    tdm_tensor_free(y);
    assert_int_equal(watch(s, 0).kernels, 0);

    tdm_session_free(s);
    tdm_session_free(ref);
    tdm_env_free(env);
}

/* More classes than the strategy keeps (8): batches 2, 4, ..., 2048 are classes 1-11; the
 * last three take the nearest class's plan. Every output against the CPU alone. */
static void test_many_classes(void **state) {
    tdm_session *s = NULL, *ref = NULL;
    tdm_env *env = sessions(*state, &s, &ref);
    for (int round = 0; round < 2; round++)
        for (int64_t n = 2; n <= 2048; n *= 2) {
            tdm_tensor *y = NULL, *yr = NULL;
            run(env, s, n, &y);
            run(env, ref, n, &yr);
            assert_close(y, yr);
            tdm_tensor_free(y);
            tdm_tensor_free(yr);
        }
    tdm_session_free(s);
    tdm_session_free(ref);
    tdm_env_free(env);
}

/* A fixed placement keeps one plan: batch 512 on the CPU as batch 1 was. */
static void test_fixed_placement_one_plan(void **state) {
    (void)state;
    tdm_env *env = new_env();
    size_t size;
    void *buf = model(&size);
    tdm_session_options so = {0};
    so.api_version = TDM_API_VERSION;
    so.devices = "test:0,cpu";
    so.placement = "cpu";
    so.opt_level = 1;
    tdm_session *s = NULL;
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s));
    free(buf);
    tdm_tensor *y = NULL;
    run(env, s, 1, &y);
    tdm_tensor_free(y);
    run(env, s, 512, &y);
    tdm_tensor_free(y);
    assert_int_equal(watch(s, 0).kernels, 0);
    tdm_session_free(s);
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plan_per_shape_class, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_classes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fixed_placement_one_plan, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
