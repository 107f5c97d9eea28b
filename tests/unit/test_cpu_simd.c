/* The CPU kernels' SIMD variants (src/backends/cpu/cpu_simd.c): for every level this machine
 * supports (portable, sse41, avx2, avx512_core, ...), each variant selected at that level is
 * run on random data of awkward sizes (1, tails around 8, 16 and 32 lanes, odd sizes) and
 * compared with the portable variant:
 *   - bit for bit where both do the same IEEE operations in the same order (exact unary ops:
 *     Abs, Neg, Relu, Clip, Floor, Ceil, Round, Sign, Sqrt, Reciprocal, ...);
 *   - sums (GEMV panels, GEMM): |got - want| <= 2 K eps S per element, where S is the sum of
 *     the products' magnitudes (each order's rounding error is at most K eps S);
 *   - softmax and the unary ops built on exp and friends: |got - want| <= 4e-6 |want| + 1e-6
 *     (polynomial exp ~2e-7 against libm's expf, FMA contractions a few ulp); the softmax's
 *     numerators with their sum (exp_sum_row) against exp in double;
 *   - non-finite inputs give non-finite results of the same kind;
 *   - byte tables: equal bytes (every byte value, random tables).
 * A deliberately broken variant (a tail left uncomputed) must fail every comparison, so the
 * comparisons can fail. */
#include <float.h>
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
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_unary.h"

static const int64_t sizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 1000};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

static uint64_t rng = 88172645463325252ull;
static float frand(float lo, float hi) { /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) & 0xffffff) / (float)0x1000000;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

/* ---- GEMV panels ---- */

/* Mismatches of panel fn against the portable one over K in sizes. */
static int check_gemv(tdm_simd_gemv_panel fn, const char *what) {
    int bad = 0;
    for (size_t si = 0; si < N_SIZES; si++) {
        int64_t K = sizes[si];
        float *p = xmalloc((size_t)K * 32 * sizeof *p), *x = xmalloc((size_t)K * sizeof *x);
        for (int64_t i = 0; i < K * 32; i++) p[i] = frand(-1, 1);
        for (int64_t i = 0; i < K; i++) x[i] = frand(-1, 1);
        float want[32], got[32];
        tdm_gemv_panel_portable(p, x, K, want);
        fn(p, x, K, got);
        for (int j = 0; j < 32; j++) {
            double S = 0;
            for (int64_t k = 0; k < K; k++) S += fabs((double)x[k] * p[k * 32 + j]);
            if (!(fabs((double)got[j] - want[j]) <= 2.0 * (double)K * FLT_EPSILON * S)) {
                if (!bad)
                    fprintf(stderr, "%s: K %lld column %d: %.9g, portable %.9g\n", what,
                            (long long)K, j, got[j], want[j]);
                bad++;
            }
        }
        free(p);
        free(x);
    }
    return bad;
}

/* ---- byte tables ---- */

static int check_lut(tdm_simd_lut_u8 fn, const char *what) {
    int bad = 0;
    uint8_t t[256];
    for (int k = 0; k < 256; k++) t[k] = (uint8_t)(rand() & 0xff);
    for (size_t si = 0; si < N_SIZES + 1; si++) {
        int64_t n = si < N_SIZES ? sizes[si] : 0;
        uint8_t *x = xmalloc((size_t)n + 1), *got = xmalloc((size_t)n + 1);
        uint8_t *want = xmalloc((size_t)n + 1);
        for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)(i < 256 ? i : rand() & 0xff);
        tdm_lut_u8_portable(t, x, want, n);
        fn(t, x, got, n);
        for (int64_t i = 0; i < n; i++)
            if (got[i] != want[i] || want[i] != t[x[i]]) {
                if (!bad)
                    fprintf(stderr, "%s: n %lld at %lld: %d, want %d\n", what, (long long)n,
                            (long long)i, got[i], t[x[i]]);
                bad++;
                break;
            }
        free(x);
        free(got);
        free(want);
    }
    return bad;
}

/* ---- dot products ---- */

