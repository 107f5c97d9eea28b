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
#include "tandem/tandem.h"

#define DH_DEVICE "cuda:0"
#define DH_KIND "GPU"
#include "device_harness.h"

/* Runs the model on `devices` (precision NULL = fp32; twice there: the second run reuses
 * pooled memory and cached algorithms) and on the CPU; compares. */
static double run_pair(mb_model *m, const char *devices, const char *precision, int opt_level,
                       double rtol, double atol, double *max_abs) {
    dh_run r = {.devices = devices, .no_fallback = true, .opt_level = opt_level,
                .precision = precision, .runs = 2};
    return dh_run_pair(m, &r, rtol, atol, max_abs);
}

static void check_tol(mb_model *m, int opt_level, double rtol, double atol) {
    double max_abs;
    double worst = run_pair(m, DH_DEVICE, NULL, opt_level, rtol, atol, &max_abs);
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
    static const int64_t da[2] = {5, 7}, db[2] = {7, 3};
    dh_two_inputs(&m, "MatMul", 2, da, 2, db);
    size_t size;
    void *buf = dh_pack(&m, &size);
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
    void *buf = dh_pack(&m, &size);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu", .precision = "fp8"};
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tdm_status_message(st), "fp8"));
    tdm_status_free(st);
    /* bf16 on the cpu: bf16 kernels where oneDNN runs avx512_core_bf16 / AMX, else refused
     * with a message naming AVX512_BF16 (never emulated; tests/tools/check_bf16_models.py) */
    so.precision = "bf16";
    st = tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s);
    if (st) {
        assert_int_equal(tdm_status_code(st), TDM_ERR_UNSUPPORTED);
        assert_non_null(strstr(tdm_status_message(st), "AVX512_BF16"));
        tdm_status_free(st);
    } else {
        tdm_session_free(s);
    }
    so.precision = "fp32"; /* back to fp32 for the env's later sessions (the device's setting) */
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s));
    tdm_session_free(s);
    free(buf);
    mb_free(&m);
}

/* ---- on the GPU ---- */

static void test_matmul(void **state) {
    (void)state;
    NEED_DEVICE();
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
        dh_two_inputs(&m, "MatMul", ranks[c][0], shapes[c][0], ranks[c][1], shapes[c][1]);
        check_gemm(&m);
    }
}

static void test_gemm(void **state) {
    (void)state;
    NEED_DEVICE();
    /* transposes x C shapes: none, [N] (bias epilogue), [M, N], [M, 1], scalar; alpha/beta */
    static const int cshapes[] = {DH_C_NONE, DH_C_N, DH_C_MN, DH_C_M1, DH_C_1};
    for (int variant = 0; variant < 20; variant++) {
        mb_model m;
        dh_gemm(&m, variant & 1, (variant >> 1) & 1, cshapes[variant / 4], variant % 3 == 0,
                0.5f, 2.0f);
        check_gemm(&m);
    }
}

static void test_conv(void **state) {
    (void)state;
    NEED_DEVICE();
    static const int64_t p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0}, pa[4] = {0, 1, 2, 1};
    static const int64_t p1d[2] = {1, 2};
    static const struct {
        int64_t N, C, H, W, M, k, group, stride;
        const int64_t *pads;
        int64_t dil;
        bool bias;
        int rank;
    } cases[] = {
        {2, 3, 11, 13, 8, 3, 1, 1, p1, 1, true, 4},  /* plain 3x3 */
        {1, 8, 9, 9, 16, 3, 2, 2, p1, 1, true, 4},   /* grouped, strided */
        {1, 6, 10, 7, 6, 3, 6, 1, p1, 2, true, 4},   /* depthwise, dilated */
        {2, 16, 7, 7, 24, 1, 1, 1, p0, 1, false, 4}, /* 1x1 */
        {1, 4, 10, 9, 8, 3, 1, 2, pa, 1, true, 4},   /* asymmetric pads */
        {1, 5, 1, 31, 7, 3, 1, 2, p1d, 1, true, 3},  /* 1-D, asymmetric */
    };
    mb_model m;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dh_conv(&m, cases[i].N, cases[i].C, cases[i].H, cases[i].W, cases[i].M, cases[i].k,
                cases[i].group, cases[i].stride, cases[i].pads, cases[i].dil, cases[i].bias,
                cases[i].rank);
        check_gemm(&m);
    }
    dh_conv_same_upper(&m); /* asymmetric at stride 2 */
    check_gemm(&m);
}

