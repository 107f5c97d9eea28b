/* The quantizer's library part (include/tandem/quantize.h): hand-computed minmax scales and
 * zero points, per-channel and per-tensor weight scales, the written QDQ model's contents,
 * the Relu placement, and the errors a caller gets. Model: x [2,4] -> MatMul(w [4,3]) -> m
 * -> Relu -> r -> MatMul(w2 [3,2]) -> y. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tandem/quantize.h"
#include "tandem/tandem.h"

#include "counting_alloc.h"
#include "model_builder.h"
#include "test_ok.h"

#define FAILS_WITH(expr, code)                                                           \
    do {                                                                                 \
        tdm_status *st_ = (expr);                                                        \
        assert_non_null(st_);                                                            \
        if (tdm_status_code(st_) != (code))                                              \
            fprintf(stderr, "got [%s] %s\n", tdm_code_name(tdm_status_code(st_)),        \
                    tdm_status_message(st_));                                            \
        assert_int_equal(tdm_status_code(st_), (code));                                  \
        tdm_status_free(st_);                                                            \
    } while (0)

/* w: column c's largest |value| is 1.27, 2.54, 0.635 -> scales 0.01, 0.02, 0.005 */
static const float W[12] = {1.27f, -2.54f, 0.1f, -0.5f, 1.0f, 0.635f,
                            0.2f,  0.3f,   -0.2f, 0.0f, 2.0f, -0.6f};

static char *write_model(int opset) {
    mb_model m;
    mb_init(&m, opset);
    int64_t xd[2] = {2, 4}, wd[2] = {4, 3}, w2d[2] = {3, 2};
    float w2[6] = {0.5f, -0.25f, 1.0f, 0.75f, -1.0f, 0.1f};
    mb_input(&m, "x", 2, xd);
    mb_init_f32(&m, "w", 2, wd, 12, W);
    mb_init_f32(&m, "w2", 2, w2d, 6, w2);
    mb_node(&m, "MatMul:x,w->m");
    mb_node(&m, "Relu:m->r");
    mb_node(&m, "MatMul:r,w2->y");
    mb_output(&m, "y");
    size_t size;
    void *bytes = mb_pack(&m, &size);
    mb_free(&m);
    static int serial;
    char *path = malloc(256);
    assert_non_null(path);
    snprintf(path, 256, "%s/test_quantize_%d_%d.onnx", TANDEM_BINARY_DIR, opset, serial++);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, size, f), size);
    fclose(f);
    free(bytes);
    return path;
}

typedef struct fx {
    counter count;
    tdm_env *env;
    char *path;
    tdm_tensor *x[2];
} fx;

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    tdm_env_options o = {.api_version = TDM_API_VERSION, .threads = 1};
    o.allocator = (tdm_allocator){c_alloc, c_free, &f->count};
    if (tdm_env_create(&o, &f->env)) return -1;
    f->path = write_model(13);
    int64_t d[2] = {2, 4};
    /* sample 0 spans [-1, 3]; sample 1 [-0.5, 2]: the range is [-1, 3] */
    const float a[8] = {-1.f, 0.5f, 3.f, 0.25f, 1.f, -0.75f, 2.f, 0.f};
    const float b[8] = {-0.5f, 2.f, 1.f, 0.5f, 0.f, 1.5f, -0.25f, 0.75f};
    for (int k = 0; k < 2; k++) {
        if (tdm_tensor_create(f->env, TDM_FLOAT, 2, d, &f->x[k])) return -1;
        memcpy(tdm_tensor_data(f->x[k]), k ? b : a, sizeof a);
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    for (int k = 0; k < 2; k++) tdm_tensor_free(f->x[k]);
    tdm_env_free(f->env);
    assert_int_equal(atomic_load(&f->count.live), 0);
    remove(f->path);
    free(f->path);
    free(f);
    return 0;
}

static void calibrate(fx *f, tdm_quantizer *q) {
    const char *names[1] = {"x"};
    const tdm_tensor *s[2] = {f->x[0], f->x[1]};
    OK(tdm_quantizer_calibrate(q, 2, 1, names, s));
}

static const Onnx__TensorProto *find_init(const Onnx__ModelProto *m, const char *name) {
    for (size_t i = 0; i < m->graph->n_initializer; i++)
        if (!strcmp(m->graph->initializer[i]->name, name)) return m->graph->initializer[i];
    return NULL;
}

static float f32_at(const Onnx__TensorProto *t, size_t i) {
    float v;
    memcpy(&v, t->raw_data.data + 4 * i, 4);
    return v;
}

