/* The 4-bit KV cache's row writers in AVX2 (the attention's read side: k_llm_gqa_i8.c; the
 * AVX-512 forms these follow: k_llm_gqa_i8_avx512.c): each new key / value row of a decode step is rotated and
 * quantised here, and the query and the output are rotated. */
#include <string.h>

#include "backends/cpu/k_llm.h"

#ifdef TDM_SIMD_X86
#include <immintrin.h>

#define GROUP TDM_KV_I8_GROUP

/* tdm_llm_kv4_rotate in four vectors of 8: the same stages (h = 1, 2, 4 within each vector
 * by lane swaps, 8 and 16 across them) and the same sums and differences, so the same result
 * bit for bit (test_nibbles) */
TDM_TARGET_AVX2 void tdm_llm_kv4_rotate_avx2(float *x, int64_t d) {
    const __m256 sc = _mm256_set1_ps(0.17677669529663688f);
    for (int64_t g0 = 0; g0 + GROUP <= d; g0 += GROUP) {
        __m256 v[4];
        for (int k = 0; k < 4; k++) { /* lane i pairs with i ^ h; the upper one takes y - x */
            v[k] = _mm256_loadu_ps(x + g0 + 8 * k);
            __m256 y = _mm256_permute_ps(v[k], 0xb1);
            v[k] = _mm256_blend_ps(_mm256_add_ps(v[k], y), _mm256_sub_ps(y, v[k]), 0xaa);
            y = _mm256_permute_ps(v[k], 0x4e);
            v[k] = _mm256_blend_ps(_mm256_add_ps(v[k], y), _mm256_sub_ps(y, v[k]), 0xcc);
            y = _mm256_permute2f128_ps(v[k], v[k], 0x01);
            v[k] = _mm256_blend_ps(_mm256_add_ps(v[k], y), _mm256_sub_ps(y, v[k]), 0xf0);
        }
        for (int k = 0; k < 4; k += 2) { /* h = 8 */
            __m256 a = v[k], b = v[k + 1];
            v[k] = _mm256_add_ps(a, b), v[k + 1] = _mm256_sub_ps(a, b);
        }
        for (int k = 0; k < 2; k++) { /* h = 16, then 1 / sqrt(32) */
            __m256 a = v[k], b = v[k + 2];
            _mm256_storeu_ps(x + g0 + 8 * k, _mm256_mul_ps(_mm256_add_ps(a, b), sc));
            _mm256_storeu_ps(x + g0 + 16 + 8 * k, _mm256_mul_ps(_mm256_sub_ps(a, b), sc));
        }
    }
}

/* 8 codes: x * inv rounded to the nearest even and clamped to [lo, hi], NaN as 0 (as
 * round_codes16) */
TDM_TARGET_AVX2 static inline __m256i round_codes8(__m256 x, __m256 inv, float lo, float hi) {
    __m256 y = _mm256_mul_ps(x, inv);
    y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q));
    y = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(lo)), _mm256_set1_ps(hi)));
}

/* tdm_llm_kv4_quantize_row for rows of whole groups (d % 32 == 0, the others there), the same
 * bytes, as quantize4_avx512 (k_llm_gqa_i8_avx512.c) in AVX2: the rotation above, the first value of largest magnitude, its
 * scale, the codes (NaN as 0: code 8), two a byte. A decode step writes 180 rows (SmolLM2:
 * 30 layers x 3 kv heads x K and V); the scalar form took ~0.4 us a row. */
TDM_TARGET_AVX2 void tdm_llm_kv4_quantize_row_avx2(const float *x0, int64_t d, int8_t *row) {
    if (d % GROUP != 0 || d > TDM_LLM_KV_I8_MAX_D) {
        tdm_llm_kv4_quantize_row(x0, d, row);
        return;
    }
    _Alignas(32) float x[TDM_LLM_KV_I8_MAX_D];
    memcpy(x, x0, (size_t)d * sizeof(float));
    tdm_llm_kv4_rotate_avx2(x, d);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t ng = d / GROUP;
    for (int64_t g = 0; g < ng; g++) {
        __m256 v[4], a[4];
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_load_ps(x + GROUP * g + 8 * k);
            v[k] = _mm256_and_ps(v[k], _mm256_cmp_ps(v[k], v[k], _CMP_ORD_Q));
            a[k] = _mm256_and_ps(v[k], absm);
        }
        __m256 m8 = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        m8 = _mm256_max_ps(m8, _mm256_permute2f128_ps(m8, m8, 0x01)); /* in every lane */
        m8 = _mm256_max_ps(m8, _mm256_permute_ps(m8, 0x4e));
        m8 = _mm256_max_ps(m8, _mm256_permute_ps(m8, 0xb1));
        float mx = _mm256_cvtss_f32(m8);
        uint32_t at = 0;
        for (int k = 0; k < 4; k++)
            at |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(a[k], m8, _CMP_EQ_OQ)) << (8 * k);
        float m = mx > 0.0f ? x[GROUP * g + __builtin_ctz(at)] : 0.0f; /* the first largest */
        uint16_t sb;
        __m256 inv = _mm256_set1_ps(tdm_llm_kv_scale4(mx, m, &sb));
        __m256i c[4];
        for (int k = 0; k < 4; k++)
            c[k] = _mm256_add_epi32(round_codes8(v[k], inv, -8.0f, 7.0f), _mm256_set1_epi32(8));
        /* byte j: code j | code j + 16 << 4; packs interleave the lanes, the dword permute
         * puts them back in order */
        __m256i lo = _mm256_or_si256(c[0], _mm256_slli_epi32(c[2], 4));
        __m256i hi = _mm256_or_si256(c[1], _mm256_slli_epi32(c[3], 4));
        __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(lo, hi), _mm256_setzero_si256());
        b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm_storeu_si128((__m128i *)(void *)(row + 16 * g), _mm256_castsi256_si128(b));
        memcpy(row + 16 * ng + 2 * g, &sb, sizeof sb);
    }
}
#endif
