/* The decode loops of MatMulNBits (contract in k_nbits.h): for each row n of B in [n0, n1)
 * and each row m of A, Y[m, n] = sum over blocks b of s[n, b] * dot_b - zero-point term.
 * B's row n (K * bits / 8 bytes) comes from memory once and from the core's L1 for the other
 * rows of A.
 *
 * int8 paths (accuracy_level 4): A is quantized per block (scale sa, codes qa in -127..127),
 * so dot_b = sa * sum qa * q, an integer product of unsigned codes and signed activations:
 * vpdpbusd (AVX-512 VNNI) or vpmaddubsw + vpmaddwd (AVX2). One vector of B (a "span") holds
 * several blocks when blocks are short: its int32 lanes are scaled by s * sa per lane
 * (lane_block gives each lane's block within the span; sal holds sa per lane).
 * 4-bit codes: byte j of a span holds elements 2j (low nibble) and 2j+1 (high nibble); A is
 * stored per span as its even elements then its odd ones, so the nibbles need no shuffle.
 *
 * float paths (other accuracy levels): codes are widened to float in registers and multiplied
 * with A's floats (4-bit: A per 32 elements as 16 evens then 16 odds), one block at a time.
 *
 * The zero-point term sum_b s * zp * (sum of A's block): the int8 SIMD paths subtract it per
 * lane (zp times A's codes summed over the lane, sql), the others once per row
 * (tdm_nbits_zterm; for int8 with the block sums of A's int8 model). */
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nbits.h"

static inline int64_t row_bytes(const tdm_nbits_w *w) { return w->nb * w->bs * w->bits / 8; }

/* Software prefetch for B streamed from memory (a whole model's weights do not stay in the
 * caches between tokens; the hardware prefetchers alone reached ~40% of the bandwidth): before
 * rows [n, n + R) of B are read, the rows NB_PFD bytes further on are requested (their codes,
 * scales and zero points); pf_start requests the first rows of a range. */
#ifndef NB_PFD
#define NB_PFD 6144
#endif
static inline void pf_bytes(const void *base, int64_t from, int64_t to) {
    const char *p = base;
    for (int64_t o = from & ~(int64_t)63; o < to; o += 64) __builtin_prefetch(p + o, 0, 3);
}

static inline void pf_span(const tdm_nbits_w *w, int64_t a, int64_t e) {
    int64_t rowb = row_bytes(w);
    if (e > w->N) e = w->N;
    if (a >= e) return;
    pf_bytes(w->b, a * rowb, e * rowb);
    pf_bytes(w->scales, a * w->nb * 4, e * w->nb * 4);
    if (w->zp) pf_bytes(w->zp, a * w->nb * 4, e * w->nb * 4);
}

static inline int64_t pf_ahead(const tdm_nbits_w *w) { return NB_PFD / row_bytes(w) + 1; }

static inline void pf_rows(const tdm_nbits_w *w, int64_t n, int64_t R) {
    int64_t d = pf_ahead(w);
    pf_span(w, n + d, n + d + R);
}

static inline void pf_start(const tdm_nbits_w *w, int64_t n0) { pf_span(w, n0, n0 + pf_ahead(w)); }

static inline float finish_z(const tdm_nbits_job *j, int64_t n, float acc, float z) {
    float y = acc - z;
    return j->bias ? y + j->bias[n] : y;
}

static inline float finish(const tdm_nbits_job *j, int64_t n, int64_t m, float acc) {
    return finish_z(j, n, acc, tdm_nbits_zterm(j->w, n, j->sum + m * j->w->nb));
}

/* ---- portable: natural order, any bits ---- */

static inline int code_at(const uint8_t *row, int64_t k, int bits) {
    int64_t bit = k * bits;
    return (row[bit >> 3] >> (bit & 7)) & ((1 << bits) - 1);
}

static void rows_portable_i8(const tdm_nbits_job *j, int64_t n0, int64_t n1) {
    const tdm_nbits_w *w = j->w;
    int64_t rowb = row_bytes(w), bs = w->bs;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = w->b + n * rowb;
        const float *s = w->scales + n * w->nb;
        for (int64_t m = 0; m < j->M; m++) {
            const int8_t *qa = (const int8_t *)j->a + m * j->kq;
            const float *sa = j->sal + m * j->sal_stride;
            float acc = 0.0f;
            for (int64_t b = 0; b < w->nb; b++) {
                int32_t d = 0;
                const int8_t *q = qa + b * bs;
                if (w->bits == 4) {
                    const uint8_t *r = row + b * bs / 2;
                    for (int64_t i = 0; i < bs / 2; i++)
                        d += q[2 * i] * (r[i] & 15) + q[2 * i + 1] * (r[i] >> 4);
                } else if (w->bits == 8) {
                    const uint8_t *r = row + b * bs;
                    for (int64_t i = 0; i < bs; i++) d += q[i] * r[i];
                } else {
                    for (int64_t i = 0; i < bs; i++) d += q[i] * code_at(row, b * bs + i, w->bits);
                }
                acc += s[b] * sa[b] * (float)d;
            }
            j->Y[m * w->N + n] = finish(j, n, m, acc);
        }
    }
}