static void test_fused(void **state) {
    (void)state;
    NEED_DEVICE();
    /* opt level 1: Conv + Add + Relu becomes FusedConv (bias, residual, Relu in one cuDNN
     * call); MatMul + Add + Relu becomes FusedMatMul (cuBLASLt's bias + Relu epilogue) */
    mb_model m;
    dh_conv_residual_relu(&m);
    double max_abs;
    /* the device list has the CPU too: Add/Relu left unfused run wherever they can */
    assert_true(run_pair(&m, "cuda:0,cpu", NULL, 1, 1e-3, 1e-4, &max_abs) <= 1.0);
    mb_free(&m);
    static const int64_t da[3] = {4, 10, 32};
    dh_matmul_bias_relu(&m, 3, da, 24);
    assert_true(run_pair(&m, "cuda:0,cpu", NULL, 1, 1e-3, 1e-4, &max_abs) <= 1.0);
    mb_free(&m);
}

static void test_pool_bn(void **state) {
    (void)state;
    NEED_DEVICE();
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
    static const int64_t dg[4] = {2, 5, 7, 3};
    dh_one_input(&m, 13, "GlobalAveragePool", 4, dg);
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
    NEED_DEVICE();
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
    NEED_DEVICE();
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
/* A session of model m on cuda:0 alone (no fallback), opt level 0. */
static tdm_session *cuda_session(mb_model *m) {
    size_t size;
    void *buf = dh_pack(m, &size);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cuda:0",
                              .no_fallback = true, .opt_level = 0};
    tdm_session *s = NULL;
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s));
    free(buf);
    return s;
}

static void test_memory_limit(void **state) {
    (void)state;
    NEED_DEVICE();
    tdm_device *dev = tdm_env_find_device(g_env, "cuda:0");
    assert_non_null(dev);
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "a", 1024, 1024);
    IN(&m, "b", 1024, 1024);
    mb_node(&m, "MatMul:a,b->y");
    mb_output(&m, "y");
    tdm_session *s = cuda_session(&m);
    tdm_tensor *ins[2] = {0}, *out[1] = {0};
    const char *names[2];
    dh_inputs(&m, ins, names);
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

/* Gather's index check: an out-of-range index fails the run with TDM_ERR_INVALID_ARGUMENT
 * (the device checks as the kernels run and the host reads its flag after waiting for them,
 * cuda_index_check), and the next run with good indices succeeds with the right rows. */
static void test_gather_index(void **state) {
    (void)state;
    NEED_DEVICE();
    mb_model m;
    mb_init(&m, 13);
    int64_t xd[2] = {4, 3}, id[1] = {2};
    mb_input(&m, "x", 2, xd);
    mb_input_as(&m, "i", MB_I64, 1, id, NULL);
    mb_node(&m, "Gather:x,i->y");
    mb_output(&m, "y");
    tdm_session *s = cuda_session(&m);
    float xv[12];
    for (int k = 0; k < 12; k++) xv[k] = (float)k + 0.5f;
    const int64_t runs[3][2] = {{1, 3}, {1, 9}, {3, 0}};
    for (int r = 0; r < 3; r++) {
        int64_t iv[2] = {runs[r][0], runs[r][1]};
        tdm_tensor *ins[2] = {0}, *out[1] = {0};
        OK(tdm_tensor_wrap(g_env, TDM_FLOAT, 2, xd, xv, sizeof xv, &ins[0]));
        OK(tdm_tensor_wrap(g_env, TDM_INT64, 1, id, iv, sizeof iv, &ins[1]));
        const char *names[2] = {"x", "i"};
        tdm_status *st = tdm_session_run(s, 2, names, (const tdm_tensor *const *)ins, 1, NULL, out);
        if (r == 1) {
            assert_non_null(st);
            assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
            assert_non_null(strstr(tdm_status_message(st), "out of range"));
            printf("index 9 of 4 rows: %s\n", tdm_status_message(st));
            tdm_status_free(st);
        } else {
            OK(st);
            const float *y = tdm_tensor_data(out[0]);
            for (int k = 0; k < 2; k++)
                for (int c = 0; c < 3; c++) assert_true(y[k * 3 + c] == xv[iv[k] * 3 + c]);
        }
        tdm_tensor_free(out[0]);
        tdm_tensor_free(ins[0]);
        tdm_tensor_free(ins[1]);
    }
    tdm_session_free(s);
    mb_free(&m);
}

