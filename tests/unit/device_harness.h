/* Test helper: the device-group harness of the device tests (test_cuda.c, test_opencl*.c).
 * Define DH_DEVICE (the device under test: "cuda:0", "opencl:0") and DH_KIND (how a missing
 * one is named: "GPU", "OpenCL device") before including; DH_SEED changes frand's seed.
 *
 * - group_setup / group_teardown: one environment for the group (device profiles and program
 *   binaries are cached under $TANDEM_CACHE_DIR, or <build>/device-test-cache when that is
 *   not set). g_have: DH_DEVICE exists; else g_why holds the reason its backend gave, the
 *   setup prints "skipped: no DH_KIND (why)" and every test that starts with NEED_DEVICE()
 *   prints "skipped" and passes.
 * - frand(): uniform in [0, 1) from a fixed seed (runs are repeatable).
 * - dh_run_pair: a built model (model_builder.h) on a device list and on the CPU with the
 *   same random inputs; returns how far the outputs are apart, in tolerances.
 * - case builders both backends' tests run: MatMul / binary ops of two shapes, Gemm, Conv,
 *   Conv with auto_pad, Conv + residual + Relu, MatMul + bias + Relu, one-input ops. */
#ifndef TDM_TEST_DEVICE_HARNESS_H
#define TDM_TEST_DEVICE_HARNESS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/settings.h"
#include "tandem/tandem.h"

#include "model_builder.h"
#include "test_ok.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* each test uses some of the helpers */

#ifndef DH_DEVICE
#error "define DH_DEVICE (the device under test) before including device_harness.h"
#endif
#ifndef DH_KIND
#define DH_KIND DH_DEVICE
#endif
#ifndef DH_SEED
#define DH_SEED 0x9e3779b97f4a7c15ull
#endif

/* ---- the group ---- */

/* The settings an environment created now would get (the program cache folder included),
 * for tests that open a backend directly. Read once; static because the devices keep the
 * pointer. */
static inline const tdm_settings *ocl_test_settings(void) {
    static tdm_settings s;
    static bool have;
    if (!have) {
        tdm_status *st = tdm_settings_read(NULL, &s);
        if (st) s = tdm_settings_builtin;
        tdm_status_free(st);
        have = true;
    }
    return &s;
}

static tdm_env *g_env;
static bool g_have;
static char g_why[512];

static int group_setup(void **state) {
    (void)state;
    if (!getenv("TANDEM_CACHE_DIR"))
        setenv("TANDEM_CACHE_DIR", TANDEM_BINARY_DIR "/device-test-cache", 1);
    tdm_status *st = tdm_env_create(NULL, &g_env);
    if (st) {
        fprintf(stderr, "%s\n", tdm_status_message(st));
        tdm_status_free(st);
        return -1;
    }
    for (size_t i = 0; i < tdm_env_device_count(g_env); i++)
        if (strcmp(tdm_env_device_name(g_env, i), DH_DEVICE) == 0) {
            g_have = true;
            printf("%s = %s\n", DH_DEVICE, tdm_env_device_description(g_env, i));
        }
    /* the reason of the device's backend: "<backend>: why" */
    size_t nb = strcspn(DH_DEVICE, ":");
    for (size_t i = 0; i < tdm_env_unavailable_count(g_env); i++) {
        const char *r = tdm_env_unavailable_reason(g_env, i);
        if (strncmp(r, DH_DEVICE, nb) == 0 && strncmp(r + nb, ": ", 2) == 0)
            snprintf(g_why, sizeof g_why, "%s", r + nb + 2);
    }
    if (!g_have) printf("skipped: no %s (%s)\n", DH_KIND, g_why[0] ? g_why : "no reason given");
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    tdm_env_free(g_env);
    return 0;
}

#define NEED_DEVICE()                                                                    \
    do {                                                                                 \
        if (!g_have) {                                                                   \
            printf("skipped: no %s\n", DH_KIND);                                         \
            return;                                                                      \
        }                                                                                \
    } while (0)

static uint64_t g_rng = DH_SEED;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / (float)0x1000000; /* [0, 1) */
}

