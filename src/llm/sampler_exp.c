/* The sampler's exp row (sampler.h: tdm_sampler_exp_row and its variants): e^((x - mx) * inv)
 * over a row of logits and the sum, for the sampler's probabilities and the engine's
 * log-probabilities, once per token and stream over the whole vocabulary (49,152 for SmolLM2).
 *
 * The exp is Cephes' expf for x <= 0: x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for
 * e^r, 2^n from the exponent bits; within 2 ulp of expf; below -87 (and NaN) e^-87. Three
 * variants, portable (four-wide GCC vectors: SSE2 at x86-64's baseline), AVX2 (8 lanes) and
 * AVX-512 (16), do the same operations in the same order on the same sixteen accumulator lanes,
 * and this file is compiled with -ffp-contract=off (no multiply-add fused in one variant and
 * not in another): every variant gives the same values and sums to the bit, so a sampled token
 * does not depend on the CPU (test_exp_row compares them bitwise). */
#include <string.h>

#include "llm/sampler.h"

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

#define EXP_LOG2E 1.44269504088896341f
#define EXP_ROUND 12582912.0f /* 1.5 * 2^23: adding and taking it off rounds to the nearest */
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

static inline v4f ld4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline v4f exp_nonpos(v4f x) {
    const v4f lo = {-87.0f, -87.0f, -87.0f, -87.0f};
    v4i c = ~(x >= lo); /* below -87, or NaN */
    x = (v4f)((c & (v4i)lo) | (~c & (v4i)x));
    v4f n = (x * EXP_LOG2E + EXP_ROUND) - EXP_ROUND;
    v4f r = x - n * EXP_LN2_HI;
    r = r - n * EXP_LN2_LO;
    v4f p = r * EXP_P0 + EXP_P1;
    p = p * r + EXP_P2;
    p = p * r + EXP_P3;
    p = p * r + EXP_P4;
    p = p * r + EXP_P5;
    p = p * r * r + r + 1.0f;
    v4i e = (__builtin_convertvector(n, v4i) + 127) << 23;
    return p * (v4f)e;
}

/* The last n < 16 values (every variant's): zero-padded through the four-wide lanes, their sums
 * added one by one. */
static double exp_tail(const float *x, size_t n, float mx, float inv, float *out) {
    _Alignas(16) float t[16] = {0};
    double sum = 0;
    memcpy(t, x, n * sizeof *t);
    for (int q = 0; q < 4; q++) {
        v4f y = exp_nonpos((ld4(t + 4 * q) - mx) * inv);
        memcpy(t + 4 * q, &y, sizeof y);
    }
    for (size_t j = 0; j < n; j++) sum += t[j];
    if (out) memcpy(out, t, n * sizeof *out);
    return sum;
}

/* Sixteen values at a time, float lanes per stretch of 4096 summed in double, lane 0 first. */
double tdm_sampler_exp_row(const float *x, size_t n, float mx, float inv, float *out) {
    double sum = 0;
    size_t i = 0;
    while (i + 16 <= n) {
        v4f acc[4] = {{0}};
        for (size_t e = i + 4096 < n ? i + 4096 : n; i + 16 <= e; i += 16)
            for (int q = 0; q < 4; q++) {
                v4f y = exp_nonpos((ld4(x + i + 4 * q) - mx) * inv);
                acc[q] += y;
                if (out) memcpy(out + i + 4 * q, &y, sizeof y);
            }
        for (int q = 0; q < 4; q++)
            for (int l = 0; l < 4; l++) sum += acc[q][l];
    }
    return i < n ? sum + exp_tail(x + i, n - i, mx, inv, out ? out + i : NULL) : sum;
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define TGT_AVX2 __attribute__((target("avx2")))
#define TGT_AVX512 __attribute__((target("avx512f")))

/* exp_nonpos on 8 lanes: the same operations */
TGT_AVX2 static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    x = _mm256_blendv_ps(lo, x, _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                                           _mm256_set1_ps(EXP_ROUND)), _mm256_set1_ps(EXP_ROUND));
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(EXP_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(EXP_LN2_LO)));
    __m256 p = _mm256_add_ps(_mm256_mul_ps(r, _mm256_set1_ps(EXP_P0)), _mm256_set1_ps(EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(EXP_P5));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

TGT_AVX2 static double exp_row_avx2(const float *x, size_t n, float mx, float inv, float *out) {
    const __m256 vm = _mm256_set1_ps(mx), vi = _mm256_set1_ps(inv);
    double sum = 0;
    size_t i = 0;
    while (i + 16 <= n) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(); /* lanes 0-7, 8-15 */
        for (size_t e = i + 4096 < n ? i + 4096 : n; i + 16 <= e; i += 16) {
            __m256 y0 = exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi));
            __m256 y1 = exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm), vi));
            a0 = _mm256_add_ps(a0, y0), a1 = _mm256_add_ps(a1, y1);
            if (out) _mm256_storeu_ps(out + i, y0), _mm256_storeu_ps(out + i + 8, y1);
        }
        _Alignas(32) float l[16];
        _mm256_store_ps(l, a0), _mm256_store_ps(l + 8, a1);
        for (int j = 0; j < 16; j++) sum += l[j];
    }
    return i < n ? sum + exp_tail(x + i, n - i, mx, inv, out ? out + i : NULL) : sum;
}

/* exp_nonpos on 16 lanes: the same operations */
TGT_AVX512 static inline __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), lo, x);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                                           _mm512_set1_ps(EXP_ROUND)), _mm512_set1_ps(EXP_ROUND));
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(EXP_LN2_HI)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(EXP_LN2_LO)));
    __m512 p = _mm512_add_ps(_mm512_mul_ps(r, _mm512_set1_ps(EXP_P0)), _mm512_set1_ps(EXP_P1));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P2));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(EXP_P5));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

TGT_AVX512 static double exp_row_avx512(const float *x, size_t n, float mx, float inv, float *out) {
    const __m512 vm = _mm512_set1_ps(mx), vi = _mm512_set1_ps(inv);
    double sum = 0;
    size_t i = 0;
    while (i + 16 <= n) {
        __m512 acc = _mm512_setzero_ps();
        for (size_t e = i + 4096 < n ? i + 4096 : n; i + 16 <= e; i += 16) {
            __m512 y = exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), vi));
            acc = _mm512_add_ps(acc, y);
            if (out) _mm512_storeu_ps(out + i, y);
        }
        _Alignas(64) float l[16];
        _mm512_store_ps(l, acc);
        for (int j = 0; j < 16; j++) sum += l[j];
    }
    return i < n ? sum + exp_tail(x + i, n - i, mx, inv, out ? out + i : NULL) : sum;
}
#endif

tdm_exp_row_fn tdm_sampler_exp_row_for(const char *isa) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    if (isa && !strncmp(isa, "avx512", 6) && __builtin_cpu_supports("avx512f")) return exp_row_avx512;
    if (isa && (!strcmp(isa, "avx2") || !strncmp(isa, "avx512", 6)) && __builtin_cpu_supports("avx2"))
        return exp_row_avx2;
#endif
    (void)isa;
    return tdm_sampler_exp_row;
}
