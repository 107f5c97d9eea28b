/* The CUDA backend (plugin libtandem_cuda.so) against the CPU backend.
 *
 * Without a GPU (no driver, no device, no plugin, TANDEM_CUDA_DISABLE) the GPU cases print
 * "skipped: no GPU (<why>)" and pass; what still runs everywhere: discovery reports a
 * reason for cuda, a session asking for cuda:0 fails with that reason (TDM_ERR_DEVICE)
 * while the CPU gives its results, and the precision option is checked.
 *
 * With a GPU each case builds a small model, runs it on cuda:0 alone (no fallback: the
 * node must run there) and on the CPU with the same random inputs, and compares:
 * |got - want| <= atol + rtol * |want| with rtol 1e-4 / atol 1e-5 for pooling and
 * normalisation, 1e-3 / 1e-4 for matrix products and convolutions (FP32: no TF32). TF32,
 * FP16 and BF16 are compared with the CPU's float32 at looser tolerances stated in
 * test_precision, and their largest errors are printed. The model tests run on cuda:0
 * through the conformance runner (tests/CMakeLists.txt: model_tests_cuda). */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/api_impl.h"
#include "backends/backend.h"
#include "model_builder.h"
#include "tandem/tandem.h"

#include "test_ok.h"

static tdm_env *g_env;
static bool g_have;
static char g_why[512];

static int group_setup(void **state) {
    (void)state;
    tdm_status *st = tdm_env_create(NULL, &g_env);
    if (st) {
        fprintf(stderr, "%s\n", tdm_status_message(st));
        tdm_status_free(st);
        return -1;
    }
    for (size_t i = 0; i < tdm_env_device_count(g_env); i++)
        if (strcmp(tdm_env_device_name(g_env, i), "cuda:0") == 0) {
            g_have = true;
            printf("cuda:0 = %s\n", tdm_env_device_description(g_env, i));
        }
    for (size_t i = 0; i < tdm_env_unavailable_count(g_env); i++) {
        const char *r = tdm_env_unavailable_reason(g_env, i);
        if (strncmp(r, "cuda: ", 6) == 0) snprintf(g_why, sizeof g_why, "%s", r + 6);
    }
    if (!g_have) printf("skipped: no GPU (%s)\n", g_why[0] ? g_why : "no reason given");
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    tdm_env_free(g_env);
    return 0;
}

#define NEED_GPU()                                                                       \
    do {                                                                                 \
        if (!g_have) {                                                                   \
            printf("skipped: no GPU\n");                                                 \
            return;                                                                      \
        }                                                                                \
    } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / (float)0x1000000; /* [0, 1) */
}

static void *pack(mb_model *m, size_t *size) {
    *size = onnx__model_proto__get_packed_size(&m->model);
    void *buf = malloc(*size);
    assert_non_null(buf);
    onnx__model_proto__pack(&m->model, buf);
    return buf;
}

static void make_inputs(mb_model *m, tdm_tensor **ins, const char **names) {
    for (size_t i = 0; i < m->graph.n_input; i++) {
        names[i] = m->ins[i]->name;
        OK(tdm_tensor_create(g_env, TDM_FLOAT, m->in_rank[i], m->in_dims[i], &ins[i]));
        float *p = tdm_tensor_data(ins[i]);
        for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++)
            p[k] = m->positive ? 0.1f + 1.9f * frand() : 4.0f * frand() - 2.0f;
    }
}

/* Largest |a - b| / (atol + rtol |b|) over the outputs (> 1: out of tolerance). */
static double compare(tdm_tensor *const *od, tdm_tensor *const *oc, size_t no, double rtol,
                      double atol, double *max_abs) {
    double worst = 0;
    *max_abs = 0;
    for (size_t o = 0; o < no; o++) {
        assert_int_equal(tdm_tensor_rank(od[o]), tdm_tensor_rank(oc[o]));
        for (int i = 0; i < tdm_tensor_rank(od[o]); i++)
            assert_int_equal(tdm_tensor_dims(od[o])[i], tdm_tensor_dims(oc[o])[i]);
        const float *a = tdm_tensor_data(od[o]), *b = tdm_tensor_data(oc[o]);
        int bad = 0;
        for (int64_t k = 0; k < tdm_tensor_element_count(od[o]); k++) {
            double d = fabs((double)a[k] - (double)b[k]);
            if (isnan(a[k]) != isnan(b[k])) d = INFINITY;
            else if (isnan(a[k])) d = 0;
            double r = d / (atol + rtol * fabs((double)b[k]));
            if (d > *max_abs) *max_abs = d;
            if (r > worst) worst = r;
            if (r > 1 && bad++ < 5)
                fprintf(stderr, "  output %zu [%lld]: cuda %.9g, cpu %.9g\n", o, (long long)k,
                        (double)a[k], (double)b[k]);
        }
    }
    return worst;
}

