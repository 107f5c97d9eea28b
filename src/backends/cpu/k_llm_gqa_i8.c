/* The 8-bit and 4-bit KV caches of GroupQueryAttention (k_llm_gqa.c with an int8 / uint8
 * past/present; the generator's kv_type "int8" / "int4"). The 4-bit rows (GGUF Q4_0's layout
 * over values rotated per 32 by a Walsh-Hadamard matrix: ops/kv_int8.h) go through the same
 * routines as the 8-bit ones (see "q4" below); what follows describes the 8-bit form.
 * The 8-bit cache: rows of int8 codes with one bfloat16 scale per 32 codes (the
 * row format: ops/kv_int8.h), quantised as each new row enters the cache:
 *     s = max|x| / 127 over the group, rounded up to a bfloat16 (so no code passes 127),
 *     c[i] = round-to-nearest-even(x[i] / s) in [-127, 127] (s = 0: all 0).
 * The attention reads the codes straight from the cache (about a quarter of float32's bytes),
 * all heads of a kv group per cache row (each row is read once per group), in one call per
 * row range:
 *   - scores: the query is quantised the same way (tdm_llm_q8_query: per 32, max|q| / 127,
 *     as llama.cpp's q8_0 dot products do), once per call, and the dot products are integer
 *     sums per group of 32 times s_k * s_q: AVX-512 VNNI (vpdpbusd on the key rows
 *     transposed 16 at a time within 128-bit lanes, shared by the group's heads), AVX2 (key
 *     rows transposed 8 at a time, vpsignb + vpmaddubsw + vpmaddwd; the 4-bit rows transposed
 *     as stored and their unsigned nibbles against the signed query, no vpsignb; also the
 *     AVX-512 level without VNNI), portable C;
 *   - p.V: AVX-512 VNNI rounds each block of 64 weights p * s_v to int16 against the block's
 *     largest and adds two rows per vpdpwssd; AVX2 makes the same int16 weights and integer
 *     sums with vpmaddwd (the same results to the bit; an 8-bit last group shorter than 32 in
 *     float32); AVX-512 without VNNI, 8-bit (rows' scales folded into the weights), in float32
 *     FMAs; portable C.
 * The best at or below the device's level (TANDEM_CPU_ISA caps). AVX-VNNI (VEX, on AVX2-only
 * CPUs) has no level of its own in cpu_isa.h; those CPUs take the AVX2 form. This file: the
 * scalar row routines, the portable and AVX2 forms and the choice of level; the AVX-512
 * forms: k_llm_gqa_i8_avx512.c; what both use: k_llm_gqa_i8.h. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_llm_gqa_i8.h"


/* the scale of group g of a row whose scales start at byte so */
static inline float group_scale(const int8_t *row, int64_t so, int64_t g) {
    uint16_t h;
    memcpy(&h, row + so + 2 * g, sizeof h);
    return tdm_bf16_to_f32(h);
}

/* the signed value of code i of a row: the 8-bit code, or the 4-bit code less 8 */
static inline int kv_code(const int8_t *r, int64_t i, bool q4) {
    if (!q4) return r[i];
    uint8_t b = (uint8_t)r[(i / GROUP) * 16 + i % 16];
    return (int)((i % GROUP < 16 ? b : b >> 4) & 15u) - 8;
}

/* value i of a row whose scales start at byte so: its group's scale times its code (the one
 * float product every widener of the cache computes, so they agree bit for bit) */
static inline float kv_value(const int8_t *r, int64_t so, int64_t i, bool q4) {
    return group_scale(r, so, i / GROUP) * (float)kv_code(r, i, q4);
}

/* v (|v| <= 127 give or take a rounding) rounded to the nearest integer, ties to even, in
 * [-127, 127]: adding 1.5 * 2^23 rounds as nearbyintf does in the default mode, without its
 * library call. NaN (a NaN input, or an infinite one times a zero inverse) gives 0, as the
 * vector forms do (converting NaN to an integer type is undefined in C) */
static inline float round_code(float v) {
    v = (v + 12582912.0f) - 12582912.0f;
    return v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f; /* NaN: 0 */
}

/* ... in [-8, 7] for the 4-bit codes (|v| <= 8 give or take a rounding) */
static inline int round_code4(float v) {
    v = (v + 12582912.0f) - 12582912.0f;
    return v > 7.0f ? 7 : v < -8.0f ? -8 : v == v ? (int)v : 0;
}

/* the largest |x[i]|, i < n: one group's range, for the cache rows and the query alike */
static float abs_max(const float *x, int64_t n) {
    float mx = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        mx = a > mx ? a : mx;
    }
    return mx;
}

void tdm_llm_kv_quantize_row(const float *x, int64_t d, int8_t *row) {
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        int64_t g1 = g0 + GROUP < d ? g0 + GROUP : d;
        float mx = abs_max(x + g0, g1 - g0);
        uint16_t sb;
        float inv = tdm_llm_kv_scale8(mx, &sb);
        for (int64_t i = g0; i < g1; i++)
            row[i] = (int8_t)round_code(x[i] * inv);
        memcpy(row + d + 2 * (g0 / GROUP), &sb, sizeof sb);
    }
}

static AI void dequantize(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out,
                          bool q4) {
    int64_t so = scales_at(d, q4);
    for (int64_t t = 0; t < n; t++) {
        const int8_t *r = rows + t * rs;
        for (int64_t i = 0; i < d; i++) out[t * d + i] = kv_value(r, so, i, q4);
    }
}

void tdm_llm_kv_dequantize_rows(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    dequantize(rows, rs, n, d, out, false);
}

void tdm_llm_kv4_dequantize_rows(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    dequantize(rows, rs, n, d, out, true);
}

void tdm_llm_kv4_rotate(float *x, int64_t d) {
    for (int64_t g0 = 0; g0 + GROUP <= d; g0 += GROUP) {
        float *v = x + g0;
        for (int h = 1; h < GROUP; h <<= 1)
            for (int i = 0; i < GROUP; i += 2 * h)
                for (int k = i; k < i + h; k++) {
                    float a = v[k], b = v[k + h];
                    v[k] = a + b;
                    v[k + h] = a - b;
                }
        for (int i = 0; i < GROUP; i++) v[i] *= 0.17677669529663688f; /* 1 / sqrt(32) */
    }
}

void tdm_llm_kv4_quantize_row(const float *x0, int64_t d, int8_t *row) {
    float x[TDM_LLM_KV_I8_MAX_D];
    memcpy(x, x0, (size_t)d * sizeof(float));
    tdm_llm_kv4_rotate(x, d);
    int64_t ng = (d + GROUP - 1) / GROUP;
    memset(row, 0x88, (size_t)(16 * ng)); /* code 8 (value 0) past d */
    for (int64_t g = 0; g < ng; g++) {
        int64_t g0 = g * GROUP, g1 = g0 + GROUP < d ? g0 + GROUP : d;
        float m = 0.0f; /* the value of largest magnitude: it gets code 0 (-8 s) */
        for (int64_t i = g0; i < g1; i++) m = fabsf(x[i]) > fabsf(m) ? x[i] : m;
        uint16_t sb;
        float inv = tdm_llm_kv_scale4(fabsf(m), m, &sb);
        uint8_t *q = (uint8_t *)row + 16 * g;
        for (int64_t i = g0; i < g1; i++) {
            unsigned c = (unsigned)(round_code4(x[i] * inv) + 8);
            int64_t j = (i - g0) % 16;
            q[j] = (uint8_t)(i - g0 < 16 ? (q[j] & 0xf0u) | c : (q[j] & 0x0fu) | (c << 4));
        }
        memcpy(row + 16 * ng + 2 * g, &sb, sizeof sb);
    }
}

