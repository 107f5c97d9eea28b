/* One softmax row with an optional additive mask, for the Attention kernel (k_fused_attn.c)
 * and Softmax over the last axis: row = softmax(src + mask), src NULL = row itself (the
 * Softmax node reads its input row directly instead of copying it first). The variants
 * (cpu_simd.h):
 *   portable  plain loops and libm's expf;
 *   avx2      8 lanes, a polynomial exp, a scalar tail with expf;
 *   avx512    16 lanes, the same polynomial, the tail in masked vectors.
 * The exponential, in base 2 with the row's maximum folded in: exp(x - mx) = 2^t with
 * t = x log2(e) - mx log2(e) (one FMA; the constant's rounding is one factor common to the
 * row, which the normalisation takes out), t = n + f with n the nearest integer and
 * |f| <= 1/2, 2^f by a degree-5 polynomial fitted for relative error (tools/fit_exp2_poly.py:
 * 2.1e-7 on [-1/2, 1/2] in float32; the Taylor form took degree 6 and a two-part ln2 step),
 * 2^n put in the exponent bits. t is clamped below at -125 (x - mx < -86.6): 2^t then stays
 * a normal float, and such a probability is flushed anyway. 10 vector operations a lane's
 * exp against 13 with the Taylor form: `build/softmax_rows 1000` (9 rows of 1,000, Zen 4)
 * 2.98 -> 2.47 us at AVX-512, 3.75 -> 2.89 at AVX2 (bench/llm/results-2026-12-07-s47-zen4.md).
 * Rows whose maximum is not finite (all -inf, +inf, NaN) take the scalar formula in every
 * variant. tdm_exp_sum_row_* (cpu_simd.h's exp_sum_row) is the exponential pass alone with
 * the sum, for callers that divide later; their maximum is finite.
 * Probabilities below FLT_MIN come out as 0 in every variant (flush_tiny): a subnormal weight
 * changes no sum it enters by more than FLT_MIN, but as an operand it costs Intel cores a
 * microcode assist per multiply — Attention's P.V product (k_fused_attn.c) on BERT ran 40x
 * slower on a Xeon than with the weights flushed (on AMD cores the two are alike). */
#include <float.h>
#include <math.h>

#include "backends/cpu/cpu_simd.h"

/* p, or 0 when p is below FLT_MIN (subnormal; p >= 0 or NaN, which stays). */
static inline float flush_tiny(float p) { return p < FLT_MIN ? 0.0f : p; }

void tdm_softmax_row_portable(float *row, const float *src, const float *m, bool mvec, int64_t n) {
    const float *x = src ? src : row;
    if (m) {
        for (int64_t t = 0; t < n; t++) row[t] = x[t] + (mvec ? m[t] : m[0]);
        x = row;
    }
    float mx = x[0];
    for (int64_t t = 1; t < n; t++) mx = x[t] > mx ? x[t] : mx;
    float sum = 0.0f;
    for (int64_t t = 0; t < n; t++) {
        row[t] = expf(x[t] - mx);
        sum += row[t];
    }
    float inv = 1.0f / sum;
    for (int64_t t = 0; t < n; t++) row[t] = flush_tiny(row[t] * inv);
}

float tdm_exp_sum_row_portable(float *row, int64_t n, float *mx) {
    float m = row[0], sum = 0.0f;
    for (int64_t t = 1; t < n; t++) m = row[t] > m ? row[t] : m;
    *mx = m;
    if (!(m > -INFINITY) || m == INFINITY) return 0.0f;
    for (int64_t t = 0; t < n; t++) sum += row[t] = flush_tiny(expf(row[t] - m));
    return sum;
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>

/* The scalar formula, for a row x (mask already added; may be row) whose maximum mx is not
 * finite. */
static void softmax_nonfinite(float *row, const float *x, int64_t n, float mx) {
    float sum = 0.0f;
    for (int64_t t = 0; t < n; t++) sum += row[t] = expf(x[t] - mx);
    for (int64_t t = 0; t < n; t++) row[t] *= 1.0f / sum;
}

/* ---- AVX2 + FMA ---- */

/* 2^f for |f| <= 1/2: the header's polynomial's coefficients, highest degree first, for
 * Horner's steps (tools/fit_exp2_poly.py 5 prints them) */
static const float exp2_poly[6] = {1.32764713e-03f, 9.67554096e-03f, 5.55071309e-02f,
                                   2.40221202e-01f, 6.93146944e-01f, 1.00000012e+00f};
#define LOG2E 1.44269504088896341f
#define T_MIN (-125.0f)

/* exp(x - mx) for 8 lanes of x, nlm = -mx log2(e) */
TDM_TARGET_AVX2 static inline __m256 exp8(__m256 x, __m256 nlm) {
    __m256 t = _mm256_max_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), nlm), _mm256_set1_ps(T_MIN));
    __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(t, n);
    __m256 p = _mm256_set1_ps(exp2_poly[0]);
    for (int k = 1; k < 6; k++) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(exp2_poly[k]));
    /* p in [0.70, 1.42]: n added to its exponent (n >= -125: a normal float) */
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p),
                                                _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
}