/* Runs the model on `devices` (precision NULL = fp32) and on the CPU; compares. */
static double run_pair(mb_model *m, const char *devices, const char *precision, int opt_level,
                       double rtol, double atol, double *max_abs) {
    size_t size;
    void *buf = pack(m, &size);
    tdm_session_options so_dev = {.api_version = TDM_API_VERSION, .devices = devices,
                                  .threads = 1, .opt_level = opt_level, .no_fallback = true,
                                  .placement = "first", .precision = precision};
    tdm_session_options so_cpu = {.api_version = TDM_API_VERSION, .devices = "cpu",
                                  .threads = 1, .opt_level = opt_level};
    tdm_session *sd = NULL, *sc = NULL;
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so_dev, &sd));
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so_cpu, &sc));
    free(buf);
    size_t ni = m->graph.n_input, no = m->graph.n_output;
    tdm_tensor *ins[16] = {0}, *od[8] = {0}, *oc[8] = {0};
    const char *names[16];
    make_inputs(m, ins, names);
    /* twice on the device: the second run reuses pooled memory and cached algorithms */
    for (int rep = 0; rep < 2; rep++) {
        for (size_t o = 0; o < no; o++) tdm_tensor_free(od[o]);
        OK(tdm_session_run(sd, ni, names, (const tdm_tensor *const *)ins, no, NULL, od));
    }
    OK(tdm_session_run(sc, ni, names, (const tdm_tensor *const *)ins, no, NULL, oc));
    double worst = compare(od, oc, no, rtol, atol, max_abs);
    for (size_t i = 0; i < ni; i++) tdm_tensor_free(ins[i]);
    for (size_t o = 0; o < no; o++) {
        tdm_tensor_free(od[o]);
        tdm_tensor_free(oc[o]);
    }
    tdm_session_free(sd);
    tdm_session_free(sc);
    return worst;
}

static void check_tol(mb_model *m, int opt_level, double rtol, double atol) {
    double max_abs;
    double worst = run_pair(m, "cuda:0", NULL, opt_level, rtol, atol, &max_abs);
    mb_free(m);
    assert_true(worst <= 1.0);
}
static void check(mb_model *m) { check_tol(m, 0, 1e-4, 1e-5); }
static void check_gemm(mb_model *m) { check_tol(m, 0, 1e-3, 1e-4); }

/* ---- everywhere ---- */

static void test_discovery(void **state) {
    (void)state;
    if (g_have) return;
    /* a reason, once, for the cuda backend */
    assert_true(g_why[0] != 0);
    int n = 0;
    for (size_t i = 0; i < tdm_env_unavailable_count(g_env); i++)
        if (strncmp(tdm_env_unavailable_reason(g_env, i), "cuda: ", 6) == 0) n++;
    assert_int_equal(n, 1);
    /* asking for cuda:0 is an error naming the reason; the CPU still runs the model */
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "a", 5, 7);
    IN(&m, "b", 7, 3);
    mb_node(&m, "MatMul:a,b->y");
    mb_output(&m, "y");
    size_t size;
    void *buf = pack(&m, &size);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cuda:0,cpu"};
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_DEVICE);
    assert_non_null(strstr(tdm_status_message(st), g_why));
    tdm_status_free(st);
    free(buf);
    double max_abs;
    /* the CPU against itself through the same helper: a session with a precision set is
     * accepted and the CPU ignores it */
    assert_true(run_pair(&m, "cpu", "fp16", 0, 1e-6, 1e-7, &max_abs) <= 1.0);
    assert_true(max_abs == 0.0);
    mb_free(&m);
}