static int check_dot(tdm_simd_dot_f32 fn, const char *what) {
    int bad = 0;
    for (size_t si = 0; si < N_SIZES + 1; si++) {
        int64_t n = si < N_SIZES ? sizes[si] : 0;
        float *a = xmalloc((size_t)n * sizeof *a), *b = xmalloc((size_t)n * sizeof *b);
        double S = 0;
        for (int64_t i = 0; i < n; i++) {
            a[i] = frand(-1, 1);
            b[i] = frand(-1, 1);
            S += fabs((double)a[i] * b[i]);
        }
        float want = tdm_dot_f32_portable(a, b, n), got = fn(a, b, n);
        if (!(fabs((double)got - want) <= 2.0 * (double)n * FLT_EPSILON * S)) {
            if (!bad)
                fprintf(stderr, "%s: n %lld: %.9g, portable %.9g\n", what, (long long)n, got, want);
            bad++;
        }
        free(a);
        free(b);
    }
    return bad;
}

/* ---- softmax rows ---- */

static bool close_rel(float got, float want, double rtol, double atol) {
    if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got)) return got == want;
    return fabs((double)got - want) <= rtol * fabs((double)want) + atol;
}

static int check_softmax(tdm_simd_softmax_row fn, const char *what) {
    int bad = 0;
    for (size_t si = 0; si < N_SIZES; si++) {
        int64_t n = sizes[si];
        float *row = xmalloc((size_t)n * sizeof *row), *ref = xmalloc((size_t)n * sizeof *ref);
        float *m = xmalloc((size_t)n * sizeof *m), *src = xmalloc((size_t)n * sizeof *src);
        float *keep = xmalloc((size_t)n * sizeof *keep);
        /* no mask, vector, scalar; -inf rows; +inf; a wide range (probabilities far below
         * FLT_MIN: they must come out 0, never subnormal); each in place and from a
         * separate src */
        for (int mode = 0; mode < 12; mode++) {
            int mm = mode % 6;
            bool apart = mode >= 6;
            for (int64_t t = 0; t < n; t++) {
                row[t] = mm == 5 ? frand(-200, 0) : frand(-10, 10);
                m[t] = frand(-5, 5);
            }
            if (mm == 3)
                for (int64_t t = 0; t < n; t++) row[t] = -INFINITY;
            if (mm == 4) row[n / 2] = INFINITY;
            const float *mk = mm == 1 || mm == 2 ? m : NULL;
            memcpy(ref, row, (size_t)n * sizeof *row);
            memcpy(keep, row, (size_t)n * sizeof *row);
            tdm_softmax_row_portable(ref, NULL, mk, mm == 1, n);
            if (apart) { /* the input apart, left as it was; row's old contents must not count */
                memcpy(src, row, (size_t)n * sizeof *row);
                for (int64_t t = 0; t < n; t++) row[t] = 1e30f;
                fn(row, src, mk, mm == 1, n);
                for (int64_t t = 0; t < n; t++) /* the input left as it was */
                    if (memcmp(&src[t], &keep[t], sizeof *src)) bad++;
            } else {
                fn(row, NULL, mk, mm == 1, n);
            }
            for (int64_t t = 0; t < n; t++)
                if (!close_rel(row[t], ref[t], 4e-6, 1e-6) || fpclassify(row[t]) == FP_SUBNORMAL ||
                    fpclassify(ref[t]) == FP_SUBNORMAL) {
                    if (!bad)
                        fprintf(stderr, "%s: n %lld mode %d [%lld]: %.9g, portable %.9g\n", what,
                                (long long)n, mode, (long long)t, row[t], ref[t]);
                    bad++;
                }
        }
        free(keep);
        free(src);
        free(row);
        free(ref);
        free(m);
    }
    return bad;
}

/* exp_sum_row against exp in double, up to the factor common to the row that cpu_simd.h allows:
 * the maximum found exactly; the value at the maximum, the factor, within |mx| 6e-8 + 1e-6 of
 * 1 (the rounding of mx log2(e)); every value over it within 4e-6 relative of exp(x - mx) in
 * double (1e-30 absolute: the SIMD variants keep far tails as tiny normal values where expf
 * underflows); no subnormal value; the sum within n 6e-8 (float additions) of the values' sum
 * in double. Rows of [-10, 10] and of [-200, 0] (tails far below FLT_MIN); rows whose maximum
 * is -inf or +inf left as they were, 0 returned. */
