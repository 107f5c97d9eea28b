/* Launch windows (backend.h version 4: segment_begin / segment_end), as the executor calls
 * them; the CUDA backend replays a window as a CUDA graph (src/backends/cuda/cuda_graph.c),
 * which this test cannot run: it wraps the test device's interface with recording hooks.
 *  - every segment_begin is followed by one segment_end on the same thread and device, with
 *    ok = true on a good run, and every kernel of the device runs inside a window;
 *  - the keys of a run repeat on the next run with the same input shapes, a run with
 *    another batch size gets other keys, and going back gives the first keys again;
 *  - the same over a plan split between the test device and the CPU (one host thread per
 *    device), where a device has several windows per run;
 *  - outputs match a CPU-only run (the hooks change nothing of the results);
 *  - on a machine with a GPU (else "skipped: no GPU"): CUDA graphs on cuda:0 give the CPU's
 *    results over repeated runs and shape changes, and are replayed (scripts/gpu-check.sh).
 * Model: tests/models/mlp_dynamic_batch (input [batch, 4, 8]). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/api_impl.h"
#include "backends/backend.h"
#include "tandem/tandem.h"

#define MLP TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx"
#define MAX_EV 4096

typedef struct event {
    char kind; /* 'b' begin, 'e' end, 'x' execute */
    uint64_t key;
    bool ok;
    pthread_t thread;
} event;

typedef struct recorder {
    pthread_mutex_t mu;
    event ev[MAX_EV];
    int n;
    const tdm_device_iface *inner;
} recorder;

static recorder rec = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void record(char kind, uint64_t key, bool ok) {
    pthread_mutex_lock(&rec.mu);
    if (rec.n < MAX_EV) rec.ev[rec.n++] = (event){kind, key, ok, pthread_self()};
    pthread_mutex_unlock(&rec.mu);
}

static tdm_status *rec_begin(tdm_device *dev, uint64_t key) {
    (void)dev;
    record('b', key, true);
    return NULL;
}

static tdm_status *rec_end(tdm_device *dev, bool ok) {
    (void)dev;
    record('e', 0, ok);
    return NULL;
}

static tdm_status *rec_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    record('x', 0, true);
    return rec.inner->execute(dev, k, ctx);
}

static tdm_device_iface wrapped;

/* Runs the model once with batch `batch`; its first output (batch x 10) into out. */
static void run(tdm_env *env, tdm_session *s, int64_t batch, float *out, size_t max) {
    int64_t dims[3] = {batch, 4, 8};
    tdm_tensor *x = NULL, *y = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 3, dims, &x));
    float *xd = tdm_tensor_data(x);
    for (int64_t i = 0; i < batch * 32; i++) xd[i] = (float)((i * 37) % 17) / 17.0f - 0.4f;
    tdm_value_desc in, o;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    assert_null(tdm_model_output(tdm_session_model(s), 0, &o));
    tdm_status *st = tdm_session_run(s, 1, &in.name, (const tdm_tensor *const *)&x, 1, &o.name, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    size_t n = tdm_tensor_byte_size(y) / sizeof(float);
    assert_true(n <= max);
    memcpy(out, tdm_tensor_data(y), n * sizeof(float));
    tdm_tensor_free(x);
    tdm_tensor_free(y);
}

/* The windows of events [from, to): checks pairing; writes the keys of the windows in order
 * into keys (count returned). */
static int windows(int from, int to, uint64_t *keys, int max) {
    int nk = 0;
    for (int i = from; i < to; i++) {
        const event *e = &rec.ev[i];
        if (e->kind != 'b') fail_msg("event %d ('%c') is outside a window", i, e->kind);
        assert_true(nk < max);
        keys[nk++] = e->key;
        int kernels = 0, j = i + 1;
        for (; j < to && rec.ev[j].kind == 'x'; j++) kernels++;
        assert_true(j < to); /* an end follows */
        assert_int_equal(rec.ev[j].kind, 'e');
        assert_true(rec.ev[j].ok);
        assert_true(pthread_equal(rec.ev[j].thread, e->thread));
        assert_true(kernels >= 1); /* a window holds the device's kernels */
        i = j;
    }
    return nk;
}