static void test_precision_option(void **state) {
    (void)state;
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "a", 2, 2);
    mb_node(&m, "Relu:a->y");
    mb_output(&m, "y");
    size_t size;
    void *buf = pack(&m, &size);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu", .precision = "fp8"};
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tdm_status_message(st), "fp8"));
    tdm_status_free(st);
    so.precision = "bf16";
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s));
    tdm_session_free(s);
    free(buf);
    mb_free(&m);
}

/* ---- on the GPU ---- */

static void test_matmul(void **state) {
    (void)state;
    NEED_GPU();
    static const int64_t shapes[][2][4] = {
        {{37, 70}, {70, 45}},
        {{3, 5, 16}, {16, 33}},     /* batched A, shared B: rows stacked */
        {{4, 5, 16}, {4, 16, 9}},   /* strided batch */
        {{5, 16}, {3, 16, 9}},      /* shared A */
        {{2, 1, 7, 8}, {3, 8, 9}},  /* broadcast batch dims: one product per matrix */
        {{13}, {13, 4}},            /* 1-D A */
        {{2, 6, 13}, {13}},         /* 1-D B */
        {{64, 0}, {0, 8}},          /* K = 0: zeros */
    };
    static const int ranks[][2] = {{2, 2}, {3, 2}, {3, 3}, {2, 3}, {4, 3}, {1, 2}, {3, 1}, {2, 2}};
    for (size_t c = 0; c < sizeof ranks / sizeof ranks[0]; c++) {
        mb_model m;
        mb_init(&m, 13);
        for (int k = 0; k < 2; k++) {
            int r = ranks[c][k];
            m.in_rank[k] = r;
            memcpy(m.in_dims[k], shapes[c][k], sizeof shapes[c][k]);
            m.ins[m.graph.n_input++] = mb_value(&m, k ? "b" : "a", 1, r, m.in_dims[k]);
        }
        mb_node(&m, "MatMul:a,b->y");
        mb_output(&m, "y");
        check_gemm(&m);
    }
}

static void test_gemm(void **state) {
    (void)state;
    NEED_GPU();
    /* transposes x C shapes: none, [N] (bias epilogue), [M, N], [M, 1], scalar; alpha/beta */
    for (int variant = 0; variant < 20; variant++) {
        mb_model m;
        mb_init(&m, 13);
        int ta = variant & 1, tb = (variant >> 1) & 1, cshape = variant / 4;
        int64_t M = 19, K = 23, N = 29;
        if (ta) IN(&m, "a", K, M);
        else IN(&m, "a", M, K);
        if (tb) IN(&m, "b", N, K);
        else IN(&m, "b", K, N);
        if (cshape == 1) IN(&m, "c", N);
        else if (cshape == 2) IN(&m, "c", M, N);
        else if (cshape == 3) IN(&m, "c", M, 1);
        else if (cshape == 4) IN(&m, "c", 1);
        Onnx__NodeProto *n = mb_node(&m, cshape ? "Gemm:a,b,c->y" : "Gemm:a,b->y");
        mb_attr_i(&m, n, "transA", ta);
        mb_attr_i(&m, n, "transB", tb);
        if (variant % 3 == 0) {
            mb_attr_f(&m, n, "alpha", 0.5f);
            mb_attr_f(&m, n, "beta", 2.0f);
        }
        mb_output(&m, "y");
        check_gemm(&m);
    }
}

static void conv_case(int64_t N, int64_t C, int64_t H, int64_t W, int64_t M, int64_t k, int64_t group,
                      int64_t stride, const int64_t *pads, int64_t dil, bool bias, int rank) {
    mb_model m;
    mb_init(&m, 13);
    if (rank == 4) {
        IN(&m, "x", N, C, H, W);
        IN(&m, "w", M, C / group, k, k);
    } else {
        IN(&m, "x", N, C, W);
        IN(&m, "w", M, C / group, k);
    }
    if (bias) IN(&m, "b", M);
    Onnx__NodeProto *n = mb_node(&m, bias ? "Conv:x,w,b->y" : "Conv:x,w->y");
    int nsp = rank - 2;
    int64_t s[2] = {stride, stride}, d[2] = {dil, dil};
    mb_attr_ints(&m, n, "strides", nsp, s);
    mb_attr_ints(&m, n, "dilations", nsp, d);
    mb_attr_ints(&m, n, "pads", 2 * nsp, pads);
    mb_attr_i(&m, n, "group", group);
    mb_output(&m, "y");
    check_gemm(&m);
}