static int check_exp_sum(tdm_simd_exp_sum_row fn, const char *what) {
    int bad = 0;
    for (size_t si = 0; si < N_SIZES; si++) {
        int64_t n = sizes[si];
        float *row = xmalloc((size_t)n * sizeof *row), *x = xmalloc((size_t)n * sizeof *x);
        for (int mode = 0; mode < 2; mode++) {
            float mx = -INFINITY;
            int64_t at = 0;
            for (int64_t t = 0; t < n; t++) {
                x[t] = mode ? frand(-200, 0) : frand(-10, 10);
                if (x[t] > mx) mx = x[t], at = t;
            }
            memcpy(row, x, (size_t)n * sizeof *row);
            float got_mx = 0.0f, sum = fn(row, n, &got_mx);
            double f = row[at], vsum = 0.0;
            for (int64_t t = 0; t < n; t++) vsum += row[t];
            if (got_mx != mx || !(fabs(f - 1.0) <= fabs((double)mx) * 6e-8 + 1e-6) ||
                !(fabs(sum - vsum) <= (double)n * 6e-8 * vsum)) {
                if (!bad)
                    fprintf(stderr,
                            "%s: n %lld mode %d: max %g (want %g), factor %.9g, sum %.9g of %.9g\n",
                            what, (long long)n, mode, got_mx, mx, f, sum, vsum);
                bad++;
            }
            for (int64_t t = 0; t < n; t++) {
                double want = exp((double)x[t] - mx), got = row[t] / f;
                if (fabs(got - want) > 4e-6 * want + 1e-30 || fpclassify(row[t]) == FP_SUBNORMAL) {
                    if (!bad)
                        fprintf(stderr, "%s: n %lld mode %d [%lld]: %.9g of the maximum's, "
                                        "want %.9g\n",
                                what, (long long)n, mode, (long long)t, got, want);
                    bad++;
                }
            }
        }
        for (int mode = 0; mode < 2; mode++) { /* a maximum not finite: the row untouched */
            for (int64_t t = 0; t < n; t++) x[t] = mode == 0 ? -INFINITY : frand(-10, 10);
            if (mode == 1) x[n / 2] = INFINITY;
            memcpy(row, x, (size_t)n * sizeof *row);
            float got_mx = 0.0f, sum = fn(row, n, &got_mx);
            if (sum != 0.0f || memcmp(row, x, (size_t)n * sizeof *row) != 0 ||
                (mode == 0 && got_mx != -INFINITY) || (mode == 1 && got_mx != INFINITY)) {
                if (!bad)
                    fprintf(stderr, "%s: n %lld, maximum not finite (%d): changed\n", what,
                            (long long)n, mode);
                bad++;
            }
        }
        free(row);
        free(x);
    }
    return bad;
}

/* ---- unary float32 ops ---- */

static bool exact_op(tdm_uop op) {
    switch (op) {
    case TDM_U_ABS: case TDM_U_NEG: case TDM_U_RECIPROCAL: case TDM_U_SQRT: case TDM_U_CEIL:
    case TDM_U_FLOOR: case TDM_U_ROUND: case TDM_U_SIGN: case TDM_U_RELU: case TDM_U_LEAKY_RELU:
    case TDM_U_THRESHOLDED_RELU: case TDM_U_SHRINK: case TDM_U_CLIP: case TDM_U_SOFTSIGN:
        return true;
    default: return false;
    }
}