/* ---- portable ---- */

/* x[i] = the row's value i, i < d */
static AI void widen_row(const int8_t *r, int64_t d, float *x, bool q4) {
    int64_t so = scales_at(d, q4);
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        float s = group_scale(r, so, g0 / GROUP);
        int64_t g1 = g0 + GROUP < d ? g0 + GROUP : d;
        for (int64_t i = g0; i < g1; i++) x[i] = s * (float)kv_code(r, i, q4);
    }
}

void tdm_llm_q8_query(const float *q, int64_t d, int8_t *c, float *s) {
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        int64_t g1 = g0 + GROUP < d ? g0 + GROUP : d;
        float mx = abs_max(q + g0, g1 - g0);
        float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
        s[g0 / GROUP] = mx / 127.0f;
        for (int64_t i = g0; i < g1; i++) {
            c[i] = (int8_t)round_code(q[i] * inv);
        }
    }
}

void tdm_llm_q8_round(float *q, int64_t d) {
    int8_t c[TDM_LLM_KV_I8_MAX_D];
    float s[TDM_LLM_KV_I8_MAX_D / GROUP];
    tdm_llm_q8_query(q, d, c, s);
    for (int64_t i = 0; i < d; i++) q[i] = s[i / GROUP] * (float)c[i];
}


/* the group's queries quantised for the integer variants: codes zero-padded to whole
 * groups, scales times the softmax scale */
static void quantize_heads(const float *const *q, int64_t hn, int64_t d, float scale,
                           int8_t (*qc)[TDM_LLM_KV_I8_MAX_D], float (*qs)[TDM_LLM_KV_I8_MAX_D / GROUP]) {
    int64_t ng = (d + GROUP - 1) / GROUP;
    for (int64_t h = 0; h < hn; h++) {
        memset(qc[h] + d, 0, (size_t)(ng * GROUP - d));
        tdm_llm_q8_query(q[h], d, qc[h], qs[h]);
        for (int64_t g = 0; g < ng; g++) qs[h][g] *= scale;
    }
}


static AI void scores_port(const float *const *q, int64_t G, const int8_t *k, int64_t rs,
                           int64_t n, int64_t d, float scale, float *out, int64_t ld, bool q4) {
    int64_t so = scales_at(d, q4);
    int8_t qc[QHEADS][TDM_LLM_KV_I8_MAX_D];
    float qs[QHEADS][TDM_LLM_KV_I8_MAX_D / GROUP];
    for (int64_t h0 = 0; h0 < G; h0 += QHEADS) {
        int64_t hn = G - h0 < QHEADS ? G - h0 : QHEADS;
        quantize_heads(q + h0, hn, d, scale, qc, qs);
        for (int64_t t = 0; t < n; t++) {
            const int8_t *r = k + t * rs;
            for (int64_t h = 0; h < hn; h++) {
                float a = 0.0f;
                for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
                    int64_t g1 = g0 + GROUP < d ? g0 + GROUP : d;
                    int32_t acc = 0;
                    for (int64_t i = g0; i < g1; i++) acc += kv_code(r, i, q4) * qc[h][i];
                    a += group_scale(r, so, g0 / GROUP) * qs[h][g0 / GROUP] * (float)acc;
                }
                out[(h0 + h) * ld + t] = a;
            }
        }
    }
}

static AI void pv_port(const float *p, int64_t ld, int64_t G, const int8_t *v, int64_t rs,
                       int64_t n, int64_t d, float *y, int64_t ys, bool q4) {
    float x[TDM_LLM_KV_I8_MAX_D];
    for (int64_t t = 0; t < n; t++) {
        widen_row(v + t * rs, d, x, q4);
        for (int64_t h = 0; h < G; h++) {
            float w = p[h * ld + t];
            float *o = y + h * ys;
            for (int64_t i = 0; i < d; i++) o[i] += w * x[i];
        }
    }
}

/* no prefetch in portable C */
#define SCORES_PORT(q, G, k, rs, n, d, scale, out, ld, vnext, q4)                              \
    ((void)(vnext), scores_port(q, G, k, rs, n, d, scale, out, ld, q4))
SCORES_PAIR(, scores_portable, SCORES_PORT)
PV_PAIR(, pv_portable, pv_port)

static const tdm_llm_i8_fns fns_portable = {scores_portable, pv_portable, NULL,
    tdm_llm_kv_quantize_row, tdm_llm_kv_dequantize_rows, TDM_ISA_PORTABLE};
static const tdm_llm_i8_fns fns4_portable = {scores_portable4, pv_portable4, tdm_llm_kv4_rotate,
    tdm_llm_kv4_quantize_row, tdm_llm_kv4_dequantize_rows, TDM_ISA_PORTABLE};

#ifdef TDM_SIMD_X86
#include <immintrin.h>

#include "backends/cpu/cpu_avx2.h"

/* ---- AVX2 + FMA ---- */

TDM_TARGET_AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The scores against the quantised query (the codes of each head padded with zeros to a
 * whole group): per group of 32, vpsignb moves the query's signs onto the key codes,
 * vpmaddubsw (|q| <= 127 times codes in [-127, 127]: pairs below 2^15, no saturation) and
 * vpmaddwd give 8 int32 sums of 4 products, scaled by sk * sq * scale into float
 * accumulators; one horizontal sum per row and head. A last group shorter than 32 codes is
 * read through a zero-padded copy. */
/* The 32 signed codes of the group at value g0 of a row (a last 8-bit group shorter than 32
 * codes through a zero-padded copy; a 4-bit group is always whole) */
TDM_TARGET_AVX2 static AI __m256i group_codes_avx2(const int8_t *r, int64_t d, int64_t g0, bool q4) {
    if (q4) {
        const __m128i nib = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
        __m128i x = _mm_loadu_si128((const __m128i *)(r + g0 / 2));
        __m128i lo = _mm_sub_epi8(_mm_and_si128(x, nib), eight);
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), nib), eight);
        return _mm256_set_m128i(hi, lo);
    }
    if (g0 + GROUP <= d) return _mm256_loadu_si256((const __m256i *)(r + g0));
    int8_t tail[GROUP] = {0};
    memcpy(tail, r + g0, (size_t)(d - g0));
    return _mm256_loadu_si256((const __m256i *)tail);
}

TDM_TARGET_AVX2 static __attribute__((always_inline)) inline void
score_row_avx2(const int8_t (*qc)[TDM_LLM_KV_I8_MAX_D], const float (*qs)[TDM_LLM_KV_I8_MAX_D / GROUP],
               int HN, const int8_t *r, int64_t d, float *out, int64_t ld, int64_t t, bool q4) {
    __m256 acc[QHEADS] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                          _mm256_setzero_ps()};
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t so = scales_at(d, q4);
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        __m256i kv = group_codes_avx2(r, d, g0, q4);
        float sk = group_scale(r, so, g0 / GROUP);
        for (int h = 0; h < HN; h++) {
            __m256i qv = _mm256_loadu_si256((const __m256i *)(qc[h] + g0));
            __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(qv), _mm256_sign_epi8(kv, qv));
            __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            acc[h] = _mm256_fmadd_ps(f, _mm256_set1_ps(sk * qs[h][g0 / GROUP]), acc[h]);
        }
    }
    for (int h = 0; h < HN; h++) out[h * ld + t] = hsum8(acc[h]);
}

