/* Allocation-failure injection: the environment's allocator hook fails the N-th allocation,
 * for every N through model load, session creation and a run. Each failure must come back as
 * a status (no crash), leak nothing (the hook counts live blocks), and a later attempt with a
 * healthy allocator must succeed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model_builder.h"
#include "tandem/tandem.h"

typedef struct counting {
    long calls, fail_at, live;
} counting;

static void *c_alloc(void *user, size_t size, size_t align) {
    counting *c = user;
    if (++c->calls == c->fail_at) return NULL;
    void *p = aligned_alloc(align, (size + align - 1) / align * align);
    if (p) c->live++;
    return p;
}

static void c_free(void *user, void *p) {
    counting *c = user;
    if (p) c->live--;
    free(p);
}

static void *build_model(size_t *size) {
    mb_model m;
    mb_init(&m, 13);
    int64_t d[2] = {-1, 8};
    mb_input(&m, "x", 2, d);
    int64_t shape[2] = {-1, 4};
    mb_init_i64(&m, "shape", 2, shape);
    mb_node(&m, "Relu:x->a");
    mb_node(&m, "Neg:a->b");
    mb_node(&m, "Reshape:b,shape->c");
    mb_node(&m, "Abs:c->y");
    mb_output(&m, "y");
    void *buf = mb_pack(&m, size);
    mb_free(&m);
    return buf;
}

/* Returns the status of one full attempt (NULL = success). */
static tdm_status *attempt(counting *c, const void *buf, size_t size) {
    tdm_env_options o = {TDM_API_VERSION, NULL, NULL, TDM_LOG_ERROR, {c_alloc, c_free, c}, 1};
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    tdm_tensor *x = NULL, *y = NULL;
    tdm_status *st = tdm_env_create(&o, &env);
    if (st) return st;
    tdm_session_options so = {TDM_API_VERSION, "cpu", 1, 1, false};
    st = tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s);
    int64_t d[2] = {3, 8};
    if (!st) st = tdm_tensor_create(env, TDM_FLOAT, 2, d, &x);
    if (!st) {
        for (int i = 0; i < 24; i++) ((float *)tdm_tensor_data(x))[i] = (float)(i - 12);
        const char *in = "x", *out = "y";
        st = tdm_session_run(s, 1, &in, (const tdm_tensor *const *)&x, 1, &out, &y);
    }
    if (!st) {
        assert_int_equal(tdm_tensor_dims(y)[0], 6);
        assert_true(((float *)tdm_tensor_data(y))[0] == 0.0f);
        assert_true(((float *)tdm_tensor_data(y))[23] == 11.0f);
    }
    tdm_tensor_free(x);
    tdm_tensor_free(y);
    tdm_session_free(s);
    tdm_env_free(env);
    return st;
}

static void test_every_allocation_fails_once(void **state) {
    (void)state;
    size_t size;
    void *buf = build_model(&size);
    counting healthy = {0, -1, 0};
    tdm_status *st = attempt(&healthy, buf, size);
    if (st) fail_msg("healthy run failed: %s", tdm_status_message(st));
    assert_int_equal(healthy.live, 0);
    long total = healthy.calls;
    assert_true(total > 20);
    int failures = 0;
    for (long n = 1; n <= total; n++) {
        counting c = {0, n, 0};
        st = attempt(&c, buf, size);
        if (st) {
            failures++;
            assert_int_equal(tdm_status_code(st), TDM_ERR_OUT_OF_MEMORY);
            tdm_status_free(st);
        }
        if (c.live != 0) fail_msg("allocation %ld of %ld failing leaked %ld blocks", n, total, c.live);
    }
    assert_true(failures > total / 2);
    /* and afterwards all is well */
    counting again = {0, -1, 0};
    assert_null(attempt(&again, buf, size));
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_allocation_fails_once)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
