/* Dot products of two float rows, for tdm_sgemm's one-row and one-column products
 * (cpu_gemm.c: an LSTM cell at batch 1 is x[K] . W^T, one dot per gate column). The variants
 * (cpu_simd.h) differ in how many partial sums they keep, so in the order of the additions:
 *   portable  8 partial sums (the loop vectorises without -ffast-math), scalar tail;
 *   avx2      4 x 8 lanes with FMA, scalar tail;
 *   avx512    4 x 16 lanes with FMA, the tail in a masked vector. */
#include <stdint.h>

#include "backends/cpu/cpu_simd.h"

float tdm_dot_f32_portable(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int u = 0; u < 8; u++) s[u] += a[k + u] * b[k + u];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; k < n; k++) r += a[k] * b[k];
    return r;
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>

TDM_TARGET_AVX2 float tdm_dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 16), _mm256_loadu_ps(b + k + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 24), _mm256_loadu_ps(b + k + 24), s3);
    }
    for (; k + 8 <= n; k += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float r = _mm_cvtss_f32(h);
    for (; k < n; k++) r += a[k] * b[k];
    return r;
}

TDM_TARGET_AVX512 float tdm_dot_f32_avx512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 32), _mm512_loadu_ps(b + k + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 48), _mm512_loadu_ps(b + k + 48), s3);
    }
    for (; k + 16 <= n; k += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), s0);
    if (k < n) {
        __mmask16 m = (__mmask16)((1u << (n - k)) - 1u);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
#endif
