/* Allocation-failure injection through real models: tests/models/bert_layer and
 * tests/models/yolo_like_head (Gather, LayerNormalization, Softmax, Erf, Gemm, Conv,
 * BatchNormalization, Resize, Concat, Slice... and the graph passes, constant folding and
 * memory plans around them). The environment's allocator hook fails the N-th allocation of
 * one attempt (session creation from the file, then two runs: the second reuses the memory
 * plan of the first). For every N:
 *   - the failure comes back as an out-of-memory status: no crash;
 *   - with the allocator healthy again, the same environment creates the session (when
 *     that was what failed) and the same session runs, with outputs matching ONNX Runtime;
 *   - when everything is freed, the hook counts no live block.
 * A healthy attempt makes about 1,100 (yolo) and 1,800 (bert) allocations, and every N is
 * tried (about 25 s for both under ASan). The yolo model is swept a second time with its nodes
 * on the test accelerator, whose device buffers come from the same hook. Should the models grow past FIRST_N + SAMPLES
 * allocations, the first FIRST_N are all tried, then every k-th so that about SAMPLES more
 * run (TDM_FAULT_ALL=1 tries every N regardless). The N being tried is printed if the
 * process dies. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tandem/tandem.h"

#define MODELS TANDEM_SOURCE_DIR "/tests/models/"
#define FIRST_N 200
#define SAMPLES 2000

typedef struct counting {
    atomic_long calls, fail_at, live, failed;
} counting;

static void *c_alloc(void *user, size_t size, size_t align) {
    counting *c = user;
    long n = atomic_fetch_add(&c->calls, 1) + 1;
    if (n == atomic_load(&c->fail_at)) {
        atomic_fetch_add(&c->failed, 1);
        return NULL;
    }
    if (align < sizeof(void *)) align = sizeof(void *);
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
    atomic_fetch_add(&c->live, 1);
    return p;
}

static void c_free(void *user, void *p) {
    counting *c = user;
    if (!p) return;
    atomic_fetch_sub(&c->live, 1);
    free(p);
}

/* ---- what to print if the process dies ---- */

static const char *volatile g_model = "";
/* Devices of the sessions: "cpu", or the test accelerator (memory of its own, allocated
 * through the same hook: device allocations fail too) with the CPU behind it. */
static const char *g_devices = "cpu";
static volatile long g_n;

static void say_where(void) {
    char buf[256];
    int len = snprintf(buf, sizeof buf, "\n*** test_fault_models died on %s with allocation %ld failing\n",
                       g_model, (long)g_n);
    if (len > 0) (void)!write(2, buf, (size_t)len);
}

static void on_signal(int sig) {
    say_where();
    signal(sig, SIG_DFL);
    raise(sig);
}

void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

/* ---- reference data (read once, with a plain environment) ---- */

typedef struct model_data {
    const char *name;
    char path[512];
    tdm_env *plain;
    size_t n_in, n_out;
    const char *in_names[8];
    tdm_tensor *ins[8], *want[8];
} model_data;

static void load_data(model_data *d, const char *name) {
    memset(d, 0, sizeof *d);
    d->name = name;
    snprintf(d->path, sizeof d->path, MODELS "%s/model.onnx", name);
    assert_null(tdm_env_create(NULL, &d->plain));
    tdm_model *m = NULL;
    tdm_status *st = tdm_model_load(d->plain, d->path, &m);
    if (st) fail_msg("%s: %s", name, tdm_status_message(st));
    d->n_in = tdm_model_input_count(m);
    d->n_out = tdm_model_output_count(m);
    assert_true(d->n_in <= 8 && d->n_out <= 8);
    static char names[8][128];
    for (size_t i = 0; i < d->n_in; i++) {
        tdm_value_desc v;
        assert_null(tdm_model_input(m, i, &v));
        snprintf(names[i], sizeof names[i], "%s", v.name);
        d->in_names[i] = names[i];
        char p[600];
        snprintf(p, sizeof p, MODELS "%s/test_data_set_0/input_%zu.pb", name, i);
        st = tdm_tensor_load_onnx(d->plain, p, &d->ins[i]);
        if (st) fail_msg("%s: %s", p, tdm_status_message(st));
    }
    for (size_t i = 0; i < d->n_out; i++) {
        char p[600];
        snprintf(p, sizeof p, MODELS "%s/test_data_set_0/output_%zu.pb", name, i);
        st = tdm_tensor_load_onnx(d->plain, p, &d->want[i]);
        if (st) fail_msg("%s: %s", p, tdm_status_message(st));
    }
    tdm_model_free(m);
}

static void free_data(model_data *d) {
    for (size_t i = 0; i < d->n_in; i++) tdm_tensor_free(d->ins[i]);
    for (size_t i = 0; i < d->n_out; i++) tdm_tensor_free(d->want[i]);
    tdm_env_free(d->plain);
}

/* Outputs against ONNX Runtime: |got - want| <= 1e-4 + 1e-3 |want| (float outputs). */
static int matches(const model_data *d, tdm_tensor *const *outs) {
    for (size_t i = 0; i < d->n_out; i++) {
        const tdm_tensor *g = outs[i], *w = d->want[i];
        if (!g || tdm_tensor_element_count(g) != tdm_tensor_element_count(w) ||
            tdm_tensor_dtype(g) != tdm_tensor_dtype(w))
            return 0;
        if (tdm_tensor_dtype(g) != TDM_FLOAT) continue;
        const float *a = tdm_tensor_data_const(g), *b = tdm_tensor_data_const(w);
        for (int64_t k = 0; k < tdm_tensor_element_count(g); k++)
            if (!(fabsf(a[k] - b[k]) <= 1e-4f + 1e-3f * fabsf(b[k]))) return 0;
    }
    return 1;
}