/* The copy and event members directly: staged uploads larger than a staging buffer,
 * pinned host memory, asynchronous downloads, events across the streams. */
static void test_copies_events(void **state) {
    (void)state;
    NEED_DEVICE();
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

/* ---- 8-bit quantization (k_ops_quant.c) ---- */

enum { Q_U8 = 2, Q_I8 = 3, Q_I32 = 6 };

/* A quantized product: x float -> QuantizeLinear -> QLinearConv / QLinearMatMul ->
 * DequantizeLinear -> y; or (fused) the QDQ form that opt level 1 folds into tandem's QConv /
 * QMatMul: DequantizeLinear of x and of symmetric s8 weights -> Conv / MatMul ->
 * QuantizeLinear -> DequantizeLinear. */
typedef struct q_case {
    bool conv, fused, per_channel, bias;
    int rank;           /* x's */
    int64_t x[4], w[4]; /* conv: w [M, C / group, k (, k)]; matmul: w [K, N] */
    int xt, wt, yt;     /* 8-bit types */
    int64_t group, stride, pad;
    int wrank;          /* matmul: w's rank (0 = 2); 3: w [batch, K, N], a batch of products */
} q_case;

static int q_wrank(const q_case *c) { return c->conv ? c->rank : c->wrank > 2 ? c->wrank : 2; }
static int64_t q_k(const q_case *c) {
    int64_t K = 1;
    if (!c->conv) return c->w[q_wrank(c) - 2];
    for (int i = 1; i < c->rank; i++) K *= c->w[i];
    return K;
}

static void q_init8(mb_model *m, const char *name, int type, int rank, const int64_t *dims,
                    bool zero) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
    uint8_t *b = mb_alloc(m, n + 1);
    for (size_t i = 0; i < n; i++) b[i] = zero ? 0 : (uint8_t)(frand() * 256.0f);
    mb_init_raw(m, name, type, rank, dims, b, n);
}

static void q_model(mb_model *m, const q_case *c) {
    mb_init(m, 13);
    mb_input(m, "x", c->rank, c->x);
    int64_t K = q_k(c), ch = c->conv ? c->w[0] : c->w[q_wrank(c) - 1];
    float xs = 4.0f / 255.0f, ws = 0.01f, ys = 0.85f * sqrtf((float)K) * 3.0f / 127.0f;
    mb_scalar(m, "xs", xs);
    mb_scalar(m, "ys", ys);
    uint8_t xz = c->xt == Q_U8 ? 128 : 0, yz = c->yt == Q_U8 ? 120 : 3;
    mb_init_raw(m, "xz", c->xt, 0, NULL, &xz, 1);
    mb_init_raw(m, "yz", c->yt, 0, NULL, &yz, 1);
    int64_t nc = c->per_channel ? ch : 1;
    float wsv[64];
    for (int64_t i = 0; i < nc; i++) wsv[i] = ws * (0.5f + frand());
    mb_init_f32(m, "ws", c->per_channel ? 1 : 0, &nc, (int)nc, wsv);
    q_init8(m, "w", c->fused ? Q_I8 : c->wt, q_wrank(c), c->w, false);
    q_init8(m, "wz", c->fused ? Q_I8 : c->wt, c->per_channel ? 1 : 0, &nc, c->fused);
    if (c->bias) {
        int32_t *b = mb_alloc(m, (size_t)ch * sizeof(int32_t));
        for (int64_t i = 0; i < ch; i++) b[i] = (int32_t)(frand() * 20000.0f) - 10000;
        mb_init_raw(m, "b", Q_I32, 1, &ch, b, (size_t)ch * sizeof(int32_t));
    }
    mb_node(m, "QuantizeLinear:x,xs,xz->xq");
    Onnx__NodeProto *n;
    if (c->fused) {
        mb_node(m, "DequantizeLinear:xq,xs,xz->xd");
        n = mb_node(m, "DequantizeLinear:w,ws,wz->wd");
        if (c->per_channel) mb_attr_i(m, n, "axis", c->conv ? 0 : 1);
        n = mb_node(m, c->conv ? "Conv:xd,wd->c" : "MatMul:xd,wd->c");
        mb_node(m, "QuantizeLinear:c,ys,yz->yq");
    } else if (c->conv) {
        n = mb_node(m, c->bias ? "QLinearConv:xq,xs,xz,w,ws,wz,ys,yz,b->yq"
                               : "QLinearConv:xq,xs,xz,w,ws,wz,ys,yz->yq");
    } else {
        n = mb_node(m, "QLinearMatMul:xq,xs,xz,w,ws,wz,ys,yz->yq");
    }
    if (c->conv) {
        int nsp = c->rank - 2;
        int64_t s[2] = {c->stride, c->stride}, p[4] = {c->pad, c->pad, c->pad, c->pad};
        mb_attr_ints(m, n, "strides", nsp, s);
        mb_attr_ints(m, n, "pads", 2 * nsp, p);
        mb_attr_i(m, n, "group", c->group);
    }
    mb_node(m, "DequantizeLinear:yq,ys,yz->y");
    mb_output(m, "y");
}

