/* Resource limits of control flow (src/backends/cpu/k_control.c): a Loop whose trip count is
 * INT64_MAX and whose condition stays true must end with TDM_ERR_LIMIT, after
 * loop_max_iterations iterations (default 10,000,000) or loop_timeout_ms milliseconds (the
 * session's options, else the environment's settings: TANDEM_LOOP_MAX_ITERATIONS,
 * TANDEM_LOOP_TIMEOUT_MS), with a message naming the limit; the session then runs again; an
 * asynchronous run stuck in such a Loop ends the same way when the session is freed under
 * it, with no leak (the environment's allocator counts live blocks); a long Scan ends at
 * loop_timeout_ms too. The models are built here; the Loop is
 *     y = Loop(M, cond, x) with body (i, c, x) -> (c, x + 1)
 * so y = x + (number of iterations). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>

#include <cmocka.h>

#include "onnx/onnx.pb-c.h"
#include "tandem/tandem.h"
#include "loop_model.h"

#include "counting_alloc.h"

/* ---- the models (the Loop model: loop_model.h) ------------------------------------------ */

/* Scan (opset 17): state s [1], scan input x [N, 1]; body (s, x) -> (s + x, x): the final
 * state is s + sum(x) and the scan output is x again. */
static void *scan_model(size_t *size) {
    int64_t one[1] = {1};
    mb_model body, m;
    mb_init(&body, 17);
    mb_input_t(&body, "s_in", MB_F32, 1, one);
    mb_input_t(&body, "x_in", MB_F32, 1, one);
    mb_node(&body, "Add:s_in,x_in->s_out");
    mb_node(&body, "Identity:x_in->y_out");
    mb_output_t(&body, "s_out", MB_F32, 1, one);
    mb_output_t(&body, "y_out", MB_F32, 1, one);

    mb_init(&m, 17);
    mb_input_t(&m, "s", MB_F32, 1, one);
    mb_input_t(&m, "x", MB_F32, -1, NULL);
    Onnx__NodeProto *scan = mb_node(&m, "Scan:s,x->final,ys");
    mb_attr_graph(&m, scan, "body", &body.graph);
    mb_attr_i(&m, scan, "num_scan_inputs", 1);
    mb_output_t(&m, "final", MB_F32, 1, one);
    mb_output_t(&m, "ys", MB_F32, -1, NULL);
    void *buf = mb_pack(&m, size);
    mb_free(&m);
    mb_free(&body);
    return buf;
}

/* ---- fixture ---------------------------------------------------------------------------- */

typedef struct fx {
    counter cnt;
    tdm_env *env;
    tdm_session *s;
    tdm_tensor *in[3];
    int64_t m;
    uint8_t cond;
    float x;
} fx;

/* The session's options set loop_max_iterations / loop_timeout_ms (0 = the environment's). */
static void fx_open_bounds(fx *f, int64_t max_iterations, int64_t timeout_ms) {
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
    tdm_session_options so = {.api_version = TDM_API_VERSION, .opt_level = 1,
                              .loop_max_iterations = max_iterations, .loop_timeout_ms = timeout_ms};
    tdm_status *st = tdm_session_create_from_buffer(f->env, model, size, NULL, &so, &f->s);
    free(model);
    if (st) fail_msg("session: %s", tdm_status_message(st));
    int64_t one[] = {1};
    assert_null(tdm_tensor_wrap(f->env, TDM_INT64, 0, NULL, &f->m, sizeof f->m, &f->in[0]));
    assert_null(tdm_tensor_wrap(f->env, TDM_BOOL, 0, NULL, &f->cond, 1, &f->in[1]));
    assert_null(tdm_tensor_wrap(f->env, TDM_FLOAT, 1, one, &f->x, sizeof f->x, &f->in[2]));
    f->cond = 1;
}

static void fx_open(fx *f) { fx_open_bounds(f, 0, 0); }

static void fx_close(fx *f) {
    for (int i = 0; i < 3; i++) tdm_tensor_free(f->in[i]);
    tdm_session_free(f->s);
    tdm_env_free(f->env);
    assert_int_equal(atomic_load(&f->cnt.live), 0);
    unsetenv("TANDEM_LOOP_MAX_ITERATIONS");
    unsetenv("TANDEM_LOOP_TIMEOUT_MS");
}

