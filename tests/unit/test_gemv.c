/* The one-row product path (src/backends/cpu/k_gemv.c): MatMul, Gemm and FusedMatMul with a
 * single row of A and a constant B, against a double-precision reference computed here.
 * Shapes straddle the 32-column panels (N = 1, 31, 32, 33, 100, 1000) and the two-way k
 * unrolling (odd K); Gemm covers transB, alpha and a bias of shape [N] and [1, N]; FusedMatMul
 * (made by the fusion pass from Gemm + Relu and MatMul + Add + Gelu) covers the activations.
 * Threads 1 and 2 (the panels are shared out when B is large). Tolerance: |d| <= 1e-5 +
 * 1e-5 * sum |x_k b_kn| (float32 accumulation of K products in another order). A second run
 * of the same session checks the packed weights are reused; a batch of 3 rows (the few-row
 * path: each panel for every row) and of 9 rows (oneDNN's path) must agree with the one-row
 * runs. */
#include <math.h>
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

enum { OP_MATMUL, OP_GEMM, OP_GEMM_RELU, OP_MATMUL_GELU };

typedef struct gv_case {
    int op;
    int64_t K, N;
    bool tb;        /* Gemm: B stored [N, K] */
    float alpha;    /* Gemm */
    int bias_rank;  /* Gemm / fused: 0 none, 1 [N], 2 [1, N] */
} gv_case;

static double act_ref(int op, double v) {
    if (op == OP_GEMM_RELU) return v > 0 ? v : 0;
    if (op == OP_MATMUL_GELU) return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    return v;
}

/* Builds the model; fills w ([K, N] logical), bias. */
static void build(mb_model *b, const gv_case *c, int64_t rows, float *w, float *bias) {
    mb_init(b, 17);
    int64_t K = c->K, N = c->N;
    int64_t ad[2] = {rows, K};
    mb_input_run(b, "A", 2, ad, NULL);
    float *stored = malloc((size_t)(K * N) * sizeof(float));
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
            float v = mb_rnd();
            w[k * N + n] = v;
            stored[c->tb ? n * K + k : k * N + n] = v;
        }
    int64_t wd[2] = {c->tb ? N : K, c->tb ? K : N};
    mb_weight(b, "W", 2, wd, stored, 0, 0);
    free(stored);
    for (int64_t n = 0; n < N; n++) bias[n] = c->bias_rank ? mb_rnd() : 0.0f;
    int64_t bd[2] = {1, N};
    if (c->bias_rank == 1) mb_weight(b, "C", 1, &N, bias, 0, 0);
    if (c->bias_rank == 2) mb_weight(b, "C", 2, bd, bias, 0, 0);
    if (c->op == OP_MATMUL) {
        mb_node(b, "MatMul:A,W->y");
    } else if (c->op == OP_MATMUL_GELU) {
        mb_node(b, "MatMul:A,W->m");
        mb_node(b, "Add:m,C->x");
        mb_scalar(b, "one", 1.0f);
        mb_scalar(b, "half", 0.5f);
        mb_scalar(b, "sqrt2", 1.4142135f);
        mb_node(b, "Div:x,sqrt2->d");
        mb_node(b, "Erf:d->e");
        mb_node(b, "Add:e,one->a");
        mb_node(b, "Mul:x,a->p");
        mb_node(b, "Mul:p,half->y");
    } else {
        Onnx__NodeProto *g = mb_node(b, c->bias_rank ? "Gemm:A,W,C->g" : "Gemm:A,W->g");
        if (c->tb) mb_attr_i(b, g, "transB", 1);
        if (c->alpha != 1.0f) mb_attr_f(b, g, "alpha", c->alpha);
        mb_node(b, c->op == OP_GEMM_RELU ? "Relu:g->y" : "Identity:g->y");
    }
    mb_output(b, "y");
}