static void test_quant(void **state) {
    (void)state;
    NEED_DEVICE();
    /* shapes on both product paths: cuBLASLt's s8 product (m and k multiples of 4) and the
     * own kernel (the rest) */
    static const q_case cases[] = {
        /* conv, fused, per_channel, bias, rank, x, w, xt, wt, yt, group, stride, pad */
        {true, false, true, true, 4, {2, 8, 8, 8}, {16, 8, 3, 3}, Q_U8, Q_I8, Q_U8, 1, 1, 1},
        {true, false, false, true, 4, {1, 6, 9, 7}, {9, 2, 3, 3}, Q_I8, Q_U8, Q_I8, 3, 2, 1},
        {true, false, true, false, 3, {2, 5, 31}, {7, 5, 3}, Q_U8, Q_U8, Q_U8, 1, 2, 1},
        {true, false, true, true, 4, {1, 8, 10, 10}, {8, 1, 3, 3}, Q_U8, Q_I8, Q_U8, 8, 1, 1},
        {true, true, true, false, 4, {1, 16, 8, 8}, {32, 16, 1, 1}, Q_U8, Q_I8, Q_U8, 1, 1, 0},
        {false, false, true, false, 3, {2, 5, 12}, {12, 8}, Q_U8, Q_I8, Q_U8, 1, 1, 0},
        {false, false, false, false, 2, {3, 7}, {7, 5}, Q_I8, Q_U8, Q_I8, 1, 1, 0},
        {false, true, true, false, 3, {2, 16, 64}, {64, 32}, Q_U8, Q_I8, Q_U8, 1, 1, 0},
        /* a batch of products: B [2, 12, 8] with A [2, 5, 12] (test_qlinearmatmul_3D's form;
         * refused on cuda:0 before 2026-12-04) */
        {false, false, false, false, 3, {2, 5, 12}, {2, 12, 8}, Q_U8, Q_I8, Q_U8, 1, 1, 0, 3},
    };
    mb_model m;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const q_case *c = &cases[i];
        q_model(&m, c);
        int64_t K = q_k(c);
        double step = 0.85 * sqrt((double)K) * 3.0 / 127.0, max_abs;
        /* the same bytes are the aim; one step of y either way is allowed (the CPU's oneDNN
         * kernels requantise in float32) */
        double worst = run_pair(&m, DH_DEVICE, NULL, c->fused ? 1 : 0, 0, step * 1.0001, &max_abs);
        printf("quant case %zu: max |cuda - cpu| = %.3g (%.2f steps)\n", i, max_abs,
               max_abs / step);
        mb_free(&m);
        assert_true(worst <= 1.0);
    }
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
        cmocka_unit_test(test_quant),
        cmocka_unit_test(test_precision),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_copies_events),
        cmocka_unit_test(test_gather_index),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