static void rows_portable_f32(const tdm_nbits_job *j, int64_t n0, int64_t n1) {
    const tdm_nbits_w *w = j->w;
    int64_t rowb = row_bytes(w), bs = w->bs;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = w->b + n * rowb;
        const float *s = w->scales + n * w->nb;
        for (int64_t m = 0; m < j->M; m++) {
            const float *a = (const float *)j->a + m * j->kq;
            float acc = 0.0f;
            for (int64_t b = 0; b < w->nb; b++) {
                float d = 0.0f;
                const float *x = a + b * bs;
                if (w->bits == 4) {
                    const uint8_t *r = row + b * bs / 2;
                    for (int64_t i = 0; i < bs / 2; i++)
                        d += x[2 * i] * (float)(r[i] & 15) + x[2 * i + 1] * (float)(r[i] >> 4);
                } else if (w->bits == 8) {
                    const uint8_t *r = row + b * bs;
                    for (int64_t i = 0; i < bs; i++) d += x[i] * (float)r[i];
                } else {
                    for (int64_t i = 0; i < bs; i++)
                        d += x[i] * (float)code_at(row, b * bs + i, w->bits);
                }
                acc += s[b] * d;
            }
            j->Y[m * w->N + n] = finish(j, n, m, acc);
        }
    }
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>

#include "backends/cpu/cpu_avx2.h"

#define TDM_TARGET_VNNI                                                                         \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")))

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- AVX2 ---- */

/* The first `bytes` (a multiple of 4, < 32) of p, zeros after. */
TDM_TARGET_AVX2 static inline __m256i load_tail32(const uint8_t *p, int64_t bytes) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(bytes / 4)), lane);
    return _mm256_maskload_epi32((const int *)p, mask);
}

/* s[b0 .. b0 + cnt) spread over the 8 lanes by lane_block. */
TDM_TARGET_AVX2 static inline __m256 lane_scales8(const float *s, int64_t cnt, __m256i idx) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), lane);
    return _mm256_permutevar8x32_ps(_mm256_maskload_ps(s, mask), idx);
}

TDM_TARGET_AVX2 static inline float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* tdm_nbits_zterm, 8 blocks at a time. */
TDM_TARGET_AVX2 static float zterm_avx2(const tdm_nbits_w *w, int64_t n, const float *sum) {
    const float *s = w->scales + n * w->nb, *zp = w->zp ? w->zp + n * w->nb : NULL;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 z = _mm256_setzero_ps();
    for (int64_t b = 0; b < w->nb; b += 8) {
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)min64(8, w->nb - b)), lane);
        __m256 sz = _mm256_maskload_ps(s + b, mask);
        if (zp) sz = _mm256_mul_ps(sz, _mm256_maskload_ps(zp + b, mask));
        z = _mm256_fmadd_ps(sz, _mm256_maskload_ps(sum + b, mask), z);
    }
    return zp ? hsum8(z) : hsum8(z) * (float)(1 << (w->bits - 1));
}

/* Lane i of the result: the maximum (add false) or the sum (add true) of the 8 lanes of v[i]
 * (a transposing reduction, as red16_ps below). */
