/* Public API behaviour: environment, allocator hook, tensors, sessions, runs (sync and async),
 * and the errors a caller gets for bad inputs. Uses tests/models/mlp_dynamic_batch
 * (input [batch,4,8] -> logits [batch,10], probabilities [batch,10]) and its ONNX Runtime
 * reference outputs. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tandem/tandem.h"

#define MLP_DIR TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch"
#define MLP_MODEL MLP_DIR "/model.onnx"
#define MLP_DATA MLP_DIR "/test_data_set_0"
#define IF_DATA TANDEM_SOURCE_DIR "/tests/models/if_chain_body/test_data_set_0"
#define IF_MODEL TANDEM_SOURCE_DIR "/tests/models/if_chain_body/model.onnx"

#include "counting_alloc.h"

typedef struct fixture {
    counter count;
    tdm_env *env;
    tdm_session *s;
    tdm_tensor *input, *want_logits, *want_probs;
} fixture;

#include "test_ok.h"

/* Asserts that `expr` fails with `code`; frees the status. */
#define FAILS_WITH(expr, code)                                                           \
    do {                                                                                 \
        tdm_status *st_ = (expr);                                                        \
        if (!st_) fail_msg("%s succeeded; expected %s", #expr, tdm_code_name(code));     \
        if (tdm_status_code(st_) != (code))                                              \
            fprintf(stderr, "%s: [%s] %s\n", #expr, tdm_code_name(tdm_status_code(st_)), \
                    tdm_status_message(st_));                                            \
        assert_int_equal(tdm_status_code(st_), (code));                                  \
        assert_true(strlen(tdm_status_message(st_)) > 0);                                \
        tdm_status_free(st_);                                                            \
    } while (0)

static tdm_env *counting_env(counter *c, int threads) {
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.allocator.alloc = c_alloc;
    o.allocator.free = c_free;
    o.allocator.user = c;
    o.threads = threads;
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&o, &env);
    if (st) {
        fprintf(stderr, "tdm_env_create: %s\n", tdm_status_message(st));
        tdm_status_free(st);
        return NULL;
    }
    return env;
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    *state = f;
    f->env = counting_env(&f->count, 2);
    if (!f->env) return -1;
    tdm_status *st = tdm_session_create(f->env, MLP_MODEL, NULL, &f->s);
    if (!st) st = tdm_tensor_load_onnx(f->env, MLP_DATA "/input_0.pb", &f->input);
    if (!st) st = tdm_tensor_load_onnx(f->env, MLP_DATA "/output_0.pb", &f->want_logits);
    if (!st) st = tdm_tensor_load_onnx(f->env, MLP_DATA "/output_1.pb", &f->want_probs);
    if (st) {
        fprintf(stderr, "setup: %s\n", tdm_status_message(st));
        tdm_status_free(st);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    if (!f) return 0;
    tdm_tensor_free(f->input);
    tdm_tensor_free(f->want_logits);
    tdm_tensor_free(f->want_probs);
    tdm_session_free(f->s);
    tdm_env_free(f->env);
    long live = atomic_load(&f->count.live);
    free(f);
    if (live != 0) {
        fprintf(stderr, "%ld blocks still allocated after tdm_env_free\n", live);
        return -1;
    }
    return 0;
}

static void assert_close(const tdm_tensor *got, const tdm_tensor *want, double rtol, double atol) {
    assert_int_equal(tdm_tensor_dtype(got), TDM_FLOAT);
    assert_int_equal(tdm_tensor_dtype(want), TDM_FLOAT);
    assert_int_equal(tdm_tensor_rank(got), tdm_tensor_rank(want));
    for (int d = 0; d < tdm_tensor_rank(got); d++)
        assert_int_equal(tdm_tensor_dims(got)[d], tdm_tensor_dims(want)[d]);
    const float *g = tdm_tensor_data_const(got), *w = tdm_tensor_data_const(want);
    for (int64_t i = 0; i < tdm_tensor_element_count(got); i++)
        if (!(fabs((double)g[i] - w[i]) <= atol + rtol * fabs((double)w[i])))
            fail_msg("element %lld: got %g, want %g", (long long)i, g[i], w[i]);
}

/* ---- status, environment ---- */

static void test_status_basics(void **state) {
    (void)state;
    assert_string_equal(tdm_status_message(NULL), "ok");
    assert_int_equal(tdm_status_code(NULL), TDM_OK);
    assert_string_equal(tdm_code_name(TDM_OK), "ok");
    assert_string_equal(tdm_code_name(TDM_ERR_INVALID_MODEL), "invalid model");
    assert_string_equal(tdm_code_name(TDM_ERR_LIMIT), "limit exceeded");
    assert_string_equal(tdm_code_name(TDM_ERR_IO), "i/o error");
    tdm_status_free(NULL);
    assert_non_null(tdm_version_string());
    assert_string_equal(tdm_dtype_name(TDM_FLOAT), "float32");
    assert_int_equal(tdm_dtype_size(TDM_FLOAT), 4);
    assert_int_equal(tdm_dtype_size(TDM_INT64), 8);
    assert_int_equal(tdm_dtype_size(TDM_FLOAT16), 2);
}

static void test_env_null_options(void **state) {
    (void)state;
    tdm_env *env = NULL;
    OK(tdm_env_create(NULL, &env));
    assert_non_null(env);
    assert_true(tdm_env_device_count(env) >= 1);
    int has_cpu = 0;
    for (size_t i = 0; i < tdm_env_device_count(env); i++) {
        assert_non_null(tdm_env_device_name(env, i));
        assert_non_null(tdm_env_device_description(env, i));
        if (strcmp(tdm_env_device_name(env, i), "cpu") == 0) has_cpu = 1;
    }
    assert_true(has_cpu);
    for (size_t i = 0; i < tdm_env_unavailable_count(env); i++)
        assert_non_null(tdm_env_unavailable_reason(env, i));
    tdm_env_free(env);
    tdm_env_free(NULL);
    FAILS_WITH(tdm_env_create(NULL, NULL), TDM_ERR_INVALID_ARGUMENT);
}

static void test_env_bad_options(void **state) {
    (void)state;
    tdm_env *env = (tdm_env *)&env; /* sentinel: must stay untouched on failure */
    tdm_env *sentinel = env;
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION + 100;
    FAILS_WITH(tdm_env_create(&o, &env), TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(env, sentinel);
    o.api_version = TDM_API_VERSION;
    o.allocator.alloc = c_alloc; /* free missing */
    FAILS_WITH(tdm_env_create(&o, &env), TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(env, sentinel);
}

/* Everything allocated through the hook is given back by the time the environment is freed. */
static void test_allocator_hook(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = counting_env(&c, 1);
    assert_non_null(env);
    tdm_session *s = NULL;
    OK(tdm_session_create(env, MLP_MODEL, NULL, &s));
    tdm_tensor *in = NULL;
    OK(tdm_tensor_load_onnx(env, MLP_DATA "/input_0.pb", &in));
    const char *name = "input";
    tdm_tensor *outs[2] = {0};
    OK(tdm_session_run(s, 1, &name, (const tdm_tensor *const *)&in, 2, NULL, outs));
    assert_non_null(outs[0]);
    assert_non_null(outs[1]);
    assert_true(atomic_load(&c.total) > 0);
    assert_true(atomic_load(&c.live) > 0);
    tdm_tensor_free(outs[0]);
    tdm_tensor_free(outs[1]);
    tdm_tensor_free(in);
    tdm_session_free(s);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

/* ---- tensors ---- */

static void test_tensor_create(void **state) {
    fixture *f = *state;
    int64_t dims[2] = {2, 3};
    tdm_tensor *t = NULL;
    OK(tdm_tensor_create(f->env, TDM_FLOAT, 2, dims, &t));
    assert_int_equal(tdm_tensor_dtype(t), TDM_FLOAT);
    assert_int_equal(tdm_tensor_rank(t), 2);
    assert_int_equal(tdm_tensor_dims(t)[0], 2);
    assert_int_equal(tdm_tensor_dims(t)[1], 3);
    assert_int_equal(tdm_tensor_element_count(t), 6);
    assert_int_equal(tdm_tensor_byte_size(t), 24);
    const float *p = tdm_tensor_data(t);
    assert_non_null(p);
    for (int i = 0; i < 6; i++) assert_true(p[i] == 0.0f);
    assert_ptr_equal(tdm_tensor_data(t), tdm_tensor_data_const(t));
    tdm_tensor_free(t);
    tdm_tensor_free(NULL);

    /* scalar, empty and int64 tensors */
    OK(tdm_tensor_create(f->env, TDM_INT64, 0, NULL, &t));
    assert_int_equal(tdm_tensor_rank(t), 0);
    assert_int_equal(tdm_tensor_element_count(t), 1);
    assert_int_equal(tdm_tensor_byte_size(t), 8);
    tdm_tensor_free(t);
    int64_t empty[2] = {0, 5};
    OK(tdm_tensor_create(f->env, TDM_FLOAT16, 2, empty, &t));
    assert_int_equal(tdm_tensor_element_count(t), 0);
    assert_int_equal(tdm_tensor_byte_size(t), 0);
    tdm_tensor_free(t);

    /* bad shapes leave the out-parameter alone */
    tdm_tensor *sentinel = (tdm_tensor *)&t;
    t = sentinel;
    int64_t neg[2] = {2, -1};
    tdm_status *st = tdm_tensor_create(f->env, TDM_FLOAT, 2, neg, &t);
    assert_non_null(st);
    tdm_status_free(st);
    assert_ptr_equal(t, sentinel);
    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    st = tdm_tensor_create(f->env, TDM_FLOAT, 3, huge, &t);
    assert_non_null(st);
    tdm_status_free(st);
    assert_ptr_equal(t, sentinel);
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    st = tdm_tensor_create(f->env, TDM_FLOAT, 9, nine, &t);
    assert_non_null(st);
    tdm_status_free(st);
    assert_ptr_equal(t, sentinel);
    FAILS_WITH(tdm_tensor_create(f->env, TDM_FLOAT, 2, dims, NULL), TDM_ERR_INVALID_ARGUMENT);
}

static void test_tensor_wrap(void **state) {
    fixture *f = *state;
    float buf[6] = {1, 2, 3, 4, 5, 6};
    int64_t dims[2] = {3, 2};
    tdm_tensor *t = NULL;
    OK(tdm_tensor_wrap(f->env, TDM_FLOAT, 2, dims, buf, sizeof buf, &t));
    assert_ptr_equal(tdm_tensor_data(t), buf); /* no copy */
    assert_int_equal(tdm_tensor_dtype(t), TDM_FLOAT);
    assert_int_equal(tdm_tensor_rank(t), 2);
    assert_int_equal(tdm_tensor_dims(t)[0], 3);
    assert_int_equal(tdm_tensor_dims(t)[1], 2);
    assert_int_equal(tdm_tensor_byte_size(t), sizeof buf);
    tdm_tensor_free(t);
    assert_true(buf[5] == 6.0f); /* the user's memory is not freed or changed */

    /* a larger buffer is fine */
    OK(tdm_tensor_wrap(f->env, TDM_FLOAT, 1, (int64_t[]){4}, buf, sizeof buf, &t));
    tdm_tensor_free(t);

    tdm_tensor *sentinel = (tdm_tensor *)&t;
    t = sentinel;
    long live0 = atomic_load(&f->count.live);
    FAILS_WITH(tdm_tensor_wrap(f->env, TDM_FLOAT, 2, dims, buf, sizeof buf - 4, &t),
               TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(t, sentinel);
    FAILS_WITH(tdm_tensor_wrap(f->env, TDM_DOUBLE, 2, dims, buf, sizeof buf, &t),
               TDM_ERR_INVALID_ARGUMENT);
    FAILS_WITH(tdm_tensor_wrap(f->env, TDM_STRING, 1, dims, buf, sizeof buf, &t),
               TDM_ERR_INVALID_ARGUMENT);
    FAILS_WITH(tdm_tensor_wrap(f->env, TDM_FLOAT, 2, dims, NULL, sizeof buf, &t),
               TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(t, sentinel);
    assert_int_equal(atomic_load(&f->count.live), live0);
}

static void test_tensor_strings(void **state) {
    fixture *f = *state;
    int64_t dims[1] = {2};
    tdm_tensor *t = NULL;
    OK(tdm_tensor_create(f->env, TDM_STRING, 1, dims, &t));
    OK(tdm_tensor_set_string(t, 0, "hello", 5));
    OK(tdm_tensor_set_string(t, 1, "a\0b", 3));
    OK(tdm_tensor_set_string(t, 0, "again", 5)); /* replaces, no leak */
    char **s = tdm_tensor_data(t);
    assert_string_equal(s[0], "again");
    assert_int_equal(s[1][0], 'a');
    FAILS_WITH(tdm_tensor_set_string(t, 2, "x", 1), TDM_ERR_INVALID_ARGUMENT);
    FAILS_WITH(tdm_tensor_set_string(t, -1, "x", 1), TDM_ERR_INVALID_ARGUMENT);
    tdm_tensor_free(t);
    OK(tdm_tensor_create(f->env, TDM_FLOAT, 1, dims, &t));
    FAILS_WITH(tdm_tensor_set_string(t, 0, "x", 1), TDM_ERR_INVALID_ARGUMENT);
    tdm_tensor_free(t);
}

/* ---- model description ---- */

static void test_model_description(void **state) {
    fixture *f = *state;
    const tdm_model *m = tdm_session_model(f->s);
    assert_non_null(m);
    assert_int_equal(tdm_model_input_count(m), 1);
    assert_int_equal(tdm_model_output_count(m), 2);
    assert_int_equal(tdm_model_opset(m, ""), 17);
    assert_int_equal(tdm_model_ir_version(m), 8);
    tdm_value_desc d;
    OK(tdm_model_input(m, 0, &d));
    assert_string_equal(d.name, "input");
    assert_int_equal(d.dtype, TDM_FLOAT);
    assert_int_equal(d.rank, 3);
    assert_int_equal(d.dims[0], -1);
    assert_non_null(d.dim_params[0]);
    assert_string_equal(d.dim_params[0], "batch");
    assert_int_equal(d.dims[1], 4);
    assert_int_equal(d.dims[2], 8);
    OK(tdm_model_output(m, 0, &d));
    assert_string_equal(d.name, "logits");
    OK(tdm_model_output(m, 1, &d));
    assert_string_equal(d.name, "probabilities");
    FAILS_WITH(tdm_model_input(m, 1, &d), TDM_ERR_NOT_FOUND);
    FAILS_WITH(tdm_model_output(m, 2, &d), TDM_ERR_NOT_FOUND);

    /* the same through tdm_model_load */
    tdm_model *lm = NULL;
    OK(tdm_model_load(f->env, MLP_MODEL, &lm));
    assert_int_equal(tdm_model_input_count(lm), 1);
    assert_true(tdm_model_node_count(lm) >= 4);
    assert_true(tdm_model_parameter_count(lm) == 32 * 64 + 64 + 64 * 10 + 10);
    assert_true(tdm_model_parameter_bytes(lm) == 4 * tdm_model_parameter_count(lm));
    for (size_t i = 0; i < tdm_model_op_type_count(lm); i++) {
        size_t nodes = 0;
        assert_non_null(tdm_model_op_type(lm, i, &nodes));
        assert_true(nodes >= 1);
        assert_true(tdm_model_op_type_supported(lm, i, "cpu"));
    }
    tdm_model_free(lm);
    tdm_model_free(NULL);
}

/* ---- runs ---- */

static void test_run_matches_reference(void **state) {
    fixture *f = *state;
    const char *in_name = "input";
    tdm_tensor *outs[2] = {0};
    OK(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&f->input, 2, NULL, outs));
    assert_close(outs[0], f->want_logits, 1e-3, 1e-4);
    assert_close(outs[1], f->want_probs, 1e-3, 1e-4);
    tdm_tensor_free(outs[0]);
    tdm_tensor_free(outs[1]);
}

static void test_outputs_by_name(void **state) {
    fixture *f = *state;
    const char *in_name = "input";
    const char *names[3] = {"probabilities", "logits", "probabilities"};
    tdm_tensor *outs[3] = {0};
    OK(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&f->input, 3, names, outs));
    assert_close(outs[0], f->want_probs, 1e-3, 1e-4);
    assert_close(outs[1], f->want_logits, 1e-3, 1e-4);
    assert_close(outs[2], f->want_probs, 1e-3, 1e-4); /* asked twice: two tensors */
    assert_ptr_not_equal(outs[0], outs[2]);
    for (int i = 0; i < 3; i++) tdm_tensor_free(outs[i]);

    /* only one output */
    tdm_tensor *one = NULL;
    OK(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&f->input, 1, &names[1], &one));
    assert_close(one, f->want_logits, 1e-3, 1e-4);
    tdm_tensor_free(one);
}

/* A wrapped user buffer with another batch size (dynamic batch). */
static void test_run_dynamic_batch(void **state) {
    fixture *f = *state;
    const float *ref = tdm_tensor_data_const(f->input); /* [3,4,8] */
    float buf[5 * 32];
    for (int b = 0; b < 5; b++) memcpy(buf + b * 32, ref + (b % 3) * 32, 32 * sizeof(float));
    tdm_tensor *in = NULL;
    OK(tdm_tensor_wrap(f->env, TDM_FLOAT, 3, (int64_t[]){5, 4, 8}, buf, sizeof buf, &in));
    const char *in_name = "input", *out_name = "logits";
    tdm_tensor *out = NULL;
    OK(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&in, 1, &out_name, &out));
    assert_int_equal(tdm_tensor_rank(out), 2);
    assert_int_equal(tdm_tensor_dims(out)[0], 5);
    assert_int_equal(tdm_tensor_dims(out)[1], 10);
    const float *got = tdm_tensor_data_const(out), *want = tdm_tensor_data_const(f->want_logits);
    for (int b = 0; b < 5; b++)
        for (int k = 0; k < 10; k++)
            assert_true(fabs(got[b * 10 + k] - want[(b % 3) * 10 + k]) <= 1e-4 + 1e-3 * fabs(want[(b % 3) * 10 + k]));
    tdm_tensor_free(out);
    tdm_tensor_free(in);
}

/* free_dims: the symbolic batch fixed before planning (the fixture's input is [3, 4, 8]). */
static void test_free_dims(void **state) {
    fixture *f = *state;
    tdm_session_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.free_dims = " batch = 3 ";
    tdm_session *s = NULL;
    OK(tdm_session_create(f->env, MLP_MODEL, &o, &s));
    tdm_session_free(s);
    o.free_dims = "batch=3,batch=3";
    OK(tdm_session_create(f->env, MLP_MODEL, &o, &s));
    tdm_value_desc d;
    OK(tdm_model_input(tdm_session_model(s), 0, &d));
    assert_int_equal(d.dims[0], 3);
    const char *in_name = "input", *out_name = "logits";
    tdm_tensor *out = NULL;
    OK(tdm_session_run(s, 1, &in_name, (const tdm_tensor *const *)&f->input, 1, &out_name, &out));
    assert_close(out, f->want_logits, 1e-3, 1e-4);
    tdm_tensor_free(out);
    float buf[2 * 32] = {0};
    tdm_tensor *two = NULL, *sentinel = (tdm_tensor *)&f;
    out = sentinel;
    OK(tdm_tensor_wrap(f->env, TDM_FLOAT, 3, (int64_t[]){2, 4, 8}, buf, sizeof buf, &two));
    FAILS_WITH(tdm_session_run(s, 1, &in_name, (const tdm_tensor *const *)&two, 1, &out_name, &out),
               TDM_ERR_INVALID_ARGUMENT); /* not the size it was fixed to */
    assert_ptr_equal(out, sentinel);
    tdm_tensor_free(two);
    tdm_session_free(s);
    const char *bad[] = {"nosuch=2", "batch", "=3", " =3", "bat ch=3", "batch=0", "batch=x", "batch=3x", "batch=99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s = NULL;
        o.free_dims = bad[i];
        FAILS_WITH(tdm_session_create(f->env, MLP_MODEL, &o, &s), TDM_ERR_INVALID_ARGUMENT);
        assert_null(s);
    }
    o.free_dims = "batch=3";
    o.mode = TDM_MODE_THROUGHPUT; /* cuts the batch: refused */
    FAILS_WITH(tdm_session_create(f->env, MLP_MODEL, &o, &s), TDM_ERR_INVALID_ARGUMENT);
    o.mode = TDM_MODE_LATENCY;
    o.free_dims = ""; /* none */
    OK(tdm_session_create(f->env, MLP_MODEL, &o, &s));
    OK(tdm_model_input(tdm_session_model(s), 0, &d));
    assert_int_equal(d.dims[0], -1);
    tdm_session_free(s);
}

static void test_run_errors(void **state) {
    fixture *f = *state;
    const char *in_name = "input";
    tdm_tensor *sentinel = (tdm_tensor *)&f; /* must stay untouched */
    tdm_tensor *outs[2];
    /* one good run first: the session keeps a memory plan per input shape (retained, not
     * leaked), which must exist before counting live blocks */
    test_run_matches_reference(state);
    long live0 = atomic_load(&f->count.live);

    /* wrong dtype */
    tdm_tensor *d = NULL;
    OK(tdm_tensor_create(f->env, TDM_DOUBLE, 3, (int64_t[]){3, 4, 8}, &d));
    outs[0] = outs[1] = sentinel;
    FAILS_WITH(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&d, 2, NULL, outs),
               TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(outs[0], sentinel);
    tdm_tensor_free(d);

    /* wrong rank */
    tdm_tensor *r = NULL;
    OK(tdm_tensor_create(f->env, TDM_FLOAT, 2, (int64_t[]){3, 32}, &r));
    FAILS_WITH(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&r, 2, NULL, outs),
               TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(outs[0], sentinel);
    tdm_tensor_free(r);

    /* wrong fixed dimension */
    tdm_tensor *w = NULL;
    OK(tdm_tensor_create(f->env, TDM_FLOAT, 3, (int64_t[]){3, 4, 9}, &w));
    FAILS_WITH(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&w, 2, NULL, outs),
               TDM_ERR_INVALID_ARGUMENT);
    tdm_tensor_free(w);

    /* unknown input name */
    const char *bad_name = "no_such_input";
    FAILS_WITH(tdm_session_run(f->s, 1, &bad_name, (const tdm_tensor *const *)&f->input, 2, NULL,
                               outs),
               TDM_ERR_NOT_FOUND);
    /* missing input */
    FAILS_WITH(tdm_session_run(f->s, 0, NULL, NULL, 2, NULL, outs), TDM_ERR_INVALID_ARGUMENT);
    /* the same input twice */
    const char *twice[2] = {"input", "input"};
    const tdm_tensor *two[2] = {f->input, f->input};
    FAILS_WITH(tdm_session_run(f->s, 2, twice, two, 2, NULL, outs), TDM_ERR_INVALID_ARGUMENT);
    /* unknown output name */
    const char *bad_out = "no_such_output";
    FAILS_WITH(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&f->input, 1, &bad_out,
                               outs),
               TDM_ERR_NOT_FOUND);
    /* NULL output names need n_outputs == output count */
    FAILS_WITH(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&f->input, 1, NULL, outs),
               TDM_ERR_INVALID_ARGUMENT);
    /* NULL tensor */
    const tdm_tensor *null_in = NULL;
    FAILS_WITH(tdm_session_run(f->s, 1, &in_name, &null_in, 2, NULL, outs), TDM_ERR_INVALID_ARGUMENT);
    FAILS_WITH(tdm_session_run(NULL, 1, &in_name, (const tdm_tensor *const *)&f->input, 2, NULL, outs),
               TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(outs[0], sentinel);
    assert_ptr_equal(outs[1], sentinel);
    assert_int_equal(atomic_load(&f->count.live), live0);

    /* the session still works afterwards */
    test_run_matches_reference(state);
    assert_int_equal(atomic_load(&f->count.live), live0);
}