static int check_unary(tdm_simd_unary_f32 fn, const char *what) {
    int bad = 0;
    for (int op = 0; op <= TDM_U_CLIP; op++) {
        tdm_uparams p = {.op = (tdm_uop)op, .alpha = 0.7f, .beta = 0.3f, .gamma = 1.05f,
                         .lambd = 0.5f, .bias = 0.25f, .lo = -2.0f, .hi = 3.0f};
        if (op == TDM_U_HARD_SIGMOID) p.alpha = 0.2f, p.beta = 0.5f;
        for (size_t si = 0; si < N_SIZES; si++) {
            int64_t n = sizes[si];
            float *x = xmalloc((size_t)n * sizeof *x), *y = xmalloc((size_t)n * sizeof *y);
            float *ref = xmalloc((size_t)n * sizeof *ref);
            bool positive = op == TDM_U_LOG || op == TDM_U_SQRT || op == TDM_U_ACOSH;
            bool unit = op == TDM_U_ASIN || op == TDM_U_ACOS || op == TDM_U_ATANH;
            for (int64_t i = 0; i < n; i++)
                x[i] = unit ? frand(-0.99f, 0.99f) : positive ? frand(1.0f, 30.0f) : frand(-12, 12);
            static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 100.0f, -100.0f};
            if (n >= 16)
                for (size_t i = 0; i < sizeof special / sizeof *special; i++) x[2 * i + 1] = special[i];
            tdm_unary_f32_portable(&p, x, ref, n);
            fn(&p, x, y, n);
            for (int64_t i = 0; i < n; i++) {
                bool ok = exact_op((tdm_uop)op)
                              ? (isnan(ref[i]) ? isnan(y[i]) : memcmp(&y[i], &ref[i], sizeof y[i]) == 0)
                              : close_rel(y[i], ref[i], 4e-6, 1e-6);
                if (!ok) {
                    if (!bad)
                        fprintf(stderr, "%s: op %d n %lld x[%lld] = %.9g: %.9g, portable %.9g\n", what,
                                op, (long long)n, (long long)i, x[i], y[i], ref[i]);
                    bad++;
                }
            }
            free(x);
            free(y);
            free(ref);
        }
    }
    return bad;
}

/* ---- GEMM (tdm_sgemm with the level's micro-kernel, against the portable one) ---- */

static int check_gemm(const tdm_cpu_simd *s, const char *what) {
    static const int64_t shapes[][3] = {
        {13, 33, 65}, {12, 32, 64}, {25, 65, 17}, {7, 100, 300}, {50, 17, 257},
        {128, 128, 1}, {37, 47, 31}, {6, 16, 400}, {145, 63, 15}, {24, 96, 129},
        {1, 512, 128}, {1, 33, 1000}, {300, 1, 257}, {1, 7, 17}, /* one row / column: dots */
    };
    int bad = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        for (int v = 0; v < 4; v++) { /* transposes and beta */
            int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            bool ta = v & 1, tb = v & 2;
            float beta = v == 1 ? 0.5f : v == 3 ? 1.0f : 0.0f;
            float *A = xmalloc((size_t)(M * K) * sizeof *A), *B = xmalloc((size_t)(K * N) * sizeof *B);
            float *C = xmalloc((size_t)(M * N) * sizeof *C), *R = xmalloc((size_t)(M * N) * sizeof *R);
            for (int64_t i = 0; i < M * K; i++) A[i] = frand(-1, 1);
            for (int64_t i = 0; i < K * N; i++) B[i] = frand(-1, 1);
            for (int64_t i = 0; i < M * N; i++) C[i] = R[i] = frand(-1, 1);
            int64_t lda = ta ? M : K, ldb = tb ? K : N;
            tdm_sgemm(tdm_cpu_simd_portable(), NULL, ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, R, N);
            tdm_sgemm(s, NULL, ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C, N);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double S = 0;
                    for (int64_t k = 0; k < K; k++)
                        S += fabs((double)(ta ? A[k * M + i] : A[i * K + k]) *
                                  (tb ? B[j * K + k] : B[k * N + j]));
                    S = 1.5 * S + fabs((double)beta * R[i * N + j]);
                    double d = fabs((double)C[i * N + j] - R[i * N + j]);
                    if (!(d <= 2.0 * (double)(K + 2) * FLT_EPSILON * S)) {
                        if (!bad)
                            fprintf(stderr, "%s: %lldx%lldx%lld v%d C[%lld,%lld]: %.9g, portable %.9g\n",
                                    what, (long long)M, (long long)N, (long long)K, v, (long long)i,
                                    (long long)j, C[i * N + j], R[i * N + j]);
                        bad++;
                    }
                }
            free(A);
            free(B);
            free(C);
            free(R);
        }
    }
    return bad;
}