__attribute__((always_inline)) TDM_TARGET_AVX2 static inline __m256 red8_ps(const __m256 *v,
                                                                           const bool add) {
#define RED8_OP(a, b) (add ? _mm256_add_ps(a, b) : _mm256_max_ps(a, b))
    __m256 t[4], u[2];
    for (int k = 0; k < 4; k++) /* per 128-bit half: v[2k] at lanes 0, 2, v[2k + 1] at 1, 3 */
        t[k] = RED8_OP(_mm256_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                       _mm256_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 2; k++) { /* per half: v[4k + i] at lane i */
        __m256d a = _mm256_castps_pd(t[2 * k]), b = _mm256_castps_pd(t[2 * k + 1]);
        u[k] = RED8_OP(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                       _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return RED8_OP(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
#undef RED8_OP
}

/* A's int8 preparation for the AVX2 variants (as quant_vnni below, 8 lanes, blocks 8 at a
 * time): codes packed with vpackssdw / vpacksswb, 4-bit spans of 64 split into 32 evens then
 * 32 odds, lane sums with vpmaddubsw + vpmaddwd. */
TDM_TARGET_AVX2 static void quant_avx2(const tdm_nbits_w *w, const float *a, int64_t kq, int8_t *q,
                                       float *sal, float *sql, int64_t sal_stride, float *sa,
                                       float *sum, int8_t *tmp) {
    const int64_t K = w->K, bs = w->bs;
    const bool q4 = w->bits == 4;
    int8_t *nat = q4 ? tmp : q;
    if (kq > K) memset(nat + K, 0, (size_t)(kq - K)); /* the loops below write every code < K */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 signbit = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
    const __m256 c127 = _mm256_set1_ps(127.0f);
    for (int64_t b0 = 0; b0 < w->nb; b0 += 8) {
        const int ng = (int)min64(8, w->nb - b0);
        __m256 m[8], qf[8];
        float inv[8], sav[8], qsum[8];
        for (int i = 0; i < 8; i++) {
            m[i] = _mm256_setzero_ps();
            int64_t k0 = (b0 + i) * bs, k1 = k0 + bs < K ? k0 + bs : K, k = k0;
            for (; i < ng && k + 32 <= k1; k += 32) { /* whole runs of 32: plain loads */
                __m256 x0 = _mm256_max_ps(_mm256_andnot_ps(signbit, _mm256_loadu_ps(a + k)),
                                          _mm256_andnot_ps(signbit, _mm256_loadu_ps(a + k + 8)));
                __m256 x1 = _mm256_max_ps(_mm256_andnot_ps(signbit, _mm256_loadu_ps(a + k + 16)),
                                          _mm256_andnot_ps(signbit, _mm256_loadu_ps(a + k + 24)));
                m[i] = _mm256_max_ps(m[i], _mm256_max_ps(x0, x1));
            }
            for (; i < ng && k < k1; k += 8) {
                __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)min64(8, k1 - k)), lane);
                m[i] = _mm256_max_ps(m[i], _mm256_andnot_ps(signbit, _mm256_maskload_ps(a + k, mk)));
            }
        }
        __m256 amax = red8_ps(m, false);
        /* 127 / amax where amax > 0, else 0; sa = amax / 127 */
        __m256 pos = _mm256_cmp_ps(amax, _mm256_setzero_ps(), _CMP_GT_OQ);
        _mm256_storeu_ps(inv, _mm256_and_ps(pos, _mm256_div_ps(c127, amax)));
        __m256 sv = _mm256_div_ps(amax, c127);
        for (int i = 0; i < 8; i++) {
            __m256i qs = _mm256_setzero_si256();
            const __m256 vinv = _mm256_set1_ps(inv[i]);
            int64_t k0 = (b0 + i) * bs, k1 = k0 + bs < K ? k0 + bs : K, k = k0;
            for (; i < ng && k + 32 <= k1; k += 32) { /* 32 codes, one store */
                __m256i c[4];
                for (int v = 0; v < 4; v++) {
                    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(a + k + 8 * v), vinv);
                    __m256 h = _mm256_or_ps(_mm256_and_ps(x, signbit), half);
                    c[v] = _mm256_cvttps_epi32(_mm256_add_ps(x, h));
                }
                qs = _mm256_add_epi32(qs, _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]),
                                                           _mm256_add_epi32(c[2], c[3])));
                /* |c| <= 127: no saturation */
                _mm256_storeu_si256((__m256i *)(nat + k), tdm_avx2_pack_codes(c[0], c[1], c[2], c[3]));
            }
            for (; i < ng && k < k1; k += 8) {
                __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)min64(8, k1 - k)), lane);
                __m256 x = _mm256_mul_ps(_mm256_maskload_ps(a + k, mk), vinv);
                __m256 h = _mm256_or_ps(_mm256_and_ps(x, signbit), half);
                __m256i c = _mm256_and_si256(_mm256_cvttps_epi32(_mm256_add_ps(x, h)), mk);
                qs = _mm256_add_epi32(qs, c);
                __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c, c), _mm256_setzero_si256());
                __m128i c8 = _mm_unpacklo_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
                _mm_storel_epi64((__m128i *)(nat + k), c8); /* k + 8 <= the block's end or kq */
            }
            qf[i] = _mm256_cvtepi32_ps(qs); /* |sum| < 2^24: exact */
        }
        _mm256_storeu_ps(sav, sv);
        _mm256_storeu_ps(qsum, _mm256_mul_ps(sv, red8_ps(qf, true)));
        memcpy(sa + b0, sav, (size_t)ng * sizeof(float));
        memcpy(sum + b0, qsum, (size_t)ng * sizeof(float));
    }
    if (!sql && !q4) return; /* the packed form's A: codes, sa and sum only (tdm_nbits_quant_fn) */
    const int64_t span = q4 ? 64 : 32, epl = q4 ? 8 : 4, nsp = kq / span;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t sp = 0; sp < nsp; sp++) {
        const int8_t *src = nat + sp * span;
        __m256i x0 = _mm256_loadu_si256((const __m256i *)src);
        __m256i s0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, x0), ones16);
        if (q4) {
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(src + 32));
            __m256i s1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, x1), ones16);
            __m256i l8 = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s0, s1), 0xd8);
            _mm256_storeu_ps(sql + sp * 8, _mm256_cvtepi32_ps(l8));
            /* evens: the low byte of each int16; odds: the high byte */
            __m256i e = _mm256_packs_epi16(_mm256_srai_epi16(_mm256_slli_epi16(x0, 8), 8),
                                           _mm256_srai_epi16(_mm256_slli_epi16(x1, 8), 8));
            __m256i o = _mm256_packs_epi16(_mm256_srai_epi16(x0, 8), _mm256_srai_epi16(x1, 8));
            _mm256_storeu_si256((__m256i *)(q + sp * 64), _mm256_permute4x64_epi64(e, 0xd8));
            _mm256_storeu_si256((__m256i *)(q + sp * 64 + 32), _mm256_permute4x64_epi64(o, 0xd8));
        } else {
            _mm256_storeu_ps(sql + sp * 8, _mm256_cvtepi32_ps(s0));
        }
    }
    for (int64_t l = 0; l < sal_stride; l++) {
        int64_t blk = l * epl / bs;
        sal[l] = blk < w->nb ? sa[blk] : 0.0f;
    }
}

