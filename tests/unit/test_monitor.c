/* Monitoring API (tdm_session_monitor): the figures agree with what the model and its
 * placement imply. A cpu + test-device run of the MLP (opt level 0, the test device claims
 * only Gemm and MatMul) copies exactly: the weights of those two nodes once per session, and
 * per run the two activations into the device and its two results out; kernels per device
 * equal the nodes placed there times the runs. Peaks are >= use, utilisation is in [0, 1],
 * runs in flight and queued return to 0, the queue depth of blocked asynchronous runs is
 * exact, reset starts a new window, and a smaller struct_size is honoured (ABI). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tandem/tandem.h"

#define MODEL TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx"

/* mlp_dynamic_batch: input [B,4,8] -> Flatten [B,32] -> Gemm (fc_w_0 [64,32], fc_b_0 [64])
 * -> Relu [B,64] -> MatMul (fc_w_1 [64,10]) -> Add (fc_b_1 [10]) -> Softmax [B,10]. */
#define WEIGHTS_ON_TEST ((64 * 32 + 64 + 64 * 10) * 4) /* fc_w_0, fc_b_0, fc_w_1 */
#define UP_PER_RUN(B) ((B) * 32 * 4 + (B) * 64 * 4)     /* flatten out, relu out */
#define DOWN_PER_RUN(B) ((B) * 64 * 4 + (B) * 10 * 4)   /* gemm out, matmul out */

static tdm_session *open_session(tdm_env *env, const char *devices, int mode, int opt) {
    tdm_session *s = NULL;
    tdm_session_options so = {TDM_API_VERSION, devices, 1, opt, false};
    so.mode = mode;
    so.placement = mode == TDM_MODE_LATENCY ? "first" : NULL;
    tdm_status *st = tdm_session_create(env, MODEL, &so, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    return s;
}

static tdm_tensor *make_input(tdm_env *env, int64_t batch) {
    int64_t dims[3] = {batch, 4, 8};
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 3, dims, &t));
    float *p = tdm_tensor_data(t);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) p[i] = (float)(i % 13) * 0.1f - 0.5f;
    return t;
}

static void run_once(tdm_session *s, const tdm_tensor *x) {
    const char *in = "input";
    tdm_tensor *out[2] = {NULL, NULL};
    tdm_status *st = tdm_session_run(s, 1, &in, &x, 2, NULL, out);
    if (st) fail_msg("%s", tdm_status_message(st));
    tdm_tensor_free(out[0]);
    tdm_tensor_free(out[1]);
}

static tdm_device_monitor mon(tdm_session *s, size_t i) {
    tdm_device_monitor m;
    memset(&m, 0, sizeof m);
    tdm_status *st = tdm_session_monitor(s, i, &m, sizeof m);
    if (st) fail_msg("%s", tdm_status_message(st));
    return m;
}

static void check_sane(const tdm_device_monitor *m) {
    assert_true(m->utilization >= 0 && m->utilization <= 1);
    assert_true(m->busy_ms >= 0 && m->busy_ms <= m->window_ms);
    assert_true(m->memory_peak >= m->memory_in_use);
    assert_true(m->memory_in_use >= 0);
    assert_true(m->copies_per_s >= 0 && m->copy_bytes_per_s >= 0);
}

static tdm_env *make_env(const char *test_ops) {
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    if (test_ops) setenv("TANDEM_TEST_DEVICE_OPS", test_ops, 1);
    else unsetenv("TANDEM_TEST_DEVICE_OPS");
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    return env;
}

static void test_mixed_copies_and_memory(void **state) {
    (void)state;
    tdm_env *env = make_env("Gemm,MatMul");
    tdm_session *s = open_session(env, "test:0,cpu", TDM_MODE_LATENCY, 0);
    assert_int_equal(tdm_session_monitor_count(s), 2);
    tdm_device_monitor t = mon(s, 0), c = mon(s, 1);
    assert_string_equal(t.device, "test:0");
    assert_string_equal(c.device, "cpu");
    assert_int_equal(t.uploads + t.downloads + t.kernels, 0); /* nothing ran yet */
    assert_int_equal(t.memory_in_use, 0);

    const int64_t B = 3, runs = 4;
    tdm_tensor *x = make_input(env, B);
    for (int r = 0; r < runs; r++) run_once(s, x);
    t = mon(s, 0);
    c = mon(s, 1);
    check_sane(&t);
    check_sane(&c);
    /* copies: attributed to the device whose memory they enter or leave */
    assert_int_equal(t.uploads, 3 + 2 * runs);
    assert_int_equal(t.bytes_uploaded, WEIGHTS_ON_TEST + runs * UP_PER_RUN(B));
    assert_int_equal(t.downloads, 2 * runs);
    assert_int_equal(t.bytes_downloaded, runs * DOWN_PER_RUN(B));
    assert_int_equal(c.uploads + c.downloads, 0);
    /* kernels: Gemm and MatMul on the test device, Flatten, Relu, Add, Softmax on the CPU */
    assert_int_equal(t.kernels, 2 * runs);
    assert_int_equal(c.kernels, 4 * runs);
    /* after the runs only the uploaded weights stay on the device; the CPU holds nothing */
    assert_int_equal(t.memory_in_use, WEIGHTS_ON_TEST);
    assert_true(t.memory_peak >= WEIGHTS_ON_TEST + B * 64 * 4); /* + an activation at least */
    assert_int_equal(c.memory_in_use, 0);
    assert_true(c.memory_peak >= B * 32 * 4);
    assert_int_equal(t.runs_in_flight + c.runs_in_flight, 0);
    assert_int_equal(t.runs_queued, 0);
    assert_true(t.busy_ms > 0 && c.busy_ms > 0);

    /* reset: a new window; levels stay */
    tdm_session_monitor_reset(s);
    t = mon(s, 0);
    c = mon(s, 1);
    assert_int_equal(t.uploads + t.downloads + t.kernels + c.kernels, 0);
    assert_int_equal(t.bytes_uploaded + t.bytes_downloaded, 0);
    assert_int_equal(t.memory_in_use, WEIGHTS_ON_TEST);
    assert_int_equal(t.memory_peak, WEIGHTS_ON_TEST);
    assert_int_equal(c.memory_peak, 0);
    run_once(s, x); /* the weights are on the device already */
    t = mon(s, 0);
    assert_int_equal(t.uploads, 2);
    assert_int_equal(t.bytes_uploaded, UP_PER_RUN(B));
    assert_int_equal(t.bytes_downloaded, DOWN_PER_RUN(B));
    check_sane(&t);

    /* errors and the ABI guard */
    tdm_device_monitor m;
    tdm_status *st = tdm_session_monitor(s, 2, &m, sizeof m);
    assert_int_equal(tdm_status_code(st), TDM_ERR_NOT_FOUND);
    tdm_status_free(st);
    st = tdm_session_monitor(s, 0, &m, 4);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    unsigned char buf[sizeof(tdm_device_monitor)];
    memset(buf, 0xAB, sizeof buf);
    size_t part = offsetof(tdm_device_monitor, kernels);
    assert_null(tdm_session_monitor(s, 0, (tdm_device_monitor *)buf, part));
    for (size_t i = part; i < sizeof buf; i++) assert_int_equal(buf[i], 0xAB);
    assert_string_equal(((tdm_device_monitor *)buf)->device, "test:0");

    tdm_tensor_free(x);
    tdm_session_free(s);
    tdm_env_free(env);
}