/* Eight key rows at a time, transposed (d a multiple of 32): per group of 32 codes the eight
 * rows' 32 bytes are an 8 x 8 matrix of dwords, transposed by three unpack / lane-permute
 * steps so that vector c holds dword c of every row (row i in lane i); against the query's
 * dword c broadcast (vpsignb moves its signs onto the codes, vpmaddubsw with |q|, vpmaddwd
 * with ones) each lane gathers its row's integer sum of the group, shared by the heads of the
 * pass: no horizontal sums, one transposition per 8 rows for all heads. The group's sum is
 * scaled by the eight rows' key scales (eight dword loads) times the head's query scale. A last
 * block of fewer than 8 rows goes through a zero-padded copy, so every row's score is made by
 * the same operations whatever n (the same integer sums per group and float steps as
 * score_row_avx2 up to the order of the float additions). */
#define TR8_ROWS 8

/* The eight rows' dwords at byte `at` of each (lane i: row i), by scalar loads: vpgatherdd took
 * ~13 cycles a block on Zen 3 (attn_rows int4: scores 4.05 -> 3.86 us; the int8 rows' gather a
 * group likewise) */
TDM_TARGET_AVX2 static AI __m256i rows_dword(const int8_t *r, int64_t rs, int64_t at) {
    int32_t w[TR8_ROWS];
    for (int i = 0; i < TR8_ROWS; i++) memcpy(&w[i], r + i * rs + at, sizeof w[i]);
    return _mm256_setr_epi32(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
}

TDM_TARGET_AVX2 static __attribute__((always_inline)) inline void
tr8_block(const int8_t (*qc)[TDM_LLM_KV_I8_MAX_D], const int8_t (*qa)[TDM_LLM_KV_I8_MAX_D],
          const float (*qs)[TDM_LLM_KV_I8_MAX_D / GROUP], int HN, const int8_t *r, int64_t rs,
          int64_t d, float (*res)[TR8_ROWS], bool q4) {
    const __m256i ones = _mm256_set1_epi16(1), hi16 = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[QHEADS];
    for (int h = 0; h < HN; h++) acc[h] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        __m256i a[8], b[8], t[8];
        for (int i = 0; i < 8; i++) a[i] = group_codes_avx2(r + i * rs, d, g0, q4);
        for (int i = 0; i < 8; i += 2) {
            b[i] = _mm256_unpacklo_epi32(a[i], a[i + 1]);
            b[i + 1] = _mm256_unpackhi_epi32(a[i], a[i + 1]);
        }
        /* b[0]: rows 0, 1 dwords 0, 1 | 4, 5; b[1]: dwords 2, 3 | 6, 7; b[2], b[3]: rows 2, 3 */
        for (int i = 0; i < 8; i += 4) {
            a[i] = _mm256_unpacklo_epi64(b[i], b[i + 2]);     /* rows i..i+3, dword 0 | 4 */
            a[i + 1] = _mm256_unpackhi_epi64(b[i], b[i + 2]); /* dword 1 | 5 */
            a[i + 2] = _mm256_unpacklo_epi64(b[i + 1], b[i + 3]); /* 2 | 6 */
            a[i + 3] = _mm256_unpackhi_epi64(b[i + 1], b[i + 3]); /* 3 | 7 */
        }
        for (int c = 0; c < 4; c++) {
            t[c] = _mm256_permute2x128_si256(a[c], a[4 + c], 0x20);
            t[4 + c] = _mm256_permute2x128_si256(a[c], a[4 + c], 0x31);
        }
        /* the rows' bfloat16 scales of this group: the high half of the dword ending there */
        __m256 sk = _mm256_castsi256_ps(
            _mm256_and_si256(rows_dword(r, rs, scales_at(d, q4) + 2 * (g0 / GROUP) - 2), hi16));
        for (int h = 0; h < HN; h++) {
            __m256i s32 = _mm256_setzero_si256();
            for (int c = 0; c < 8; c++) {
                int32_t qd, ad;
                memcpy(&qd, qc[h] + g0 + 4 * c, 4);
                memcpy(&ad, qa[h] + g0 + 4 * c, 4);
                __m256i p = _mm256_maddubs_epi16(_mm256_set1_epi32(ad),
                                                 _mm256_sign_epi8(t[c], _mm256_set1_epi32(qd)));
                s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(p, ones));
            }
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32),
                                     _mm256_mul_ps(sk, _mm256_set1_ps(qs[h][g0 / GROUP])), acc[h]);
        }
    }
    for (int h = 0; h < HN; h++) _mm256_storeu_ps(res[h], acc[h]);
}

TDM_TARGET_AVX2 static AI int32_t hsum8i(__m256i x) {
    __m128i m = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    m = _mm_add_epi32(m, _mm_unpackhi_epi64(m, m));
    return _mm_cvtsi128_si32(_mm_add_epi32(m, _mm_shuffle_epi32(m, 1)));
}

/* The 4-bit rows need no widening to bytes first: the eight rows' 16 bytes of a group (four
 * dwords each; row i in the low lane of vector i & 3 and row i + 4 in its high one) are
 * transposed by two unpack steps so that vector c holds dword c of every row (row i in lane
 * i). Dword c's low nibbles are codes 4c..4c+3, its high ones 16+4c..16+4c+3, taken as they
 * are stored (unsigned, 0..15): vpmaddubsw against the query's signed codes gives pairs of at
 * most 2 * 15 * 127, so the group's eight chunks add in 16 bits (<= 30480) before one
 * vpmaddwd, and the codes' offset comes off as 8 * the query group's sum: the same integer
 * sums as tr8_block's, with half its multiplies and no vpsignb, and the same float steps.
 * sk: the eight rows' scales of the group (lane i: row i). */
TDM_TARGET_AVX2 static __attribute__((always_inline)) inline void
tr8_group4(const int8_t (*qc)[TDM_LLM_KV_I8_MAX_D], const int32_t (*qz)[TDM_LLM_KV_I8_MAX_D / GROUP],
           const float (*qs)[TDM_LLM_KV_I8_MAX_D / GROUP], int HN, const int8_t *r, int64_t rs,
           int64_t g, __m256 sk, __m256 *acc) {
    const __m256i nib = _mm256_set1_epi8(15);
    __m256i y[4], t[4], k[8];
    for (int i = 0; i < 4; i++)
        y[i] = _mm256_loadu2_m128i((const __m128i *)(const void *)(r + (i + 4) * rs + 16 * g),
                                   (const __m128i *)(const void *)(r + i * rs + 16 * g));
    t[0] = _mm256_unpacklo_epi32(y[0], y[1]), t[1] = _mm256_unpackhi_epi32(y[0], y[1]);
    t[2] = _mm256_unpacklo_epi32(y[2], y[3]), t[3] = _mm256_unpackhi_epi32(y[2], y[3]);
    for (int c = 0; c < 4; c++) {
        __m256i u = (c & 1) ? _mm256_unpackhi_epi64(t[c >> 1], t[2 + (c >> 1)])
                            : _mm256_unpacklo_epi64(t[c >> 1], t[2 + (c >> 1)]);
        k[c] = _mm256_and_si256(u, nib);                        /* codes 4c .. 4c + 3 */
        k[4 + c] = _mm256_and_si256(_mm256_srli_epi16(u, 4), nib); /* 16 + 4c .. */
    }
    for (int h = 0; h < HN; h++) {
        __m256i s16 = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            int32_t qd;
            memcpy(&qd, qc[h] + GROUP * g + 4 * c, 4);
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(k[c], _mm256_set1_epi32(qd)));
        }
        __m256i s32 = _mm256_sub_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), _mm256_set1_epi32(qz[h][g]));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(sk, _mm256_set1_ps(qs[h][g])), acc[h]);
    }
}

