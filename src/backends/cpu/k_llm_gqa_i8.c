/* The 8-bit KV cache of GroupQueryAttention (k_llm_gqa.c with an int8 past/present; the
 * generator's kv_type "int8"): rows of int8 codes with one bfloat16 scale per 32 codes (the
 * row format: ops/kv_int8.h), quantised as each new row enters the cache:
 *     s = max|x| / 127 over the group, rounded up to a bfloat16 (so no code passes 127),
 *     c[i] = round-to-nearest-even(x[i] / s) in [-127, 127] (s = 0: all 0).
 * The attention reads the codes straight from the cache (about a quarter of float32's bytes):
 * the dot products widen them to float32 in registers and multiply each by its group's scale
 * (bfloat16 widens with a shift), all heads of a kv group per cache row (each row is read
 * once per group). Variants: portable C, AVX2 + FMA (8 codes a step), AVX-512 (16 codes a
 * step), the best at or below the device's level (TANDEM_CPU_ISA caps). No VNNI form: it would
 * need the query quantised too (an error of its own), and these loops are bound by the
 * cache's memory reads, not by their arithmetic. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_llm.h"

#define GROUP TDM_KV_I8_GROUP

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* the smallest bfloat16 >= x (x >= 0, finite) */
static inline uint16_t bf16_up(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (u & 0xffffu) u += 0x10000u;
    return (uint16_t)(u >> 16);
}

/* the scale of group g of a row of d codes */
static inline float group_scale(const int8_t *row, int64_t d, int64_t g) {
    uint16_t h;
    memcpy(&h, row + d + 2 * g, sizeof h);
    return bf16_to_f32(h);
}

void tdm_llm_kv_quantize_row(const float *x, int64_t d, int8_t *row) {
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        int64_t g1 = g0 + GROUP < d ? g0 + GROUP : d;
        float mx = 0.0f;
        for (int64_t i = g0; i < g1; i++) {
            float a = fabsf(x[i]);
            mx = a > mx ? a : mx;
        }
        uint16_t sb = bf16_up(mx / 127.0f);
        float s = bf16_to_f32(sb), inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int64_t i = g0; i < g1; i++) {
            float c = nearbyintf(x[i] * inv);
            row[i] = (int8_t)(c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c);
        }
        memcpy(row + d + 2 * (g0 / GROUP), &sb, sizeof sb);
    }
}

void tdm_llm_kv_dequantize_rows(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    for (int64_t t = 0; t < n; t++) {
        const int8_t *r = rows + t * rs;
        for (int64_t i = 0; i < d; i++) out[t * d + i] = group_scale(r, d, i / GROUP) * (float)r[i];
    }
}

/* ---- portable ---- */

/* x[i] = the row's value i, i < d */
static void widen_row(const int8_t *r, int64_t d, float *x) {
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        float s = group_scale(r, d, g0 / GROUP);
        int64_t g1 = g0 + GROUP < d ? g0 + GROUP : d;
        for (int64_t i = g0; i < g1; i++) x[i] = s * (float)r[i];
    }
}

static void scores_portable(const float *const *q, int64_t G, const int8_t *k, int64_t rs,
                            int64_t n, int64_t d, float scale, float *out, int64_t ld) {
    float x[TDM_LLM_KV_I8_MAX_D];
    for (int64_t t = 0; t < n; t++) {
        widen_row(k + t * rs, d, x);
        for (int64_t h = 0; h < G; h++) {
            float acc[4] = {0};
            int64_t i = 0;
            for (; i + 4 <= d; i += 4)
                for (int u = 0; u < 4; u++) acc[u] += q[h][i + u] * x[i + u];
            float a = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            for (; i < d; i++) a += q[h][i] * x[i];
            out[h * ld + t] = scale * a;
        }
    }
}

static void pv_portable(const float *p, int64_t ld, int64_t G, const int8_t *v, int64_t rs,
                        int64_t n, int64_t d, float *y, int64_t ys) {
    float x[TDM_LLM_KV_I8_MAX_D];
    for (int64_t t = 0; t < n; t++) {
        widen_row(v + t * rs, d, x);
        for (int64_t h = 0; h < G; h++) {
            float w = p[h * ld + t];
            float *o = y + h * ys;
            for (int64_t i = 0; i < d; i++) o[i] += w * x[i];
        }
    }
}

