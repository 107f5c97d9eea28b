/* Cancelling runs (tdm_session_cancel, tdm_session_cancel_all) and run deadlines
 * (tdm_run_options.timeout_ms):
 *  - a queued run is dropped without running, its callback called once with
 *    TDM_ERR_CANCELLED before the cancel returns; a running endless Loop
 *    (TANDEM_LOOP_MAX_ITERATIONS=0, so only a cancel ends it) ends with TDM_ERR_CANCELLED;
 *    the session runs normally afterwards; cancelling again, or an unknown id, is a no-op;
 *  - a deadline ends a run queued or running past it (asynchronous and synchronous runs);
 *  - cancels racing with completion on several threads (1000 tiny runs): every callback is
 *    called exactly once, TDM_ERR_CANCELLED exactly when tdm_session_cancel returned true,
 *    otherwise with the right output (run under TSan by scripts/test.sh);
 *  - tdm_session_free with runs queued and running (after tdm_session_cancel_all, and
 *    without it, when it waits for them): no leak (the environment's allocator counts live
 *    blocks), every callback once;
 *  - throughput mode over two slowed test devices and pipeline mode stop a cancelled run
 *    before running all its kernels.
 * The Loop model is built here: y = Loop(M, cond, x) with body (i, c, x) -> (c, x + 1), so
 * y = x + M when cond stays true. */
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "onnx/onnx.pb-c.h"
#include "tandem/tandem.h"
#include "loop_model.h"

#define MLP TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx"

#include "counting_alloc.h"

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* the Loop model: loop_model.h */

/* ---- fixture: a Loop session on a counting allocator ------------------------------------ */

typedef struct fx {
    counter cnt;
    tdm_env *env;
    tdm_session *s;
} fx;

static void fx_open(fx *f) {
    memset(f, 0, sizeof *f);
    tdm_env_options o;
    memset(&o, 0, sizeof o);
    o.api_version = TDM_API_VERSION;
    o.allocator.alloc = c_alloc;
    o.allocator.free = c_free;
    o.allocator.user = &f->cnt;
    o.threads = 1;
    assert_null(tdm_env_create(&o, &f->env));
    size_t size;
    void *model = loop_model(&size);
    tdm_status *st = tdm_session_create_from_buffer(f->env, model, size, NULL, NULL, &f->s);
    free(model);
    if (st) fail_msg("session: %s", tdm_status_message(st));
}

static void fx_close(fx *f) {
    tdm_session_free(f->s);
    tdm_env_free(f->env);
    assert_int_equal(atomic_load(&f->cnt.live), 0);
}

static const char *const names[] = {"M", "cond", "x"};

/* One run: its inputs (referenced by the run until its callback) and what the callback saw. */
typedef struct job {
    int64_t m;
    uint8_t cond;
    float x;
    tdm_tensor *in[3];
    tdm_run_id id;
    bool caught;      /* tdm_session_cancel returned true */
    atomic_int calls; /* callbacks so far */
    atomic_int *done; /* shared count of callbacks, or NULL */
    tdm_code code;
    float y;
    char msg[256];
} job;

static void job_init(fx *f, job *j, int64_t m, float x) {
    memset(j, 0, sizeof *j);
    j->m = m;
    j->cond = 1;
    j->x = x;
    int64_t one[] = {1};
    assert_null(tdm_tensor_wrap(f->env, TDM_INT64, 0, NULL, &j->m, sizeof j->m, &j->in[0]));
    assert_null(tdm_tensor_wrap(f->env, TDM_BOOL, 0, NULL, &j->cond, 1, &j->in[1]));
    assert_null(tdm_tensor_wrap(f->env, TDM_FLOAT, 1, one, &j->x, sizeof j->x, &j->in[2]));
}

static void job_fini(job *j) {
    for (int i = 0; i < 3; i++) tdm_tensor_free(j->in[i]);
}