/* Asynchronous runs: the first callback holds the worker, so the other runs wait in the
 * queue: exactly n - 1 of them. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    int done, failed;
} gate;

static void on_done(void *user, tdm_status *st, size_t n, tdm_tensor **outs) {
    gate *g = user;
    if (st) {
        tdm_status_free(st);
        pthread_mutex_lock(&g->mu);
        g->failed++;
        pthread_mutex_unlock(&g->mu);
    }
    for (size_t i = 0; i < n; i++) tdm_tensor_free(outs[i]);
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    g->done++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void test_async_queue_depth(void **state) {
    (void)state;
    tdm_env *env = make_env("Gemm,MatMul");
    tdm_session *s = open_session(env, "test:0,cpu", TDM_MODE_LATENCY, 0);
    tdm_tensor *x = make_input(env, 2);
    gate g = {.open = false};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    const char *in = "input";
    const int n = 6;
    for (int i = 0; i < n; i++) {
        tdm_status *st =
            tdm_session_run_async(s, 1, &in, (const tdm_tensor *const *)&x, 2, NULL, on_done, &g);
        if (st) fail_msg("%s", tdm_status_message(st));
    }
    /* wait until the worker is inside the first callback: then n - 1 are queued */
    tdm_device_monitor t;
    for (;;) {
        t = mon(s, 0);
        if (t.kernels == 2) break; /* first run done (its callback blocks the worker) */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    t = mon(s, 0);
    assert_int_equal(t.runs_queued, n - 1);
    assert_int_equal(mon(s, 1).runs_queued, n - 1);
    pthread_mutex_lock(&g.mu);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    while (g.done < n) pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    assert_int_equal(g.failed, 0);
    tdm_session_free(s); /* waits for the worker */
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    tdm_tensor_free(x);
    tdm_env_free(env);
}

/* Throughput mode (a replica per device, batches split across them, runs from several
 * threads): levels return to 0 and both devices did work. */
typedef struct worker_arg {
    tdm_session *s;
    const tdm_tensor *x;
} worker_arg;

static void *worker(void *p) {
    worker_arg *w = p;
    for (int i = 0; i < 5; i++) run_once(w->s, w->x);
    return NULL;
}

static void test_throughput_threads(void **state) {
    (void)state;
    tdm_env *env = make_env(NULL);
    tdm_session *s = open_session(env, "cpu,test:0", TDM_MODE_THROUGHPUT, 1);
    tdm_tensor *x = make_input(env, 8);
    worker_arg w = {s, x};
    pthread_t th[3];
    for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, worker, &w), 0);
    for (int i = 0; i < 3; i++) {
        tdm_device_monitor m = mon(s, 0); /* read while runs go on */
        check_sane(&m);
        /* each of 3 runs is at most 2 parts, each part's plan may use the CPU */
        assert_true(m.runs_in_flight >= 0 && m.runs_in_flight <= 6);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (size_t d = 0; d < 2; d++) {
        tdm_device_monitor m = mon(s, d);
        check_sane(&m);
        assert_int_equal(m.runs_in_flight, 0);
        assert_int_equal(m.runs_queued, 0);
    }
    assert_true(mon(s, 0).kernels + mon(s, 1).kernels > 0);
    assert_true(mon(s, 1).uploads > 0); /* the test device's part of the batch went up */
    assert_int_equal(mon(s, 0).memory_in_use, 0);
    tdm_tensor_free(x);
    tdm_session_free(s);
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_copies_and_memory),
        cmocka_unit_test(test_async_queue_depth),
        cmocka_unit_test(test_throughput_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