static void test_conv(void **state) {
    (void)state;
    NEED_GPU();
    static const int64_t p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0}, pa[4] = {0, 1, 2, 1};
    static const int64_t p1d[2] = {1, 2};
    conv_case(2, 3, 11, 13, 8, 3, 1, 1, p1, 1, true, 4);  /* plain 3x3 */
    conv_case(1, 8, 9, 9, 16, 3, 2, 2, p1, 1, true, 4);   /* grouped, strided */
    conv_case(1, 6, 10, 7, 6, 3, 6, 1, p1, 2, true, 4);   /* depthwise, dilated */
    conv_case(2, 16, 7, 7, 24, 1, 1, 1, p0, 1, false, 4); /* 1x1 */
    conv_case(1, 4, 10, 9, 8, 3, 1, 2, pa, 1, true, 4);   /* asymmetric pads */
    conv_case(1, 5, 1, 31, 7, 3, 1, 2, p1d, 1, true, 3);  /* 1-D, asymmetric */
    mb_model m; /* auto_pad SAME_UPPER (asymmetric at stride 2) */
    mb_init(&m, 13);
    IN(&m, "x", 1, 3, 8, 8);
    IN(&m, "w", 4, 3, 3, 3);
    Onnx__NodeProto *n = mb_node(&m, "Conv:x,w->y");
    mb_attr_s(&m, n, "auto_pad", "SAME_UPPER");
    int64_t s2[2] = {2, 2};
    mb_attr_ints(&m, n, "strides", 2, s2);
    mb_output(&m, "y");
    check_gemm(&m);
}

static void test_fused(void **state) {
    (void)state;
    NEED_GPU();
    /* opt level 1: Conv + Add + Relu becomes FusedConv (bias, residual, Relu in one cuDNN
     * call); MatMul + Add + Relu becomes FusedMatMul (cuBLASLt's bias + Relu epilogue) */
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "x", 1, 8, 6, 6);
    int64_t wd[4] = {8, 8, 3, 3}, bd[1] = {8};
    float wv[8 * 8 * 9], bv[8];
    for (int i = 0; i < 8 * 8 * 9; i++) wv[i] = frand() - 0.5f;
    for (int i = 0; i < 8; i++) bv[i] = frand() - 0.5f;
    mb_init_f32(&m, "w", 4, wd, 8 * 8 * 9, wv);
    mb_init_f32(&m, "b", 1, bd, 8, bv);
    Onnx__NodeProto *n = mb_node(&m, "Conv:x,w,b->c");
    int64_t p[4] = {1, 1, 1, 1};
    mb_attr_ints(&m, n, "pads", 4, p);
    mb_node(&m, "Add:c,x->s");
    mb_node(&m, "Relu:s->y");
    mb_output(&m, "y");
    double max_abs;
    /* the device list has the CPU too: Add/Relu left unfused run wherever they can */
    assert_true(run_pair(&m, "cuda:0,cpu", NULL, 1, 1e-3, 1e-4, &max_abs) <= 1.0);
    mb_free(&m);
    mb_init(&m, 13);
    IN(&m, "a", 4, 10, 32);
    int64_t bwd[2] = {32, 24}, bbd[1] = {24};
    float bw[32 * 24], bb[24];
    for (int i = 0; i < 32 * 24; i++) bw[i] = frand() - 0.5f;
    for (int i = 0; i < 24; i++) bb[i] = frand() - 0.5f;
    mb_init_f32(&m, "w", 2, bwd, 32 * 24, bw);
    mb_init_f32(&m, "bias", 1, bbd, 24, bb);
    mb_node(&m, "MatMul:a,w->mm");
    mb_node(&m, "Add:mm,bias->s");
    mb_node(&m, "Relu:s->y");
    mb_output(&m, "y");
    assert_true(run_pair(&m, "cuda:0,cpu", NULL, 1, 1e-3, 1e-4, &max_abs) <= 1.0);
    mb_free(&m);
}