static void on_done(void *user, tdm_status *st, size_t n, tdm_tensor **outs) {
    job *j = user;
    j->code = tdm_status_code(st);
    snprintf(j->msg, sizeof j->msg, "%s", st ? tdm_status_message(st) : "");
    if (!st && n == 1) j->y = ((const float *)tdm_tensor_data_const(outs[0]))[0];
    tdm_status_free(st);
    for (size_t i = 0; i < n; i++) tdm_tensor_free(outs[i]);
    atomic_fetch_add(&j->calls, 1);
    if (j->done) atomic_fetch_add(j->done, 1);
}

static void start(fx *f, job *j, const tdm_run_options *ro) {
    tdm_status *st = tdm_session_run_async_ex(f->s, 3, names, (const tdm_tensor *const *)j->in, 1,
                                              NULL, ro, on_done, j, &j->id);
    if (st) fail_msg("run_async_ex: %s", tdm_status_message(st));
    assert_true(j->id != 0);
}

/* Waits up to `limit_ms` for the job's callback; true when it came. */
static bool wait_job(job *j, int limit_ms) {
    int64_t t0 = now_ms();
    while (atomic_load(&j->calls) == 0) {
        if (now_ms() - t0 > limit_ms) return false;
        sleep_ms(1);
    }
    return true;
}

static void expect_cancelled(job *j, const char *needle) {
    assert_int_equal(atomic_load(&j->calls), 1);
    if (j->code != TDM_ERR_CANCELLED || (needle && !strstr(j->msg, needle)))
        fail_msg("expected TDM_ERR_CANCELLED (%s), got [%s] %s", needle ? needle : "",
                 tdm_code_name(j->code), j->msg);
}

static int queued_runs(tdm_session *s) {
    tdm_device_monitor m;
    assert_null(tdm_session_monitor(s, 0, &m, sizeof m));
    return m.runs_queued;
}

/* Waits until exactly `n` asynchronous runs are queued (the worker took the one before). */
static void wait_queued(tdm_session *s, int n) {
    int64_t t0 = now_ms();
    while (queued_runs(s) != n) {
        if (now_ms() - t0 > 10000) fail_msg("the queue never got to %d runs", n);
        sleep_ms(1);
    }
}

