/* The fused operators' reference kernels (k_fused.c), which oneDNN kernels may shadow in
 * sessions: each fused node built by hand and run through tdm_cpu_kernels_fused against the
 * unfused model at opt level 0. (Split from test_fuse.c.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cpu/cpu_kernels.h"
#include "fuse_models.h"
#include "model_builder.h"
#include "ops/fused.h"
#include "tandem/tandem.h"

/* ---- the reference kernels (k_fused.c), which oneDNN kernels may shadow in sessions ----
 * The unfused model at opt-level 0 gives the expected output; the fused node is built by
 * hand and run through tdm_cpu_kernels_fused directly. */

static tdm_attr str_attr(const char *name, const char *v) {
    tdm_attr a = {.name = (char *)name, .type = TDM_ATTR_STRING, .s = (char *)v, .s_len = strlen(v)};
    return a;
}

/* The session's output (opt level `opt`, `threads` threads; at opt 1 the model must hold
 * `op`) against the reference kernel, within atol + 1e-4 * |x|. */
static void ref_check_at(mb_model *b, const char *op, int n_attrs, tdm_attr *attrs, int n_in,
                         const char *const *in_names, int opt, int threads, float atol) {
    size_t size = onnx__model_proto__get_packed_size(&b->model);
    void *buf = malloc(size);
    onnx__model_proto__pack(&b->model, buf);
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    size_t n_graph_in = b->graph.n_input;
    tdm_tensor *ins[MB_MAX] = {0}, *want = NULL;
    const char *names[MB_MAX];
    mb_rng_state = 777;
    for (size_t i = 0; i < n_graph_in; i++) {
        names[i] = b->ins[i]->name;
        assert_null(tdm_tensor_create(env, TDM_FLOAT, b->in_rank[i], b->in_dims[i], &ins[i]));
        float *d = tdm_tensor_data(ins[i]);
        for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++) d[k] = 2.0f * mb_rnd();
    }
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu",
                              .threads = threads, .opt_level = opt};
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    if (opt == 1) {
        const tdm_model *m = tdm_session_model(s);
        bool has = false;
        for (size_t i = 0; i < tdm_model_op_type_count(m); i++) {
            size_t c;
            has = has || strcmp(tdm_model_op_type(m, i, &c), op) == 0;
        }
        if (!has) fail_msg("opt 1: no %s in the session's model", op);
    }
    const char *out_name = b->outs[0]->name;
    st = tdm_session_run(s, n_graph_in, names, (const tdm_tensor *const *)ins, 1, &out_name, &want);
    if (st) fail_msg("%s", tdm_status_message(st));
    tdm_session_free(s);

    /* the fused node's inputs by name: graph inputs or initializers */
    const tdm_tensor *kin[4] = {0};
    tdm_tensor *wrapped[4] = {0};
    for (int i = 0; i < n_in; i++) {
        if (!in_names[i][0]) continue;
        for (size_t g = 0; g < n_graph_in; g++)
            if (strcmp(names[g], in_names[i]) == 0) kin[i] = ins[g];
        for (size_t t = 0; t < b->graph.n_initializer && !kin[i]; t++) {
            Onnx__TensorProto *tp = b->inits[t];
            if (strcmp(tp->name, in_names[i])) continue;
            assert_null(tdm_tensor_wrap(env, TDM_FLOAT, (int)tp->n_dims, tp->dims, tp->float_data,
                                        tp->n_float_data * sizeof(float), &wrapped[i]));
            kin[i] = wrapped[i];
        }
        assert_non_null(kin[i]);
    }
    tdm_node node = {.name = "ref", .op_type = (char *)op, .domain = TDM_FUSED_DOMAIN, .opset = 1,
                     .n_inputs = n_in, .n_outputs = 1, .n_attrs = n_attrs, .attrs = attrs};
    const tdm_op_schema *schema = tdm_op_find(TDM_FUSED_DOMAIN, op, 1);
    assert_non_null(schema);
    tdm_value_info vin[4], vout[1];
    memset(vin, 0, sizeof vin);
    memset(vout, 0, sizeof vout);
    vout[0].present = true;
    vout[0].rank = -1;
    for (int i = 0; i < n_in; i++) {
        vin[i].rank = -1;
        if (!kin[i]) continue;
        vin[i].present = true;
        vin[i].dtype = kin[i]->dtype;
        vin[i].rank = kin[i]->rank;
        memcpy(vin[i].dims, kin[i]->dims, sizeof vin[i].dims);
        vin[i].data = kin[i];
    }
    tdm_infer_ctx ic = {&node, 1, n_in, vin, 1, vout};
    st = schema->infer(&ic);
    if (st) fail_msg("%s", tdm_status_message(st));
    tdm_tensor *y = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, vout[0].rank, vout[0].dims, &y));
    const tdm_kernel_def *kd = NULL;
    for (int k = 0; k < tdm_cpu_kernels_fused_count; k++)
        if (strcmp(tdm_cpu_kernels_fused[k].op, op) == 0) kd = &tdm_cpu_kernels_fused[k];
    assert_non_null(kd);
    tdm_kernel_ctx kc = {.node = &node, .opset = 1, .n_in = n_in, .in = kin, .n_out = 1, .out = &y};
    st = kd->run(&kc);
    if (st) fail_msg("%s", tdm_status_message(st));
    assert_int_equal(tdm_tensor_element_count(y), tdm_tensor_element_count(want));
    const float *x = tdm_tensor_data(want), *g = tdm_tensor_data(y);
    for (int64_t k = 0; k < tdm_tensor_element_count(y); k++)
        if (!(fabsf(x[k] - g[k]) <= atol + 1e-4f * fabsf(x[k])))
            fail_msg("%s: element %lld: %.8g (session, opt %d, %d threads) vs %.8g (reference "
                     "kernel)", op, (long long)k, x[k], opt, threads, g[k]);
    tdm_tensor_free(y);
    tdm_tensor_free(want);
    for (int i = 0; i < 4; i++) tdm_tensor_free(wrapped[i]);
    for (size_t i = 0; i < n_graph_in; i++) tdm_tensor_free(ins[i]);
    tdm_env_free(env);
    free(buf);
}