static void test_session_create_errors(void **state) {
    fixture *f = *state;
    tdm_session *s = (tdm_session *)&s, *sentinel = s;
    FAILS_WITH(tdm_session_create(f->env, TANDEM_SOURCE_DIR "/tests/models/no_such_model.onnx", NULL,
                                  &s),
               TDM_ERR_IO);
    assert_ptr_equal(s, sentinel);
    tdm_session_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.devices = "no_such_device:7";
    FAILS_WITH(tdm_session_create(f->env, MLP_MODEL, &o, &s), TDM_ERR_DEVICE);
    o.api_version = 0;
    o.devices = NULL;
    FAILS_WITH(tdm_session_create(f->env, MLP_MODEL, &o, &s), TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(s, sentinel);
    FAILS_WITH(tdm_session_create(NULL, MLP_MODEL, NULL, &s), TDM_ERR_INVALID_ARGUMENT);
    tdm_session_free(NULL);

    /* explicit options, opt level 0 */
    o.api_version = TDM_API_VERSION;
    o.devices = "cpu";
    o.threads = 1;
    o.opt_level = 0;
    o.no_fallback = true;
    OK(tdm_session_create(f->env, MLP_MODEL, &o, &s));
    const char *in_name = "input";
    tdm_tensor *outs[2] = {0};
    OK(tdm_session_run(s, 1, &in_name, (const tdm_tensor *const *)&f->input, 2, NULL, outs));
    assert_close(outs[0], f->want_logits, 1e-3, 1e-4);
    tdm_tensor_free(outs[0]);
    tdm_tensor_free(outs[1]);
    tdm_session_free(s);
}

/* ---- asynchronous runs ---- */

#define N_ASYNC 8

typedef struct async_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    struct {
        tdm_tensor *out[2];
        tdm_status *st;
        size_t n;
        int calls;
    } slot[N_ASYNC + 1];
} async_state;