static void test_minmax_hand_computed(void **state) {
    fx *f = *state;
    tdm_quantizer *q = NULL;
    tdm_quantize_options o = {.api_version = TDM_API_VERSION};
    OK(tdm_quantizer_create(f->env, f->path, &o, &q));
    assert_int_equal(tdm_quantizer_node_count(q), 2);
    assert_string_equal(tdm_quantizer_node_op(q, 0), "MatMul");
    assert_int_equal(tdm_quantizer_node_position(q, 1), 2);
    tdm_quant_param p;
    assert_false(tdm_quantizer_tensor(q, 0, &p)); /* not calibrated yet */
    calibrate(f, q);
    /* x: [-1, 3] -> scale 4/255, zero point round(1 / (4/255)) = round(63.75) = 64; r (the
     * Relu's output, quantized instead of m): [0, max] -> zero point 0 */
    bool seen_x = false, seen_r = false;
    for (size_t i = 0; i < tdm_quantizer_tensor_count(q); i++) {
        assert_true(tdm_quantizer_tensor(q, i, &p));
        assert_string_not_equal(p.name, "m");
        if (!strcmp(p.name, "x")) {
            seen_x = true;
            assert_float_equal(p.observed_min, -1.f, 0);
            assert_float_equal(p.observed_max, 3.f, 0);
            assert_float_equal(p.scale, 4.f / 255.f, 1e-9);
            assert_int_equal(p.zero_point, 64);
        }
        if (!strcmp(p.name, "r")) {
            seen_r = true;
            assert_float_equal(p.range_min, 0.f, 0);
            assert_int_equal(p.zero_point, 0);
            assert_float_equal(p.scale, p.range_max / 255.f, 1e-9);
        }
    }
    assert_true(seen_x && seen_r);
    void *buf = NULL;
    size_t size = 0;
    OK(tdm_quantizer_save_buffer(q, &buf, &size));
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, buf);
    assert_non_null(m);
    /* weights: per output column (axis 1), symmetric int8 */
    const Onnx__TensorProto *ws = find_init(m, "w_scale"), *wq = find_init(m, "w_quantized");
    assert_non_null(ws);
    assert_non_null(wq);
    assert_null(find_init(m, "w")); /* the float weight is gone */
    assert_int_equal(ws->n_dims, 1);
    assert_int_equal(ws->dims[0], 3);
    assert_float_equal(f32_at(ws, 0), 0.01f, 1e-8);
    assert_float_equal(f32_at(ws, 1), 0.02f, 1e-8);
    assert_float_equal(f32_at(ws, 2), 0.005f, 1e-8);
    assert_int_equal(wq->data_type, TDM_INT8);
    const int8_t *qv = (const int8_t *)wq->raw_data.data;
    assert_int_equal(qv[0], 127);  /* 1.27 / 0.01 */
    assert_int_equal(qv[1], -127); /* -2.54 / 0.02 */
    assert_int_equal(qv[2], 20);   /* 0.1 / 0.005 */
    assert_int_equal(qv[4], 50);   /* 1.0 / 0.02 */
    const Onnx__TensorProto *xs = find_init(m, "x_scale"), *xz = find_init(m, "x_zero_point");
    assert_non_null(xs);
    assert_non_null(xz);
    assert_int_equal(xz->data_type, TDM_UINT8);
    assert_int_equal(xz->raw_data.data[0], 64);
    /* every MatMul reads dequantized values */
    int q_nodes = 0, dq_nodes = 0;
    for (size_t i = 0; i < m->graph->n_node; i++) {
        const Onnx__NodeProto *n = m->graph->node[i];
        q_nodes += !strcmp(n->op_type, "QuantizeLinear");
        dq_nodes += !strcmp(n->op_type, "DequantizeLinear");
        if (!strcmp(n->op_type, "MatMul")) assert_non_null(strstr(n->input[0], "_DequantizeLinear_Output"));
    }
    assert_int_equal(q_nodes, 2);  /* x, r */
    assert_int_equal(dq_nodes, 4); /* x, r, w, w2 */
    onnx__model_proto__free_unpacked(m, NULL);
    tdm_string_free(buf);
    tdm_quantizer_free(q);
}