static void expect_sync(fx *f, int64_t m, float x) {
    job j;
    job_init(f, &j, m, x);
    tdm_tensor *out = NULL;
    tdm_status *st = tdm_session_run(f->s, 3, names, (const tdm_tensor *const *)j.in, 1, NULL, &out);
    if (st) fail_msg("%s", tdm_status_message(st));
    assert_true(((const float *)tdm_tensor_data_const(out))[0] == x + (float)m);
    tdm_tensor_free(out);
    job_fini(&j);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_cancel_queued_and_running(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    job a, b, c;
    job_init(&f, &a, INT64_MAX, 0); /* endless */
    job_init(&f, &b, 3, 0);
    start(&f, &a, NULL);
    start(&f, &b, NULL);
    assert_true(b.id > a.id);
    wait_queued(f.s, 1); /* a runs, b waits */
    /* b is dropped without running; its callback came before the cancel returned */
    assert_true(tdm_session_cancel(f.s, b.id));
    expect_cancelled(&b, "before it started");
    assert_false(tdm_session_cancel(f.s, b.id)); /* again: no-op */
    assert_int_equal(atomic_load(&b.calls), 1);
    assert_int_equal(queued_runs(f.s), 0);
    sleep_ms(20);
    assert_int_equal(atomic_load(&a.calls), 0); /* still looping */
    int64_t t0 = now_ms();
    assert_true(tdm_session_cancel(f.s, a.id));
    if (!wait_job(&a, 10000)) fail_msg("the cancelled Loop did not stop within 10 s");
    print_message("running Loop stopped %lld ms after the cancel\n", (long long)(now_ms() - t0));
    expect_cancelled(&a, "cancelled");
    /* no-ops: done already, never given, 0 */
    assert_false(tdm_session_cancel(f.s, a.id));
    assert_false(tdm_session_cancel(f.s, a.id + 1000));
    assert_false(tdm_session_cancel(f.s, 0));
    assert_false(tdm_session_cancel(NULL, a.id));
    assert_int_equal(tdm_session_cancel_all(f.s), 0);
    /* the session runs normally afterwards */
    expect_sync(&f, 5, 1);
    job_init(&f, &c, 7, 2);
    start(&f, &c, NULL);
    assert_true(wait_job(&c, 10000));
    if (c.code != TDM_OK) fail_msg("%s", c.msg);
    assert_true(c.y == 9.0f);
    assert_true(c.id > b.id);
    sleep_ms(5);
    assert_int_equal(atomic_load(&a.calls), 1);
    assert_int_equal(atomic_load(&b.calls), 1);
    job_fini(&a);
    job_fini(&b);
    job_fini(&c);
    fx_close(&f);
}

static void test_deadline(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    tdm_run_options ro = {sizeof ro, 100};
    job a, b, c, d;
    /* running past its deadline */
    job_init(&f, &a, INT64_MAX, 0);
    start(&f, &a, &ro);
    if (!wait_job(&a, 10000)) fail_msg("the deadline did not stop the Loop within 10 s");
    expect_cancelled(&a, "deadline");
    assert_false(tdm_session_cancel(f.s, a.id));
    /* queued past its deadline behind an endless run without one */
    job_init(&f, &b, INT64_MAX, 0);
    job_init(&f, &c, 3, 0);
    tdm_run_options short_ro = {sizeof short_ro, 30};
    start(&f, &b, NULL);
    start(&f, &c, &short_ro);
    sleep_ms(80);
    assert_int_equal(atomic_load(&c.calls), 0); /* taken out only when it would start */
    assert_true(tdm_session_cancel(f.s, b.id));
    assert_true(wait_job(&b, 10000));
    assert_true(wait_job(&c, 10000));
    expect_cancelled(&b, "cancelled");
    expect_cancelled(&c, "deadline");
    /* a deadline that is not reached changes nothing */
    tdm_run_options long_ro = {sizeof long_ro, 60000};
    job_init(&f, &d, 4, 1);
    start(&f, &d, &long_ro);
    assert_true(wait_job(&d, 10000));
    if (d.code != TDM_OK) fail_msg("%s", d.msg);
    assert_true(d.y == 5.0f);
    /* synchronous runs */
    job s;
    job_init(&f, &s, INT64_MAX, 0);
    tdm_tensor *out = NULL;
    tdm_status *st = tdm_session_run_ex(f.s, 3, names, (const tdm_tensor *const *)s.in, 1, NULL, &ro, &out);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_CANCELLED);
    assert_non_null(strstr(tdm_status_message(st), "deadline"));
    assert_null(out);
    tdm_status_free(st);
    s.m = 6;
    assert_null(tdm_session_run_ex(f.s, 3, names, (const tdm_tensor *const *)s.in, 1, NULL, &long_ro, &out));
    assert_true(((const float *)tdm_tensor_data_const(out))[0] == 6.0f);
    tdm_tensor_free(out);
    out = NULL;
    assert_null(tdm_session_run_ex(f.s, 3, names, (const tdm_tensor *const *)s.in, 1, NULL, NULL, &out));
    tdm_tensor_free(out);
    /* bad options */
    tdm_run_options bad = {0, 10};
    st = tdm_session_run_ex(f.s, 3, names, (const tdm_tensor *const *)s.in, 1, NULL, &bad, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    bad = (tdm_run_options){sizeof bad, -5};
    st = tdm_session_run_async_ex(f.s, 3, names, (const tdm_tensor *const *)s.in, 1, NULL, &bad,
                                  on_done, &s, NULL);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tdm_status_message(st), "timeout_ms"));
    tdm_status_free(st);
    /* an older, shorter struct: only struct_size, no deadline */
    size_t old_size = sizeof(size_t);
    assert_null(tdm_session_run_ex(f.s, 3, names, (const tdm_tensor *const *)s.in, 1, NULL,
                                   (const tdm_run_options *)&old_size, &out));
    assert_true(((const float *)tdm_tensor_data_const(out))[0] == 6.0f);
    tdm_tensor_free(out);
    assert_int_equal(atomic_load(&s.calls), 0);
    job_fini(&a);
    job_fini(&b);
    job_fini(&c);
    job_fini(&d);
    job_fini(&s);
    fx_close(&f);
}

/* ---- cancel racing with completion ---- */