static void run_case(tdm_env *env, const gv_case *c, int threads) {
    int64_t K = c->K, N = c->N, R = 3;
    float *w = malloc((size_t)(K * N) * sizeof(float)), *bias = malloc((size_t)N * sizeof(float));
    mb_model b;
    uint32_t seed = mb_rng_state;
    build(&b, c, 1, w, bias);
    size_t size = onnx__model_proto__get_packed_size(&b.model);
    void *buf = malloc(size);
    onnx__model_proto__pack(&b.model, buf);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = threads,
                              .opt_level = 1};
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s);
    if (st) fail_msg("create: %s", tdm_status_message(st));
    float *xs = malloc((size_t)(R * K) * sizeof(float)), *ys = malloc((size_t)(R * N) * sizeof(float));
    for (int64_t i = 0; i < R * K; i++) xs[i] = mb_rnd();
    const char *in_name = "A";
    /* three one-row runs, each checked against the reference */
    for (int64_t r = 0; r < R; r++) {
        int64_t ad[2] = {1, K};
        tdm_tensor *x = NULL, *y = NULL;
        assert_null(tdm_tensor_create(env, TDM_FLOAT, 2, ad, &x));
        memcpy(tdm_tensor_data(x), xs + r * K, (size_t)K * sizeof(float));
        st = tdm_session_run(s, 1, &in_name, (const tdm_tensor *const *)&x, 1, NULL, &y);
        if (st) fail_msg("run: %s", tdm_status_message(st));
        assert_int_equal(tdm_tensor_element_count(y), N);
        const float *yv = tdm_tensor_data(y);
        for (int64_t n = 0; n < N; n++) {
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                acc += (double)xs[r * K + k] * w[k * N + n];
                mag += fabs((double)xs[r * K + k] * w[k * N + n]);
            }
            double alpha = c->op == OP_GEMM || c->op == OP_GEMM_RELU ? c->alpha : 1.0;
            double want = act_ref(c->op, alpha * acc + bias[n]);
            double tol = 1e-5 + 1e-5 * (fabs(alpha) * mag + fabs(bias[n]));
            if (!(fabs(yv[n] - want) <= tol))
                fail_msg("op %d K %lld N %lld tb %d alpha %g bias %d threads %d row %lld col %lld: "
                         "%.8g, want %.8g", c->op, (long long)K, (long long)N, c->tb, c->alpha,
                         c->bias_rank, threads, (long long)r, (long long)n, yv[n], want);
            ys[r * N + n] = yv[n];
        }
        tdm_tensor_free(x);
        tdm_tensor_free(y);
    }
    tdm_session_free(s);
    free(buf);
    mb_free(&b);
    /* the same rows as one batch of 3 (the few-row path) and, repeated, as a batch of 9 (more
     * rows than DN_GEMV_MAX_ROWS: oneDNN's path) agree with the one-row runs */
    for (int64_t mult = 1; mult <= 3; mult += 2) {
        int64_t rows = R * mult;
        uint32_t after = mb_rng_state;
        mb_rng_state = seed;
        mb_model b3;
        build(&b3, c, rows, w, bias);
        mb_rng_state = after;
        size = onnx__model_proto__get_packed_size(&b3.model);
        buf = malloc(size);
        onnx__model_proto__pack(&b3.model, buf);
        st = tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s);
        if (st) fail_msg("create (batch): %s", tdm_status_message(st));
        int64_t ad3[2] = {rows, K};
        tdm_tensor *x3 = NULL, *y3 = NULL;
        assert_null(tdm_tensor_create(env, TDM_FLOAT, 2, ad3, &x3));
        for (int64_t m = 0; m < mult; m++)
            memcpy((float *)tdm_tensor_data(x3) + m * R * K, xs, (size_t)(R * K) * sizeof(float));
        st = tdm_session_run(s, 1, &in_name, (const tdm_tensor *const *)&x3, 1, NULL, &y3);
        if (st) fail_msg("run (batch): %s", tdm_status_message(st));
        const float *yb = tdm_tensor_data(y3);
        for (int64_t i = 0; i < rows * N; i++) {
            float want = ys[i % (R * N)];
            if (!(fabsf(yb[i] - want) <= 1e-4f + 1e-4f * fabsf(want)))
                fail_msg("op %d K %lld N %lld: batch of %lld row %lld col %lld %.8g vs one-row %.8g",
                         c->op, (long long)K, (long long)N, (long long)rows, (long long)(i / N),
                         (long long)(i % N), yb[i], want);
        }
        tdm_tensor_free(x3);
        tdm_tensor_free(y3);
        tdm_session_free(s);
        free(buf);
        mb_free(&b3);
    }
    free(xs);
    free(ys);
    free(w);
    free(bias);
}

static void test_gemv_shapes(void **state) {
    (void)state;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    mb_rng_state = 4242;
    const int64_t Ks[] = {1, 7, 64, 513}, Ns[] = {1, 31, 32, 33, 100, 1000};
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
            gv_case c = {OP_MATMUL, Ks[ki], Ns[ni], false, 1.0f, 0};
            run_case(env, &c, 1);
        }
    tdm_env_free(env);
}

static void test_gemv_gemm(void **state) {
    (void)state;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    mb_rng_state = 99;
    for (int tb = 0; tb <= 1; tb++)
        for (int br = 0; br <= 2; br++)
            for (int op = OP_GEMM; op <= OP_GEMM_RELU; op++) {
                gv_case c = {op, 300, 77, tb, op == OP_GEMM ? 0.75f : 1.0f, br};
                run_case(env, &c, 1);
            }
    gv_case g = {OP_MATMUL_GELU, 129, 65, false, 1.0f, 1};
    run_case(env, &g, 1);
    tdm_env_free(env);
}

static void test_gemv_threads(void **state) {
    (void)state;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    mb_rng_state = 7;
    gv_case big = {OP_GEMM_RELU, 1024, 1000, true, 1.0f, 1}; /* 4 MB of weights: shared out */
    run_case(env, &big, 2);
    gv_case mm = {OP_MATMUL, 2048, 257, false, 1.0f, 0};
    run_case(env, &mm, 2);
    /* a classifier head (5 MB of weights, above DN_GEMV_COLD_BYTES): its batch of 3 takes the
     * few-row path, on one thread and on two */
    gv_case head = {OP_GEMM, 1280, 1000, true, 1.0f, 1};
    run_case(env, &head, 1);
    run_case(env, &head, 2);
    tdm_env_free(env);
}

int main(void) {
    (void)mb_init_i64;
    (void)mb_attr_ints;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemv_shapes),
        cmocka_unit_test(test_gemv_gemm),
        cmocka_unit_test(test_gemv_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