static void test_per_tensor_int8(void **state) {
    fx *f = *state;
    tdm_quantizer *q = NULL;
    tdm_quantize_options o = {.api_version = TDM_API_VERSION, .per_tensor = true,
                              .activation_type = TDM_INT8};
    OK(tdm_quantizer_create(f->env, f->path, &o, &q));
    calibrate(f, q);
    tdm_quant_param p;
    assert_true(tdm_quantizer_tensor(q, 0, &p));
    assert_string_equal(p.name, "x");
    assert_float_equal(p.scale, 4.f / 255.f, 1e-9);
    assert_int_equal(p.zero_point, -64); /* round(-128 + 63.75) */
    void *buf = NULL;
    size_t size = 0;
    OK(tdm_quantizer_save_buffer(q, &buf, &size));
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, buf);
    assert_non_null(m);
    const Onnx__TensorProto *ws = find_init(m, "w_scale");
    assert_non_null(ws);
    assert_int_equal(ws->n_dims, 0);
    assert_float_equal(f32_at(ws, 0), 0.02f, 1e-8);
    onnx__model_proto__free_unpacked(m, NULL);
    /* the quantized model runs in tandem */
    tdm_session *s = NULL;
    OK(tdm_session_create_from_buffer(f->env, buf, size, NULL, NULL, &s));
    tdm_tensor *y = NULL;
    const char *in = "x", *out = "y";
    OK(tdm_session_run(s, 1, &in, (const tdm_tensor *const *)&f->x[0], 1, &out, &y));
    assert_int_equal(tdm_tensor_element_count(y), 4);
    tdm_tensor_free(y);
    tdm_session_free(s);
    tdm_string_free(buf);
    tdm_quantizer_free(q);
}

static void test_exclude_and_enable(void **state) {
    fx *f = *state;
    tdm_quantizer *q = NULL;
    tdm_quantize_options o = {.api_version = TDM_API_VERSION, .exclude = "#2"};
    OK(tdm_quantizer_create(f->env, f->path, &o, &q));
    assert_true(tdm_quantizer_node_enabled(q, 0));
    assert_false(tdm_quantizer_node_enabled(q, 1));
    tdm_quantizer_set_enabled(q, 1, true);
    tdm_quantizer_set_enabled(q, 0, false);
    tdm_quantizer_set_enabled(q, 99, false); /* out of range: ignored */
    assert_false(tdm_quantizer_node_enabled(q, 99));
    calibrate(f, q);
    void *buf = NULL;
    size_t size = 0;
    OK(tdm_quantizer_save_buffer(q, &buf, &size));
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, buf);
    assert_non_null(m);
    assert_non_null(find_init(m, "w"));  /* the first MatMul stays float */
    assert_null(find_init(m, "w2"));     /* the second is quantized */
    assert_null(find_init(m, "x_scale"));
    onnx__model_proto__free_unpacked(m, NULL);
    tdm_string_free(buf);
    tdm_quantizer_free(q);
    o.exclude = "/[/";
    FAILS_WITH(tdm_quantizer_create(f->env, f->path, &o, &q), TDM_ERR_INVALID_ARGUMENT);
    o.exclude = "#5-2";
    FAILS_WITH(tdm_quantizer_create(f->env, f->path, &o, &q), TDM_ERR_INVALID_ARGUMENT);
}

static void test_errors(void **state) {
    fx *f = *state;
    tdm_quantizer *q = NULL;
    tdm_quantize_options o = {.api_version = TDM_API_VERSION};
    FAILS_WITH(tdm_quantizer_create(NULL, f->path, &o, &q), TDM_ERR_INVALID_ARGUMENT);
    FAILS_WITH(tdm_quantizer_create(f->env, f->path, NULL, &q), TDM_ERR_INVALID_ARGUMENT);
    o.api_version = 0;
    FAILS_WITH(tdm_quantizer_create(f->env, f->path, &o, &q), TDM_ERR_INVALID_ARGUMENT);
    o.api_version = TDM_API_VERSION;
    o.activation_type = TDM_FLOAT;
    FAILS_WITH(tdm_quantizer_create(f->env, f->path, &o, &q), TDM_ERR_INVALID_ARGUMENT);
    o.activation_type = TDM_UINT8;
    o.percentile = 20;
    FAILS_WITH(tdm_quantizer_create(f->env, f->path, &o, &q), TDM_ERR_INVALID_ARGUMENT);
    o.percentile = 0;
    FAILS_WITH(tdm_quantizer_create(f->env, "/nonexistent/model.onnx", &o, &q), TDM_ERR_IO);
    assert_null(q);
    /* opset 10: per-channel needs 13 (the model's nodes would allow 13 only from 11 on) */
    char *p10 = write_model(10);
    FAILS_WITH(tdm_quantizer_create(f->env, p10, &o, &q), TDM_ERR_UNSUPPORTED);
    o.per_tensor = true;
    OK(tdm_quantizer_create(f->env, p10, &o, &q));
    tdm_quantizer_free(q);
    remove(p10);
    free(p10);
    o.per_tensor = false;
    OK(tdm_quantizer_create(f->env, f->path, &o, &q));
    void *buf = NULL;
    size_t size = 0;
    FAILS_WITH(tdm_quantizer_save_buffer(q, &buf, &size), TDM_ERR_INVALID_ARGUMENT); /* no calibration */
    const char *names[1] = {"nope"};
    const tdm_tensor *s[1] = {f->x[0]};
    FAILS_WITH(tdm_quantizer_calibrate(q, 0, 1, names, s), TDM_ERR_INVALID_ARGUMENT);
    FAILS_WITH(tdm_quantizer_calibrate(q, 1, 1, names, s), TDM_ERR_NOT_FOUND);
    FAILS_WITH(tdm_quantizer_save(q, "/nonexistent/dir/out.onnx"), TDM_ERR_INVALID_ARGUMENT);
    calibrate(f, q);
    FAILS_WITH(tdm_quantizer_save(q, "/nonexistent/dir/out.onnx"), TDM_ERR_IO);
    tdm_quantizer_free(q);
    tdm_quantizer_free(NULL);
    assert_int_equal(tdm_quantizer_node_count(NULL), 0);
    assert_null(tdm_quantizer_node_name(NULL, 0));
}