typedef struct async_arg {
    async_state *as;
    int index;
} async_arg;

static void on_done(void *user, tdm_status *st, size_t n, tdm_tensor **outs) {
    async_arg *a = user;
    async_state *as = a->as;
    pthread_mutex_lock(&as->mu);
    as->slot[a->index].calls++;
    as->slot[a->index].st = st;
    as->slot[a->index].n = n;
    for (size_t i = 0; i < n && i < 2; i++) as->slot[a->index].out[i] = outs[i];
    as->done++;
    pthread_cond_signal(&as->cv);
    pthread_mutex_unlock(&as->mu);
}

static tdm_tensor *batch_input(fixture *f, int seed, int batch) {
    tdm_tensor *t = NULL;
    OK(tdm_tensor_create(f->env, TDM_FLOAT, 3, (int64_t[]){batch, 4, 8}, &t));
    float *p = tdm_tensor_data(t);
    uint32_t x = 2654435761u * (uint32_t)(seed + 1);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float)((x >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return t;
}

static void test_run_async(void **state) {
    fixture *f = *state;
    async_state as;
    memset(&as, 0, sizeof as);
    pthread_mutex_init(&as.mu, NULL);
    pthread_cond_init(&as.cv, NULL);
    async_arg args[N_ASYNC + 1];
    tdm_tensor *ins[N_ASYNC];
    const char *in_name = "input";
    const char *names[2] = {"probabilities", "logits"}; /* reversed order on purpose */
    for (int i = 0; i < N_ASYNC; i++) {
        ins[i] = batch_input(f, i, 1 + i % 4);
        args[i].as = &as;
        args[i].index = i;
        OK(tdm_session_run_async(f->s, 1, &in_name, (const tdm_tensor *const *)&ins[i], 2, names,
                                 on_done, &args[i]));
    }
    /* a run that fails: its callback gets the status */
    tdm_tensor *bad = NULL;
    OK(tdm_tensor_create(f->env, TDM_INT32, 3, (int64_t[]){1, 4, 8}, &bad));
    args[N_ASYNC].as = &as;
    args[N_ASYNC].index = N_ASYNC;
    tdm_status *st = tdm_session_run_async(f->s, 1, &in_name, (const tdm_tensor *const *)&bad, 2,
                                           names, on_done, &args[N_ASYNC]);
    int expect_calls = N_ASYNC + 1;
    if (st) { /* rejected up front is fine too */
        assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
        tdm_status_free(st);
        expect_calls = N_ASYNC;
    }

    pthread_mutex_lock(&as.mu);
    while (as.done < expect_calls) pthread_cond_wait(&as.cv, &as.mu);
    pthread_mutex_unlock(&as.mu);

    for (int i = 0; i < N_ASYNC; i++) {
        assert_int_equal(as.slot[i].calls, 1);
        if (as.slot[i].st) fail_msg("async run %d: %s", i, tdm_status_message(as.slot[i].st));
        assert_int_equal(as.slot[i].n, 2);
        tdm_tensor *sync[2] = {0};
        OK(tdm_session_run(f->s, 1, &in_name, (const tdm_tensor *const *)&ins[i], 2, names, sync));
        assert_int_equal(tdm_tensor_dims(as.slot[i].out[0])[0], 1 + i % 4);
        for (int k = 0; k < 2; k++) {
            assert_close(as.slot[i].out[k], sync[k], 1e-6, 1e-7);
            tdm_tensor_free(as.slot[i].out[k]);
            tdm_tensor_free(sync[k]);
        }
        tdm_tensor_free(ins[i]);
    }
    if (expect_calls > N_ASYNC) {
        assert_int_equal(as.slot[N_ASYNC].calls, 1);
        assert_non_null(as.slot[N_ASYNC].st);
        assert_int_equal(tdm_status_code(as.slot[N_ASYNC].st), TDM_ERR_INVALID_ARGUMENT);
        assert_int_equal(as.slot[N_ASYNC].n, 0);
        tdm_status_free(as.slot[N_ASYNC].st);
    }
    tdm_tensor_free(bad);
    FAILS_WITH(tdm_session_run_async(f->s, 1, &in_name, (const tdm_tensor *const *)&f->input, 2,
                                     NULL, NULL, NULL),
               TDM_ERR_INVALID_ARGUMENT);
    pthread_cond_destroy(&as.cv);
    pthread_mutex_destroy(&as.mu);
}

/* Freeing a session waits for its queued runs: every callback still runs exactly once. */
static void test_free_waits_for_async(void **state) {
    fixture *f = *state;
    tdm_session *s = NULL;
    OK(tdm_session_create(f->env, MLP_MODEL, NULL, &s));
    async_state as;
    memset(&as, 0, sizeof as);
    pthread_mutex_init(&as.mu, NULL);
    pthread_cond_init(&as.cv, NULL);
    async_arg args[N_ASYNC];
    const char *in_name = "input";
    for (int i = 0; i < N_ASYNC; i++) {
        args[i].as = &as;
        args[i].index = i;
        OK(tdm_session_run_async(s, 1, &in_name, (const tdm_tensor *const *)&f->input, 2, NULL,
                                 on_done, &args[i]));
    }
    tdm_session_free(s);
    assert_int_equal(as.done, N_ASYNC);
    for (int i = 0; i < N_ASYNC; i++) {
        assert_int_equal(as.slot[i].calls, 1);
        assert_null(as.slot[i].st);
        assert_close(as.slot[i].out[0], f->want_logits, 1e-3, 1e-4);
        tdm_tensor_free(as.slot[i].out[0]);
        tdm_tensor_free(as.slot[i].out[1]);
    }
    pthread_cond_destroy(&as.cv);
    pthread_mutex_destroy(&as.mu);
}

/* Several threads call tdm_session_run on one session at once. */
typedef struct thread_arg {
    fixture *f;
    tdm_tensor *in;
    int ok;
} thread_arg;

static void *run_thread(void *p) {
    thread_arg *t = p;
    const char *in_name = "input";
    t->ok = 1;
    for (int it = 0; it < 20 && t->ok; it++) {
        tdm_tensor *outs[2] = {0};
        tdm_status *st = tdm_session_run(t->f->s, 1, &in_name, (const tdm_tensor *const *)&t->in, 2,
                                         NULL, outs);
        if (st) {
            tdm_status_free(st);
            t->ok = 0;
            break;
        }
        const float *g = tdm_tensor_data_const(outs[0]);
        const float *w = tdm_tensor_data_const(t->f->want_logits);
        for (int i = 0; i < 30; i++)
            if (fabs(g[i] - w[i]) > 1e-4 + 1e-3 * fabs(w[i])) t->ok = 0;
        tdm_tensor_free(outs[0]);
        tdm_tensor_free(outs[1]);
    }
    return NULL;
}

static void test_concurrent_runs(void **state) {
    fixture *f = *state;
    pthread_t th[4];
    thread_arg ta[4];
    for (int i = 0; i < 4; i++) {
        ta[i] = (thread_arg){f, f->input, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_thread, &ta[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) assert_true(ta[i].ok);
}

/* Several threads run an If model on one session: each run of the body takes the body's
 * cache for itself or, while another run holds it, runs the body uncached (same results). */
typedef struct if_arg {
    tdm_session *s;
    tdm_tensor *in[2];
    const tdm_tensor *want;
    int ok;
} if_arg;

static void *run_if_thread(void *p) {
    if_arg *t = p;
    const char *names[2] = {"c", "X"};
    t->ok = 1;
    for (int it = 0; it < 30 && t->ok; it++) {
        tdm_tensor *out = NULL;
        tdm_status *st = tdm_session_run(t->s, 2, names, (const tdm_tensor *const *)t->in, 1, NULL, &out);
        if (st) {
            tdm_status_free(st);
            t->ok = 0;
            break;
        }
        const float *g = tdm_tensor_data_const(out), *w = tdm_tensor_data_const(t->want);
        for (int64_t i = 0; i < tdm_tensor_element_count(t->want); i++)
            if (fabs(g[i] - w[i]) > 1e-4 + 1e-3 * fabs(w[i])) t->ok = 0;
        tdm_tensor_free(out);
    }
    return NULL;
}

static void test_concurrent_if_runs(void **state) {
    fixture *f = *state;
    tdm_session *s = NULL;
    OK(tdm_session_create(f->env, IF_MODEL, NULL, &s));
    tdm_tensor *c = NULL, *x = NULL, *want = NULL;
    OK(tdm_tensor_load_onnx(f->env, IF_DATA "/input_0.pb", &c));
    OK(tdm_tensor_load_onnx(f->env, IF_DATA "/input_1.pb", &x));
    OK(tdm_tensor_load_onnx(f->env, IF_DATA "/output_0.pb", &want));
    pthread_t th[4];
    if_arg ta[4];
    for (int i = 0; i < 4; i++) {
        ta[i] = (if_arg){s, {c, x}, want, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_if_thread, &ta[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) assert_true(ta[i].ok);
    tdm_session_free(s);
    tdm_tensor_free(c);
    tdm_tensor_free(x);
    tdm_tensor_free(want);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_basics),
        cmocka_unit_test(test_env_null_options),
        cmocka_unit_test(test_env_bad_options),
        cmocka_unit_test(test_allocator_hook),
        T(test_tensor_create),
        T(test_tensor_wrap),
        T(test_tensor_strings),
        T(test_model_description),
        T(test_run_matches_reference),
        T(test_outputs_by_name),
        T(test_run_dynamic_batch),
        T(test_free_dims),
        T(test_run_errors),
        T(test_session_create_errors),
        T(test_run_async),
        T(test_free_waits_for_async),
        T(test_concurrent_runs),
        T(test_concurrent_if_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