static tdm_status *run_once(const model_data *d, tdm_session *s, int *ok) {
    tdm_tensor *outs[8] = {NULL};
    tdm_status *st = tdm_session_run(s, d->n_in, d->in_names, (const tdm_tensor *const *)d->ins,
                                     d->n_out, NULL, outs);
    *ok = st ? 0 : matches(d, outs);
    for (size_t i = 0; i < d->n_out; i++) tdm_tensor_free(outs[i]);
    return st;
}

/* One attempt with allocation `fail_at` failing (-1: none). Returns the number of problems
 * (printed); *failures counts the injected failures that surfaced as a status. */
static int attempt(const model_data *d, long fail_at, long *total_calls, int *failures) {
    counting c = {0};
    atomic_store(&c.fail_at, fail_at);
    int problems = 0;
    tdm_env_options o = {TDM_API_VERSION, NULL, NULL, TDM_LOG_ERROR, {c_alloc, c_free, &c}, 1};
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&o, &env);
    if (st) { /* the environment itself could not be made: nothing else to check */
        if (tdm_status_code(st) != TDM_ERR_OUT_OF_MEMORY) {
            fprintf(stderr, "%s N=%ld: tdm_env_create: [%s] %s\n", d->name, fail_at,
                    tdm_code_name(tdm_status_code(st)), tdm_status_message(st));
            problems++;
        }
        tdm_status_free(st);
        (*failures)++;
        goto leak_check;
    }
    tdm_session_options so = {TDM_API_VERSION, g_devices, 1, 1, false};
    if (strcmp(g_devices, "cpu") != 0) so.placement = "test:0"; /* not the measured profiles */
    tdm_session *s = NULL;
    for (int round = 0; round < 3; round++) {
        const char *what = "tdm_session_create";
        if (!s) st = tdm_session_create(env, d->path, &so, &s);
        if (!st) {
            int ok = 0;
            what = "tdm_session_run";
            st = run_once(d, s, &ok);
            if (!st && !ok) {
                fprintf(stderr, "%s N=%ld: outputs differ from the reference (round %d)\n",
                        d->name, fail_at, round);
                problems++;
            }
            if (!st && round == 0) {
                st = run_once(d, s, &ok); /* the memory plan of the first run */
                what = "tdm_session_run (second)";
                if (!st && !ok) {
                    fprintf(stderr, "%s N=%ld: second run differs from the reference\n", d->name,
                            fail_at);
                    problems++;
                }
            }
        }
        if (!st) break;
        (*failures)++;
        if (tdm_status_code(st) != TDM_ERR_OUT_OF_MEMORY || round > 0) {
            fprintf(stderr, "%s N=%ld: %s (round %d): [%s] %s\n", d->name, fail_at, what, round,
                    tdm_code_name(tdm_status_code(st)), tdm_status_message(st));
            problems++;
        }
        if (s && strncmp(what, "tdm_session_create", 18) == 0) {
            fprintf(stderr, "%s N=%ld: failed session creation set the session\n", d->name, fail_at);
            problems++;
        }
        tdm_status_free(st);
        st = NULL;
        atomic_store(&c.fail_at, -1); /* healthy again: the same env / session must work */
    }
    tdm_session_free(s);
    tdm_env_free(env);
leak_check:
    if (atomic_load(&c.live) != 0) {
        fprintf(stderr, "%s N=%ld: %ld blocks leaked\n", d->name, fail_at, (long)atomic_load(&c.live));
        problems++;
    }
    if (total_calls) *total_calls = atomic_load(&c.calls);
    return problems;
}

static void sweep(const char *name) {
    model_data d;
    load_data(&d, name);
    /* cmocka installs its own handlers around each test: ours go on top, inside the test */
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGFPE, on_signal);
    signal(SIGABRT, on_signal);
    g_model = name;
    g_n = -1;
    long total = 0;
    int failures = 0;
    int problems = attempt(&d, -1, &total, &failures);
    if (problems || failures) fail_msg("%s: the healthy attempt failed", name);
    assert_true(total > 100);
    bool all = getenv("TDM_FAULT_ALL") && atoi(getenv("TDM_FAULT_ALL"));
    long step = all || total <= FIRST_N ? 1 : (total - FIRST_N) / SAMPLES + 1;
    int tried = 0;
    for (long n = 1; n <= total; n += n < FIRST_N ? 1 : step) {
        g_n = n;
        problems += attempt(&d, n, NULL, &failures);
        tried++;
    }
    g_n = -1;
    printf("%s: %ld allocations in a healthy attempt; %d attempts (all N <= %d, then every %ld-th); "
           "%d injected failures surfaced as a status; %d problems\n",
           name, total, tried, FIRST_N, step, failures, problems);
    /* most failures must surface: a sweep that never fails anything tests nothing */
    assert_true(failures > tried / 2);
    free_data(&d);
    assert_int_equal(problems, 0);
}

static void test_bert_layer(void **state) {
    (void)state;
    sweep("bert_layer");
}

static void test_yolo_like_head(void **state) {
    (void)state;
    sweep("yolo_like_head");
}

/* The same sweep with the nodes on the test accelerator: uploads, device buffers and
 * downloads fail as well, and a failed upload or device allocation leaks nothing. */
static void test_yolo_like_head_on_device(void **state) {
    (void)state;
    g_devices = "test:0,cpu";
    sweep("yolo_like_head");
    g_devices = "cpu";
}

int main(void) {
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(say_where);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert_layer),
        cmocka_unit_test(test_yolo_like_head),
        cmocka_unit_test(test_yolo_like_head_on_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