/* the largest byte: one maximum at each position of arrays of every size */
static int check_max(tdm_simd_max_u8 fn, const char *what) {
    int bad = 0;
    for (size_t si = 0; si < N_SIZES + 1; si++) {
        int64_t n = si < N_SIZES ? sizes[si] : 0;
        uint8_t *x = xmalloc((size_t)n + 1);
        for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)(rand() % 200);
        if (fn(x, n) != tdm_max_u8_portable(x, n)) {
            if (!bad) fprintf(stderr, "%s: n %lld random\n", what, (long long)n);
            bad++;
        }
        for (int64_t at = 0; at < n; at++) {
            uint8_t keep = x[at];
            x[at] = (uint8_t)(200 + at % 56);
            uint8_t got = fn(x, n);
            x[at] = keep;
            if (got != (uint8_t)(200 + at % 56)) {
                if (!bad)
                    fprintf(stderr, "%s: n %lld at %lld: %d, want %d\n", what, (long long)n,
                            (long long)at, got, 200 + (int)(at % 56));
                bad++;
                break;
            }
        }
        free(x);
    }
    return bad;
}

/* ---- QAdd / QMul rows ---- */

/* The documented steps in scalar float (this file is built without FMA contraction on the
 * baseline ISA): the bytes every variant must give. */
static uint8_t q8_ref(const tdm_q8_bin *p, float a, float b) {
    float v = p->mul ? (a * b) / p->sy : (a + b) + p->c;
    if (v < -4194304.0f) v = -4194304.0f;
    if (v > 4194304.0f) v = 4194304.0f;
    float r = nearbyintf(v); /* half to even (the default rounding mode) */
    if (p->mul) r += p->zy;
    if (r < p->lo) r = p->lo;
    if (r > p->hi) r = p->hi;
    return (uint8_t)(int32_t)r;
}

/* Random operands (bytes or float rows), QAdd and QMul settings, 8-bit signs; scales of 0.5
 * and 0.25 put many results on rounding ties. */
static int check_q8_bin(tdm_simd_q8_bin fn, const char *what) {
    int bad = 0;
    for (int cfg = 0; cfg < 32; cfg++) {
        tdm_q8_bin p = {.mul = cfg & 1, .a_s8 = (cfg >> 1) & 1, .b_s8 = (cfg >> 2) & 1,
                        .y_s8 = (cfg >> 3) & 1};
        bool ta_rows = (cfg >> 4) & 1; /* a from a float row, b from bytes */
        float ks[] = {0.5f, 0.25f, 0.0371f, 1.75f};
        p.ka = ks[rand() % 4];
        p.kb = ks[rand() % 4];
        p.za = p.mul ? (float)(rand() % 50) : 0.0f;
        p.zb = p.mul ? (float)(rand() % 50) : 0.0f;
        p.c = p.mul ? 0.0f : (float)(rand() % 64) - 32.5f;
        p.sy = p.mul ? ks[rand() % 4] * 8.0f : 0.0f;
        p.zy = p.mul ? (float)(rand() % 40) : 0.0f;
        p.lo = p.y_s8 ? -128.0f : 0.0f;
        p.hi = p.y_s8 ? 127.0f : 255.0f;
        if (cfg & 8) p.lo += 3.0f; /* a narrower range (a folded Relu / Clip) */
        for (size_t si = 0; si < N_SIZES + 1; si++) {
            int64_t n = si < N_SIZES ? sizes[si] : 0;
            uint8_t *a = xmalloc((size_t)n + 1), *b = xmalloc((size_t)n + 1);
            uint8_t *got = xmalloc((size_t)n + 1);
            float *fa = xmalloc(((size_t)n + 1) * sizeof(float));
            for (int64_t i = 0; i < n; i++) {
                a[i] = (uint8_t)(rand() & 0xff);
                b[i] = (uint8_t)(rand() & 0xff);
            }
            for (int64_t i = 0; i < n; i++) {
                float x = p.a_s8 ? (float)(int8_t)a[i] : (float)a[i];
                fa[i] = (x - p.za) * p.ka;
            }
            fn(&p, ta_rows ? NULL : a, fa, b, NULL, n, got);
            for (int64_t i = 0; i < n; i++) {
                float xb = p.b_s8 ? (float)(int8_t)b[i] : (float)b[i];
                uint8_t want = q8_ref(&p, fa[i], (xb - p.zb) * p.kb);
                if (got[i] != want) {
                    if (!bad)
                        fprintf(stderr, "%s: cfg %d n %lld at %lld: %d, want %d\n", what, cfg,
                                (long long)n, (long long)i, got[i], want);
                    bad++;
                    break;
                }
            }
            free(a);
            free(b);
            free(got);
            free(fa);
        }
    }
    return bad;
}