static const char *const names[] = {"M", "cond", "x"};

/* Runs with trip count m; on success *y is the output. Returns the status (caller frees). */
static tdm_status *run(fx *f, int64_t m, float *y) {
    f->m = m;
    tdm_tensor *out = NULL;
    tdm_status *st = tdm_session_run(f->s, 3, names, (const tdm_tensor *const *)f->in, 1, NULL, &out);
    if (!st) {
        *y = ((const float *)tdm_tensor_data_const(out))[0];
        tdm_tensor_free(out);
    }
    return st;
}

static void expect_limit(tdm_status *st, const char *needle) {
    assert_non_null(st);
    if (tdm_status_code(st) != TDM_ERR_LIMIT || !strstr(tdm_status_message(st), needle))
        fail_msg("expected a limit naming %s, got [%s] %s", needle, tdm_code_name(tdm_status_code(st)),
                 tdm_status_message(st));
    tdm_status_free(st);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_loop_within_limits(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    float y = 0;
    tdm_status *st = run(&f, 1000, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    assert_true(y == 1000.0f);
    f.cond = 0; /* the condition ends it before the first iteration */
    st = run(&f, INT64_MAX, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    assert_true(y == 0.0f);
    fx_close(&f);
}

static void test_loop_iteration_limit(void **state) {
    (void)state;
    fx f;
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "5000", 1); /* the environment's default */
    fx_open(&f);
    float y = 0;
    expect_limit(run(&f, INT64_MAX, &y), "TANDEM_LOOP_MAX_ITERATIONS");
    /* the session keeps working: up to the limit is allowed */
    tdm_status *st = run(&f, 5000, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    assert_true(y == 5000.0f);
    expect_limit(run(&f, 5001, &y), "5000 iterations");
    fx_close(&f);
    /* the session's option wins over the environment's */
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "5000", 1);
    fx_open_bounds(&f, 300, 0);
    expect_limit(run(&f, 301, &y), "300 iterations");
    st = run(&f, 300, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    assert_true(y == 300.0f);
    fx_close(&f);
    /* a malformed variable: the environment is not created, the message names it */
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "lots", 1);
    tdm_env *env = NULL;
    st = tdm_env_create(NULL, &env);
    assert_non_null(st);
    assert_null(env);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tdm_status_message(st), "TANDEM_LOOP_MAX_ITERATIONS"));
    tdm_status_free(st);
    unsetenv("TANDEM_LOOP_MAX_ITERATIONS");
}

/* The default bound ends an endless loop without any setting (10,000,000 iterations of a
 * one-Add body). Only where TDM_TEST_SLOW=1: about 10-60 s. */
static void test_loop_default_limit(void **state) {
    (void)state;
    if (!getenv("TDM_TEST_SLOW")) skip();
    fx f;
    fx_open(&f);
    float y = 0;
    expect_limit(run(&f, INT64_MAX, &y), "10000000 iterations");
    fx_close(&f);
}