static void test_pool_bn(void **state) {
    (void)state;
    NEED_GPU();
    static const char *ops[] = {"MaxPool", "AveragePool"};
    for (int o = 0; o < 2; o++)
        for (int pads = 0; pads < 2; pads++) {
            mb_model m;
            mb_init(&m, 13);
            IN(&m, "x", 2, 3, 9, 11);
            char spec[64];
            snprintf(spec, sizeof spec, "%s:x->y", ops[o]);
            Onnx__NodeProto *n = mb_node(&m, spec);
            int64_t k[2] = {3, 3}, s[2] = {2, 2}, p[4] = {1, 1, 1, 1};
            mb_attr_ints(&m, n, "kernel_shape", 2, k);
            mb_attr_ints(&m, n, "strides", 2, s);
            if (pads) mb_attr_ints(&m, n, "pads", 4, p);
            mb_output(&m, "y");
            check(&m);
        }
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "x", 2, 5, 7, 3);
    mb_node(&m, "GlobalAveragePool:x->y");
    mb_output(&m, "y");
    check(&m);
    mb_init(&m, 13);
    m.positive = true; /* variances */
    IN(&m, "x", 2, 4, 5, 6);
    IN(&m, "s", 4);
    IN(&m, "b", 4);
    IN(&m, "mean", 4);
    IN(&m, "var", 4);
    mb_node(&m, "BatchNormalization:x,s,b,mean,var->y");
    mb_output(&m, "y");
    check(&m);
}

static void test_conv_transpose(void **state) {
    (void)state;
    NEED_GPU();
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "x", 1, 4, 5, 6);
    IN(&m, "w", 4, 3, 3, 3);
    IN(&m, "b", 3);
    Onnx__NodeProto *n = mb_node(&m, "ConvTranspose:x,w,b->y");
    int64_t s[2] = {2, 2}, p[4] = {1, 1, 1, 1}, op[2] = {1, 1};
    mb_attr_ints(&m, n, "strides", 2, s);
    mb_attr_ints(&m, n, "pads", 4, p);
    mb_attr_ints(&m, n, "output_padding", 2, op);
    mb_output(&m, "y");
    check_gemm(&m);
}

/* TF32 / FP16 / BF16 against the CPU's float32: a 96 x 256 x 80 product of values in
 * [-2, 2) (|y| up to ~40). Tolerances (atol + rtol |want|): TF32 and FP16 (10-bit
 * mantissas) rtol 1e-2, atol 5e-2; BF16 (7 bits) rtol 3e-2, atol 4e-1. */
static void test_precision(void **state) {
    (void)state;
    NEED_GPU();
    static const struct { const char *p; double rtol, atol; } cases[] = {
        {"tf32", 1e-2, 5e-2}, {"fp16", 1e-2, 5e-2}, {"bf16", 3e-2, 4e-1}, {"fp32", 1e-3, 1e-4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int conv = 0; conv < 2; conv++) {
            mb_model m;
            mb_init(&m, 13);
            if (conv) {
                IN(&m, "a", 2, 32, 14, 14);
                IN(&m, "b", 64, 32, 3, 3);
                mb_node(&m, "Conv:a,b->y");
            } else {
                IN(&m, "a", 96, 256);
                IN(&m, "b", 256, 80);
                mb_node(&m, "MatMul:a,b->y");
            }
            mb_output(&m, "y");
            double max_abs;
            double worst = run_pair(&m, "cuda:0", cases[c].p, 0, cases[c].rtol, cases[c].atol,
                                    &max_abs);
            printf("precision %s %s: largest |cuda - cpu fp32| = %.3g (%.2f of the tolerance)\n",
                   cases[c].p, conv ? "Conv" : "MatMul", max_abs, worst);
            mb_free(&m);
            assert_true(worst <= 1.0);
        }
    }
}