/* ---- every level the machine supports ---- */

static void test_levels_pick_variants_at_or_below(void **state) {
    (void)state;
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    for (int l = 0; l < TDM_ISA_COUNT; l++) {
        tdm_cpu_simd s;
        tdm_cpu_simd_init(&s, (tdm_cpu_isa)l);
        assert_int_equal(s.level, l);
#define CHECK_LEVEL(k) assert_true(s.k##_isa <= (tdm_cpu_isa)l);
        TDM_CPU_SIMD_KERNELS(CHECK_LEVEL)
#undef CHECK_LEVEL
        assert_int_equal(144 % s.gemm_mr, 0);
        assert_int_equal(s.gemm_nr % 4, 0);
#ifdef TDM_SIMD_X86
        /* on x86 the SIMD variants exist: each level gets the best one */
        tdm_cpu_isa want = l >= TDM_ISA_AVX512_CORE ? TDM_ISA_AVX512_CORE
                           : l >= TDM_ISA_AVX2      ? TDM_ISA_AVX2
                                                    : TDM_ISA_PORTABLE;
        assert_int_equal(s.gemv_panel_isa, want);
        assert_int_equal(s.softmax_row_isa, want);
        assert_int_equal(s.exp_sum_row_isa, want);
        assert_int_equal(s.unary_f32_isa, want);
        assert_int_equal(s.gemm_isa, want);
        assert_int_equal(s.dot_f32_isa, want);
        assert_int_equal(s.lut_u8_isa, want);
        assert_int_equal(s.max_u8_isa, want);
        assert_int_equal(s.q8_bin_isa, want);
#endif
    }
    tdm_cpu_simd host;
    tdm_cpu_simd_init(&host, tdm_cpu_host_isa());
    assert_true(host.level <= have);
    assert_ptr_equal(tdm_cpu_simd_of(NULL), tdm_cpu_simd_portable());
    tdm_kernel_ctx ctx = {.cpu_simd = &host};
    assert_ptr_equal(tdm_cpu_simd_of(&ctx), &host);
}

static void test_each_level_agrees_with_portable(void **state) {
    (void)state;
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    for (int l = 0; l <= (int)have; l++) {
        tdm_cpu_simd s;
        tdm_cpu_simd_init(&s, (tdm_cpu_isa)l);
        char what[64];
        snprintf(what, sizeof what, "%s gemv_panel", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_gemv(s.gemv_panel, what), 0);
        snprintf(what, sizeof what, "%s softmax_row", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_softmax(s.softmax_row, what), 0);
        snprintf(what, sizeof what, "%s exp_sum_row", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_exp_sum(s.exp_sum_row, what), 0);
        snprintf(what, sizeof what, "%s unary_f32", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_unary(s.unary_f32, what), 0);
        snprintf(what, sizeof what, "%s dot_f32", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_dot(s.dot_f32, what), 0);
        snprintf(what, sizeof what, "%s lut_u8", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_lut(s.lut_u8, what), 0);
        snprintf(what, sizeof what, "%s max_u8", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_max(s.max_u8, what), 0);
        snprintf(what, sizeof what, "%s q8_bin", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_q8_bin(s.q8_bin, what), 0);
        snprintf(what, sizeof what, "%s gemm", tdm_cpu_isa_name((tdm_cpu_isa)l));
        assert_int_equal(check_gemm(&s, what), 0);
    }
}

/* ---- broken variants: the machine's best, with a tail bug ---- */

static tdm_cpu_simd best;

static void broken_gemv(const float *restrict p, const float *restrict x, int64_t K,
                        float *restrict acc) {
    best.gemv_panel(p, x, K - 1, acc); /* the last k row is left out */
    if (K == 1)
        for (int j = 0; j < 32; j++) acc[j] = 0.0f;
}

static void broken_softmax(float *row, const float *src, const float *m, bool mvec, int64_t n) {
    float last = (src ? src : row)[n - 1] + (m ? m[mvec ? n - 1 : 0] : 0.0f);
    best.softmax_row(row, src, m, mvec, n);
    if (n % 16) row[n - 1] = last; /* a tail element not normalised */
}

