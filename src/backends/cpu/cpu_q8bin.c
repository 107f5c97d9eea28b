/* Requantised element-wise sums and products of 8-bit tensors (QAdd / QMul, ops/fused.h;
 * k_misc_quant.c walks the shapes and calls the variant of cpu_simd.h for each row):
 *
 *   ta[q] = (a[q] - za) * ka      (or given: a broadcast or strided operand, scaled before)
 *   tb[q] = (b[q] - zb) * kb
 *   QAdd: v = (ta + tb) + c                 QMul: v = (ta * tb) / sy
 *   v clamped to +-2^22, rounded half to even by adding and subtracting 1.5 * 2^23,
 *   QMul: + zy; then clamped to [lo, hi] and stored as uint8 / int8.
 *
 * Every variant runs these float32 operations in this order, one rounding each (this file
 * is compiled with -ffp-contract=off: no product may fuse into an FMA), so all give the same
 * bytes as DequantizeLinear, Add / Mul, QuantizeLinear computed in float:
 *   portable  SSE2 16 elements a step on x86-64 (the baseline), scalar elsewhere and at the
 *             tail; byte operands scaled into 256-element rows first;
 *   avx2      8 elements a step from bytes or rows, the scalar tail;
 *   avx512    16 elements a step, the tail masked.
 * Measured on PP-OCRv4's detector (int8, 1 thread, AMX machine): the notes of the commit. */
#include <stdint.h>

#include "backends/cpu/cpu_simd.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define Q8_BIG 12582912.0f  /* 1.5 * 2^23 */
#define Q8_LIM 4194304.0f   /* 2^22 */

static void scale_row(const void *x, bool s8, float z, float k, int64_t n, float *restrict t) {
    if (s8) {
        const int8_t *p = x;
        for (int64_t q = 0; q < n; q++) t[q] = ((float)p[q] - z) * k;
    } else {
        const uint8_t *p = x;
        for (int64_t q = 0; q < n; q++) t[q] = ((float)p[q] - z) * k;
    }
}

static inline float q8_one(const tdm_q8_bin *p, float a, float b) {
    float v = p->mul ? a * b / p->sy : a + b + p->c;
    v = v > -Q8_LIM ? v : -Q8_LIM;
    v = v < Q8_LIM ? v : Q8_LIM;
    v = (v + Q8_BIG) - Q8_BIG;
    if (p->mul) v += p->zy;
    v = v > p->lo ? v : p->lo;
    return v < p->hi ? v : p->hi;
}

static inline float q8_in(const void *x8, bool s8, float z, float k, const float *t, int64_t q) {
    if (!x8) return t[q];
    float x = s8 ? (float)((const int8_t *)x8)[q] : (float)((const uint8_t *)x8)[q];
    return (x - z) * k;
}

/* The scalar form from element q0 on. */
static void q8_tail(const tdm_q8_bin *p, const void *a8, const float *ta, const void *b8,
                    const float *tb, int64_t q0, int64_t n, uint8_t *y) {
    for (int64_t q = q0; q < n; q++) {
        float v = q8_one(p, q8_in(a8, p->a_s8, p->za, p->ka, ta, q),
                         q8_in(b8, p->b_s8, p->zb, p->kb, tb, q));
        y[q] = (uint8_t)(int32_t)v;
    }
}

/* Rows of floats (SSE2 16 a step where the baseline has it). */
static void q8_rows(const tdm_q8_bin *p, const float *ta, const float *tb, int64_t n, uint8_t *y) {
    int64_t q = 0;
#if defined(__SSE2__)
    const __m128 vc = _mm_set1_ps(p->c), vsy = _mm_set1_ps(p->sy), vzy = _mm_set1_ps(p->zy);
    const __m128 vb = _mm_set1_ps(Q8_BIG), vmin = _mm_set1_ps(-Q8_LIM);
    const __m128 vmax = _mm_set1_ps(Q8_LIM), vlo = _mm_set1_ps(p->lo), vhi = _mm_set1_ps(p->hi);
    for (; q + 16 <= n; q += 16) {
        __m128i w[4];
        for (int k = 0; k < 4; k++) {
            __m128 a = _mm_loadu_ps(ta + q + 4 * k), b = _mm_loadu_ps(tb + q + 4 * k), v;
            v = p->mul ? _mm_div_ps(_mm_mul_ps(a, b), vsy) : _mm_add_ps(_mm_add_ps(a, b), vc);
            v = _mm_min_ps(_mm_max_ps(v, vmin), vmax);
            v = _mm_sub_ps(_mm_add_ps(v, vb), vb);
            if (p->mul) v = _mm_add_ps(v, vzy);
            v = _mm_min_ps(_mm_max_ps(v, vlo), vhi);
            w[k] = _mm_cvttps_epi32(v);
        }
        __m128i p0 = _mm_packs_epi32(w[0], w[1]), p1 = _mm_packs_epi32(w[2], w[3]);
        _mm_storeu_si128((__m128i *)(y + q),
                         p->y_s8 ? _mm_packs_epi16(p0, p1) : _mm_packus_epi16(p0, p1));
    }
#endif
    q8_tail(p, NULL, ta, NULL, tb, q, n, y);
}