enum { RACE_THREADS = 4, RACE_RUNS = 250 };

typedef struct racer {
    fx *f;
    job *jobs; /* RACE_RUNS */
    unsigned seed;
} racer;

static void *race_main(void *arg) {
    racer *r = arg;
    for (int i = 0; i < RACE_RUNS; i++) {
        job *j = &r->jobs[i];
        tdm_status *st = tdm_session_run_async_ex(r->f->s, 3, names, (const tdm_tensor *const *)j->in,
                                                  1, NULL, NULL, on_done, j, &j->id);
        if (st) { /* not a cmocka assertion off the main thread: recorded, checked there */
            j->code = TDM_ERR_INTERNAL;
            tdm_status_free(st);
            continue;
        }
        switch (rand_r(&r->seed) % 4) {
        case 0: /* at once: most likely still queued */
            j->caught = tdm_session_cancel(r->f->s, j->id);
            break;
        case 1: { /* after a little while: queued, running or done */
            volatile int spin = 0;
            int n = (int)(rand_r(&r->seed) % 20000);
            for (int k = 0; k < n; k++) spin++;
            j->caught = tdm_session_cancel(r->f->s, j->id);
            break;
        }
        case 2:
            sched_yield();
            j->caught = tdm_session_cancel(r->f->s, j->id);
            break;
        default: /* left to run */
            break;
        }
    }
    return NULL;
}

static void test_cancel_races_completion(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    static job jobs[RACE_THREADS * RACE_RUNS];
    atomic_int done = 0;
    for (int i = 0; i < RACE_THREADS * RACE_RUNS; i++) {
        job_init(&f, &jobs[i], 1 + i % 3, (float)i);
        jobs[i].done = &done;
    }
    pthread_t th[RACE_THREADS];
    racer rs[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++) {
        rs[t] = (racer){&f, &jobs[t * RACE_RUNS], 1234u + (unsigned)t};
        assert_int_equal(pthread_create(&th[t], NULL, race_main, &rs[t]), 0);
    }
    for (int t = 0; t < RACE_THREADS; t++) pthread_join(th[t], NULL);
    int64_t t0 = now_ms();
    while (atomic_load(&done) < RACE_THREADS * RACE_RUNS && now_ms() - t0 < 60000) sleep_ms(1);
    sleep_ms(10); /* a second callback would come now */
    int cancelled = 0, completed = 0;
    for (int i = 0; i < RACE_THREADS * RACE_RUNS; i++) {
        job *j = &jobs[i];
        if (j->code == TDM_ERR_INTERNAL && !j->id) fail_msg("run %d did not start", i);
        if (atomic_load(&j->calls) != 1)
            fail_msg("run %d: %d callbacks", i, atomic_load(&j->calls));
        if (j->caught) {
            if (j->code != TDM_ERR_CANCELLED)
                fail_msg("run %d: cancel returned true, callback got [%s] %s", i, tdm_code_name(j->code), j->msg);
            cancelled++;
        } else {
            if (j->code != TDM_OK)
                fail_msg("run %d: not cancelled, callback got [%s] %s", i, tdm_code_name(j->code), j->msg);
            if (j->y != j->x + (float)j->m) fail_msg("run %d: y %g, expected %g", i, j->y, j->x + (float)j->m);
            completed++;
        }
    }
    print_message("%d runs cancelled, %d completed\n", cancelled, completed);
    assert_int_equal(atomic_load(&done), RACE_THREADS * RACE_RUNS);
    assert_true(completed > 0);
    for (int i = 0; i < RACE_THREADS * RACE_RUNS; i++) job_fini(&jobs[i]);
    fx_close(&f);
}

/* ---- tdm_session_free with runs in flight ---- */