/* Eight 4-bit rows: each pair of groups' bfloat16 scales is one dword of the row (the first
 * group's in its low half), read once for the pair; the scores go straight to res (row i at
 * res[h * rld + i]), without a copy through the stack (scores 4.18 -> 4.05 us) */
TDM_TARGET_AVX2 static __attribute__((always_inline)) inline void
tr8_block4(const int8_t (*qc)[TDM_LLM_KV_I8_MAX_D], const int32_t (*qz)[TDM_LLM_KV_I8_MAX_D / GROUP],
           const float (*qs)[TDM_LLM_KV_I8_MAX_D / GROUP], int HN, const int8_t *r, int64_t rs,
           int64_t d, float *res, int64_t rld) {
    const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
    const int64_t ng = (d + GROUP - 1) / GROUP, so = scales_at(d, true); /* a 4-bit group is whole */
    __m256 acc[QHEADS];
    for (int h = 0; h < HN; h++) acc[h] = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 2 <= ng; g += 2) {
        __m256i x = rows_dword(r, rs, so + 2 * g);
        tr8_group4(qc, qz, qs, HN, r, rs, g, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), acc);
        tr8_group4(qc, qz, qs, HN, r, rs, g + 1, _mm256_castsi256_ps(_mm256_and_si256(x, hi16)), acc);
    }
    if (g < ng) { /* a lone last group: the dword that ends with its scale */
        __m256i x = rows_dword(r, rs, so + 2 * g - 2);
        tr8_group4(qc, qz, qs, HN, r, rs, g, _mm256_castsi256_ps(_mm256_and_si256(x, hi16)), acc);
    }
    for (int h = 0; h < HN; h++) _mm256_storeu_ps(res + h * rld, acc[h]);
}

TDM_TARGET_AVX2 static AI void tr8_rows(const int8_t (*qc)[TDM_LLM_KV_I8_MAX_D],
                                        const int8_t (*qa)[TDM_LLM_KV_I8_MAX_D],
                                        const int32_t (*qz)[TDM_LLM_KV_I8_MAX_D / GROUP],
                                        const float (*qs)[TDM_LLM_KV_I8_MAX_D / GROUP], int HN,
                                        const int8_t *r, int64_t rs, int64_t d, float *o,
                                        int64_t ld, int64_t t, int64_t cnt, bool q4) {
    float res[QHEADS][TR8_ROWS];
    if (q4) { /* a whole block straight into o */
        bool whole = cnt == TR8_ROWS;
        float *dst = whole ? o + t : res[0];
        int64_t dl = whole ? ld : TR8_ROWS;
        switch (HN) {
        case 1: tr8_block4(qc, qz, qs, 1, r, rs, d, dst, dl); break;
        case 2: tr8_block4(qc, qz, qs, 2, r, rs, d, dst, dl); break;
        case 3: tr8_block4(qc, qz, qs, 3, r, rs, d, dst, dl); break;
        default: tr8_block4(qc, qz, qs, 4, r, rs, d, dst, dl); break;
        }
        if (whole) return;
    } else switch (HN) {
    case 1: tr8_block(qc, qa, qs, 1, r, rs, d, res, q4); break;
    case 2: tr8_block(qc, qa, qs, 2, r, rs, d, res, q4); break;
    case 3: tr8_block(qc, qa, qs, 3, r, rs, d, res, q4); break;
    default: tr8_block(qc, qa, qs, 4, r, rs, d, res, q4); break;
    }
    for (int h = 0; h < HN; h++) {
        if (cnt == TR8_ROWS) _mm256_storeu_ps(o + h * ld + t, _mm256_loadu_ps(res[h]));
        else memcpy(o + h * ld + t, res[h], sizeof(float) * (size_t)cnt);
    }
}

/* quantize_heads in AVX2, group by group: tdm_llm_q8_query's largest |q| (NaN skipped: vmaxps
 * keeps its second operand), scale, division and round-to-nearest-even (the product rounded
 * before the 1.5 * 2^23 trick's add: TDM_NO_CONTRACT; NaN as code 0, as the scalar conversion
 * gives), so the same codes and scales to the bit, stored as vectors: the scalar form's byte
 * stores stalled the dword and vector loads of them that follow (no store forwarding; attn_rows
 * int4, Zen 3: scores 3.94-4.07 -> 3.80 us, 0.39 -> 0.16 at 16 rows). A last group shorter
 * than 32 goes through the scalar form. */
TDM_TARGET_AVX2 TDM_NO_CONTRACT static void quantize_heads_avx2(const float *const *q, int64_t hn, int64_t d, float scale,
                                                int8_t (*qc)[TDM_LLM_KV_I8_MAX_D],
                                                float (*qs)[TDM_LLM_KV_I8_MAX_D / GROUP]) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 magic = _mm256_set1_ps(12582912.0f), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    int64_t ng = (d + GROUP - 1) / GROUP, whole = d / GROUP;
    for (int64_t h = 0; h < hn; h++) {
        for (int64_t g = 0; g < whole; g++) {
            const float *x = q[h] + GROUP * g;
            __m256 v[4], m = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                v[k] = _mm256_loadu_ps(x + 8 * k);
                m = _mm256_max_ps(_mm256_and_ps(v[k], absm), m);
            }
            m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
            m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4e));
            m = _mm256_max_ps(m, _mm256_permute_ps(m, 0xb1));
            float mx = _mm256_cvtss_f32(m), inv = mx > 0.0f ? 127.0f / mx : 0.0f;
            qs[h][g] = mx / 127.0f * scale;
            __m256i c[4];
            for (int k = 0; k < 4; k++) {
                __m256 y = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(inv)), magic), magic);
                y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q));
                c[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(y, lo), hi));
            }
            _mm256_storeu_si256((__m256i *)(void *)(qc[h] + GROUP * g),
                                tdm_avx2_pack_codes(c[0], c[1], c[2], c[3]));
        }
        if (whole < ng) { /* the short last group, zero-padded */
            memset(qc[h] + GROUP * whole, 0, GROUP);
            tdm_llm_q8_query(q[h] + GROUP * whole, d - GROUP * whole, qc[h] + GROUP * whole, qs[h] + whole);
            qs[h][whole] *= scale;
        }
    }
}

/* The rows of a range: k + t * rs, or (blocks: a paged cache) row t at blk[t / bs] + (t % bs) * rs.
 * A cursor walks them TR8_ROWS at a time without a division (bs a multiple of TR8_ROWS: a
 * step's rows lie in one block); in blocks a second cursor runs `ahead` rows in front and asks
 * for its rows into L2 (a fixed distance in bytes, as the contiguous forms prefetch, would
 * leave the block). */