/* int8 path, 4 or 8 bits: spans of 32 bytes; R <= 4 rows of B share the loads of A. */
__attribute__((always_inline)) TDM_TARGET_AVX2 static inline void
avx2_rows(const tdm_nbits_job *j, int64_t n, int R, bool q4, bool has_zp) {
    const tdm_nbits_w *w = j->w;
    const int64_t rowb = row_bytes(w), nsp = (rowb + 31) / 32, tail = rowb - (nsp - 1) * 32;
    const int64_t span = q4 ? 64 : 32, bps = span / w->bs > 0 ? span / w->bs : 1;
    const int bshift = __builtin_ctzll((unsigned long long)w->bs);
    const __m256i idx = _mm256_loadu_si256((const __m256i *)j->lane_block);
    const __m256i nib = _mm256_set1_epi8(15), one = _mm256_set1_epi16(1);
    const __m256 zdef = _mm256_set1_ps((float)(1 << (w->bits - 1)));
    const uint8_t *row[4];
    const float *sr[4], *zr[4];
    for (int r = 0; r < R; r++) {
        row[r] = w->b + (n + r) * rowb;
        sr[r] = w->scales + (n + r) * w->nb;
        zr[r] = has_zp ? w->zp + (n + r) * w->nb : NULL;
    }
    for (int64_t m = 0; m < j->M; m++) {
        const int8_t *qa = (const int8_t *)j->a + m * j->kq;
        const float *sl = j->sal + m * j->sal_stride, *ql = j->sql + m * j->sal_stride;
        __m256 acc[4];
        for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t sp = 0; sp < nsp; sp++) {
            const int8_t *q = qa + sp * span;
            __m256i e = _mm256_loadu_si256((const __m256i *)q);
            __m256i o = q4 ? _mm256_loadu_si256((const __m256i *)(q + 32)) : e;
            __m256 sal = _mm256_loadu_ps(sl + sp * 8), qsl = _mm256_loadu_ps(ql + sp * 8);
            int64_t b0 = (sp * span) >> bshift, cnt = min64(bps, w->nb - b0);
            for (int r = 0; r < R; r++) {
                __m256i wv = sp + 1 < nsp
                                 ? _mm256_loadu_si256((const __m256i *)(row[r] + sp * 32))
                                 : load_tail32(row[r] + sp * 32, tail);
                __m256i lo = _mm256_and_si256(wv, nib);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), nib);
                __m256i d;
                if (q4) {
                    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, e),
                                                 _mm256_maddubs_epi16(hi, o));
                    d = _mm256_madd_epi16(p, one);
                } else { /* the byte split in nibbles keeps vpmaddubsw's sums in int16 */
                    __m256i dl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, e), one);
                    __m256i dh = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, e), one);
                    d = _mm256_add_epi32(dl, _mm256_slli_epi32(dh, 4));
                }
                __m256 sc = _mm256_mul_ps(lane_scales8(sr[r] + b0, cnt, idx), sal);
                __m256 zl = has_zp ? lane_scales8(zr[r] + b0, cnt, idx) : zdef;
                /* (sum qa q - zp sum qa) per lane, times s sa */
                __m256 t = _mm256_fnmadd_ps(zl, qsl, _mm256_cvtepi32_ps(d));
                acc[r] = _mm256_fmadd_ps(t, sc, acc[r]);
            }
        }
        for (int r = 0; r < R; r++) {
            float y = hsum8(acc[r]);
            j->Y[m * w->N + n + r] = j->bias ? y + j->bias[n + r] : y;
        }
    }
}

/* B larger than this streams from memory: one row of B at a time (see rows_vnni_i8) */
#ifndef NB_CACHED_BYTES
#define NB_CACHED_BYTES ((int64_t)2 << 20)
#endif
/* Four rows of B at a time only for short rows of a B that fits the caches: measured with B
 * streaming from memory (bench_nbits with BENCH_COPIES=64), 576 x 1536 4-bit (rows of 768
 * bytes) ran at ~6.7 GB/s four rows at a time and ~12.5 GB/s one at a time with prefetch;
 * 1536 x 576 (rows of 288 bytes) ~11 GB/s either way. */
#ifndef NB_FOUR_ROW_BYTES
#define NB_FOUR_ROW_BYTES 384
#endif
static inline bool nb_four_rows(const tdm_nbits_w *w) {
    return w->N * row_bytes(w) <= NB_CACHED_BYTES && row_bytes(w) <= NB_FOUR_ROW_BYTES;
}

#define AVX2_VARIANT(name, q4, zp)                                                              \
    TDM_TARGET_AVX2 static void name(const tdm_nbits_job *j, int64_t n0, int64_t n1) {         \
        int64_t n = n0;                                                                         \
        pf_start(j->w, n0);                                                                     \
        if (nb_four_rows(j->w))                                                                 \
            for (; n + 4 <= n1; n += 4) pf_rows(j->w, n, 4), avx2_rows(j, n, 4, q4, zp);        \
        for (; n < n1; n++) pf_rows(j->w, n, 1), avx2_rows(j, n, 1, q4, zp);                    \
    }
AVX2_VARIANT(avx2_q4, true, false)
AVX2_VARIANT(avx2_q4_zp, true, true)
AVX2_VARIANT(avx2_q8, false, false)
AVX2_VARIANT(avx2_q8_zp, false, true)

TDM_TARGET_AVX2 static void rows_avx2_i8(const tdm_nbits_job *j, int64_t n0, int64_t n1) {
    bool zp = j->w->zp != NULL;
    if (j->w->bits == 4) zp ? avx2_q4_zp(j, n0, n1) : avx2_q4(j, n0, n1);
    else zp ? avx2_q8_zp(j, n0, n1) : avx2_q8(j, n0, n1);
}

/* float path: 4 bits (A per 32 elements: 16 evens, 16 odds) or 8 bits; bs % 32 == 0. Rows of
 * A two at a time share each block's unpacking (each row's sums in a single row's order). */
