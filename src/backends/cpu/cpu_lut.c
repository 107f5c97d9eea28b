/* Byte tables: y[i] = t[x[i]] for an 8-bit x and a table of 256 bytes (QLut, ops/fused.h;
 * the int8 QDQ pass's activations and requantisations). The variants (cpu_simd.h) give the
 * same bytes:
 *   portable  8 lookups per 64-bit word;
 *   avx2      the table as 16 rows of 16 bytes: per 32 bytes of x, each row looked up by
 *             the low nibble (vpshufb) and kept where the high nibble is the row's;
 *   avx512    the same on 64 bytes, the rows merged by mask (AVX-512 BW); masked tail.
 * And the largest byte of an array (max_u8: the int8 convolutions' choice of weights without
 * VNNI, k_dnnl.c): portable a byte a step, avx2 vpmaxub on 128 bytes a step (four
 * accumulators) and a byte tail, avx512 64 bytes a step with a masked tail. */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"

void tdm_lut_u8_portable(const uint8_t *restrict t, const uint8_t *restrict x,
                         uint8_t *restrict y, int64_t n) {
    uint8_t tab[256]; /* (a local copy: the byte stores may alias the table) */
    memcpy(tab, t, sizeof tab);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v, o = 0;
        memcpy(&v, x + i, 8);
        for (int k = 0; k < 8; k++) o |= (uint64_t)tab[(v >> (8 * k)) & 0xff] << (8 * k);
        memcpy(y + i, &o, 8);
    }
    for (; i < n; i++) y[i] = tab[x[i]];
}

uint8_t tdm_max_u8_portable(const uint8_t *x, int64_t n) {
    uint8_t m = 0;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>

TDM_TARGET_AVX2 void tdm_lut_u8_avx2(const uint8_t *restrict t, const uint8_t *restrict x,
                                     uint8_t *restrict y, int64_t n) {
    __m256i rows[16];
    for (int r = 0; r < 16; r++)
        rows[r] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(t + 16 * r)));
    const __m256i nib = _mm256_set1_epi8(0x0f);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i lo = _mm256_and_si256(v, nib);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
        __m256i o = _mm256_setzero_si256();
        for (int r = 0; r < 16; r++) {
            __m256i m = _mm256_cmpeq_epi8(hi, _mm256_set1_epi8((char)r));
            o = _mm256_or_si256(o, _mm256_and_si256(m, _mm256_shuffle_epi8(rows[r], lo)));
        }
        _mm256_storeu_si256((__m256i *)(y + i), o);
    }
    for (; i < n; i++) y[i] = t[x[i]];
}

/* The largest of 16 bytes (SSE2). */
static inline uint8_t max16(__m128i h) {
    h = _mm_max_epu8(h, _mm_srli_si128(h, 8));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 4));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 2));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 1));
    return (uint8_t)_mm_cvtsi128_si32(h);
}

TDM_TARGET_AVX2 uint8_t tdm_max_u8_avx2(const uint8_t *x, int64_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a = _mm256_max_epu8(a, _mm256_loadu_si256((const __m256i *)(x + i)));
        b = _mm256_max_epu8(b, _mm256_loadu_si256((const __m256i *)(x + i + 32)));
        c = _mm256_max_epu8(c, _mm256_loadu_si256((const __m256i *)(x + i + 64)));
        d = _mm256_max_epu8(d, _mm256_loadu_si256((const __m256i *)(x + i + 96)));
    }
    for (; i + 32 <= n; i += 32) a = _mm256_max_epu8(a, _mm256_loadu_si256((const __m256i *)(x + i)));
    a = _mm256_max_epu8(_mm256_max_epu8(a, b), _mm256_max_epu8(c, d));
    uint8_t m = max16(_mm_max_epu8(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

TDM_TARGET_AVX512 void tdm_lut_u8_avx512(const uint8_t *restrict t, const uint8_t *restrict x,
                                         uint8_t *restrict y, int64_t n) {
    __m512i rows[16];
    for (int r = 0; r < 16; r++)
        rows[r] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(t + 16 * r)));
    const __m512i nib = _mm512_set1_epi8(0x0f);
    for (int64_t i = 0; i < n; i += 64) {
        __mmask64 k = n - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - i)) - 1;
        __m512i v = _mm512_maskz_loadu_epi8(k, x + i);
        __m512i lo = _mm512_and_si512(v, nib);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        __m512i o = _mm512_setzero_si512();
        for (int r = 0; r < 16; r++) {
            __mmask64 m = _mm512_cmpeq_epi8_mask(hi, _mm512_set1_epi8((char)r));
            o = _mm512_mask_shuffle_epi8(o, m, rows[r], lo);
        }
        _mm512_mask_storeu_epi8(y + i, k, o);
    }
}

TDM_TARGET_AVX512 uint8_t tdm_max_u8_avx512(const uint8_t *x, int64_t n) {
    __m512i a = _mm512_setzero_si512();
    for (int64_t i = 0; i < n; i += 64) { /* (bound by loads: one accumulator keeps up) */
        __mmask64 k = n - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - i)) - 1;
        a = _mm512_max_epu8(a, _mm512_maskz_loadu_epi8(k, x + i));
    }
    __m256i w = _mm256_max_epu8(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
    return max16(_mm_max_epu8(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
}
#endif