static void test_dynamic(void **state) {
    fx *f = *state;
    tdm_quantizer *q = NULL;
    tdm_quantize_options o = {.api_version = TDM_API_VERSION, .mode = TDM_QUANT_DYNAMIC};
    OK(tdm_quantizer_create(f->env, f->path, &o, &q));
    assert_int_equal(tdm_quantizer_node_count(q), 2);
    assert_int_equal(tdm_quantizer_tensor_count(q), 0);
    void *buf = NULL;
    size_t size = 0;
    OK(tdm_quantizer_save_buffer(q, &buf, &size)); /* no calibration needed */
    tdm_session *s = NULL;
    OK(tdm_session_create_from_buffer(f->env, buf, size, NULL, NULL, &s));
    tdm_tensor *y = NULL;
    const char *in = "x", *out = "y";
    OK(tdm_session_run(s, 1, &in, (const tdm_tensor *const *)&f->x[0], 1, &out, &y));
    /* against the float product: within a few quantization steps */
    const float *x = tdm_tensor_data_const(f->x[0]), *got = tdm_tensor_data_const(y);
    const float w2[6] = {0.5f, -0.25f, 1.0f, 0.75f, -1.0f, 0.1f};
    for (int r = 0; r < 2; r++) {
        float h[3];
        for (int c = 0; c < 3; c++) {
            h[c] = 0;
            for (int k = 0; k < 4; k++) h[c] += x[r * 4 + k] * W[k * 3 + c];
            if (h[c] < 0) h[c] = 0;
        }
        for (int c = 0; c < 2; c++) {
            float want = 0;
            for (int k = 0; k < 3; k++) want += h[k] * w2[k * 2 + c];
            assert_float_equal(got[r * 2 + c], want, 0.1);
        }
    }
    tdm_tensor_free(y);
    tdm_session_free(s);
    tdm_string_free(buf);
    tdm_quantizer_free(q);
}

static int64_t written_opset(tdm_quantizer *q) {
    void *buf = NULL;
    size_t size = 0;
    OK(tdm_quantizer_save_buffer(q, &buf, &size));
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, buf);
    assert_non_null(m);
    int64_t v = -1;
    for (size_t i = 0; i < m->n_opset_import; i++)
        if (!m->opset_import[i]->domain || !m->opset_import[i]->domain[0]) v = m->opset_import[i]->version;
    onnx__model_proto__free_unpacked(m, NULL);
    tdm_string_free(buf);
    return v;
}

/* opset 11 / 12: static per-channel writes opset 13 (nothing in the model changes meaning);
 * dynamic mode keeps the opset (no axis needed) but needs 11 */
static void test_opsets(void **state) {
    fx *f = *state;
    char *p11 = write_model(11), *p10 = write_model(10);
    tdm_quantizer *q = NULL;
    tdm_quantize_options o = {.api_version = TDM_API_VERSION};
    OK(tdm_quantizer_create(f->env, p11, &o, &q));
    calibrate(f, q);
    assert_int_equal(written_opset(q), 13);
    tdm_quantizer_free(q);
    o.mode = TDM_QUANT_DYNAMIC;
    OK(tdm_quantizer_create(f->env, p11, &o, &q));
    assert_int_equal(written_opset(q), 11);
    tdm_quantizer_free(q);
    FAILS_WITH(tdm_quantizer_create(f->env, p10, &o, &q), TDM_ERR_UNSUPPORTED);
    remove(p11);
    remove(p10);
    free(p11);
    free(p10);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minmax_hand_computed),
        cmocka_unit_test(test_per_tensor_int8),
        cmocka_unit_test(test_exclude_and_enable),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_dynamic),
        cmocka_unit_test(test_opsets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