/* ---- a model on the device and on the CPU ---- */

/* The model's bytes (caller frees). */
static void *dh_pack(mb_model *m, size_t *size) {
    *size = onnx__model_proto__get_packed_size(&m->model);
    void *buf = malloc(*size);
    assert_non_null(buf);
    onnx__model_proto__pack(&m->model, buf);
    return buf;
}

/* Random float inputs of the builder's shapes: [-2, 2), or (0.1, 2] when m->positive. */
static void dh_inputs(mb_model *m, tdm_tensor **ins, const char **names) {
    for (size_t i = 0; i < m->graph.n_input; i++) {
        names[i] = m->ins[i]->name;
        OK(tdm_tensor_create(g_env, TDM_FLOAT, m->in_rank[i], m->in_dims[i], &ins[i]));
        float *p = tdm_tensor_data(ins[i]);
        for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++)
            p[k] = m->positive ? 0.1f + 1.9f * frand() : 4.0f * frand() - 2.0f;
    }
}

static double dh_element(const tdm_tensor *t, int64_t k) {
    const void *p = tdm_tensor_data((tdm_tensor *)t);
    switch (tdm_tensor_dtype(t)) {
    case TDM_FLOAT: return ((const float *)p)[k];
    case TDM_INT64: return (double)((const int64_t *)p)[k];
    case TDM_INT32: return ((const int32_t *)p)[k];
    case TDM_BOOL: return ((const uint8_t *)p)[k];
    default: fail_msg("output dtype %d is not compared", (int)tdm_tensor_dtype(t));
    }
    return 0;
}

/* Largest |got - want| / (atol + rtol |want|) over the outputs (> 1: out of tolerance; NaN
 * against a number: infinity); dtypes and shapes must be the same. Prints the first five
 * elements out of tolerance; *max_abs gets the largest |got - want|. */
static double dh_compare(tdm_tensor *const *got, tdm_tensor *const *want, size_t n_out,
                         const char *who, double rtol, double atol, double *max_abs) {
    double worst = 0;
    *max_abs = 0;
    for (size_t o = 0; o < n_out; o++) {
        assert_int_equal(tdm_tensor_dtype(got[o]), tdm_tensor_dtype(want[o]));
        assert_int_equal(tdm_tensor_rank(got[o]), tdm_tensor_rank(want[o]));
        for (int i = 0; i < tdm_tensor_rank(got[o]); i++)
            assert_int_equal(tdm_tensor_dims(got[o])[i], tdm_tensor_dims(want[o])[i]);
        int bad = 0;
        for (int64_t k = 0; k < tdm_tensor_element_count(got[o]); k++) {
            double a = dh_element(got[o], k), b = dh_element(want[o], k), d;
            if (a == b || (isnan(a) && isnan(b))) d = 0;
            else if (isnan(a) || isnan(b)) d = INFINITY;
            else d = fabs(a - b);
            double r = d / (atol + rtol * fabs(b));
            if (d > *max_abs) *max_abs = d;
            if (r > worst) worst = r;
            if (r > 1 && bad++ < 5)
                fprintf(stderr, "  output %zu [%lld]: %s %.9g, cpu %.9g\n", o, (long long)k, who,
                        a, b);
        }
    }
    return worst;
}

/* How dh_run_pair runs the model on the devices under test. */
typedef struct dh_run {
    const char *devices;   /* the session's device list, e.g. DH_DEVICE or DH_DEVICE ",cpu" */
    bool no_fallback;      /* every node the first device cannot run is an error */
    int opt_level;
    const char *precision; /* NULL: fp32 */
    int runs;              /* runs there before comparing (0: 1); later runs reuse pooled
                              memory and cached algorithms */
} dh_run;

/* Runs the model per `r` (placement "first": every node the device claims runs there; the
 * cost model might prefer the CPU for tiny tensors) and on the CPU alone, with the same
 * random inputs; returns dh_compare's figure. */
