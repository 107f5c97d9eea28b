/* Helpers of tests/unit/test_catalogue.c: a counting allocator hook that refuses single
 * allocations over 1 GiB, finish() for models of model_builder.h, and checks of statuses, leaks and failing runs. One environment per test
 * (g_env, made by setup). */
#ifndef TDM_TEST_CATALOGUE_UTIL_H
#define TDM_TEST_CATALOGUE_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model_builder.h"
#include "tandem/tandem.h"

/* ---- counting allocator that refuses single allocations over 1 GiB ---- */

#define CAT_MAX_ALLOC ((size_t)1 << 30)

typedef struct counter {
    atomic_long live;
    atomic_long refused;
} counter;

static void *c_alloc(void *user, size_t size, size_t align) {
    counter *c = user;
    if (size > CAT_MAX_ALLOC) {
        atomic_fetch_add(&c->refused, 1);
        return NULL;
    }
    if (align < sizeof(void *)) align = sizeof(void *);
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
    atomic_fetch_add(&c->live, 1);
    return p;
}

static void c_free(void *user, void *p) {
    counter *c = user;
    if (!p) return;
    atomic_fetch_sub(&c->live, 1);
    free(p);
}

static counter g_count;
static tdm_env *g_env;

static int setup(void **state) {
    (void)state;
    memset(&g_count, 0, sizeof g_count);
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.allocator.alloc = c_alloc;
    o.allocator.free = c_free;
    o.allocator.user = &g_count;
    o.threads = 1;
    tdm_status *st = tdm_env_create(&o, &g_env);
    if (st) {
        fprintf(stderr, "tdm_env_create: %s\n", tdm_status_message(st));
        tdm_status_free(st);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tdm_env_free(g_env);
    g_env = NULL;
    long live = atomic_load(&g_count.live);
    if (live != 0) {
        fprintf(stderr, "%ld blocks still allocated after tdm_env_free\n", live);
        return -1;
    }
    return 0;
}

static long live(void) { return atomic_load(&g_count.live); }

static bool strict(void) {
    const char *e = getenv("TDM_CATALOGUE_STRICT");
    return e && atoi(e);
}

/* ---- model building (model_builder.h) ---- */

/* Serializes m and frees it. */
static void *finish(mb_model *m, size_t *size) {
    void *buf = mb_pack(m, size);
    mb_free(m);
    return buf;
}

/* Serializes m (freed) and makes a session of it through g_env: the status of the creation. */
static tdm_status *load_model(mb_model *m, tdm_session **s) {
    size_t size;
    void *buf = finish(m, &size);
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, s);
    free(buf);
    return st;
}

/* ---- checks ---- */

/* Checks status st (freed): code one of `code`/`code2` (code2 < 0: none), message holding
 * every non-NULL substring. Returns 0 when it matches. */
static int check(const char *label, tdm_status *st, int code, int code2, const char *s1,
                 const char *s2) {
    if (!st) {
        fprintf(stderr, "[%s] succeeded; expected [%s]\n", label, tdm_code_name((tdm_code)code));
        return -1;
    }
    int c = (int)tdm_status_code(st);
    const char *msg = tdm_status_message(st);
    int bad = (c != code && c != code2) || (s1 && !strstr(msg, s1)) || (s2 && !strstr(msg, s2));
    if (bad)
        fprintf(stderr, "[%s] got [%s] %s\n    expected [%s]%s%s ...%s...%s%s%s\n", label,
                tdm_code_name((tdm_code)c), msg, tdm_code_name((tdm_code)code),
                code2 >= 0 ? " or " : "", code2 >= 0 ? tdm_code_name((tdm_code)code2) : "",
                s1 ? s1 : "", s2 ? " ...": "", s2 ? s2 : "", s2 ? "..." : "");
    else if (getenv("TDM_TEST_VERBOSE"))
        printf("  %-40s [%s] %s\n", label, tdm_code_name((tdm_code)c), msg);
    tdm_status_free(st);
    return bad ? -1 : 0;
}