__attribute__((always_inline)) TDM_TARGET_AVX2 static inline void
f32_group_avx2(const tdm_nbits_job *j, int64_t n, int64_t m0, const int G) {
    const tdm_nbits_w *w = j->w;
    const bool q4 = w->bits == 4;
    const int64_t rowb = row_bytes(w), bs = w->bs, bb = bs * w->bits / 8;
    const __m256i nib = _mm256_set1_epi32(15);
    const uint8_t *row = w->b + n * rowb;
    const float *s = w->scales + n * w->nb;
    const float *a[2];
    __m256 acc[2];
    for (int g = 0; g < G; g++) {
        a[g] = (const float *)j->a + (m0 + g) * j->kq;
        acc[g] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < w->nb; b++) {
        const uint8_t *r = row + b * bb;
        int64_t x = b * bs;
        __m256 t0[2], t1[2];
        for (int g = 0; g < G; g++) t0[g] = t1[g] = _mm256_setzero_ps();
        if (q4) {
            for (int64_t c = 0; c < bb; c += 16, r += 16, x += 32) {
                __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)r));
                __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + 8)));
                __m256 l0 = _mm256_cvtepi32_ps(_mm256_and_si256(v0, nib));
                __m256 h0 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));
                __m256 l1 = _mm256_cvtepi32_ps(_mm256_and_si256(v1, nib));
                __m256 h1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));
                for (int g = 0; g < G; g++) {
                    t0[g] = _mm256_fmadd_ps(l0, _mm256_loadu_ps(a[g] + x), t0[g]);
                    t1[g] = _mm256_fmadd_ps(h0, _mm256_loadu_ps(a[g] + x + 16), t1[g]);
                    t0[g] = _mm256_fmadd_ps(l1, _mm256_loadu_ps(a[g] + x + 8), t0[g]);
                    t1[g] = _mm256_fmadd_ps(h1, _mm256_loadu_ps(a[g] + x + 24), t1[g]);
                }
            }
        } else {
            for (int64_t c = 0; c < bb; c += 16, r += 16, x += 16) {
                __m256 f0 = _mm256_cvtepi32_ps(
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)r)));
                __m256 f1 = _mm256_cvtepi32_ps(
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + 8))));
                for (int g = 0; g < G; g++) {
                    t0[g] = _mm256_fmadd_ps(f0, _mm256_loadu_ps(a[g] + x), t0[g]);
                    t1[g] = _mm256_fmadd_ps(f1, _mm256_loadu_ps(a[g] + x + 8), t1[g]);
                }
            }
        }
        __m256 sc = _mm256_set1_ps(s[b]);
        for (int g = 0; g < G; g++) acc[g] = _mm256_fmadd_ps(_mm256_add_ps(t0[g], t1[g]), sc, acc[g]);
    }
    for (int g = 0; g < G; g++)
        j->Y[(m0 + g) * w->N + n] =
            finish_z(j, n, hsum8(acc[g]), zterm_avx2(w, n, j->sum + (m0 + g) * w->nb));
}

TDM_TARGET_AVX2 static void rows_avx2_f32(const tdm_nbits_job *j, int64_t n0, int64_t n1) {
    const tdm_nbits_w *w = j->w;
    pf_start(w, n0);
    for (int64_t n = n0; n < n1; n++) {
        pf_rows(w, n, 1);
        int64_t m = 0;
        for (; m + 2 <= j->M; m += 2) f32_group_avx2(j, n, m, 2);
        if (m < j->M) f32_group_avx2(j, n, m, 1);
    }
}

/* ---- AVX-512 ---- */

TDM_TARGET_AVX512 static float zterm_avx512(const tdm_nbits_w *w, int64_t n, const float *sum) {
    const float *s = w->scales + n * w->nb, *zp = w->zp ? w->zp + n * w->nb : NULL;
    __m512 z = _mm512_setzero_ps();
    for (int64_t b = 0; b < w->nb; b += 16) {
        __mmask16 mask = (__mmask16)((1u << min64(16, w->nb - b)) - 1);
        __m512 sz = _mm512_maskz_loadu_ps(mask, s + b);
        if (zp) sz = _mm512_mul_ps(sz, _mm512_maskz_loadu_ps(mask, zp + b));
        z = _mm512_fmadd_ps(sz, _mm512_maskz_loadu_ps(mask, sum + b), z);
    }
    float r = _mm512_reduce_add_ps(z);
    return zp ? r : r * (float)(1 << (w->bits - 1));
}

/* One span of R rows of B (R <= 4) for one row of A: acc[r] += (d - zp sum qa) * s sa per
 * lane. `last`: the tail span (masked load, fewer blocks). */
#define VNNI_ROWS 4
typedef struct vnni_ctx {
    const uint8_t *row[VNNI_ROWS];
    const float *s[VNNI_ROWS], *z[VNNI_ROWS];
} vnni_ctx;

__attribute__((always_inline)) TDM_TARGET_VNNI static inline void
vnni_span(const vnni_ctx *c, int R, bool q4, bool has_zp, int64_t sp, __mmask64 wm, __mmask16 bm,
          int64_t b0, const int8_t *q, __m512 sal, __m512 ql, __m512i idx, __m512 zdef,
          __m512 *acc) {
    const __m512i nib = _mm512_set1_epi8(15);
    __m512i e = _mm512_loadu_si512(q), o = q4 ? _mm512_loadu_si512(q + 64) : e;
    for (int r = 0; r < R; r++) {
        __m512i wv = _mm512_maskz_loadu_epi8(wm, c->row[r] + sp * 64);
        __m512i d;
        if (q4) {
            __m512i lo = _mm512_and_si512(wv, nib);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), nib);
            d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, e), hi, o);
        } else {
            d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, e);
        }
        __m512 sc = _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(bm, c->s[r] + b0));
        __m512 zl = has_zp ? _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(bm, c->z[r] + b0))
                           : zdef;
        __m512 t = _mm512_fnmadd_ps(zl, ql, _mm512_cvtepi32_ps(d));
        acc[r] = _mm512_fmadd_ps(t, _mm512_mul_ps(sc, sal), acc[r]);
    }
}