static const tdm_llm_i8_fns fns_portable = {scores_portable, pv_portable, TDM_ISA_PORTABLE};

#ifdef TDM_SIMD_X86
#include <immintrin.h>

/* ---- AVX2 + FMA ---- */

/* codes c[0..8) widened and times s */
TDM_TARGET_AVX2 static inline __m256 widen8(const int8_t *c, __m256 s) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)c))), s);
}

TDM_TARGET_AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One row's scores for HN (compile-time: the accumulators stay in registers) heads; the d % 8
 * tail in C. */
TDM_TARGET_AVX2 static __attribute__((always_inline)) inline void
score_row_avx2(const float *const *q, int HN, const int8_t *r, int64_t d, int64_t d8, float scale,
               float *out, int64_t ld, int64_t t) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    __m256 sv = _mm256_setzero_ps();
    for (int64_t i = 0; i < d8; i += 8) {
        if (i % GROUP == 0) sv = _mm256_set1_ps(group_scale(r, d, i / GROUP));
        __m256 kv = widen8(r + i, sv);
        for (int h = 0; h < HN; h++) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + i), kv, acc[h]);
    }
    float st = d8 < d ? group_scale(r, d, d8 / GROUP) : 0.0f;
    for (int h = 0; h < HN; h++) {
        float a = hsum8(acc[h]);
        for (int64_t i = d8; i < d; i++) a += q[h][i] * (st * (float)r[i]);
        out[h * ld + t] = scale * a;
    }
}

TDM_TARGET_AVX2 static void scores_avx2(const float *const *q, int64_t G, const int8_t *k,
                                        int64_t rs, int64_t n, int64_t d, float scale, float *out,
                                        int64_t ld) {
    int64_t d8 = d & ~(int64_t)7;
    for (int64_t h0 = 0; h0 < G; h0 += 4) {
        int hn = G - h0 < 4 ? (int)(G - h0) : 4;
        const float *const *qh = q + h0;
        float *o = out + h0 * ld;
        for (int64_t t = 0; t < n; t++) {
            const int8_t *r = k + t * rs;
            switch (hn) {
            case 1: score_row_avx2(qh, 1, r, d, d8, scale, o, ld, t); break;
            case 2: score_row_avx2(qh, 2, r, d, d8, scale, o, ld, t); break;
            case 3: score_row_avx2(qh, 3, r, d, d8, scale, o, ld, t); break;
            default: score_row_avx2(qh, 4, r, d, d8, scale, o, ld, t); break;
            }
        }
    }
}

/* 32 columns (one scale group) x HN heads of accumulators in registers, over all rows; NV
 * vectors of 8 columns (compile-time: no accumulator spills to the stack). */
TDM_TARGET_AVX2 static __attribute__((always_inline)) inline void
pv_block_avx2(const float *p, int64_t ld, int HN, int NV, const int8_t *v, int64_t rs, int64_t n,
              int64_t d, int64_t i0, float *y, int64_t ys) {
    __m256 acc[2][4];
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) acc[h][c] = _mm256_loadu_ps(y + h * ys + i0 + 8 * c);
    for (int64_t t = 0; t < n; t++) {
        const int8_t *r = v + t * rs;
        __m256 sv = _mm256_set1_ps(group_scale(r, d, i0 / GROUP));
        __m256 w[2];
        for (int h = 0; h < HN; h++) w[h] = _mm256_set1_ps(p[h * ld + t]);
        for (int c = 0; c < NV; c++) {
            __m256 x = widen8(r + i0 + 8 * c, sv);
            for (int h = 0; h < HN; h++) acc[h][c] = _mm256_fmadd_ps(w[h], x, acc[h][c]);
        }
    }
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) _mm256_storeu_ps(y + h * ys + i0 + 8 * c, acc[h][c]);
}