static float broken_exp_sum(float *row, int64_t n, float *mx) {
    float last = row[n - 1], sum = best.exp_sum_row(row, n, mx);
    if (n % 16) row[n - 1] = last; /* a tail element left as it was */
    return sum;
}

static void broken_unary(const struct tdm_uparams *p, const float *restrict x, float *restrict y,
                         int64_t n) {
    best.unary_f32(p, x, y, n);
    if (n % 16) y[n - 1] = x[n - 1] + 1.0f; /* a tail element not computed */
}

static void broken_gemm_uk(int64_t kc, const float *restrict pa, const float *restrict pb,
                           float *restrict c, int64_t ldc, int m, int n, float alpha, float beta) {
    best.gemm(kc, pa, pb, c, ldc, m, n > 1 ? n - 1 : n, alpha, beta); /* the last column dropped */
}

static float broken_dot(const float *a, const float *b, int64_t n) {
    return best.dot_f32(a, b, n > 1 && n % 16 ? n - 1 : n); /* the last tail element dropped */
}

static void broken_lut(const uint8_t *restrict t, const uint8_t *restrict x, uint8_t *restrict y,
                       int64_t n) {
    best.lut_u8(t, x, y, n);
    if (n % 16) y[n - 1] = (uint8_t)(t[x[n - 1]] + 1); /* a tail byte wrong */
}

static uint8_t broken_max(const uint8_t *x, int64_t n) {
    return best.max_u8(x, n > 1 && n % 16 ? n - 1 : n); /* the last tail byte left out */
}

static void broken_q8_bin(const tdm_q8_bin *p, const void *a8, const float *ta, const void *b8,
                          const float *tb, int64_t n, uint8_t *y) {
    best.q8_bin(p, a8, ta, b8, tb, n, y);
    if (n % 16) y[n - 1] ^= 1; /* a tail byte wrong */
}

static void test_broken_variants_fail(void **state) {
    (void)state;
    tdm_cpu_simd_init(&best, tdm_cpu_isa_detect());
    fprintf(stderr, "(broken variants on purpose: the mismatch lines below are expected)\n");
    assert_true(check_gemv(broken_gemv, "broken gemv_panel") > 0);
    assert_true(check_softmax(broken_softmax, "broken softmax_row") > 0);
    assert_true(check_exp_sum(broken_exp_sum, "broken exp_sum_row") > 0);
    assert_true(check_unary(broken_unary, "broken unary_f32") > 0);
    assert_true(check_dot(broken_dot, "broken dot_f32") > 0);
    assert_true(check_lut(broken_lut, "broken lut_u8") > 0);
    assert_true(check_max(broken_max, "broken max_u8") > 0);
    assert_true(check_q8_bin(broken_q8_bin, "broken q8_bin") > 0);
    tdm_cpu_simd bad = best;
    bad.gemm = broken_gemm_uk;
    assert_true(check_gemm(&bad, "broken gemm") > 0);
    bad = best;
    bad.dot_f32 = broken_dot;
    assert_true(check_gemm(&bad, "broken gemm dot") > 0);
}

/* tdm_cpu_flush_subnormals: a subnormal product comes out 0 on this thread until restored
 * (off x86 the pair does nothing). */
static void test_flush_subnormals(void **state) {
    (void)state;
    volatile float a = FLT_MIN, b = 0.25f;
    volatile float before = a * b;
    unsigned csr = tdm_cpu_flush_subnormals();
    volatile float during = a * b;
    tdm_cpu_subnormals_restore(csr);
    volatile float after = a * b;
    assert_int_equal(fpclassify(before), FP_SUBNORMAL);
    assert_int_equal(fpclassify(after), FP_SUBNORMAL);
#ifdef TDM_SIMD_X86
    assert_true(during == 0.0f);
#else
    assert_int_equal(fpclassify(during), FP_SUBNORMAL);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_pick_variants_at_or_below),
        cmocka_unit_test(test_each_level_agrees_with_portable),
        cmocka_unit_test(test_broken_variants_fail),
        cmocka_unit_test(test_flush_subnormals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