typedef struct rows_at {
    const int8_t *k;
    const int8_t *const *blk;
    int64_t bs, rs, bi, off; /* blocks: block bi, row off of it */
    int64_t pbi, poff, pt;   /* the prefetching cursor: row pt, block pbi, row poff of it */
} rows_at;

TDM_TARGET_AVX2 static AI rows_at rows_start(const int8_t *k, const int8_t *const *blk, int64_t bs,
                                             int64_t rs, int64_t n, int64_t ahead) {
    rows_at c = {k, blk, bs, rs, 0, 0, 0, 0, ahead};
    if (!blk) return c;
    c.pbi = ahead / bs, c.poff = ahead % bs;
    for (int64_t t = 0; t < n && t < ahead; t += TR8_ROWS) { /* the rows before the cursor's */
        const char *a = (const char *)(blk[t / bs] + (t % bs) * rs);
        for (int64_t o = 0; o < TR8_ROWS * rs; o += 64) _mm_prefetch(a + o, _MM_HINT_T1);
    }
    return c;
}

TDM_TARGET_AVX2 static AI const int8_t *rows_here(const rows_at *c, int64_t t, bool blocks) {
    return blocks ? c->blk[c->bi] + c->off * c->rs : c->k + t * c->rs;
}

/* both cursors TR8_ROWS rows on; the rows the prefetching one passed (before n) asked for */
TDM_TARGET_AVX2 static AI void rows_step(rows_at *c, int64_t n, bool blocks) {
    if (!blocks) return;
    if ((c->off += TR8_ROWS) == c->bs) c->bi++, c->off = 0;
    if (c->pt < n) {
        const char *a = (const char *)(c->blk[c->pbi] + c->poff * c->rs);
        for (int64_t o = 0; o < TR8_ROWS * c->rs; o += 64) _mm_prefetch(a + o, _MM_HINT_T1);
    }
    c->pt += TR8_ROWS;
    if ((c->poff += TR8_ROWS) == c->bs) c->pbi++, c->poff = 0;
}

TDM_TARGET_AVX2 static AI void scores_avx2_any(const float *const *q, int64_t G, const int8_t *k,
                                               const int8_t *const *blk, int64_t bs, int64_t rs,
                                               int64_t n, int64_t d, float scale, float *out,
                                               int64_t ld, const int8_t *vnext, bool q4,
                                               bool blocks) {
    _Alignas(32) int8_t qc[QHEADS][TDM_LLM_KV_I8_MAX_D], qa[QHEADS][TDM_LLM_KV_I8_MAX_D];
    float qs[QHEADS][TDM_LLM_KV_I8_MAX_D / GROUP];
    int32_t qz[QHEADS][TDM_LLM_KV_I8_MAX_D / GROUP]; /* 4-bit: 8 * the sum of a group's query codes */
    _Alignas(32) int8_t pad[TR8_ROWS * TDM_KV_I8_ROW(TDM_LLM_KV_I8_MAX_D)];
    for (int64_t h0 = 0; h0 < G; h0 += QHEADS) {
        int hn = G - h0 < QHEADS ? (int)(G - h0) : QHEADS;
        quantize_heads_avx2(q + h0, hn, d, scale, qc, qs);
        float *o = out + h0 * ld;
        if (q4 || d % GROUP == 0) { /* eight rows at a time, transposed */
            for (int h = 0; h < hn; h++)
                for (int64_t i = 0; i < d; i += 32) {
                    __m256i c = _mm256_load_si256((const __m256i *)(qc[h] + i));
                    if (q4) /* the group's sum of codes: vpsadbw of the codes + 128, less 32 * 128 */
                        qz[h][i / GROUP] = 8 * (hsum8i(_mm256_sad_epu8(_mm256_xor_si256(c, _mm256_set1_epi8((char)0x80)),
                                                                       _mm256_setzero_si256())) - 32 * 128);
                    else
                        _mm256_store_si256((__m256i *)(qa[h] + i), _mm256_abs_epi8(c));
                }
            rows_at at = rows_start(k, blk, bs, rs, n, 4 * TR8_ROWS);
            for (int64_t t = 0; t < n; t += TR8_ROWS) {
                int64_t cnt = n - t < TR8_ROWS ? n - t : TR8_ROWS;
                const int8_t *r = rows_here(&at, t, blocks);
                if (vnext && h0 == 0) /* the value rows' lines, into L2 for the p.V */
                    for (int64_t o2 = (t * rs) & ~(int64_t)63; o2 < (t + cnt) * rs; o2 += 64)
                        _mm_prefetch((const char *)(vnext + o2), _MM_HINT_T1);
                if (cnt == TR8_ROWS) {
                    tr8_rows(qc, qa, qz, qs, hn, r, rs, d, o, ld, t, cnt, q4);
                } else { /* the last rows through a zero-padded copy */
                    const int64_t prs = q4 ? TDM_KV_I4_ROW(d) : TDM_KV_I8_ROW(d);
                    memset(pad, 0, (size_t)(TR8_ROWS * prs));
                    for (int64_t i = 0; i < cnt; i++)
                        memcpy(pad + i * prs, r + i * rs, (size_t)prs);
                    tr8_rows(qc, qa, qz, qs, hn, pad, prs, d, o, ld, t, cnt, q4);
                }
                rows_step(&at, n, blocks);
            }
            continue;
        }
        for (int64_t t = 0; t < n; t++) { /* contiguous only (the block forms decline) */
            const int8_t *r = k + t * rs;
            if (vnext && h0 == 0) /* the value row's lines, into L2 for the p.V */
                for (int64_t ob = (t * rs) & ~(int64_t)63; ob < (t + 1) * rs; ob += 64)
                    _mm_prefetch((const char *)(vnext + ob), _MM_HINT_T1);
            switch (hn) {
            case 1: score_row_avx2(qc, qs, 1, r, d, o, ld, t, q4); break;
            case 2: score_row_avx2(qc, qs, 2, r, d, o, ld, t, q4); break;
            case 3: score_row_avx2(qc, qs, 3, r, d, o, ld, t, q4); break;
            default: score_row_avx2(qc, qs, 4, r, d, o, ld, t, q4); break;
            }
        }
    }
}
TDM_TARGET_AVX2 static AI void scores_avx2_f(const float *const *q, int64_t G, const int8_t *k,
                                             int64_t rs, int64_t n, int64_t d, float scale,
                                             float *out, int64_t ld, const int8_t *vnext, bool q4) {
    scores_avx2_any(q, G, k, NULL, TR8_ROWS, rs, n, d, scale, out, ld, vnext, q4, false);
}
SCORES_PAIR(TDM_TARGET_AVX2, scores_avx2, scores_avx2_f)

/* Up to PV_HEADS heads x NV vectors of 8 columns inside one scale group, the accumulators in
 * registers over all rows (NV, HN compile-time: no spills): each row's codes are widened once
 * for all the heads, and the row's scale is folded into each head's weight (p * s_v, one
 * product per row and head) instead of into the codes. */