TDM_TARGET_AVX2 static void pv_avx2(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                    int64_t rs, int64_t n, int64_t d, float *y, int64_t ys) {
    int64_t d8 = d & ~(int64_t)7;
    for (int64_t i0 = 0; i0 < d8; i0 += 32) {
        int nv = d8 - i0 >= 32 ? 4 : (int)((d8 - i0) / 8);
        for (int64_t h0 = 0; h0 < G; h0 += 2) {
            const float *ph = p + h0 * ld;
            float *yh = y + h0 * ys;
            if (G - h0 >= 2 && nv == 4) {
                pv_block_avx2(ph, ld, 2, 4, v, rs, n, d, i0, yh, ys);
                continue;
            }
            for (int64_t h = h0; h < G && h < h0 + 2; h++) /* one head at a time */
                switch (nv) {
                case 1: pv_block_avx2(p + h * ld, ld, 1, 1, v, rs, n, d, i0, y + h * ys, ys); break;
                case 2: pv_block_avx2(p + h * ld, ld, 1, 2, v, rs, n, d, i0, y + h * ys, ys); break;
                case 3: pv_block_avx2(p + h * ld, ld, 1, 3, v, rs, n, d, i0, y + h * ys, ys); break;
                default: pv_block_avx2(p + h * ld, ld, 1, 4, v, rs, n, d, i0, y + h * ys, ys); break;
                }
        }
    }
    if (d8 < d)
        for (int64_t t = 0; t < n; t++) {
            const int8_t *r = v + t * rs;
            float s = group_scale(r, d, d8 / GROUP);
            for (int64_t h = 0; h < G; h++) {
                float w = p[h * ld + t] * s;
                for (int64_t i = d8; i < d; i++) y[h * ys + i] += w * (float)r[i];
            }
        }
}

static const tdm_llm_i8_fns fns_avx2 = {scores_avx2, pv_avx2, TDM_ISA_AVX2};

/* ---- AVX-512 ---- */

TDM_TARGET_AVX512 static inline __m512 widen16(const int8_t *c, __m512 s) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)c))), s);
}

TDM_TARGET_AVX512 static inline __m512 widen16_mask(const int8_t *c, __mmask16 m, __m512 s) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, c))), s);
}

TDM_TARGET_AVX512 static inline __mmask16 mask_of(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* Cache rows are read in order: one 4 KiB step ahead (the next block's rows) keeps loads in
 * flight while the group's heads compute (a kv head's rows are a short run in memory). */
#ifndef I8_AHEAD
#define I8_AHEAD 4096
#endif

/* One row's scores for HN (compile-time: the accumulators stay in registers) heads. */
#define AI __attribute__((always_inline)) inline
TDM_TARGET_AVX512 static AI void score_row_avx512(const float *const *q, int HN, const int8_t *r,
                                                  int64_t d, float scale, float *out, int64_t ld,
                                                  int64_t t) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    __m512 sv = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
        if (i % GROUP == 0) sv = _mm512_set1_ps(group_scale(r, d, i / GROUP));
        if (i + 16 <= d) {
            __m512 kv = widen16(r + i, sv);
            for (int h = 0; h < HN; h++) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q[h] + i), kv, acc[h]);
        } else {
            __mmask16 m = mask_of(d - i);
            __m512 kv = widen16_mask(r + i, m, sv);
            for (int h = 0; h < HN; h++)
                acc[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q[h] + i), kv, acc[h]);
        }
    }
    for (int h = 0; h < HN; h++) out[h * ld + t] = scale * _mm512_reduce_add_ps(acc[h]);
}

TDM_TARGET_AVX512 static void scores_avx512(const float *const *q, int64_t G, const int8_t *k,
                                            int64_t rs, int64_t n, int64_t d, float scale,
                                            float *out, int64_t ld) {
    for (int64_t h0 = 0; h0 < G; h0 += 4) {
        int hn = G - h0 < 4 ? (int)(G - h0) : 4;
        const float *const *qh = q + h0;
        float *o = out + h0 * ld;
        for (int64_t t = 0; t < n; t++) {
            const int8_t *r = k + t * rs;
            if (h0 == 0) _mm_prefetch((const char *)(r + I8_AHEAD), _MM_HINT_T0);
            switch (hn) {
            case 1: score_row_avx512(qh, 1, r, d, scale, o, ld, t); break;
            case 2: score_row_avx512(qh, 2, r, d, scale, o, ld, t); break;
            case 3: score_row_avx512(qh, 3, r, d, scale, o, ld, t); break;
            default: score_row_avx512(qh, 4, r, d, scale, o, ld, t); break;
            }
        }
    }
}