/* A memory limit makes a run fail with TDM_ERR_OUT_OF_MEMORY; without it the next run of
 * the same session works. */
static void test_memory_limit(void **state) {
    (void)state;
    NEED_GPU();
    tdm_device *dev = tdm_env_find_device(g_env, "cuda:0");
    assert_non_null(dev);
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "a", 1024, 1024);
    IN(&m, "b", 1024, 1024);
    mb_node(&m, "MatMul:a,b->y");
    mb_output(&m, "y");
    size_t size;
    void *buf = pack(&m, &size);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cuda:0",
                              .no_fallback = true, .opt_level = 0};
    tdm_session *s = NULL;
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s));
    free(buf);
    tdm_tensor *ins[2] = {0}, *out[1] = {0};
    const char *names[2];
    make_inputs(&m, ins, names);
    OK(dev->iface->configure(dev, "mem_limit_mb", "2"));
    tdm_status *st = tdm_session_run(s, 2, names, (const tdm_tensor *const *)ins, 1, NULL, out);
    OK(dev->iface->configure(dev, "mem_limit_mb", "0"));
    assert_int_equal(tdm_status_code(st), TDM_ERR_OUT_OF_MEMORY);
    printf("with a 2 MiB limit: %s\n", tdm_status_message(st));
    tdm_status_free(st);
    OK(tdm_session_run(s, 2, names, (const tdm_tensor *const *)ins, 1, NULL, out));
    tdm_tensor_free(out[0]);
    st = dev->iface->configure(dev, "mem_limit_mb", "lots");
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    for (int i = 0; i < 2; i++) tdm_tensor_free(ins[i]);
    tdm_session_free(s);
    mb_free(&m);
}

/* The copy and event members directly: staged uploads larger than a staging buffer,
 * pinned host memory, asynchronous downloads, events across the streams. */
static void test_copies_events(void **state) {
    (void)state;
    NEED_GPU();
    tdm_device *dev = tdm_env_find_device(g_env, "cuda:0");
    assert_non_null(dev);
    const tdm_device_iface *f = dev->iface;
    size_t n = (size_t)5 << 20, bytes = n * sizeof(float); /* 20 MiB: 3 staging rounds */
    float *src = malloc(bytes), *back = malloc(bytes);
    assert_non_null(src);
    assert_non_null(back);
    for (size_t i = 0; i < n; i++) src[i] = (float)i * 0.5f;
    void *b1 = NULL, *b2 = NULL, *pin = NULL, *ev = NULL, *ev2 = NULL;
    OK(f->buffer_alloc(dev, bytes, &b1));
    OK(f->buffer_alloc(dev, bytes, &b2));
    OK(f->upload(dev, b1, src, bytes));
    memset(src, 0, bytes); /* staged: the caller's memory is free once upload returns */
    OK(f->download(dev, back, b1, bytes));
    for (size_t i = 0; i < n; i += 4099) assert_true(back[i] == (float)i * 0.5f);
    OK(f->host_alloc(dev, bytes, &pin));
    memcpy(pin, back, bytes);
    OK(f->upload(dev, b2, pin, bytes));
    OK(f->event_record(dev, &ev));
    OK(f->event_wait(dev, dev, ev));
    OK(f->event_sync(dev, ev)); /* the upload read pin before the event completed */
    memset(pin, 0, bytes);
    OK(f->download_async(dev, pin, b2, bytes, &ev2));
    OK(f->event_sync(dev, ev2));
    assert_memory_equal(pin, back, bytes);
    f->buffer_free(dev, b2); /* after an asynchronous download: ordered behind it */
    f->event_free(dev, ev);
    f->event_free(dev, ev2);
    f->host_free(dev, pin);
    f->buffer_free(dev, b1);
    OK(f->synchronize(dev));
    void *z = NULL;
    OK(f->buffer_alloc(dev, 0, &z)); /* size 0 still gives a handle */
    assert_non_null(z);
    f->buffer_free(dev, z);
    free(src);
    free(back);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_precision_option),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_fused),
        cmocka_unit_test(test_pool_bn),
        cmocka_unit_test(test_conv_transpose),
        cmocka_unit_test(test_precision),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_copies_events),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