static double dh_run_pair(mb_model *m, const dh_run *r, double rtol, double atol, double *max_abs) {
    size_t size;
    void *buf = dh_pack(m, &size);
    tdm_session_options so_dev = {.api_version = TDM_API_VERSION, .devices = r->devices,
                                  .threads = 1, .opt_level = r->opt_level,
                                  .no_fallback = r->no_fallback, .placement = "first",
                                  .precision = r->precision};
    tdm_session_options so_cpu = {.api_version = TDM_API_VERSION, .devices = "cpu",
                                  .threads = 1, .opt_level = r->opt_level};
    tdm_session *sd = NULL, *sc = NULL;
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so_dev, &sd));
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so_cpu, &sc));
    free(buf);
    size_t ni = m->graph.n_input, no = m->graph.n_output;
    tdm_tensor *ins[16] = {0}, *od[8] = {0}, *oc[8] = {0};
    const char *names[16];
    dh_inputs(m, ins, names);
    for (int rep = 0; rep < (r->runs > 0 ? r->runs : 1); rep++) {
        for (size_t o = 0; o < no; o++) tdm_tensor_free(od[o]);
        OK(tdm_session_run(sd, ni, names, (const tdm_tensor *const *)ins, no, NULL, od));
    }
    OK(tdm_session_run(sc, ni, names, (const tdm_tensor *const *)ins, no, NULL, oc));
    double worst = dh_compare(od, oc, no, r->devices, rtol, atol, max_abs);
    for (size_t i = 0; i < ni; i++) tdm_tensor_free(ins[i]);
    for (size_t o = 0; o < no; o++) {
        tdm_tensor_free(od[o]);
        tdm_tensor_free(oc[o]);
    }
    tdm_session_free(sd);
    tdm_session_free(sc);
    return worst;
}

/* ---- cases both backends run ---- */

/* "<op>:a,b->y" (opset 13) with inputs a [da] and b [db]: MatMul, binary ops */
static void dh_two_inputs(mb_model *m, const char *op, int ra, const int64_t *da, int rb,
                          const int64_t *db) {
    mb_init(m, 13);
    mb_input(m, "a", ra, da);
    mb_input(m, "b", rb, db);
    char spec[64];
    snprintf(spec, sizeof spec, "%s:a,b->y", op);
    mb_node(m, spec);
    mb_output(m, "y");
}

/* One input x [dims] and "<op>:x->y" at `opset` (attributes are the caller's). */
static Onnx__NodeProto *dh_one_input(mb_model *m, int opset, const char *op, int rank,
                                     const int64_t *dims) {
    mb_init(m, opset);
    mb_input(m, "x", rank, dims);
    char spec[64];
    snprintf(spec, sizeof spec, "%s:x->y", op);
    Onnx__NodeProto *n = mb_node(m, spec);
    mb_output(m, "y");
    return n;
}

/* Gemm's C: none, [N], [M, N], [M, 1], [1] */
enum { DH_C_NONE, DH_C_N, DH_C_MN, DH_C_M1, DH_C_1 };

/* Gemm of 19 x 23 by 23 x 29 (transA / transB as given) with C of shape `c`; alpha and
 * beta are set when `scaled`. */
static void dh_gemm(mb_model *m, bool ta, bool tb, int c, bool scaled, float alpha, float beta) {
    mb_init(m, 13);
    int64_t M = 19, K = 23, N = 29;
    if (ta) IN(m, "a", K, M);
    else IN(m, "a", M, K);
    if (tb) IN(m, "b", N, K);
    else IN(m, "b", K, N);
    if (c == DH_C_N) IN(m, "c", N);
    else if (c == DH_C_MN) IN(m, "c", M, N);
    else if (c == DH_C_M1) IN(m, "c", M, 1);
    else if (c == DH_C_1) IN(m, "c", 1);
    Onnx__NodeProto *n = mb_node(m, c != DH_C_NONE ? "Gemm:a,b,c->y" : "Gemm:a,b->y");
    mb_attr_i(m, n, "transA", ta);
    mb_attr_i(m, n, "transB", tb);
    if (scaled) {
        mb_attr_f(m, n, "alpha", alpha);
        mb_attr_f(m, n, "beta", beta);
    }
    mb_output(m, "y");
}