/* 64 columns (two scale groups) x HN heads of accumulators in registers, over all rows; NV
 * vectors of 16 columns (the last one masked by m[NV - 1]). */
TDM_TARGET_AVX512 static AI void pv_block_avx512(const float *p, int64_t ld, int HN, int NV,
                                                 const __mmask16 *m, const int8_t *v, int64_t rs,
                                                 int64_t n, int64_t d, int64_t i0, float *y,
                                                 int64_t ys, bool prefetch) {
    __m512 acc[4][4];
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) acc[h][c] = _mm512_maskz_loadu_ps(m[c], y + h * ys + i0 + 16 * c);
    for (int64_t t = 0; t < n; t++) {
        const int8_t *r = v + t * rs;
        if (prefetch) _mm_prefetch((const char *)(r + I8_AHEAD), _MM_HINT_T0);
        __m512 wv[4];
        for (int h = 0; h < HN; h++) wv[h] = _mm512_set1_ps(p[h * ld + t]);
        __m512 sv = _mm512_setzero_ps();
        for (int c = 0; c < NV; c++) {
            if ((16 * c) % GROUP == 0) sv = _mm512_set1_ps(group_scale(r, d, (i0 + 16 * c) / GROUP));
            __m512 x = m[c] == 0xffff ? widen16(r + i0 + 16 * c, sv)
                                      : widen16_mask(r + i0 + 16 * c, m[c], sv);
            for (int h = 0; h < HN; h++) acc[h][c] = _mm512_fmadd_ps(wv[h], x, acc[h][c]);
        }
    }
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) _mm512_mask_storeu_ps(y + h * ys + i0 + 16 * c, m[c], acc[h][c]);
}

TDM_TARGET_AVX512 static void pv_avx512(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                        int64_t rs, int64_t n, int64_t d, float *y, int64_t ys) {
    for (int64_t i0 = 0; i0 < d; i0 += 64) {
        int64_t w = d - i0 < 64 ? d - i0 : 64;
        int nv = (int)((w + 15) / 16);
        __mmask16 m[4];
        for (int c = 0; c < 4; c++) m[c] = mask_of(w - 16 * c);
        for (int64_t h0 = 0; h0 < G; h0 += 4) {
            int hn = G - h0 < 4 ? (int)(G - h0) : 4;
            const float *ph = p + h0 * ld;
            float *yh = y + h0 * ys;
            bool pf = h0 == 0 && i0 == 0;
            if (nv == 4) {
                switch (hn) {
                case 1: pv_block_avx512(ph, ld, 1, 4, m, v, rs, n, d, i0, yh, ys, pf); break;
                case 2: pv_block_avx512(ph, ld, 2, 4, m, v, rs, n, d, i0, yh, ys, pf); break;
                case 3: pv_block_avx512(ph, ld, 3, 4, m, v, rs, n, d, i0, yh, ys, pf); break;
                default: pv_block_avx512(ph, ld, 4, 4, m, v, rs, n, d, i0, yh, ys, pf); break;
                }
            } else { /* a narrower last chunk: one head at a time */
                for (int h = 0; h < hn; h++)
                    switch (nv) {
                    case 1: pv_block_avx512(ph + h * ld, ld, 1, 1, m, v, rs, n, d, i0, yh + h * ys, ys, pf); break;
                    case 2: pv_block_avx512(ph + h * ld, ld, 1, 2, m, v, rs, n, d, i0, yh + h * ys, ys, pf); break;
                    default: pv_block_avx512(ph + h * ld, ld, 1, 3, m, v, rs, n, d, i0, yh + h * ys, ys, pf); break;
                    }
            }
        }
    }
}

static const tdm_llm_i8_fns fns_avx512 = {scores_avx512, pv_avx512, TDM_ISA_AVX512_CORE};
#endif

const tdm_llm_i8_fns *tdm_llm_i8_fns_for(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX512_CORE) return &fns_avx512;
    if (level >= TDM_ISA_AVX2) return &fns_avx2;
#endif
    (void)level;
    return &fns_portable;
}