/* The unfused model at opt-level 0 against the reference kernel. */
static void ref_check(mb_model *b, const char *op, int n_attrs, tdm_attr *attrs, int n_in,
                      const char *const *in_names) {
    ref_check_at(b, op, n_attrs, attrs, n_in, in_names, 0, 1, 1e-5f);
}

static void test_reference_conv(void **state) {
    (void)state;
    const char *acts[] = {"", "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish"};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
        for (int with_z = 0; with_z <= 1; with_z++) {
            if (!acts[a][0] && !with_z) continue;
            mb_model b;
            mb_init(&b, 14);
            conv_model(&b, true, x_shape, NULL);
            int64_t zd[4] = {2, 6, 7, 7};
            const char *src = "y";
            if (with_z) {
                mb_input_run(&b, "r", 4, zd, NULL);
                mb_node(&b, acts[a][0] ? "Add:y,r->s" : "Add:y,r->z");
                src = "s";
            }
            float params[2] = {0, 0};
            int np = 0;
            if (acts[a][0]) {
                char spec[64];
                if (strcmp(acts[a], "Clip") == 0) {
                    mb_scalar(&b, "lo", -0.5f);
                    mb_scalar(&b, "hi", 0.75f);
                    snprintf(spec, sizeof spec, "Clip:%s,lo,hi->z", src);
                    params[0] = -0.5f;
                    params[1] = 0.75f;
                    np = 2;
                } else {
                    snprintf(spec, sizeof spec, "%s:%s->z", acts[a], src);
                }
                Onnx__NodeProto *n = mb_node(&b, spec);
                if (strcmp(acts[a], "LeakyRelu") == 0) {
                    mb_attr_f(&b, n, "alpha", 0.2f);
                    params[0] = 0.2f;
                    np = 1;
                }
                if (strcmp(acts[a], "HardSigmoid") == 0) {
                    mb_attr_f(&b, n, "alpha", 0.3f);
                    mb_attr_f(&b, n, "beta", 0.4f);
                    params[0] = 0.3f;
                    params[1] = 0.4f;
                    np = 2;
                }
            }
            mb_output(&b, "z");
            int64_t pads[4] = {1, 1, 1, 1};
            tdm_attr attrs[3] = {
                {.name = "pads", .type = TDM_ATTR_INTS, .ints = pads, .n = 4},
                str_attr("activation", acts[a]),
                {.name = "activation_params", .type = TDM_ATTR_FLOATS, .floats = params, .n = (size_t)np},
            };
            const char *kin[4] = {"x", "W", "B", "r"};
            ref_check(&b, "FusedConv", 3, attrs, with_z ? 4 : 3, kin);
            mb_free(&b);
        }
}