static bool same_keys(const uint64_t *a, int na, const uint64_t *b, int nb) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static bool disjoint_keys(const uint64_t *a, int na, const uint64_t *b, int nb) {
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (a[i] == b[j]) return false;
    return true;
}

static void check_devices(const char *ops, int min_windows) {
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    if (ops) setenv("TANDEM_TEST_DEVICE_OPS", ops, 1);
    else unsetenv("TANDEM_TEST_DEVICE_OPS");
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_device *dev = tdm_env_find_device(env, "test:0");
    assert_non_null(dev);
    assert_true(dev->iface->api_version >= 4);
    rec.inner = dev->iface;
    wrapped = *dev->iface;
    wrapped.segment_begin = rec_begin;
    wrapped.segment_end = rec_end;
    wrapped.execute = rec_execute;
    const tdm_device_iface *saved = dev->iface;
    dev->iface = &wrapped;

    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "test:0,cpu",
                              .threads = 1, .opt_level = 1, .placement = "first"};
    tdm_session *s = NULL, *ref = NULL;
    tdm_status *st = tdm_session_create(env, MLP, &so, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    tdm_session_options cpu = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = 1};
    assert_null(tdm_session_create(env, MLP, &cpu, &ref));

    const int64_t batches[4] = {2, 2, 3, 2};
    uint64_t keys[4][64];
    int nk[4];
    for (int r = 0; r < 4; r++) {
        float got[64], want[64];
        pthread_mutex_lock(&rec.mu);
        rec.n = 0;
        pthread_mutex_unlock(&rec.mu);
        run(env, s, batches[r], got, 64);
        int n = rec.n;
        nk[r] = windows(0, n, keys[r], 64);
        assert_true(nk[r] >= min_windows);
        run(env, ref, batches[r], want, 64); /* no events: the CPU has no hooks */
        assert_int_equal(rec.n, n);
        for (int64_t i = 0; i < batches[r] * 10; i++)
            if (fabsf(got[i] - want[i]) > 1e-5f + 1e-4f * fabsf(want[i]))
                fail_msg("run %d output %lld: %g, CPU %g", r, (long long)i, got[i], want[i]);
    }
    /* the first run uploads the weights, and a window ends before each node whose inputs are
     * copied (tdm_exec_input_moves), so its windows differ; from the second run on: */
    assert_true(same_keys(keys[1], nk[1], keys[3], nk[3]));  /* same shapes: same keys */
    assert_true(disjoint_keys(keys[1], nk[1], keys[2], nk[2])); /* other shapes: new keys */
    for (int i = 0; i < nk[1]; i++)                           /* one key per window */
        for (int j = i + 1; j < nk[1]; j++) assert_true(keys[1][i] != keys[1][j]);

    tdm_session_free(s);
    tdm_session_free(ref);
    dev->iface = saved;
    tdm_env_free(env);
    unsetenv("TANDEM_TEST_DEVICES");
    unsetenv("TANDEM_TEST_DEVICE_OPS");
}

/* Every node on the test device: one window per run (executor.c, one thread). */
static void test_one_device(void **state) {
    (void)state;
    check_devices(NULL, 1);
}

/* Flatten and Softmax on the test device, the rest on the CPU: a window around each run of
 * consecutive test-device nodes, two per run (executor_multi.c, one thread per device). */
static void test_split_devices(void **state) {
    (void)state;
    check_devices("Flatten,Softmax", 2);
}

/* ---- on a GPU: the CUDA backend's graphs (TANDEM_CUDA_GRAPHS=1) -------------------------- */

/* Runs `s` on input values made from `seed` with batch `batch` (the first input's dynamic
 * dimensions); outputs into *y (caller frees). */