TDM_TARGET_AVX2 static float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

TDM_TARGET_AVX2 static float hsum8(__m256 v) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* the largest of x[0..n) */
TDM_TARGET_AVX2 static float max_row8(const float *x, int64_t n) {
    int64_t n8 = n & ~(int64_t)7, t;
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    for (t = 0; t < n8; t += 8) vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(x + t));
    float mx = hmax8(vmx);
    for (; t < n; t++) mx = x[t] > mx ? x[t] : mx;
    return mx;
}

/* row[t] = exp(x[t] - mx) (x may be row), their sum; mx finite */
TDM_TARGET_AVX2 static float exp_sum8(const float *x, float *row, int64_t n, float mx) {
    int64_t n8 = n & ~(int64_t)7, t;
    __m256 nlm = _mm256_set1_ps(-mx * LOG2E), vs = _mm256_setzero_ps();
    for (t = 0; t < n8; t += 8) {
        __m256 e = exp8(_mm256_loadu_ps(x + t), nlm);
        _mm256_storeu_ps(row + t, e);
        vs = _mm256_add_ps(vs, e);
    }
    float sum = hsum8(vs);
    for (; t < n; t++) sum += row[t] = flush_tiny(expf(x[t] - mx));
    return sum;
}

TDM_TARGET_AVX2 void tdm_softmax_row_avx2(float *row, const float *src, const float *m, bool mvec,
                                          int64_t n) {
    int64_t n8 = n & ~(int64_t)7, t = 0;
    const float *x = src ? src : row;
    if (m) {
        if (mvec) {
            for (t = 0; t < n8; t += 8)
                _mm256_storeu_ps(row + t, _mm256_add_ps(_mm256_loadu_ps(x + t), _mm256_loadu_ps(m + t)));
            for (; t < n; t++) row[t] = x[t] + m[t];
        } else {
            __m256 mv = _mm256_set1_ps(m[0]);
            for (t = 0; t < n8; t += 8)
                _mm256_storeu_ps(row + t, _mm256_add_ps(_mm256_loadu_ps(x + t), mv));
            for (; t < n; t++) row[t] = x[t] + m[0];
        }
        x = row;
    }
    float mx = max_row8(x, n);
    if (!(mx > -INFINITY) || mx == INFINITY) {
        softmax_nonfinite(row, x, n, mx);
        return;
    }
    float sum = exp_sum8(x, row, n, mx);
    __m256 inv = _mm256_set1_ps(1.0f / sum), tiny = _mm256_set1_ps(FLT_MIN);
    for (t = 0; t < n8; t += 8) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(row + t), inv);
        _mm256_storeu_ps(row + t, _mm256_andnot_ps(_mm256_cmp_ps(p, tiny, _CMP_LT_OQ), p));
    }
    for (; t < n; t++) row[t] = flush_tiny(row[t] * (1.0f / sum));
}

TDM_TARGET_AVX2 float tdm_exp_sum_row_avx2(float *row, int64_t n, float *mxp) {
    float mx = *mxp = max_row8(row, n);
    return !(mx > -INFINITY) || mx == INFINITY ? 0.0f : exp_sum8(row, row, n, mx);
}

/* ---- AVX-512 (F, BW, DQ, VL) ---- */