void tdm_q8_bin_portable(const tdm_q8_bin *p, const void *a8, const float *ta, const void *b8,
                         const float *tb, int64_t n, uint8_t *y) {
    float ra[256], rb[256];
    for (int64_t q0 = 0; q0 < n; q0 += 256) {
        int64_t m = n - q0 < 256 ? n - q0 : 256;
        const float *fa = ta ? ta + q0 : NULL, *fb = tb ? tb + q0 : NULL;
        if (a8) {
            scale_row((const uint8_t *)a8 + q0, p->a_s8, p->za, p->ka, m, ra);
            fa = ra;
        }
        if (b8) {
            scale_row((const uint8_t *)b8 + q0, p->b_s8, p->zb, p->kb, m, rb);
            fb = rb;
        }
        q8_rows(p, fa, fb, m, y + q0);
    }
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>

/* 8 operand values: bytes at x8 + q scaled, or the row's floats. */
TDM_TARGET_AVX2 static inline __m256 in8(const void *x8, bool s8, __m256 z, __m256 k,
                                         const float *t, int64_t q) {
    if (!x8) return _mm256_loadu_ps(t + q);
    __m128i b = _mm_loadl_epi64((const __m128i *)((const uint8_t *)x8 + q));
    __m256i w = s8 ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    return _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(w), z), k);
}

TDM_TARGET_AVX2 void tdm_q8_bin_avx2(const tdm_q8_bin *p, const void *a8, const float *ta,
                                     const void *b8, const float *tb, int64_t n, uint8_t *y) {
    const __m256 vc = _mm256_set1_ps(p->c), vsy = _mm256_set1_ps(p->sy);
    const __m256 vzy = _mm256_set1_ps(p->zy), vb = _mm256_set1_ps(Q8_BIG);
    const __m256 vmin = _mm256_set1_ps(-Q8_LIM), vmax = _mm256_set1_ps(Q8_LIM);
    const __m256 vlo = _mm256_set1_ps(p->lo), vhi = _mm256_set1_ps(p->hi);
    const __m256 za = _mm256_set1_ps(p->za), ka = _mm256_set1_ps(p->ka);
    const __m256 zb = _mm256_set1_ps(p->zb), kb = _mm256_set1_ps(p->kb);
    int64_t q = 0;
    for (; q + 8 <= n; q += 8) {
        __m256 a = in8(a8, p->a_s8, za, ka, ta, q), b = in8(b8, p->b_s8, zb, kb, tb, q), v;
        v = p->mul ? _mm256_div_ps(_mm256_mul_ps(a, b), vsy)
                   : _mm256_add_ps(_mm256_add_ps(a, b), vc);
        v = _mm256_min_ps(_mm256_max_ps(v, vmin), vmax);
        v = _mm256_sub_ps(_mm256_add_ps(v, vb), vb);
        if (p->mul) v = _mm256_add_ps(v, vzy);
        v = _mm256_min_ps(_mm256_max_ps(v, vlo), vhi);
        __m256i w = _mm256_cvttps_epi32(v);
        __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        h = p->y_s8 ? _mm_packs_epi16(h, h) : _mm_packus_epi16(h, h);
        _mm_storel_epi64((__m128i *)(y + q), h);
    }
    q8_tail(p, a8, ta, b8, tb, q, n, y);
}

/* 16 operand values (m: the lanes to read). */
TDM_TARGET_AVX512 static inline __m512 in16(const void *x8, bool s8, __m512 z, __m512 k,
                                            const float *t, int64_t q, __mmask16 m) {
    if (!x8) return _mm512_maskz_loadu_ps(m, t + q);
    __m128i b = _mm_maskz_loadu_epi8(m, (const uint8_t *)x8 + q);
    __m512i w = s8 ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(w), z), k);
}

TDM_TARGET_AVX512 void tdm_q8_bin_avx512(const tdm_q8_bin *p, const void *a8, const float *ta,
                                         const void *b8, const float *tb, int64_t n,
                                         uint8_t *y) {
    const __m512 vc = _mm512_set1_ps(p->c), vsy = _mm512_set1_ps(p->sy);
    const __m512 vzy = _mm512_set1_ps(p->zy), vb = _mm512_set1_ps(Q8_BIG);
    const __m512 vmin = _mm512_set1_ps(-Q8_LIM), vmax = _mm512_set1_ps(Q8_LIM);
    const __m512 vlo = _mm512_set1_ps(p->lo), vhi = _mm512_set1_ps(p->hi);
    const __m512 za = _mm512_set1_ps(p->za), ka = _mm512_set1_ps(p->ka);
    const __m512 zb = _mm512_set1_ps(p->zb), kb = _mm512_set1_ps(p->kb);
    for (int64_t q = 0; q < n; q += 16) {
        __mmask16 m = n - q >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - q)) - 1);
        __m512 a = in16(a8, p->a_s8, za, ka, ta, q, m), b = in16(b8, p->b_s8, zb, kb, tb, q, m), v;
        v = p->mul ? _mm512_div_ps(_mm512_mul_ps(a, b), vsy)
                   : _mm512_add_ps(_mm512_add_ps(a, b), vc);
        v = _mm512_min_ps(_mm512_max_ps(v, vmin), vmax);
        v = _mm512_sub_ps(_mm512_add_ps(v, vb), vb);
        if (p->mul) v = _mm512_add_ps(v, vzy);
        v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);
        /* (in range of the 8-bit type: the truncating narrowing keeps the value) */
        _mm_mask_storeu_epi8(y + q, m, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
    }
}
#endif