__attribute__((always_inline)) TDM_TARGET_VNNI static inline void
vnni_rows(const tdm_nbits_job *j, int64_t n, int R, bool q4, bool has_zp) {
    const tdm_nbits_w *w = j->w;
    const int64_t rowb = row_bytes(w), nsp = (rowb + 63) / 64, tail = rowb - (nsp - 1) * 64;
    const __mmask64 tmask = tail >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << tail) - 1);
    const int64_t span = q4 ? 128 : 64, bps = span / w->bs > 0 ? span / w->bs : 1;
    const int bshift = __builtin_ctzll((unsigned long long)w->bs);
    const __m512i idx = _mm512_loadu_si512(j->lane_block);
    const __m512 zdef = _mm512_set1_ps((float)(1 << (w->bits - 1)));
    const __mmask16 fullm = (__mmask16)((1u << bps) - 1);
    vnni_ctx c;
    for (int r = 0; r < R; r++) {
        c.row[r] = w->b + (n + r) * rowb;
        c.s[r] = w->scales + (n + r) * w->nb;
        c.z[r] = has_zp ? w->zp + (n + r) * w->nb : NULL;
    }
    for (int64_t m = 0; m < j->M; m++) {
        const int8_t *qa = (const int8_t *)j->a + m * j->kq;
        const float *sl = j->sal + m * j->sal_stride, *ql = j->sql + m * j->sal_stride;
        __m512 acc[VNNI_ROWS];
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
        int64_t sp = 0;
        for (; sp + 1 < nsp; sp++)
            vnni_span(&c, R, q4, has_zp, sp, ~(__mmask64)0, fullm, (sp * span) >> bshift,
                      qa + sp * (q4 ? 128 : 64), _mm512_loadu_ps(sl + sp * 16),
                      _mm512_loadu_ps(ql + sp * 16), idx, zdef, acc);
        int64_t b0 = (sp * span) >> bshift, cnt = w->nb - b0 < bps ? w->nb - b0 : bps;
        vnni_span(&c, R, q4, has_zp, sp, tmask, (__mmask16)((1u << cnt) - 1), b0,
                  qa + sp * (q4 ? 128 : 64), _mm512_loadu_ps(sl + sp * 16),
                  _mm512_loadu_ps(ql + sp * 16), idx, zdef, acc);
        if (R == 4) { /* the four sums at once: a 4 x 4 transpose-add per 128-bit lane */
            __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(acc[0], acc[1]),
                                      _mm512_unpackhi_ps(acc[0], acc[1]));
            __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(acc[2], acc[3]),
                                      _mm512_unpackhi_ps(acc[2], acc[3]));
            __m512d d0 = _mm512_castps_pd(t0), d1 = _mm512_castps_pd(t1);
            __m512 u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d0, d1)),
                                     _mm512_castpd_ps(_mm512_unpackhi_pd(d0, d1)));
            __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u), _mm512_extractf32x8_ps(u, 1));
            __m128 y = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            if (j->bias) y = _mm_add_ps(y, _mm_loadu_ps(j->bias + n));
            _mm_storeu_ps(j->Y + m * w->N + n, y);
            continue;
        }
        for (int r = 0; r < R; r++) {
            float y = _mm512_reduce_add_ps(acc[r]);
            j->Y[m * w->N + n + r] = j->bias ? y + j->bias[n + r] : y;
        }
    }
}

#define VNNI_VARIANT(name, q4, zp, R)                                                           \
    TDM_TARGET_VNNI static void name(const tdm_nbits_job *j, int64_t n0, int64_t n1) {         \
        int64_t n = n0;                                                                         \
        pf_start(j->w, n0);                                                                     \
        for (; n + (R) <= n1; n += (R)) pf_rows(j->w, n, (R)), vnni_rows(j, n, (R), q4, zp);    \
        for (; n < n1; n++) pf_rows(j->w, n, 1), vnni_rows(j, n, 1, q4, zp);                    \
    }
/* Four rows of B at a time share the loads of A and hide each other's latencies when B is in
 * the caches; one at a time streams B from memory faster (fewer concurrent streams for the
 * prefetchers: the 8-bit LM head, 28 MB, 3.1-3.9 ms against 5.6-5.8 ms for four at a time). */
VNNI_VARIANT(vnni_q4, true, false, VNNI_ROWS)
VNNI_VARIANT(vnni_q4_zp, true, true, VNNI_ROWS)
VNNI_VARIANT(vnni_q8, false, false, VNNI_ROWS)
VNNI_VARIANT(vnni_q8_zp, false, true, VNNI_ROWS)
VNNI_VARIANT(vnni_q4_1, true, false, 1)
VNNI_VARIANT(vnni_q4_zp_1, true, true, 1)
VNNI_VARIANT(vnni_q8_1, false, false, 1)
VNNI_VARIANT(vnni_q8_zp_1, false, true, 1)


TDM_TARGET_VNNI static void rows_vnni_i8(const tdm_nbits_job *j, int64_t n0, int64_t n1) {
    const tdm_nbits_w *w = j->w;
    bool zp = w->zp != NULL, big = !nb_four_rows(w);
    if (w->bits == 4) {
        if (big) zp ? vnni_q4_zp_1(j, n0, n1) : vnni_q4_1(j, n0, n1);
        else zp ? vnni_q4_zp(j, n0, n1) : vnni_q4(j, n0, n1);
    } else {
        if (big) zp ? vnni_q8_zp_1(j, n0, n1) : vnni_q8_1(j, n0, n1);
        else zp ? vnni_q8_zp(j, n0, n1) : vnni_q8(j, n0, n1);
    }
}

/* Lane i of the result: the maximum (add false) or the sum (add true) of the 16 lanes of v[i],
 * by a transposing reduction (45 shuffles and operations for 16 vectors, a third of 16
 * horizontal reductions'). Maxima of non-negative values and sums of integers below 2^24 come
 * out exactly as one vector's reduction gives them. */