#define PV_HEADS 3
TDM_TARGET_AVX2 static __attribute__((always_inline)) inline void
pv_block_avx2(const float *p, int64_t ld, int HN, int NV, const int8_t *v, int64_t rs, int64_t n,
              int64_t d, int64_t i0, float *y, int64_t ys, bool q4) {
    __m256 acc[PV_HEADS][4];
    int64_t so = scales_at(d, q4);
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) acc[h][c] = _mm256_loadu_ps(y + h * ys + i0 + 8 * c);
    for (int64_t t = 0; t < n; t++) {
        const int8_t *r = v + t * rs;
        float sv = group_scale(r, so, i0 / GROUP);
        __m256 w[PV_HEADS];
        for (int h = 0; h < HN; h++) w[h] = _mm256_set1_ps(p[h * ld + t] * sv);
        __m256i g4 = q4 ? group_codes_avx2(r, d, i0, true) : _mm256_setzero_si256();
        for (int c = 0; c < NV; c++) {
            __m128i cb;
            if (q4) { /* codes 8c .. 8c + 7 of the widened group */
                cb = c < 2 ? _mm256_castsi256_si128(g4) : _mm256_extracti128_si256(g4, 1);
                if (c & 1) cb = _mm_unpackhi_epi64(cb, cb);
            } else {
                cb = _mm_loadl_epi64((const __m128i *)(r + i0 + 8 * c));
            }
            __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(cb));
            for (int h = 0; h < HN; h++) acc[h][c] = _mm256_fmadd_ps(w[h], x, acc[h][c]);
        }
    }
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) _mm256_storeu_ps(y + h * ys + i0 + 8 * c, acc[h][c]);
}

/* ---- AVX2 p.V in integers ----
 * The AVX-512 VNNI form's numbers (pvq_block, k_llm_gqa_i8_avx512.c) with AVX2's vpmaddwd:
 * per block of PVQ_ROWS rows, each head and whole group's weights p * s_v rounded to int16 against the
 * block's largest, two rows' codes as int16 pairs per column (unsigned: 4-bit as stored,
 * 8-bit + 128), vpmaddwd + vpaddd into int32 sums, the codes' offset taken off each block's
 * sums in int32 and the sums scaled into float32 by the block's step: the same integer sums
 * and float steps as pvq_block, so the same results to the bit (test_pv_levels_agree). The
 * float form widened every code to float (vpmovsxbd ymm: under one a cycle on Zen 3) and took
 * one FMA per 8 products; this takes one vpmaddwd per 16. A block's weights are made once for
 * all its groups (the scales by eight-row dword loads, rows_dword: a ymm gather cost more on
 * Zen 3), then each
 * group's rows go by in two passes of 16 columns, so that three heads' sums stay in registers
 * (32 columns spilled them); per pair of rows and pass each row's 16 bytes are broadcast to
 * both lanes, interleaved with the other row's (vpunpck[lh]bw) and widened to 16 bits by
 * vpshufb (low lane bytes 0-7, high lane 8-15):
 *   - 4-bit, bytes 8 half .. 8 half + 7: & 15 gives columns 8 half + j, >> 4 columns
 *     16 + 8 half + j;
 *   - 8-bit, columns 16 half .. 16 half + 15, + 128 (xor) before the widening.
 * |w| <= 32767 and codes <= 255: a block's int32 sums stay below 2^30. attn_rows (Zen 3, 1000
 * rows x 3 heads): 4-bit 10.1 -> 5.5 us, 8-bit 6.36 -> 5.95 (the loop is bound by the
 * instructions it issues: 12 vpmaddwd + 12 vpaddd + 8 shuffles a row); session 31's weights
 * and pass changes (below): 4-bit 5.6 -> 5.05, 8-bit 5.95 -> 5.4. */
TDM_TARGET_AVX2 static AI __m256i lanes_below(int64_t k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k > 8 ? 8 : (int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define PVQ_GROUPS (TDM_LLM_KV_I8_MAX_D / GROUP)
/* ia[h][0..1] += the products of rows ra and rb (weights w[h][t], w[h][t + 1]) over 16
 * columns of a group (half): see pvq_avx2 */
TDM_TARGET_AVX2 static AI void pvq_pair(const int8_t *ra, const int8_t *rb, const int16_t *const *w,
                                        int64_t t, int HN, int half, bool q4, __m256i (*ia)[2]) {
    const __m256i widen = _mm256_setr_epi8(0, -1, 1, -1, 2, -1, 3, -1, 4, -1, 5, -1, 6, -1, 7, -1,
                                           8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1);
    __m256i A = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)ra));
    __m256i B = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)rb));
    __m256i x[2];
    if (q4) { /* bytes 8 half .. 8 half + 7: columns 8 half + j, 16 + 8 half + j */
        __m256i X = _mm256_shuffle_epi8(half ? _mm256_unpackhi_epi8(A, B) : _mm256_unpacklo_epi8(A, B), widen);
        x[0] = _mm256_and_si256(X, _mm256_set1_epi16(15)), x[1] = _mm256_srli_epi16(X, 4);
    } else { /* columns 16 half .. 16 half + 15, + 128 */
        const __m256i sb = _mm256_set1_epi8((char)0x80);
        x[0] = _mm256_shuffle_epi8(_mm256_xor_si256(_mm256_unpacklo_epi8(A, B), sb), widen);
        x[1] = _mm256_shuffle_epi8(_mm256_xor_si256(_mm256_unpackhi_epi8(A, B), sb), widen);
    }
    for (int h = 0; h < HN; h++) {
        int32_t wd;
        memcpy(&wd, w[h] + t, sizeof wd);
        __m256i wv = _mm256_set1_epi32(wd);
        tdm_avx2_add32_acc(&ia[h][0], _mm256_madd_epi16(x[0], wv));
        tdm_avx2_add32_acc(&ia[h][1], _mm256_madd_epi16(x[1], wv));
    }
}

/* One pass of pvq_avx2: the 16 columns `half` of group g (half a compile-time constant: its
 * lane choice out of the loop), all heads, into acc; pf: the rows' lines ahead into L1 */
TDM_TARGET_AVX2 static AI void pvq_pass(const int8_t *vb, const int8_t *const *rp, int64_t rs,
                                        int64_t cnt, const int16_t (*wq)[PVQ_GROUPS][PVQ_ROWS],
                                        const int32_t (*corr)[PVQ_GROUPS], const float (*bs)[PVQ_GROUPS],
                                        int HN, int64_t g, int64_t NG, const int half, bool q4, bool pf,
                                        float (*acc)[8], bool blocks) {
    const int64_t go = q4 ? 16 * g : 32 * g + 16 * half; /* the pass's bytes in a row */
    const int8_t *vg = blocks ? NULL : vb + go; /* vb is NULL in blocks */
#define PVQ_ROW(t) (blocks ? rp[t] + go : vg + (t) * rs)
    __m256i ia[PV_HEADS][2];
    for (int h = 0; h < HN; h++) ia[h][0] = ia[h][1] = _mm256_setzero_si256();
    const int16_t *wg[PV_HEADS];
    for (int h = 0; h < HN; h++) wg[h] = wq[h][g];
    int64_t t = 0;
    for (; t + 4 <= cnt; t += 4) { /* two pairs a pass: half the loop's own work */
        if (pf && !blocks) _mm_prefetch((const char *)(vg + t * rs + 8192), _MM_HINT_T0);
        pvq_pair(PVQ_ROW(t), PVQ_ROW(t + 1), wg, t, HN, half, q4, ia);
        pvq_pair(PVQ_ROW(t + 2), PVQ_ROW(t + 3), wg, t + 2, HN, half, q4, ia);
    }
    for (; t < cnt; t += 2) {
        const int8_t *ra = PVQ_ROW(t);
        pvq_pair(ra, t + 1 < cnt ? PVQ_ROW(t + 1) : ra /* weight 0 */, wg, t, HN, half, q4, ia);
    }
#undef PVQ_ROW
    /* vector c's columns: 8-bit 16 half + 8 c, 4-bit 8 half + 16 c */
    for (int h = 0; h < HN; h++) {
        __m256i cv = _mm256_set1_epi32(corr[h][g]);
        __m256 st = _mm256_set1_ps(bs[h][g]);
        for (int c = 0; c < 2; c++) {
            float *a = acc[(h * NG + g) * 4 + (q4 ? half + 2 * c : 2 * half + c)];
            _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(ia[h][c], cv)), st,
                                               _mm256_load_ps(a)));
        }
    }
}

