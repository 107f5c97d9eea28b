/* Lenient loading (issue 17): what real exporters write and ONNX Runtime accepts is accepted
 * with one warning each — a domain imported twice with the same version (skl2onnx), a graph
 * input dimension given as -1 (Paddle2ONNX) — while the strict cases stay errors: the same
 * domain at two versions, a dimension below -1, an initializer with a negative dimension. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "log_box.h"
#include "model_builder.h"
#include "tandem/tandem.h"
#include "test_ok.h"

static tdm_env *env_with_log(log_box *box) {
    tdm_env_options eo = {TDM_API_VERSION, keep_log, box, TDM_LOG_INFO, {0}, 1};
    tdm_env *env = NULL;
    OK(tdm_env_create(&eo, &env));
    return env;
}

/* Relu over x [N, 3] -> y, with the opset imports and x's first dimension as given. */
static void relu_model(mb_model *m, Onnx__OperatorSetIdProto *extra, int64_t dim0) {
    mb_init(m, 13);
    mb_node(m, "Relu:x->y");
    int64_t dims[2] = {1, 3};
    mb_input(m, "x", 2, dims);
    Onnx__TensorShapeProto__Dimension *d = m->ins[0]->type->tensor_type->shape->dim[0];
    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d->dim_value = dim0;
    mb_output(m, "y");
    if (extra) {
        static Onnx__OperatorSetIdProto *two[2];
        two[0] = &m->opset;
        two[1] = extra;
        m->model.opset_import = two;
        m->model.n_opset_import = 2;
    }
}

static tdm_status *create(tdm_env *env, mb_model *m, tdm_session **s) {
    size_t size = 0;
    void *buf = mb_pack(m, &size);
    tdm_status *st = tdm_session_create_from_buffer(env, buf, size, NULL, NULL, s);
    free(buf);
    return st;
}

/* Session creation from m must fail with an invalid-model status naming `text`. */
static void expect_refused(tdm_env *env, mb_model *m, const char *text) {
    tdm_session *s = NULL;
    tdm_status *st = create(env, m, &s);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_MODEL);
    assert_non_null(strstr(tdm_status_message(st), text));
    assert_null(s);
    tdm_status_free(st);
}

/* Runs Relu on a [rows, 3] input and checks every output. */
static void run_relu(tdm_env *env, tdm_session *s, int64_t rows) {
    int64_t dims[2] = {rows, 3};
    tdm_tensor *x = NULL, *y = NULL;
    OK(tdm_tensor_create(env, TDM_FLOAT, 2, dims, &x));
    float *xd = tdm_tensor_data(x);
    for (int64_t i = 0; i < rows * 3; i++) xd[i] = (float)(i % 5) - 2.0f;
    const char *in = "x", *out = "y";
    OK(tdm_session_run(s, 1, &in, (const tdm_tensor *const *)&x, 1, &out, &y));
    const float *yd = tdm_tensor_data(y);
    for (int64_t i = 0; i < rows * 3; i++) assert_true(yd[i] == (xd[i] > 0 ? xd[i] : 0.0f));
    tdm_tensor_free(x);
    tdm_tensor_free(y);
}

static void test_same_opset_twice_is_accepted(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = env_with_log(&box);
    mb_model m;
    Onnx__OperatorSetIdProto again;
    onnx__operator_set_id_proto__init(&again);
    again.domain = "ai.onnx"; /* the default domain by its other name */
    again.has_version = 1;
    again.version = 13;
    relu_model(&m, &again, 2);
    tdm_session *s = NULL;
    OK(create(env, &m, &s));
    assert_true(logged(&box, "imports an opset twice with the same version"));
    run_relu(env, s, 2);
    tdm_session_free(s);
    mb_free(&m);
    tdm_env_free(env);
}

static void test_opset_twice_at_two_versions_fails(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = env_with_log(&box);
    mb_model m;
    Onnx__OperatorSetIdProto again;
    onnx__operator_set_id_proto__init(&again);
    again.domain = "";
    again.has_version = 1;
    again.version = 14;
    relu_model(&m, &again, 2);
    expect_refused(env, &m, "imported twice, as versions 13 and 14");
    mb_free(&m);
    tdm_env_free(env);
}

static void test_dim_minus_one_is_unknown(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = env_with_log(&box);
    mb_model m;
    relu_model(&m, NULL, -1);
    tdm_session *s = NULL;
    OK(create(env, &m, &s));
    assert_true(logged(&box, "gives a dimension as -1"));
    run_relu(env, s, 5); /* any batch: the dimension is unknown, not -1 */
    run_relu(env, s, 1);
    tdm_session_free(s);
    mb_free(&m);
    tdm_env_free(env);
}

static void test_dim_below_minus_one_fails(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = env_with_log(&box);
    mb_model m;
    relu_model(&m, NULL, -2);
    expect_refused(env, &m, "dimension 0 is negative (-2)");
    assert_false(logged(&box, "gives a dimension as -1"));
    mb_free(&m);
    tdm_env_free(env);
}

int main(void) {
    (void)mb_init_i64; /* the builder's, unused here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_opset_twice_is_accepted),
        cmocka_unit_test(test_opset_twice_at_two_versions_fails),
        cmocka_unit_test(test_dim_minus_one_is_unknown),
        cmocka_unit_test(test_dim_below_minus_one_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