static void run_seeded(tdm_env *env, tdm_session *s, int64_t batch, int seed, tdm_tensor **y) {
    tdm_value_desc in, o;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    assert_null(tdm_model_output(tdm_session_model(s), 0, &o));
    int64_t dims[TDM_MAX_RANK];
    for (int d = 0; d < in.rank; d++) dims[d] = in.dims[d] < 0 ? batch : in.dims[d];
    tdm_tensor *x = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, in.rank, dims, &x));
    float *xd = tdm_tensor_data(x);
    size_t n = tdm_tensor_byte_size(x) / sizeof(float);
    for (size_t i = 0; i < n; i++) xd[i] = (float)((i * 37 + (size_t)seed * 101) % 23) / 23.0f - 0.5f;
    tdm_status *st = tdm_session_run(s, 1, &in.name, (const tdm_tensor *const *)&x, 1, &o.name, y);
    if (st) fail_msg("%s", tdm_status_message(st));
    tdm_tensor_free(x);
}

/* Repeated runs of the same shapes (new input values every run, so a replayed graph must
 * read the new uploads), a shape change and back, on cuda:0 with graphs on: every output
 * against the CPU (|got - want| <= 1e-4 + 1e-3 |want|), and the device's counts
 * (TANDEM_CUDA_GRAPHS_LOG, written when the device closes) show replays. */
static void test_cuda_graphs(void **state) {
    (void)state;
    char log[] = "/tmp/tandem-graphs-XXXXXX";
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    setenv("TANDEM_CUDA_GRAPHS", "1", 1);
    setenv("TANDEM_CUDA_GRAPHS_LOG", log, 1);
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    if (!tdm_env_find_device(env, "cuda:0")) {
        tdm_env_free(env);
        unlink(log);
        unsetenv("TANDEM_CUDA_GRAPHS");
        unsetenv("TANDEM_CUDA_GRAPHS_LOG");
        printf("skipped: no GPU\n");
        skip();
    }
    const char *models[] = {MLP, TANDEM_SOURCE_DIR "/tests/models/mobilenet_block/model.onnx"};
    const int64_t batches[] = {2, 2, 2, 2, 2, 2, 3, 3, 3, 2, 2};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cuda:0,cpu",
                                  .threads = 1, .opt_level = 1, .placement = "first"};
        tdm_session_options cpu = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = 1};
        tdm_session *s = NULL, *ref = NULL;
        tdm_status *st = tdm_session_create(env, models[m], &so, &s);
        if (st) fail_msg("%s", tdm_status_message(st));
        assert_null(tdm_session_create(env, models[m], &cpu, &ref));
        for (size_t r = 0; r < sizeof batches / sizeof batches[0]; r++) {
            tdm_tensor *got = NULL, *want = NULL;
            run_seeded(env, s, batches[r], (int)r, &got);
            run_seeded(env, ref, batches[r], (int)r, &want);
            size_t n = tdm_tensor_byte_size(want) / sizeof(float);
            assert_int_equal(tdm_tensor_byte_size(got), tdm_tensor_byte_size(want));
            const float *g = tdm_tensor_data(got), *w = tdm_tensor_data(want);
            for (size_t i = 0; i < n; i++)
                if (!(fabsf(g[i] - w[i]) <= 1e-4f + 1e-3f * fabsf(w[i])))
                    fail_msg("%s run %zu (batch %lld) value %zu: %g, CPU %g", models[m], r,
                             (long long)batches[r], i, g[i], w[i]);
            tdm_tensor_free(got);
            tdm_tensor_free(want);
        }
        tdm_session_free(s);
        tdm_session_free(ref);
    }
    tdm_env_free(env); /* closes cuda:0, which writes its counts */
    unsetenv("TANDEM_CUDA_GRAPHS");
    unsetenv("TANDEM_CUDA_GRAPHS_LOG");
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[256] = "";
    long replays = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "replays=");
        if (p) replays = strtol(p + 8, NULL, 10);
        printf("%s", line);
    }
    fclose(f);
    unlink(log);
    assert_true(replays >= 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_device),
        cmocka_unit_test(test_split_devices),
        cmocka_unit_test(test_cuda_graphs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