TDM_TARGET_AVX2 static AI void pvq_avx2(const float *p, int64_t ld, int HN, const int8_t *v,
                                        const int8_t *const *blk, int64_t bsz, int64_t rs,
                                        int64_t n, int64_t d, int64_t NG, float *y, int64_t ys,
                                        bool q4, bool blocks) {
    const int64_t so = scales_at(d, q4); /* NG: the whole groups */
    const __m256i z = _mm256_setzero_si256();
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
    _Alignas(32) float acc[PV_HEADS * PVQ_GROUPS * 4][8]; /* head h, group g, vector k: (h NG + g) 4 + k */
    memset(acc, 0, sizeof(float) * 32 * (size_t)(HN * NG));
    rows_at at = rows_start(v, blk, bsz, rs, n, PVQ_ROWS); /* the next block of rows ahead */
    for (int64_t t0 = 0; t0 < n; t0 += PVQ_ROWS) {
        int64_t cnt = n - t0 < PVQ_ROWS ? n - t0 : PVQ_ROWS, c16 = (cnt + 15) & ~(int64_t)15;
        /* in blocks: the block's rows, TR8_ROWS from each cursor step (bsz a multiple of it;
         * the next block's asked for as the cursor passes) */
        const int8_t *rp[PVQ_ROWS];
        if (blocks)
            for (int64_t t = 0; t < cnt; t += TR8_ROWS) {
                const int8_t *r = rows_here(&at, t0 + t, true);
                for (int64_t i = 0; i < TR8_ROWS; i++) rp[t + i] = r + i * rs;
                rows_step(&at, n, true);
            }
        _Alignas(32) float sc[PVQ_GROUPS][PVQ_ROWS];
        _Alignas(32) int16_t wq[PV_HEADS][PVQ_GROUPS][PVQ_ROWS];
        /* the rows' scales (bfloat16: the high half of a float32; rows past cnt: 0), eight rows
         * a vector store, a pair of groups from each row's dword: the passes below read them as
         * vectors, and a vector load over eight scalar stores waits for them to reach the cache
         * (no store forwarding; attn_rows 64 avx2 int4, Zen 3, alternating: p.V 6.0-6.2 -> 5.5-5.8
         * us) */
        for (int64_t g = 0; g < NG; g += 2) {
            const bool two = g + 1 < NG;
            const int64_t so8 = so + 2 * g - (two ? 0 : 2); /* a lone last group: the dword ending with its scale */
            for (int64_t t = 0; t < c16; t += 8) {
                __m256i x;
                const int8_t *r8 = blocks ? rp[t] : v + (t0 + t) * rs; /* rows t .. t + 7 */
                if (t + 8 <= cnt) {
                    x = rows_dword(r8, rs, so8);
                } else { /* the last rows, zero past cnt */
                    _Alignas(32) int32_t w[TR8_ROWS] = {0};
                    for (int64_t i = 0; t + i < cnt; i++) memcpy(&w[i], r8 + i * rs + so8, sizeof w[i]);
                    x = _mm256_load_si256((const __m256i *)(const void *)w);
                }
                if (two) {
                    _mm256_store_ps(sc[g] + t, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)));
                    _mm256_store_ps(sc[g + 1] + t, _mm256_castsi256_ps(_mm256_and_si256(x, hi16)));
                } else {
                    _mm256_store_ps(sc[g] + t, _mm256_castsi256_ps(_mm256_and_si256(x, hi16)));
                }
            }
        }
        float bs[PV_HEADS][PVQ_GROUPS], inv[PV_HEADS][PVQ_GROUPS];
        int32_t corr[PV_HEADS][PVQ_GROUPS];
        _Alignas(32) float pw[PV_HEADS][PVQ_ROWS]; /* p, zero past cnt */
        for (int h = 0; h < HN; h++) {
            const float *ph = p + h * ld + t0;
            for (int64_t t = 0; t < c16; t += 8)
                _mm256_store_ps(pw[h] + t, cnt - t >= 8 ? _mm256_loadu_ps(ph + t) : _mm256_maskload_ps(ph + t, lanes_below(cnt - t)));
        }
        /* each head and group's weights against the block's largest: first every largest and
         * its inverse (independent chains of a max pass, a reduction and a division, which
         * overlap; one after the other with its rounding pass, each waited for the last:
         * attn_rows p.V 5.21-5.39 -> 5.09-5.13 us), then the rounding passes */
        for (int h = 0; h < HN; h++)
            for (int64_t g = 0; g < NG; g++) {
                __m256 mx = _mm256_setzero_ps();
                for (int64_t t = 0; t < c16; t += 8)
                    mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_mul_ps(_mm256_load_ps(pw[h] + t), _mm256_load_ps(sc[g] + t)), absm));
                mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 1)); /* in every lane */
                mx = _mm256_max_ps(mx, _mm256_permute_ps(mx, 0x4e));
                mx = _mm256_max_ps(mx, _mm256_permute_ps(mx, 0xb1));
                float m = _mm256_cvtss_f32(mx);
                bs[h][g] = m / 32767.0f;
                inv[h][g] = m > 0.0f ? 32767.0f / m : 0.0f;
            }
        for (int h = 0; h < HN; h++)
            for (int64_t g = 0; g < NG; g++) {
                const __m256 iv = _mm256_set1_ps(inv[h][g]);
                __m256i qsum = z;
                for (int64_t t = 0; t < c16; t += 16) {
                    __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(pw[h] + t), _mm256_load_ps(sc[g] + t)), iv));
                    __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(pw[h] + t + 8), _mm256_load_ps(sc[g] + t + 8)), iv));
                    _mm256_store_si256((__m256i *)(void *)(wq[h][g] + t),
                                       _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8));
                    qsum = _mm256_add_epi32(qsum, _mm256_add_epi32(q0, q1));
                }
                /* the codes' offset times the weights; wrapping (weights from a NaN or infinite
                 * p: garbage in, no undefined behaviour) */
                corr[h][g] = (int32_t)((uint32_t)(q4 ? 8 : 128) * (uint32_t)hsum8i(qsum));
            }
        const int8_t *vb = blocks ? NULL : v + t0 * rs; /* contiguous */
        for (int64_t g = 0; g < NG; g++) { /* 16 columns a pass: the sums stay in registers */
            pvq_pass(vb, rp, rs, cnt, wq, corr, bs, HN, g, NG, 0, q4, g == 0, acc, blocks);
            pvq_pass(vb, rp, rs, cnt, wq, corr, bs, HN, g, NG, 1, q4, false, acc, blocks);
        }
    }
    for (int h = 0; h < HN; h++)
        for (int64_t g = 0; g < NG; g++) {
            float *o = y + h * ys + GROUP * g;
            for (int k = 0; k < 4; k++)
                _mm256_storeu_ps(o + 8 * k, _mm256_add_ps(_mm256_loadu_ps(o + 8 * k), _mm256_load_ps(acc[(h * NG + g) * 4 + k])));
        }
}