static void test_loop_time_limit(void **state) {
    (void)state;
    fx f;
    fx_open_bounds(&f, -1, 200); /* no count bound: only the time one */
    float y = 0;
    expect_limit(run(&f, INT64_MAX, &y), "TANDEM_LOOP_TIMEOUT_MS");
    tdm_status *st = run(&f, 7, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    assert_true(y == 7.0f);
    fx_close(&f);
}

typedef struct async_result {
    atomic_int calls;
    tdm_code code;
    char msg[512];
} async_result;

static void on_done(void *user, tdm_status *st, size_t n, tdm_tensor **outs) {
    async_result *r = user;
    r->code = st ? tdm_status_code(st) : TDM_OK;
    snprintf(r->msg, sizeof r->msg, "%s", st ? tdm_status_message(st) : "");
    tdm_status_free(st);
    for (size_t i = 0; i < n; i++) tdm_tensor_free(outs[i]);
    atomic_fetch_add(&r->calls, 1);
}

/* An asynchronous run in an endless Loop, and a second one queued behind it; the session is
 * freed at once: tdm_session_free waits for both, each ends with its own status, nothing leaks. */
static void test_loop_async_free(void **state) {
    (void)state;
    fx f;
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "0", 1); /* the environment's: no count bound */
    setenv("TANDEM_LOOP_TIMEOUT_MS", "300", 1);
    fx_open(&f);
    async_result r1 = {0}, r2 = {0};
    f.m = INT64_MAX;
    assert_null(tdm_session_run_async(f.s, 3, names, (const tdm_tensor *const *)f.in, 1, NULL, on_done, &r1));
    assert_null(tdm_session_run_async(f.s, 3, names, (const tdm_tensor *const *)f.in, 1, NULL, on_done, &r2));
    tdm_session_free(f.s);
    f.s = NULL;
    assert_int_equal(atomic_load(&r1.calls), 1);
    assert_int_equal(atomic_load(&r2.calls), 1);
    if (r1.code != TDM_ERR_LIMIT || !strstr(r1.msg, "TANDEM_LOOP_TIMEOUT_MS"))
        fail_msg("first run: [%d] %s", (int)r1.code, r1.msg);
    if (r2.code != TDM_ERR_LIMIT) fail_msg("second run: [%d] %s", (int)r2.code, r2.msg);
    fx_close(&f);
}

/* A Scan over 1,000,000 steps ends at the session's loop_timeout_ms; a short one sums correctly. */
static void test_scan_time_limit(void **state) {
    (void)state;
    counter cnt = {0};
    tdm_env_options o;
    memset(&o, 0, sizeof o);
    o.api_version = TDM_API_VERSION;
    o.allocator.alloc = c_alloc;
    o.allocator.free = c_free;
    o.allocator.user = &cnt;
    o.threads = 1;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(&o, &env));
    size_t size;
    void *model = scan_model(&size);
    tdm_session *s = NULL;
    tdm_session_options so = {.api_version = TDM_API_VERSION, .opt_level = 1, .loop_timeout_ms = 50};
    tdm_status *st = tdm_session_create_from_buffer(env, model, size, NULL, &so, &s);
    free(model);
    if (st) fail_msg("session: %s", tdm_status_message(st));
    enum { N = 1000000 };
    float *xs = calloc(N, sizeof *xs);
    assert_non_null(xs);
    for (int i = 0; i < N; i++) xs[i] = (float)(i % 4);
    float s0 = 0.5f;
    int64_t one[] = {1}, xd[] = {10, 1};
    tdm_tensor *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
    assert_null(tdm_tensor_wrap(env, TDM_FLOAT, 1, one, &s0, sizeof s0, &in[0]));
    assert_null(tdm_tensor_wrap(env, TDM_FLOAT, 2, xd, xs, (size_t)N * sizeof *xs, &in[1]));
    static const char *const sn[] = {"s", "x"};
    st = tdm_session_run(s, 2, sn, (const tdm_tensor *const *)in, 2, NULL, out);
    if (st) fail_msg("%s", tdm_status_message(st));
    /* 0.5 + (0+1+2+3) + (0+1+2+3) + 0 + 1 */
    assert_true(((const float *)tdm_tensor_data_const(out[0]))[0] == 13.5f);
    assert_int_equal(tdm_tensor_dims(out[1])[0], 10);
    for (int i = 0; i < 2; i++) tdm_tensor_free(out[i]);
    tdm_tensor_free(in[1]);
    xd[0] = N;
    assert_null(tdm_tensor_wrap(env, TDM_FLOAT, 2, xd, xs, (size_t)N * sizeof *xs, &in[1]));
    out[0] = out[1] = NULL;
    expect_limit(tdm_session_run(s, 2, sn, (const tdm_tensor *const *)in, 2, NULL, out),
                 "TANDEM_LOOP_TIMEOUT_MS");
    assert_null(out[0]);
    for (int i = 0; i < 2; i++) tdm_tensor_free(in[i]);
    free(xs);
    tdm_session_free(s);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&cnt.live), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loop_within_limits),
        cmocka_unit_test(test_loop_iteration_limit),
        cmocka_unit_test(test_loop_default_limit),
        cmocka_unit_test(test_loop_time_limit),
        cmocka_unit_test(test_loop_async_free),
        cmocka_unit_test(test_scan_time_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