/* exp(x - mx), 16 lanes, the same steps; 2^n by scalef */
TDM_TARGET_AVX512 static inline __m512 exp16(__m512 x, __m512 nlm) {
    __m512 t = _mm512_max_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(LOG2E), nlm), _mm512_set1_ps(T_MIN));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(exp2_poly[0]);
    for (int k = 1; k < 6; k++) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(exp2_poly[k]));
    return _mm512_scalef_ps(p, n);
}

/* lanes [0, k) of a 16-lane block, k <= 16 */
TDM_TARGET_AVX512 static inline __mmask16 lanes(int64_t k) {
    return (__mmask16)(k >= 16 ? 0xffffu : (1u << k) - 1u);
}

/* the largest of x[0..n): two chains, the max's latency (not the loads) bounded one */
TDM_TARGET_AVX512 static float max_row16(const float *x, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vmx = ninf, vmx2 = ninf;
    int64_t n32 = n & ~(int64_t)31, t = 0;
    for (; t < n32; t += 32) {
        vmx = _mm512_max_ps(vmx, _mm512_loadu_ps(x + t));
        vmx2 = _mm512_max_ps(vmx2, _mm512_loadu_ps(x + t + 16));
    }
    for (; t < n; t += 16)
        vmx = _mm512_max_ps(vmx, _mm512_mask_loadu_ps(ninf, lanes(n - t), x + t));
    return _mm512_reduce_max_ps(_mm512_max_ps(vmx, vmx2));
}

/* row[t] = exp(x[t] - mx) (x may be row), their sum (two, for the adds' latency); mx finite */
TDM_TARGET_AVX512 static float exp_sum16(const float *x, float *row, int64_t n, float mx) {
    __m512 nlm = _mm512_set1_ps(-mx * LOG2E), vs = _mm512_setzero_ps(), vs2 = vs;
    int64_t n32 = n & ~(int64_t)31, t = 0;
    for (; t < n32; t += 32) {
        __m512 e = exp16(_mm512_loadu_ps(x + t), nlm);
        __m512 e2 = exp16(_mm512_loadu_ps(x + t + 16), nlm);
        _mm512_storeu_ps(row + t, e);
        _mm512_storeu_ps(row + t + 16, e2);
        vs = _mm512_add_ps(vs, e);
        vs2 = _mm512_add_ps(vs2, e2);
    }
    for (; t < n; t += 16) {
        __mmask16 k = lanes(n - t);
        __m512 e = exp16(_mm512_maskz_loadu_ps(k, x + t), nlm);
        _mm512_mask_storeu_ps(row + t, k, e);
        vs = _mm512_mask_add_ps(vs, k, vs, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(vs, vs2));
}

TDM_TARGET_AVX512 void tdm_softmax_row_avx512(float *row, const float *src, const float *m,
                                              bool mvec, int64_t n) {
    const float *x = src ? src : row;
    if (m) {
        __m512 mv = _mm512_set1_ps(m[0]);
        for (int64_t t = 0; t < n; t += 16) {
            __mmask16 k = lanes(n - t);
            __m512 add = mvec ? _mm512_maskz_loadu_ps(k, m + t) : mv;
            _mm512_mask_storeu_ps(row + t, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + t), add));
        }
        x = row;
    }
    float mx = max_row16(x, n);
    if (!(mx > -INFINITY) || mx == INFINITY) {
        softmax_nonfinite(row, x, n, mx);
        return;
    }
    __m512 inv = _mm512_set1_ps(1.0f / exp_sum16(x, row, n, mx)), tiny = _mm512_set1_ps(FLT_MIN);
    for (int64_t t = 0; t < n; t += 16) {
        __mmask16 k = lanes(n - t);
        __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + t), inv);
        __mmask16 keep = (__mmask16)~_mm512_cmp_ps_mask(p, tiny, _CMP_LT_OQ);
        _mm512_mask_storeu_ps(row + t, k, _mm512_maskz_mov_ps(keep, p));
    }
}

TDM_TARGET_AVX512 float tdm_exp_sum_row_avx512(float *row, int64_t n, float *mxp) {
    float mx = *mxp = max_row16(row, n);
    return !(mx > -INFINITY) || mx == INFINITY ? 0.0f : exp_sum16(row, row, n, mx);
}
#endif