__attribute__((always_inline)) TDM_TARGET_VNNI static inline __m512 red16_ps(const __m512 *v,
                                                                            const bool add) {
#define RED16_OP(a, b) (add ? _mm512_add_ps(a, b) : _mm512_max_ps(a, b))
    __m512 t[8], u[4], w[2];
    for (int k = 0; k < 8; k++) /* per 128-bit chunk: v[2k] at lanes 0, 2, v[2k + 1] at 1, 3 */
        t[k] = RED16_OP(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                        _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++) { /* per chunk: v[4k + i] at lane i */
        __m512d a = _mm512_castps_pd(t[2 * k]), b = _mm512_castps_pd(t[2 * k + 1]);
        u[k] = RED16_OP(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                        _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int k = 0; k < 2; k++) /* chunks 0 + 1 and 2 + 3 of u[2k], then of u[2k + 1] */
        w[k] = RED16_OP(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0x88),
                        _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0xdd));
    return RED16_OP(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xdd));
#undef RED16_OP
}

/* A's int8 preparation for the VNNI variants (tdm_nbits_quant_fn): per block, codes rounded
 * half away from zero as the generic one does (k_nbits.c), written in natural order (8-bit:
 * the final order) and, for 4 bits, split per span of 128 into 64 evens then 64 odds (the
 * int16 pairs' low and high bytes, vpmovwb); lane sums by vpdpbusd with ones. Blocks go 16 at
 * a time: their maxima and code sums reduced together (red16_ps), their scales divided as one
 * vector (an 8-row decode step's quantisation had been 10-15x a single row's). */
TDM_TARGET_VNNI static void quant_vnni(const tdm_nbits_w *w, const float *a, int64_t kq, int8_t *q,
                                       float *sal, float *sql, int64_t sal_stride, float *sa,
                                       float *sum, int8_t *tmp) {
    const int64_t K = w->K, bs = w->bs;
    const bool q4 = w->bits == 4;
    int8_t *nat = q4 ? tmp : q;
    if (kq > K) memset(nat + K, 0, (size_t)(kq - K)); /* the loops below write every code < K */
    const __m512 half = _mm512_set1_ps(0.5f), c127 = _mm512_set1_ps(127.0f);
    const __m512i signbit = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t b0 = 0; b0 < w->nb; b0 += 16) {
        const int ng = (int)min64(16, w->nb - b0);
        __m512 m[16], qf[16];
        float inv[16];
        for (int i = 0; i < 16; i++) {
            m[i] = _mm512_setzero_ps();
            int64_t k0 = (b0 + i) * bs, k1 = k0 + bs < K ? k0 + bs : K;
            for (int64_t k = k0; i < ng && k < k1; k += 16) {
                __mmask16 mk = k1 - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k1 - k)) - 1);
                m[i] = _mm512_max_ps(m[i], _mm512_abs_ps(_mm512_maskz_loadu_ps(mk, a + k)));
            }
        }
        __m512 amax = red16_ps(m, false);
        /* 127 / amax where amax > 0, else 0; sa = amax / 127 */
        _mm512_storeu_ps(inv, _mm512_maskz_div_ps(
                                  _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ), c127, amax));
        __m512 sav = _mm512_div_ps(amax, c127);
        for (int i = 0; i < 16; i++) {
            __m512i qs = _mm512_setzero_si512();
            const __m512 vinv = _mm512_set1_ps(inv[i]);
            int64_t k0 = (b0 + i) * bs, k1 = k0 + bs < K ? k0 + bs : K;
            for (int64_t k = k0; i < ng && k < k1; k += 16) {
                __mmask16 mk = k1 - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k1 - k)) - 1);
                __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, a + k), vinv);
                __m512 h = _mm512_castsi512_ps(_mm512_or_si512(
                    _mm512_and_si512(_mm512_castps_si512(x), signbit), _mm512_castps_si512(half)));
                __m512i c = _mm512_maskz_mov_epi32(mk, _mm512_cvttps_epi32(_mm512_add_ps(x, h)));
                qs = _mm512_add_epi32(qs, c);
                _mm_storeu_si128((__m128i *)(nat + k), _mm512_cvtepi32_epi8(c));
            }
            qf[i] = _mm512_cvtepi32_ps(qs); /* |sum| < 2^24: exact */
        }
        __mmask16 mb = (__mmask16)(ng == 16 ? 0xffffu : (1u << ng) - 1);
        _mm512_mask_storeu_ps(sa + b0, mb, sav);
        _mm512_mask_storeu_ps(sum + b0, mb, _mm512_mul_ps(sav, red16_ps(qf, true)));
    }
    if (!sql && !q4) return; /* the packed form's A: codes, sa and sum only (tdm_nbits_quant_fn) */
    const int64_t span = q4 ? 128 : 64, epl = q4 ? 8 : 4, nsp = kq / span;
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t sp = 0; sp < nsp; sp++) {
        const int8_t *src = nat + sp * span;
        if (q4) {
            __m512i x0 = _mm512_loadu_si512(src), x1 = _mm512_loadu_si512(src + 64);
            __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x0);
            __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x1);
            __m512i l8 = _mm512_add_epi32(_mm512_permutex2var_epi32(s0, ev, s1),
                                          _mm512_permutex2var_epi32(s0, od, s1));
            _mm512_storeu_ps(sql + sp * 16, _mm512_cvtepi32_ps(l8));
            /* evens: the low byte of each int16; odds: the high byte */
            __m256i e0 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_slli_epi16(x0, 8), 8));
            __m256i e1 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_slli_epi16(x1, 8), 8));
            __m256i o0 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(x0, 8));
            __m256i o1 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(x1, 8));
            int8_t *dst = q + sp * 128;
            _mm256_storeu_si256((__m256i *)dst, e0);
            _mm256_storeu_si256((__m256i *)(dst + 32), e1);
            _mm256_storeu_si256((__m256i *)(dst + 64), o0);
            _mm256_storeu_si256((__m256i *)(dst + 96), o1);
        } else {
            __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones,
                                             _mm512_loadu_si512(src));
            _mm512_storeu_ps(sql + sp * 16, _mm512_cvtepi32_ps(s0));
        }
    }
    /* A's scale per lane */
    for (int64_t l = 0; l < sal_stride; l++) {
        int64_t blk = l * epl / bs;
        sal[l] = blk < w->nb ? sa[blk] : 0.0f;
    }
}