/* Conv (opset 13) of x [N, C, H, W] (rank 4) or [N, C, W] (rank 3) by M filters of k (x k),
 * weights and bias as graph inputs; pads has 2 (rank - 2) values. */
static void dh_conv(mb_model *m, int64_t N, int64_t C, int64_t H, int64_t W, int64_t M, int64_t k,
                    int64_t group, int64_t stride, const int64_t *pads, int64_t dil, bool bias,
                    int rank) {
    mb_init(m, 13);
    if (rank == 4) {
        IN(m, "x", N, C, H, W);
        IN(m, "w", M, C / group, k, k);
    } else {
        IN(m, "x", N, C, W);
        IN(m, "w", M, C / group, k);
    }
    if (bias) IN(m, "b", M);
    Onnx__NodeProto *n = mb_node(m, bias ? "Conv:x,w,b->y" : "Conv:x,w->y");
    int nsp = rank - 2;
    int64_t s[2] = {stride, stride}, d[2] = {dil, dil};
    mb_attr_ints(m, n, "strides", nsp, s);
    mb_attr_ints(m, n, "dilations", nsp, d);
    mb_attr_ints(m, n, "pads", 2 * nsp, pads);
    mb_attr_i(m, n, "group", group);
    mb_output(m, "y");
}

/* Conv with auto_pad SAME_UPPER at stride 2 (asymmetric padding) */
static void dh_conv_same_upper(mb_model *m) {
    mb_init(m, 13);
    IN(m, "x", 1, 3, 8, 8);
    IN(m, "w", 4, 3, 3, 3);
    Onnx__NodeProto *n = mb_node(m, "Conv:x,w->y");
    mb_attr_s(m, n, "auto_pad", "SAME_UPPER");
    int64_t s2[2] = {2, 2};
    mb_attr_ints(m, n, "strides", 2, s2);
    mb_output(m, "y");
}

/* Conv (constant weights and bias) + Add of the input (residual) + Relu: one FusedConv at
 * opt level 1 */
static void dh_conv_residual_relu(mb_model *m) {
    mb_init(m, 13);
    IN(m, "x", 1, 8, 6, 6);
    int64_t wd[4] = {8, 8, 3, 3}, bd[1] = {8};
    float wv[8 * 8 * 9], bv[8];
    for (int i = 0; i < 8 * 8 * 9; i++) wv[i] = frand() - 0.5f;
    for (int i = 0; i < 8; i++) bv[i] = frand() - 0.5f;
    mb_init_f32(m, "w", 4, wd, 8 * 8 * 9, wv);
    mb_init_f32(m, "b", 1, bd, 8, bv);
    Onnx__NodeProto *n = mb_node(m, "Conv:x,w,b->c");
    int64_t p[4] = {1, 1, 1, 1};
    mb_attr_ints(m, n, "pads", 4, p);
    mb_node(m, "Add:c,x->s");
    mb_node(m, "Relu:s->y");
    mb_output(m, "y");
}

/* MatMul of a [da] (last dim K) by constant weights [K, N] + constant bias [N] + Relu: one
 * FusedMatMul at opt level 1 */
static void dh_matmul_bias_relu(mb_model *m, int ra, const int64_t *da, int64_t N) {
    mb_init(m, 13);
    mb_input(m, "a", ra, da);
    int64_t K = da[ra - 1], wd[2] = {K, N}, bd[1] = {N};
    float *w = malloc((size_t)(K * N) * sizeof *w), *b = malloc((size_t)N * sizeof *b);
    assert_non_null(w);
    assert_non_null(b);
    for (int64_t i = 0; i < K * N; i++) w[i] = frand() - 0.5f;
    for (int64_t i = 0; i < N; i++) b[i] = frand() - 0.5f;
    mb_init_f32(m, "w", 2, wd, (int)(K * N), w);
    mb_init_f32(m, "bias", 1, bd, (int)N, b);
    free(w);
    free(b);
    mb_node(m, "MatMul:a,w->t");
    mb_node(m, "Add:t,bias->u");
    mb_node(m, "Relu:u->y");
    mb_output(m, "y");
}

#pragma GCC diagnostic pop

#endif