/* A known-good model through the same environment: y = Relu(x), x [2]. */
static void env_still_serves(void) {
    mb_model m;
    mb_init(&m, 17);
    int64_t d[1] = {2};
    mb_input(&m, "x", 1, d);
    mb_node(&m, "Relu:x->y");
    mb_output(&m, "y");
    tdm_session *s = NULL;
    tdm_status *st = load_model(&m, &s);
    if (st) fail_msg("the environment no longer serves: %s", tdm_status_message(st));
    tdm_tensor *x = NULL, *y = NULL;
    assert_null(tdm_tensor_create(g_env, TDM_FLOAT, 1, d, &x));
    ((float *)tdm_tensor_data(x))[0] = -1.0f;
    ((float *)tdm_tensor_data(x))[1] = 2.0f;
    const char *in = "x";
    st = tdm_session_run(s, 1, &in, (const tdm_tensor *const *)&x, 1, NULL, &y);
    if (st) fail_msg("the environment no longer runs: %s", tdm_status_message(st));
    assert_true(((float *)tdm_tensor_data(y))[0] == 0.0f);
    assert_true(((float *)tdm_tensor_data(y))[1] == 2.0f);
    tdm_tensor_free(x);
    tdm_tensor_free(y);
    tdm_session_free(s);
}

/* The model must be refused: by tdm_session_create_from_buffer (or, with run_too, by its
 * first run when the session can only tell then: inputs of unknown shape). */
static int expect_refused(const char *label, mb_model *m, int code, int code2, const char *s1,
                          const char *s2) {
    long live0 = live();
    tdm_session *s = NULL;
    tdm_status *st = load_model(m, &s);
    int r = check(label, st, code, code2, s1, s2);
    if (s) {
        fprintf(stderr, "[%s] the session was created\n", label);
        tdm_session_free(s);
        r = -1;
    }
    if (live() != live0) {
        fprintf(stderr, "[%s] %ld blocks leaked\n", label, live() - live0);
        r = -1;
    }
    env_still_serves();
    return r;
}

static tdm_session *session_of(mb_model *m) {
    tdm_session *s = NULL;
    tdm_status *st = load_model(m, &s);
    if (st) fail_msg("session: [%s] %s", tdm_code_name(tdm_status_code(st)), tdm_status_message(st));
    return s;
}

static tdm_tensor *tensor(tdm_dtype dt, int rank, const int64_t *dims, const void *data) {
    tdm_tensor *t = NULL;
    tdm_status *st = tdm_tensor_create(g_env, dt, rank, dims, &t);
    if (st) fail_msg("tensor: %s", tdm_status_message(st));
    if (data && tdm_tensor_byte_size(t)) memcpy(tdm_tensor_data(t), data, tdm_tensor_byte_size(t));
    return t;
}

/* float tensor 0, 1, 2, ... */
static tdm_tensor *iota(int rank, const int64_t *dims) {
    tdm_tensor *t = tensor(TDM_FLOAT, rank, dims, NULL);
    float *p = tdm_tensor_data(t);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) p[i] = (float)i;
    return t;
}

/* Runs s on n inputs; one output, returned in *out (NULL on failure). */
static tdm_status *run(tdm_session *s, int n, const char *const *names, tdm_tensor *const *ins,
                       tdm_tensor **out) {
    *out = NULL;
    return tdm_session_run(s, (size_t)n, names, (const tdm_tensor *const *)ins, 1, NULL, out);
}

/* A failing run: the status matches, nothing leaks, no output is handed out. */
static int expect_run_fails(const char *label, tdm_session *s, int n, const char *const *names,
                            tdm_tensor *const *ins, int code, int code2, const char *s1,
                            const char *s2) {
    long live0 = live();
    tdm_tensor *out = (tdm_tensor *)&out;
    tdm_status *st = tdm_session_run(s, (size_t)n, names, (const tdm_tensor *const *)ins, 1, NULL,
                                     &out);
    int r = check(label, st, code, code2, s1, s2);
    if (!st) { /* already reported; the session may now hold a memory plan */
        if (out != (tdm_tensor *)&out) tdm_tensor_free(out);
        return r;
    }
    if (out != (tdm_tensor *)&out) {
        fprintf(stderr, "[%s] the output was touched on failure\n", label);
        r = -1;
    }
    if (live() != live0) {
        fprintf(stderr, "[%s] %ld blocks leaked\n", label, live() - live0);
        r = -1;
    }
    return r;
}

#define NONE (-1)
#define INVALID TDM_ERR_INVALID_ARGUMENT
#define BADMODEL TDM_ERR_INVALID_MODEL

#endif
