/* Helpers of tests/unit/test_catalogue.c: a counting allocator hook that refuses single
 * allocations over 1 GiB, model building on top of model_builder.h (attributes, typed values,
 * initializers), and checks of statuses, leaks and failing runs. One environment per test
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

/* ---- model building: attributes and typed values on top of model_builder.h ---- */

static void *g_extra[1024];
static int g_n_extra;

static void *xalloc(size_t n) {
    assert_true(g_n_extra < (int)(sizeof g_extra / sizeof g_extra[0]));
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    g_extra[g_n_extra++] = p;
    return p;
}

static char *xstr(const char *s) {
    char *d = xalloc(strlen(s) + 1);
    strcpy(d, s);
    return d;
}

static Onnx__AttributeProto *a_int(const char *name, int64_t v) {
    Onnx__AttributeProto *a = xalloc(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = xstr(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    return a;
}

static Onnx__AttributeProto *a_ints(const char *name, int n, const int64_t *v) {
    Onnx__AttributeProto *a = xalloc(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = xstr(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = (size_t)n;
    a->ints = xalloc((size_t)(n + 1) * sizeof(int64_t));
    if (n) memcpy(a->ints, v, (size_t)n * sizeof(int64_t));
    return a;
}

/* A TensorProto of any type with raw little-endian data (or none). */
static Onnx__TensorProto *tensor_proto(const char *name, int dtype, int rank, const int64_t *dims,
                                       const void *raw, size_t raw_len) {
    Onnx__TensorProto *t = xalloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = xstr(name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)rank;
    t->dims = xalloc((size_t)(rank + 1) * sizeof(int64_t));
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    if (raw) {
        t->has_raw_data = 1;
        t->raw_data.len = raw_len;
        t->raw_data.data = xalloc(raw_len);
        memcpy(t->raw_data.data, raw, raw_len);
    }
    return t;
}

static Onnx__AttributeProto *a_tensor(const char *name, Onnx__TensorProto *t) {
    Onnx__AttributeProto *a = xalloc(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = xstr(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    a->t = t;
    return a;
}

/* Node `node` gets the n attributes given (NULL entries skipped). */
static void attrs(mb_model *m, int node, int n, ...) {
    Onnx__AttributeProto **arr = xalloc((size_t)(n + 1) * sizeof *arr);
    va_list ap;
    va_start(ap, n);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        Onnx__AttributeProto *a = va_arg(ap, Onnx__AttributeProto *);
        if (a) arr[k++] = a;
    }
    va_end(ap);
    m->nodes[node]->attribute = arr;
    m->nodes[node]->n_attribute = k;
}

static void input_t(mb_model *m, const char *name, int dtype, int rank, const int64_t *dims) {
    m->ins[m->graph.n_input++] = mb_value(m, name, dtype, rank, dims);
}

static void output_t(mb_model *m, const char *name, int dtype) {
    m->outs[m->graph.n_output++] = mb_value(m, name, dtype, -1, NULL);
}

/* An initializer kept in g_extra (mb_free must not see it: it would free the parts). */
static Onnx__TensorProto *g_inits[8];
static int g_n_inits;

static void init_raw(mb_model *m, const char *name, int dtype, int rank, const int64_t *dims,
                     const void *raw, size_t raw_len) {
    Onnx__TensorProto *t = tensor_proto(name, dtype, rank, dims, raw, raw_len);
    g_inits[g_n_inits++] = t;
    m->inits[m->graph.n_initializer++] = t;
}

/* Serializes m and releases everything the helpers above allocated (and m). */
static void *finish(mb_model *m, size_t *size) {
    void *buf = mb_pack(m, size);
    for (size_t i = 0; i < m->graph.n_node; i++) {
        m->nodes[i]->attribute = NULL;
        m->nodes[i]->n_attribute = 0;
    }
    /* initializers made by init_raw live in g_extra: take them out of the graph */
    size_t keep = 0;
    for (size_t i = 0; i < m->graph.n_initializer; i++) {
        bool ours = false;
        for (int k = 0; k < g_n_inits; k++) ours |= m->inits[i] == g_inits[k];
        if (!ours) m->inits[keep++] = m->inits[i];
    }
    m->graph.n_initializer = keep;
    g_n_inits = 0;
    mb_free(m);
    for (int i = 0; i < g_n_extra; i++) free(g_extra[i]);
    g_n_extra = 0;
    return buf;
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
    size_t size;
    void *buf = finish(&m, &size);
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s);
    free(buf);
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
    size_t size;
    void *buf = finish(m, &size);
    long live0 = live();
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s);
    free(buf);
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
    size_t size;
    void *buf = finish(m, &size);
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s);
    free(buf);
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