static void test_reference_matmul(void **state) {
    (void)state;
    /* A ranks 1..4 against a matrix and a batch of matrices; Relu, Gelu (erf), GeluTanh */
    const char *acts[] = {"", "Relu", "Gelu", "GeluTanh"};
    for (int a_rank = 1; a_rank <= 4; a_rank++)
        for (int batched = 0; batched <= 1; batched++)
            for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
                mb_model b;
                mb_init(&b, 17);
                matmul_model(&b, a_rank, batched);
                mb_node(&b, acts[a][0] ? "Add:y,bias->x" : "Add:y,bias->z");
                mb_scalar(&b, "one", 1.0f);
                mb_scalar(&b, "half", 0.5f);
                if (strcmp(acts[a], "Relu") == 0) mb_node(&b, "Relu:x->z");
                if (strcmp(acts[a], "Gelu") == 0) {
                    mb_erf_gelu(&b);
                }
                if (strcmp(acts[a], "GeluTanh") == 0) {
                    mb_scalar(&b, "three", 3.0f);
                    mb_scalar(&b, "c", 0.044715f);
                    mb_scalar(&b, "k", 0.7978845608f);
                    mb_node(&b, "Pow:x,three->p");
                    mb_node(&b, "Mul:p,c->q");
                    mb_node(&b, "Add:x,q->r");
                    mb_node(&b, "Mul:k,r->s");
                    mb_node(&b, "Tanh:s->t");
                    mb_node(&b, "Add:t,one->a");
                    mb_node(&b, "Mul:x,a->m");
                    mb_node(&b, "Mul:m,half->z");
                }
                mb_output(&b, "z");
                tdm_attr attrs[1] = {str_attr("activation", acts[a])};
                const char *kin[3] = {"A", "W", "bias"};
                ref_check(&b, "FusedMatMul", 1, attrs, 3, kin);
                mb_free(&b);
            }
}

/* A constant B's layout for oneDNN's product (k_dnnl_matmul.c: [N, K] or padded rows where
 * row-major rows would be a multiple of 2 KiB apart): MiniLM's shapes, 60 rows of K = 384
 * against N = 384 (plain), 512, 1024, 1536 (the aliasing widths), with and without the erf
 * GELU; the fused product (opt 1) and the unfused MatMul (opt 0) against the reference
 * kernel, on one thread and on two (the rows cut in chunks, the last one built on the
 * first one's weights layout). */
static void test_matmul_wide_n(void **state) {
    (void)state;
    const int64_t Ns[] = {384, 512, 1024, 1536};
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
        for (int gelu = 0; gelu <= 1; gelu++)
            for (int opt = 0; opt <= 1; opt++) {
                int64_t ad[2] = {60, 384}, wd[2] = {384, Ns[ni]};
                mb_model b;
                mb_init(&b, 17);
                mb_rng_state = 31 + (uint32_t)ni;
                mb_input_run(&b, "A", 2, ad, NULL);
                mb_weight(&b, "W", 2, wd, NULL, 0, 0.1f);
                mb_weight(&b, "bias", 1, &wd[1], NULL, 0, 0.5f);
                mb_node(&b, "MatMul:A,W->y");
                mb_node(&b, gelu ? "Add:y,bias->x" : "Add:y,bias->z");
                if (gelu) {
                    mb_scalar(&b, "one", 1.0f);
                    mb_scalar(&b, "half", 0.5f);
                    mb_erf_gelu(&b);
                }
                mb_output(&b, "z");
                tdm_attr attrs[1] = {str_attr("activation", gelu ? "Gelu" : "")};
                const char *kin[3] = {"A", "W", "bias"};
                for (int threads = 1; threads <= 2; threads++)
                    ref_check_at(&b, "FusedMatMul", 1, attrs, 3, kin, opt, threads, 1e-4f);
                mb_free(&b);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_conv),
        cmocka_unit_test(test_reference_matmul),
        cmocka_unit_test(test_matmul_wide_n),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