static void test_free_with_runs_in_flight(void **state) {
    (void)state;
    enum { Q = 5 };
    /* cancel_all, then free: returns although the first run would never end */
    fx f;
    fx_open(&f);
    job a, q[Q];
    job_init(&f, &a, INT64_MAX, 0);
    start(&f, &a, NULL);
    for (int i = 0; i < Q; i++) {
        job_init(&f, &q[i], 2, 0);
        start(&f, &q[i], NULL);
    }
    assert_int_equal(tdm_session_cancel_all(f.s), 1 + Q);
    tdm_session_free(f.s);
    f.s = NULL;
    expect_cancelled(&a, NULL);
    for (int i = 0; i < Q; i++) expect_cancelled(&q[i], "before it started");
    job_fini(&a);
    for (int i = 0; i < Q; i++) job_fini(&q[i]);
    fx_close(&f);

    /* cancel the running one and free at once, while the others are still queued: they run */
    fx_open(&f);
    job_init(&f, &a, INT64_MAX, 0);
    start(&f, &a, NULL);
    for (int i = 0; i < Q; i++) {
        job_init(&f, &q[i], 10 + i, 1);
        start(&f, &q[i], NULL);
    }
    wait_queued(f.s, Q);
    assert_true(tdm_session_cancel(f.s, a.id));
    tdm_session_free(f.s); /* waits for the queued runs */
    f.s = NULL;
    expect_cancelled(&a, NULL);
    for (int i = 0; i < Q; i++) {
        assert_int_equal(atomic_load(&q[i].calls), 1);
        if (q[i].code != TDM_OK) fail_msg("%s", q[i].msg);
        assert_true(q[i].y == (float)(11 + i));
    }
    job_fini(&a);
    for (int i = 0; i < Q; i++) job_fini(&q[i]);
    fx_close(&f);
}

/* ---- throughput and pipeline mode on slowed test devices ---- */

typedef struct mjob {
    atomic_int calls;
    tdm_code code;
    char msg[256];
    tdm_tensor *y;
} mjob;

static void on_mdone(void *user, tdm_status *st, size_t n, tdm_tensor **outs) {
    mjob *j = user;
    j->code = tdm_status_code(st);
    snprintf(j->msg, sizeof j->msg, "%s", st ? tdm_status_message(st) : "");
    tdm_status_free(st);
    if (n == 1) j->y = outs[0];
    atomic_fetch_add(&j->calls, 1);
}

static tdm_tensor *mlp_input(tdm_env *env, tdm_session *s, int64_t batch) {
    tdm_value_desc d;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &d));
    int64_t dims[TDM_MAX_RANK];
    for (int i = 0; i < d.rank; i++) dims[i] = d.dims[i] < 0 ? 1 : d.dims[i];
    dims[0] = batch;
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, d.rank, dims, &t));
    float *p = tdm_tensor_data(t);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) p[i] = (float)(i % 13) * 0.25f - 1.0f;
    return t;
}

/* Kernels the test devices ran in the session's monitor window. */
static int64_t test_kernels(tdm_session *s) {
    int64_t k = 0;
    for (size_t i = 0; i < tdm_session_monitor_count(s); i++) {
        tdm_device_monitor m;
        assert_null(tdm_session_monitor(s, i, &m, sizeof m));
        if (!strncmp(m.device, "test:", 5)) k += m.kernels;
    }
    return k;
}

/* One run of session `s` started asynchronously: cancelled after `after_ms` when cancel,
 * else run to the end. Returns the kernels the test devices ran; *y the output (or NULL). */
static int64_t mode_run(tdm_env *env, tdm_session *s, bool cancel, int after_ms, tdm_code *code,
                        tdm_tensor **y) {
    tdm_value_desc in, out;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    assert_null(tdm_model_output(tdm_session_model(s), 0, &out));
    tdm_tensor *x = mlp_input(env, s, 8);
    mjob j;
    memset(&j, 0, sizeof j);
    tdm_session_monitor_reset(s);
    tdm_run_id id = 0;
    const tdm_tensor *xs[] = {x};
    assert_null(tdm_session_run_async_ex(s, 1, &in.name, xs, 1, &out.name, NULL, on_mdone, &j, &id));
    if (cancel) {
        sleep_ms(after_ms);
        assert_true(tdm_session_cancel(s, id));
    }
    int64_t t0 = now_ms();
    while (atomic_load(&j.calls) == 0 && now_ms() - t0 < 30000) sleep_ms(1);
    assert_int_equal(atomic_load(&j.calls), 1);
    *code = j.code;
    if (cancel && j.code != TDM_ERR_CANCELLED) fail_msg("[%s] %s", tdm_code_name(j.code), j.msg);
    if (!cancel && j.code != TDM_OK) fail_msg("[%s] %s", tdm_code_name(j.code), j.msg);
    *y = j.y;
    tdm_tensor_free(x);
    return test_kernels(s);
}