#define PV_CASE(hn, nv)                                                                         \
    case (hn) * 8 + (nv): pv_block_avx2(ph, ld, hn, nv, v, rs, n, d, i0, yh, ys, q4); break;
/* Whole groups in integers (pvq_avx2; d >= 32, so the scale dwords lie inside the row), an
 * 8-bit last group shorter than 32 in float32 (contiguous rows only: the block forms take
 * whole groups) */
TDM_TARGET_AVX2 static AI void pv_avx2_any(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                           const int8_t *const *blk, int64_t bs, int64_t rs,
                                           int64_t n, int64_t d, float *y, int64_t ys, bool q4,
                                           bool blocks) {
    int64_t whole = d / GROUP, d8 = d & ~(int64_t)7;
    for (int64_t h0 = 0; whole && h0 < G; h0 += PV_HEADS) {
        int hn = G - h0 < PV_HEADS ? (int)(G - h0) : PV_HEADS;
        const float *ph = p + h0 * ld;
        float *yh = y + h0 * ys;
        switch (hn) {
        case 1: pvq_avx2(ph, ld, 1, v, blk, bs, rs, n, d, whole, yh, ys, q4, blocks); break;
        case 2: pvq_avx2(ph, ld, 2, v, blk, bs, rs, n, d, whole, yh, ys, q4, blocks); break;
        default: pvq_avx2(ph, ld, 3, v, blk, bs, rs, n, d, whole, yh, ys, q4, blocks); break;
        }
    }
    if (blocks) return;
    for (int64_t i0 = whole * GROUP; i0 < d8; i0 += 32) {
        int nv = d8 - i0 >= 32 ? 4 : (int)((d8 - i0) / 8);
        for (int64_t h0 = 0; h0 < G; h0 += PV_HEADS) {
            int hn = G - h0 < PV_HEADS ? (int)(G - h0) : PV_HEADS;
            const float *ph = p + h0 * ld;
            float *yh = y + h0 * ys;
            switch (hn * 8 + nv) {
                PV_CASE(1, 1) PV_CASE(1, 2) PV_CASE(1, 3) PV_CASE(1, 4)
                PV_CASE(2, 1) PV_CASE(2, 2) PV_CASE(2, 3) PV_CASE(2, 4)
                PV_CASE(3, 1) PV_CASE(3, 2) PV_CASE(3, 3)
            default: pv_block_avx2(ph, ld, 3, 4, v, rs, n, d, i0, yh, ys, q4); break;
            }
        }
    }
#undef PV_CASE
    if (d8 < d)
        for (int64_t t = 0; t < n; t++) {
            const int8_t *r = v + t * rs;
            float s = group_scale(r, scales_at(d, q4), d8 / GROUP);
            for (int64_t h = 0; h < G; h++) {
                float w = p[h * ld + t] * s;
                for (int64_t i = d8; i < d; i++) y[h * ys + i] += w * (float)kv_code(r, i, q4);
            }
        }
}
TDM_TARGET_AVX2 static AI void pv_avx2_f(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                         int64_t rs, int64_t n, int64_t d, float *y, int64_t ys,
                                         bool q4) {
    pv_avx2_any(p, ld, G, v, NULL, TR8_ROWS, rs, n, d, y, ys, q4, false);
}
PV_PAIR(TDM_TARGET_AVX2, pv_avx2, pv_avx2_f)

/* The block-list forms (tdm_llm_i8_fns.scores_blk / pv_blk) of the transposed scores and the
 * integer p.V: the same routines over the rows where they lie, so the same results as the
 * contiguous forms to the bit. They do not take a block size that is not a multiple of
 * TR8_ROWS or a head size not a multiple of 32 (its last group goes through copies and float32
 * there). */
static inline bool blk_avx2_takes(int64_t bs, int64_t d, int64_t rs, bool q4) {
    (void)rs, (void)q4;
    return bs % TR8_ROWS == 0 && d % GROUP == 0 && d <= TDM_LLM_KV_I8_MAX_D;
}

BLK_PAIR(TDM_TARGET_AVX2, blk_avx2, blk_avx2_takes, scores_avx2_any, pv_avx2_any)

/* The widening of dequantize (the block GEMMs' key / value ranges: prefill, chunks) 32 values
 * at a time: each value is its group's scale times its code, one float product as in the
 * scalar form, so the same result bit for bit. A last group shorter than 32 goes through
 * the scalar form. The AVX-512 levels take this form too. */
TDM_TARGET_AVX2 static AI void dequantize_avx2_f(const int8_t *rows, int64_t rs, int64_t n,
                                                 int64_t d, float *out, bool q4) {
    int64_t so = scales_at(d, q4), d32 = d & ~(int64_t)(GROUP - 1);
    for (int64_t t = 0; t < n; t++) {
        const int8_t *r = rows + t * rs;
        float *o = out + t * d;
        for (int64_t g0 = 0; g0 < d32; g0 += GROUP) {
            __m256 s = _mm256_set1_ps(group_scale(r, so, g0 / GROUP));
            __m256i c = group_codes_avx2(r, d, g0, q4);
            __m128i h[2] = {_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1)};
            for (int k = 0; k < 4; k++) {
                __m128i b = k & 1 ? _mm_unpackhi_epi64(h[k / 2], h[k / 2]) : h[k / 2];
                _mm256_storeu_ps(o + g0 + 8 * k,
                                 _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s));
            }
        }
        for (int64_t i = d32; i < d; i++) o[i] = kv_value(r, so, i, q4);
    }
}
TDM_TARGET_AVX2 static void dequantize_avx2(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    dequantize_avx2_f(rows, rs, n, d, out, false);
}
TDM_TARGET_AVX2 static void dequantize_avx24(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    dequantize_avx2_f(rows, rs, n, d, out, true);
}

const tdm_llm_i8_fns tdm_llm_i8_fns_avx2 = {scores_avx2, pv_avx2, NULL,
    tdm_llm_kv_quantize_row, dequantize_avx2, TDM_ISA_AVX2, blk_avx2_scores, blk_avx2_pv};
const tdm_llm_i8_fns tdm_llm_i4_fns_avx2 = {scores_avx24, pv_avx24, tdm_llm_kv4_rotate_avx2,
    tdm_llm_kv4_quantize_row_avx2, dequantize_avx24, TDM_ISA_AVX2, blk_avx24_scores, blk_avx24_pv};

#endif

const tdm_llm_i8_fns *tdm_llm_i8_fns_for(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX512_CORE_VNNI) return &tdm_llm_i8_fns_vnni;
    if (level >= TDM_ISA_AVX512_CORE) return &tdm_llm_i8_fns_avx512;
    if (level >= TDM_ISA_AVX2) return &tdm_llm_i8_fns_avx2;
#endif
    (void)level;
    return &fns_portable;
}

const tdm_llm_i8_fns *tdm_llm_i4_fns_for(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX512_CORE_VNNI) return &tdm_llm_i4_fns_vnni;
    if (level >= TDM_ISA_AVX2) return &tdm_llm_i4_fns_avx2;
#endif
    (void)level;
    return &fns4_portable;
}