/* float path, as rows_avx2_f32 with 16 lanes. A decode of several rows of A (the engine's
 * batch) takes them G at a time: each block of B is unpacked to floats once for the G rows
 * (the unpacking, not the FMAs, is most of the work); every row's sums are made in the order
 * of a single row's, so the result of a row does not depend on the others. */
__attribute__((always_inline)) TDM_TARGET_AVX512 static inline void
f32_group_avx512(const tdm_nbits_job *j, int64_t n, int64_t m0, const int G) {
    const tdm_nbits_w *w = j->w;
    const bool q4 = w->bits == 4;
    const int64_t rowb = row_bytes(w), bs = w->bs, bb = bs * w->bits / 8;
    const __m512i nib = _mm512_set1_epi32(15);
    const uint8_t *row = w->b + n * rowb;
    const float *s = w->scales + n * w->nb;
    const float *a[4];
    __m512 acc[4];
    for (int g = 0; g < G; g++) {
        a[g] = (const float *)j->a + (m0 + g) * j->kq;
        acc[g] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < w->nb; b++) {
        const uint8_t *r = row + b * bb;
        int64_t x = b * bs;
        __m512 t0[4], t1[4];
        for (int g = 0; g < G; g++) t0[g] = t1[g] = _mm512_setzero_ps();
        if (q4) {
            for (int64_t c = 0; c < bb; c += 16, r += 16, x += 32) {
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)r));
                __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, nib));
                __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
                for (int g = 0; g < G; g++) {
                    t0[g] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(a[g] + x), t0[g]);
                    t1[g] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(a[g] + x + 16), t1[g]);
                }
            }
        } else {
            for (int64_t c = 0; c < bb; c += 16, r += 16, x += 16) {
                __m512 v = _mm512_cvtepi32_ps(
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)r)));
                for (int g = 0; g < G; g++)
                    t0[g] = _mm512_fmadd_ps(v, _mm512_loadu_ps(a[g] + x), t0[g]);
            }
        }
        __m512 sc = _mm512_set1_ps(s[b]);
        for (int g = 0; g < G; g++) acc[g] = _mm512_fmadd_ps(_mm512_add_ps(t0[g], t1[g]), sc, acc[g]);
    }
    for (int g = 0; g < G; g++)
        j->Y[(m0 + g) * w->N + n] = finish_z(j, n, _mm512_reduce_add_ps(acc[g]),
                                             zterm_avx512(w, n, j->sum + (m0 + g) * w->nb));
}

TDM_TARGET_AVX512 static void rows_avx512_f32(const tdm_nbits_job *j, int64_t n0, int64_t n1) {
    const tdm_nbits_w *w = j->w;
    pf_start(w, n0);
    for (int64_t n = n0; n < n1; n++) {
        pf_rows(w, n, 1);
        int64_t m = 0;
        for (; m + 4 <= j->M; m += 4) f32_group_avx512(j, n, m, 4);
        if (j->M - m == 3) f32_group_avx512(j, n, m, 3);
        else if (j->M - m == 2) f32_group_avx512(j, n, m, 2);
        else if (j->M - m == 1) f32_group_avx512(j, n, m, 1);
    }
}
#endif

/* Best first; the portable ones take everything. */
typedef struct variant_entry {
    int level, bits; /* bits 0: any */
    bool int8;
    int64_t bs_mult; /* block size must be a multiple of this */
    tdm_nbits_variant v;
} variant_entry;

static const variant_entry variants[] = {
#ifdef TDM_SIMD_X86
    {TDM_ISA_AVX512_CORE_VNNI, 4, true, 16, {rows_vnni_i8, true, 64, 128, 16, quant_vnni}},
    {TDM_ISA_AVX512_CORE_VNNI, 8, true, 16, {rows_vnni_i8, true, 0, 64, 16, quant_vnni}},
    {TDM_ISA_AVX2, 4, true, 16, {rows_avx2_i8, true, 32, 64, 8, quant_avx2}},
    {TDM_ISA_AVX2, 8, true, 16, {rows_avx2_i8, true, 0, 32, 8, quant_avx2}},
    {TDM_ISA_AVX512_CORE, 4, false, 32, {rows_avx512_f32, false, 16, 0, 0}},
    {TDM_ISA_AVX512_CORE, 8, false, 16, {rows_avx512_f32, false, 0, 0, 0}},
    {TDM_ISA_AVX2, 4, false, 32, {rows_avx2_f32, false, 16, 0, 0}},
    {TDM_ISA_AVX2, 8, false, 16, {rows_avx2_f32, false, 0, 0, 0}},
#endif
    {TDM_ISA_PORTABLE, 0, true, 1, {rows_portable_i8, true, 0, 0, 0}},
    {TDM_ISA_PORTABLE, 0, false, 1, {rows_portable_f32, false, 0, 0, 0}},
};

const tdm_nbits_variant *tdm_nbits_pick(int level, int bits, bool int8, int64_t bs) {
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        const variant_entry *e = &variants[i];
        if (e->level <= level && (e->bits == 0 || e->bits == bits) && e->int8 == int8 &&
            bs % e->bs_mult == 0)
            return &e->v;
    }
    return NULL; /* not reached: the portable entries match everything */
}