static tdm_session *mode_session(tdm_env *env, const char *devices, int mode);

static void check_mode(const char *devices, int mode) {
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_session *s = mode_session(env, devices, mode);
    tdm_code code;
    tdm_tensor *y_full = NULL, *y = NULL;
    int64_t full = mode_run(env, s, false, 0, &code, &y_full);
    int64_t cut = mode_run(env, s, true, 10, &code, &y);
    assert_null(y);
    print_message("%s mode %d: test devices ran %lld kernels in a full run, %lld in a cancelled one\n",
                  devices, mode, (long long)full, (long long)cut);
    if (full < 2 || cut >= full) fail_msg("the cancelled run ran %lld of %lld kernels", (long long)cut, (long long)full);
    /* the session runs normally afterwards, with the same outputs */
    mode_run(env, s, false, 0, &code, &y);
    assert_int_equal(tdm_tensor_element_count(y), tdm_tensor_element_count(y_full));
    /* not bitwise: the split between devices may differ from run to run, and a device's
     * share of one row takes the one-row product path (another summation order) */
    const float *ya = tdm_tensor_data_const(y), *yb = tdm_tensor_data_const(y_full);
    for (int64_t i = 0; i < tdm_tensor_element_count(y); i++)
        if (!(fabsf(ya[i] - yb[i]) <= 1e-6f + 1e-5f * fabsf(yb[i])))
            fail_msg("output %lld: %.9g after the cancelled run, %.9g before", (long long)i, ya[i], yb[i]);
    tdm_tensor_free(y);
    tdm_tensor_free(y_full);
    tdm_session_free(s);
    tdm_env_free(env);
}

/* The sessions of check_mode: the model on `devices`, no device profiles to measure (slow on
 * slowed devices), pipeline stages: the first node, then the rest. */
static tdm_session *mode_session(tdm_env *env, const char *devices, int mode) {
    tdm_session_options so;
    memset(&so, 0, sizeof so);
    so.api_version = TDM_API_VERSION;
    so.devices = devices;
    so.threads = 1;
    so.opt_level = 1;
    so.mode = mode;
    so.no_rebalance = true;
    so.placement = "first";
    so.pipeline_cuts = "#1";
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create(env, MLP, &so, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    return s;
}

/* One run of 4 rows (the parts' size below) on one thread first: oneDNN makes its primitives
 * on first use and shares them through a process-wide cache; ThreadSanitizer does not see
 * oneDNN's own synchronisation (the library is not instrumented) and would report two
 * replicas making the same primitive at the same time. */
static void warm_up(void) {
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_session *s = mode_session(env, "test:0", TDM_MODE_LATENCY);
    tdm_value_desc in, out;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    assert_null(tdm_model_output(tdm_session_model(s), 0, &out));
    tdm_tensor *x = mlp_input(env, s, 4), *y = NULL;
    assert_null(tdm_session_run(s, 1, &in.name, (const tdm_tensor *const *)&x, 1, &out.name, &y));
    tdm_tensor_free(x);
    tdm_tensor_free(y);
    tdm_session_free(s);
    tdm_env_free(env);
}

static void test_cancel_throughput_mode(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "2", 1);
    setenv("TANDEM_TEST_DEVICE_DELAY_US", "50000", 1); /* 50 ms per kernel */
    warm_up();
    check_mode("test:0,test:1", TDM_MODE_THROUGHPUT);
    check_mode("test:0,test:1", TDM_MODE_PIPELINE);
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICES");
}

int main(void) {
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "0", 1); /* only a cancel or a deadline ends a Loop */
    if (!getenv("TANDEM_CACHE_DIR")) setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_queued_and_running),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_cancel_races_completion),
        cmocka_unit_test(test_free_with_runs_in_flight),
        cmocka_unit_test(test_cancel_throughput_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
