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
 * CPUs) has no level of its own in cpu_isa.h; those CPUs take the AVX2 form. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_llm.h"

#define GROUP TDM_KV_I8_GROUP
#define AI __attribute__((always_inline)) inline

/* The 4-bit cache (q4, kv_type "int4"; ops/kv_int8.h TDM_KV_I4_ROW) goes through the same
 * routines with the row's codes read another way: every routine below takes a q4 flag that
 * is a constant where it is instantiated (the entry points come in pairs), so each form
 * compiles to its own code. A 4-bit group (16 bytes) widens to its 32 codes in order: the
 * low nibbles are values 0..15, the high ones 16..31; the codes less 8 are the signed values
 * (the integer variants take c - 8, or c with 8 * sum(q) taken off, as the 8-bit forms take
 * c + 128 with 128 * sum(q)). The scales follow the codes: at byte d (8-bit) or 16 per group
 * (4-bit). */
static inline int64_t scales_at(int64_t d, bool q4) {
    return q4 ? 16 * ((d + GROUP - 1) / GROUP) : d;
}

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
 * library call */
static inline float round_code(float v) {
    v = (v + 12582912.0f) - 12582912.0f;
    return v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
}

/* ... in [-8, 7] for the 4-bit codes (|v| <= 8 give or take a rounding) */
static inline int round_code4(float v) {
    v = (v + 12582912.0f) - 12582912.0f;
    return v > 7.0f ? 7 : v < -8.0f ? -8 : (int)v;
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

/* Heads per pass over the rows (the quantised queries on the stack). */
#define QHEADS 4

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

/* The entry points of a routine for both forms: NAME (8-bit) and NAME##4 (4-bit) calling
 * BODY(..., q4) with q4 a constant. ATTR: the target attribute. */
#define SCORES_PAIR(ATTR, NAME, BODY)                                                          \
    ATTR static void NAME(const float *const *q, int64_t G, const int8_t *k, int64_t rs,         \
                          int64_t n, int64_t d, float scale, float *out, int64_t ld,             \
                          const int8_t *vnext) {                                                 \
        BODY(q, G, k, rs, n, d, scale, out, ld, vnext, false);                                   \
    }                                                                                            \
    ATTR static void NAME##4(const float *const *q, int64_t G, const int8_t *k, int64_t rs,      \
                             int64_t n, int64_t d, float scale, float *out, int64_t ld,          \
                             const int8_t *vnext) {                                              \
        BODY(q, G, k, rs, n, d, scale, out, ld, vnext, true);                                    \
    }
#define PV_PAIR(ATTR, NAME, BODY)                                                              \
    ATTR static void NAME(const float *p, int64_t ld, int64_t G, const int8_t *v, int64_t rs,     \
                          int64_t n, int64_t d, float *y, int64_t ys) {                          \
        BODY(p, ld, G, v, rs, n, d, y, ys, false);                                               \
    }                                                                                            \
    ATTR static void NAME##4(const float *p, int64_t ld, int64_t G, const int8_t *v, int64_t rs,  \
                             int64_t n, int64_t d, float *y, int64_t ys) {                       \
        BODY(p, ld, G, v, rs, n, d, y, ys, true);                                                \
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
            __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
            b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(void *)(qc[h] + GROUP * g), b);
        }
        if (whole < ng) { /* the short last group, zero-padded */
            memset(qc[h] + GROUP * whole, 0, GROUP);
            tdm_llm_q8_query(q[h] + GROUP * whole, d - GROUP * whole, qc[h] + GROUP * whole, qs[h] + whole);
            qs[h][whole] *= scale;
        }
    }
}

TDM_TARGET_AVX2 static AI void scores_avx2_f(const float *const *q, int64_t G, const int8_t *k,
                                             int64_t rs, int64_t n, int64_t d, float scale,
                                             float *out, int64_t ld, const int8_t *vnext, bool q4) {
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
            int64_t t = 0;
            for (; t < n; t += TR8_ROWS) {
                int64_t cnt = n - t < TR8_ROWS ? n - t : TR8_ROWS;
                if (vnext && h0 == 0) /* the value rows' lines, into L2 for the p.V */
                    for (int64_t o2 = (t * rs) & ~(int64_t)63; o2 < (t + cnt) * rs; o2 += 64)
                        _mm_prefetch((const char *)(vnext + o2), _MM_HINT_T1);
                if (cnt == TR8_ROWS) {
                    tr8_rows(qc, qa, qz, qs, hn, k + t * rs, rs, d, o, ld, t, cnt, q4);
                } else { /* the last rows through a zero-padded copy */
                    const int64_t prs = q4 ? TDM_KV_I4_ROW(d) : TDM_KV_I8_ROW(d);
                    memset(pad, 0, (size_t)(TR8_ROWS * prs));
                    for (int64_t i = 0; i < cnt; i++)
                        memcpy(pad + i * prs, k + (t + i) * rs, (size_t)prs);
                    tr8_rows(qc, qa, qz, qs, hn, pad, prs, d, o, ld, t, cnt, q4);
                }
            }
            continue;
        }
        for (int64_t t = 0; t < n; t++) {
            const int8_t *r = k + t * rs;
            if (vnext && h0 == 0) /* the value row's lines, into L2 for the p.V */
                for (int64_t o = (t * rs) & ~(int64_t)63; o < (t + 1) * rs; o += 64)
                    _mm_prefetch((const char *)(vnext + o), _MM_HINT_T1);
            switch (hn) {
            case 1: score_row_avx2(qc, qs, 1, r, d, o, ld, t, q4); break;
            case 2: score_row_avx2(qc, qs, 2, r, d, o, ld, t, q4); break;
            case 3: score_row_avx2(qc, qs, 3, r, d, o, ld, t, q4); break;
            default: score_row_avx2(qc, qs, 4, r, d, o, ld, t, q4); break;
            }
        }
    }
}
SCORES_PAIR(TDM_TARGET_AVX2, scores_avx2, scores_avx2_f)

/* Up to PV_HEADS heads x NV vectors of 8 columns inside one scale group, the accumulators in
 * registers over all rows (NV, HN compile-time: no spills): each row's codes are widened once
 * for all the heads, and the row's scale is folded into each head's weight (p * s_v, one
 * product per row and head) instead of into the codes. */
#define PV_HEADS 3
#define PVQ_ROWS 64 /* rows per block of integer p.V weights (AVX2, AVX-512 VNNI) */
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
 * The AVX-512 VNNI form's numbers (pvq_block, below) with AVX2's vpmaddwd: per block of
 * PVQ_ROWS rows, each head and whole group's weights p * s_v rounded to int16 against the
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
/* acc += x in acc's register (GCC 12 adds into a new register and copies it back: six
 * copies a pass of three heads' sums) */
TDM_TARGET_AVX2 static AI void padd_acc(__m256i *acc, __m256i x) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpaddd %1, %0, %0" : "+x"(*acc) : "x"(x));
#else
    *acc = _mm256_add_epi32(*acc, x);
#endif
}
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
        padd_acc(&ia[h][0], _mm256_madd_epi16(x[0], wv));
        padd_acc(&ia[h][1], _mm256_madd_epi16(x[1], wv));
    }
}

/* One pass of pvq_avx2: the 16 columns `half` of group g (half a compile-time constant: its
 * lane choice out of the loop), all heads, into acc; pf: the rows' lines ahead into L1 */
TDM_TARGET_AVX2 static AI void pvq_pass(const int8_t *vb, int64_t rs, int64_t cnt,
                                        const int16_t (*wq)[PVQ_GROUPS][PVQ_ROWS],
                                        const int32_t (*corr)[PVQ_GROUPS], const float (*bs)[PVQ_GROUPS],
                                        int HN, int64_t g, int64_t NG, const int half, bool q4, bool pf,
                                        float (*acc)[8]) {
    const int8_t *vg = vb + (q4 ? 16 * g : 32 * g + 16 * half);
    __m256i ia[PV_HEADS][2];
    for (int h = 0; h < HN; h++) ia[h][0] = ia[h][1] = _mm256_setzero_si256();
    const int16_t *wg[PV_HEADS];
    for (int h = 0; h < HN; h++) wg[h] = wq[h][g];
    int64_t t = 0;
    for (; t + 4 <= cnt; t += 4) { /* two pairs a pass: half the loop's own work */
        if (pf) _mm_prefetch((const char *)(vg + t * rs + 8192), _MM_HINT_T0);
        pvq_pair(vg + t * rs, vg + (t + 1) * rs, wg, t, HN, half, q4, ia);
        pvq_pair(vg + (t + 2) * rs, vg + (t + 3) * rs, wg, t + 2, HN, half, q4, ia);
    }
    for (; t < cnt; t += 2) {
        const int8_t *ra = vg + t * rs;
        pvq_pair(ra, t + 1 < cnt ? ra + rs : ra /* weight 0 */, wg, t, HN, half, q4, ia);
    }
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
                                        int64_t rs, int64_t n, int64_t d, int64_t NG, float *y,
                                        int64_t ys, bool q4) {
    const int64_t so = scales_at(d, q4); /* NG: the whole groups */
    const __m256i z = _mm256_setzero_si256();
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
    _Alignas(32) float acc[PV_HEADS * PVQ_GROUPS * 4][8]; /* head h, group g, vector k: (h NG + g) 4 + k */
    memset(acc, 0, sizeof(float) * 32 * (size_t)(HN * NG));
    for (int64_t t0 = 0; t0 < n; t0 += PVQ_ROWS) {
        int64_t cnt = n - t0 < PVQ_ROWS ? n - t0 : PVQ_ROWS, c16 = (cnt + 15) & ~(int64_t)15;
        _Alignas(32) float sc[PVQ_GROUPS][PVQ_ROWS];
        _Alignas(32) int16_t wq[PV_HEADS][PVQ_GROUPS][PVQ_ROWS];
        /* the rows' scales (bfloat16: the high half of a float32; rows past cnt: 0), eight rows
         * a vector store, a pair of groups from each row's dword: the passes below read them as
         * vectors, and a vector load over eight scalar stores waits for them to reach the cache
         * (no store forwarding; attn_rows 64 avx2 int4, Zen 3, alternating: p.V 6.0-6.2 -> 5.5-5.8
         * us) */
        for (int64_t g = 0; g < NG; g += 2) {
            const bool two = g + 1 < NG;
            const int64_t at = so + 2 * g - (two ? 0 : 2); /* a lone last group: the dword ending with its scale */
            for (int64_t t = 0; t < c16; t += 8) {
                __m256i x;
                if (t + 8 <= cnt) {
                    x = rows_dword(v + (t0 + t) * rs, rs, at);
                } else { /* the last rows, zero past cnt */
                    _Alignas(32) int32_t w[TR8_ROWS] = {0};
                    for (int64_t i = 0; t + i < cnt; i++) memcpy(&w[i], v + (t0 + t + i) * rs + at, sizeof w[i]);
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
                corr[h][g] = (q4 ? 8 : 128) * hsum8i(qsum); /* the codes' offset times the weights */
            }
        const int8_t *vb = v + t0 * rs;
        for (int64_t g = 0; g < NG; g++) { /* 16 columns a pass: the sums stay in registers */
            pvq_pass(vb, rs, cnt, wq, corr, bs, HN, g, NG, 0, q4, g == 0, acc);
            pvq_pass(vb, rs, cnt, wq, corr, bs, HN, g, NG, 1, q4, false, acc);
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
 * 8-bit last group shorter than 32 in float32 */
TDM_TARGET_AVX2 static AI void pv_avx2_f(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                         int64_t rs, int64_t n, int64_t d, float *y, int64_t ys,
                                         bool q4) {
    int64_t whole = d / GROUP, d8 = d & ~(int64_t)7;
    for (int64_t h0 = 0; whole && h0 < G; h0 += PV_HEADS) {
        int hn = G - h0 < PV_HEADS ? (int)(G - h0) : PV_HEADS;
        switch (hn) {
        case 1: pvq_avx2(p + h0 * ld, ld, 1, v, rs, n, d, whole, y + h0 * ys, ys, q4); break;
        case 2: pvq_avx2(p + h0 * ld, ld, 2, v, rs, n, d, whole, y + h0 * ys, ys, q4); break;
        default: pvq_avx2(p + h0 * ld, ld, 3, v, rs, n, d, whole, y + h0 * ys, ys, q4); break;
        }
    }
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
PV_PAIR(TDM_TARGET_AVX2, pv_avx2, pv_avx2_f)

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

static const tdm_llm_i8_fns fns_avx2 = {scores_avx2, pv_avx2, NULL,
    tdm_llm_kv_quantize_row, dequantize_avx2, TDM_ISA_AVX2};
static const tdm_llm_i8_fns fns4_avx2 = {scores_avx24, pv_avx24, tdm_llm_kv4_rotate_avx2,
    tdm_llm_kv4_quantize_row_avx2, dequantize_avx24, TDM_ISA_AVX2};

/* ---- AVX-512 ---- */

TDM_TARGET_AVX512 static inline __mmask16 mask_of(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* 16 codes: x * inv rounded to the nearest even and clamped to [lo, hi], NaN (x NaN, or inf
 * times a zero inv) as 0: what round_code / round_code4 and the conversion after them give.
 * The row quantisers and vt_head's query share it. */
TDM_TARGET_AVX512 static inline __m512i round_codes16(__m512 x, float inv, float lo, float hi) {
    __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(inv));
    y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), y);
    y = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(lo)), _mm512_set1_ps(hi)));
}

/* Cache rows are read in order: the scores fetch their key rows 8 KiB ahead into L2 and 1 KiB
 * ahead into L1 (attn_depth 4-bit, FLUSH=2, 1 thread: 0.83-0.85 ms a step against 0.88-0.90
 * with one 4 KiB step into L1, whose misses the block's scale gather then waited for), and
 * the value rows of the same block into L2 for p.V; p.V reads its rows I8_AHEAD ahead into
 * L1 (a kv head's rows are a short run in memory). */
#ifndef I8_AHEAD
#define I8_AHEAD 8192
#endif
#ifndef I8_NEAR
#define I8_NEAR 1024
#endif

#define VN_MAXC 8 /* chunks of 64 codes a row: head sizes up to 512 */
#define TDM_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")))

/* ---- AVX-512 VNNI scores, 16 rows a block, the keys transposed ----
 * A row's codes go through vpdpbusd 64 at a time ("chunks", zero-padded; head sizes 16..512),
 * the key codes as the unsigned operand (xor 0x80: c + 128) and the quantised query as the
 * signed one; the 128 * sum(q) this adds is taken off per group after the sums. A scale is
 * read as the high half of the dword that ends with it (a float32 once masked).
 * Four rows a, b, c, d of a chunk (64 codes, xor 0x80) go through two unpack steps within
 * each 128-bit lane (no lane crossing): vector u_j then holds in lane L the dwords 4L + j
 * of the four rows, and vpdpbusd against the query's dwords 4L + j (u_j's lane order, one
 * vector per head, chunk and j) adds row i's products of bytes 16L .. 16L + 15 into lane
 * (L, i): the transposition is shared by the group's heads (an earlier form reduced each
 * head's per-row sums with shuffles: 1.2-1.3x the time at head size 64). Per 16 rows (sets s = 0..3 of 4) and chunk, lanes L = 0, 1 (group 2c) and
 * 2, 3 (group 2c + 1) of the four sets' sums fold with two lane shuffles a pair of sets into
 * [set s: group 2c, group 2c + 1, set s + 1: group 2c, 2c + 1], 4 rows each; those go to
 * float with the correction, the query scale and the rows' key scales (one gather of both
 * groups' scales per block and chunk: 2.87 us against 3.12 with a gather per pair of sets,
 * attn_rows 4-bit), summed over the chunks; the last fold adds the two groups of each set:
 * 16 scores in row order. A last block shorter than 16 rows loads its missing rows as zeros
 * (masked), with zero scales. */
typedef struct vt_query {
    _Alignas(64) int32_t q[QHEADS][VN_MAXC][4][16]; /* per head, chunk, j: lane (L, i) = dword 4L + j */
    _Alignas(64) int32_t corr[QHEADS][VN_MAXC][16]; /* lane (b, i): 128 * sum of the codes of group 2c + (b & 1) */
    _Alignas(64) float qs[QHEADS][VN_MAXC][16];     /* lane (b, i): query scale * softmax scale of that group */
    _Alignas(64) int32_t ridx[16];                  /* lane t: t * rs (the block's rows) */
    int32_t soff[VN_MAXC]; /* the dword of chunk c's scales in a row: both groups (low half 2c, high
                              half 2c + 1) where two[c], else the one that ends with group 2c */
    bool two[VN_MAXC];
} vt_query;

/* Chunk c (values 64 c ..) of a row as 64 unsigned codes: the 8-bit codes + 128 in order
 * (bytes of m), or the 4-bit codes as they are (32 bytes of nibbles, the low 32 bits of m)
 * with 128-bit lanes [values 0-15 of group 2c, 0-15 of 2c + 1, 16-31 of 2c, 16-31 of 2c + 1]
 * (vt_head lays the query's dwords out in that order, and the fold adds lanes 0 + 2 and
 * 1 + 3): the 32 bytes in both halves, the upper half shifted by a nibble, no lane shuffle.
 * Bytes outside m read as code 0. */
TDM_TARGET_VNNI static AI __m512i chunk_codes(const int8_t *r, int c, __mmask64 m, bool q4) {
    if (!q4)
        return _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, r + 64 * c), _mm512_set1_epi8((char)0x80));
    __m512i z; /* a whole chunk: one broadcast load (always masked: scores 3.32 us, not 3.10) */
    if ((uint32_t)m == 0xffffffffu)
        z = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(r + 32 * c)));
    else
        z = _mm512_broadcast_i64x4(_mm256_maskz_loadu_epi8((__mmask32)m, r + 32 * c));
    z = _mm512_mask_srli_epi16(z, (__mmask32)0xffff0000u, z, 4);
    return _mm512_and_si512(z, _mm512_set1_epi8(15));
}

/* the load masks of a row's chunks (chunk_codes' m) */
static void chunk_masks(int64_t d, int NC, bool q4, __mmask64 *cm) {
    for (int c = 0; c < NC; c++) {
        int64_t w = q4 ? 16 * ((d + GROUP - 1) / GROUP) - 32 * c : d - 64 * c;
        cm[c] = w >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << w) - 1);
    }
}

TDM_TARGET_VNNI static AI void vt_block(const vt_query *vq, int HN, int NC, const int8_t *r,
                                        int64_t rs, int64_t rows, const __mmask64 *cm,
                                        bool prefetch, const int8_t *vnext, float *out, int64_t ld,
                                        bool q4, bool whole) {
    if (whole) rows = 16; /* a constant: no test per row */
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512 f[QHEADS][2];
    for (int h = 0; h < HN; h++) f[h][0] = f[h][1] = _mm512_setzero_ps();
    const __mmask16 lm = mask_of(rows); /* the real rows' scales, the others 0 */
    const __m512i ri = _mm512_load_si512((const void *)vq->ridx);
    for (int c = 0; c < NC; c++) {
        /* one gather a block, first (its latency under the sets' work): both groups' scales of
         * the 16 rows; per pair of sets below, lane (b, i) = row 8 pr + 4 (b >> 1) + i, group
         * 2c + (b & 1) */
        const __m512i sd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lm,
                                                       _mm512_add_epi32(ri, _mm512_set1_epi32(vq->soff[c])),
                                                       (const void *)r, 1);
        __m512i a[4][QHEADS]; /* per set of 4 rows: lane (L, i) = row 4s + i, bytes 16L.. */
#pragma GCC unroll 4
        for (int st = 0; st < 4; st++) {
            if (prefetch && c == 0) /* the set's key rows ahead (L2 and L1) and its value rows,
                                       every line, spread over the block (not in one burst) */
                for (int64_t o = (4 * st * rs) & ~(int64_t)63; o < (4 * st + 4) * rs; o += 64) {
                    _mm_prefetch((const char *)(r + o + I8_AHEAD), _MM_HINT_T1);
                    _mm_prefetch((const char *)(r + o + I8_NEAR), _MM_HINT_T0);
                    if (vnext) _mm_prefetch((const char *)(vnext + o), _MM_HINT_T1);
                }
            __m512i x[4];
            for (int i = 0; i < 4; i++) {
                int64_t row = 4 * st + i;
                __mmask64 m = row < rows ? cm[c] : 0;
                x[i] = chunk_codes(r + row * rs, c, m, q4);
            }
            __m512i t0 = _mm512_unpacklo_epi32(x[0], x[1]), t1 = _mm512_unpackhi_epi32(x[0], x[1]);
            __m512i t2 = _mm512_unpacklo_epi32(x[2], x[3]), t3 = _mm512_unpackhi_epi32(x[2], x[3]);
            __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                            _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
            for (int h = 0; h < HN; h++) {
                __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0],
                                                  _mm512_load_si512((const void *)vq->q[h][c][0]));
                for (int jj = 1; jj < 4; jj++)
                    acc = _mm512_dpbusd_epi32(acc, u[jj], _mm512_load_si512((const void *)vq->q[h][c][jj]));
                a[st][h] = acc;
            }
        }
        __m512 sk[2];
        for (int pr = 0; pr < 2; pr++) {
            __m512i dw = _mm512_permutexvar_epi32(
                _mm512_add_epi32(_mm512_set_epi32(7, 6, 5, 4, 7, 6, 5, 4, 3, 2, 1, 0, 3, 2, 1, 0),
                                 _mm512_set1_epi32(8 * pr)), sd);
            sk[pr] = _mm512_castsi512_ps(
                vq->two[c] ? _mm512_mask_and_epi32(_mm512_slli_epi32(dw, 16), 0xf0f0, dw, hi)
                           : _mm512_maskz_and_epi32(0x0f0f, dw, hi));
        }
        for (int h = 0; h < HN; h++) {
            const __m512i corr = _mm512_load_si512((const void *)vq->corr[h][c]);
            const __m512 qs = _mm512_load_ps(vq->qs[h][c]);
            for (int pr = 0; pr < 2; pr++) {
                __m512i x = a[2 * pr][h], y = a[2 * pr + 1][h];
                __m512i sum = q4 ? _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                                                    _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)))
                                 : _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                                                    _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
                __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum, corr)), qs);
                f[h][pr] = _mm512_fmadd_ps(v, sk[pr], f[h][pr]);
            }
        }
    }
    __mmask16 om = rows >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rows) - 1u);
    for (int h = 0; h < HN; h++) {
        __m512 x = f[h][0], y = f[h][1];
        __m512 o = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_mask_storeu_ps(out + h * ld, om, o);
    }
}

TDM_TARGET_VNNI static AI void vt_rows(const vt_query *vq, int HN, int NC, const int8_t *k,
                                       int64_t rs, int64_t n, const __mmask64 *cm, bool prefetch,
                                       const int8_t *vnext, float *out, int64_t ld, bool q4) {
    /* whole blocks (16 rows; 4-bit: every chunk's 32 bytes) without a test per row */
    bool whole = !q4 || (uint32_t)cm[NC - 1] == 0xffffffffu;
    int64_t t = 0;
    if (whole)
        for (; t + 16 <= n; t += 16)
            vt_block(vq, HN, NC, k + t * rs, rs, 16, cm, prefetch, vnext ? vnext + t * rs : NULL,
                     out + t, ld, q4, true);
    for (; t < n; t += 16)
        vt_block(vq, HN, NC, k + t * rs, rs, n - t < 16 ? n - t : 16, cm, prefetch,
                 vnext ? vnext + t * rs : NULL, out + t, ld, q4, false);
}

/* Head h of vq from its float query: tdm_llm_q8_query's codes and scales (the same largest
 * |q|, division and round-to-nearest-even; NaN as 0, as its conversion gives), 16 values a
 * vector, then each chunk's dwords in vt_block's order (one permute per j), the groups' code
 * sums and scales per lane (attn_rows, 16 rows x 3 heads: 0.47 us a call with the scalar
 * quantiser and per-lane stores) */
TDM_TARGET_VNNI static void vt_head(vt_query *vq, int h, const float *q, int64_t d, int NC,
                                    int64_t ng, float scale, bool q4) {
    /* lane (b, i) of q[h][c][j] takes the chunk's dword 4 L + j, L = b (8-bit) or the lane
     * chunk_codes puts group values at (4-bit: lanes 1 and 2 swapped) */
    const __m512i base = q4 ? _mm512_set_epi32(12, 12, 12, 12, 4, 4, 4, 4, 8, 8, 8, 8, 0, 0, 0, 0)
                            : _mm512_set_epi32(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
    for (int c = 0; c < NC; c++) {
        __m512 x[4];
        for (int k = 0; k < 4; k++) {
            int64_t i0 = 64 * c + 16 * k;
            x[k] = _mm512_maskz_loadu_ps(mask_of(d - i0), q + i0);
            x[k] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x[k], x[k], _CMP_ORD_Q), x[k]);
        }
        __m128i b[4];
        int32_t gsum[2];
        float gs[2];
        for (int gg = 0; gg < 2; gg++) {
            float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x[2 * gg]), _mm512_abs_ps(x[2 * gg + 1])));
            float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
            __m512i sum = _mm512_setzero_si512();
            for (int k = 2 * gg; k < 2 * gg + 2; k++) {
                __m512i iv = round_codes16(x[k], inv, -127.0f, 127.0f);
                sum = _mm512_add_epi32(sum, iv);
                b[k] = _mm512_cvtepi32_epi8(iv);
            }
            gsum[gg] = _mm512_reduce_add_epi32(sum);
            gs[gg] = 2 * c + gg < ng ? mx / 127.0f * scale : 0.0f;
        }
        __m512i codes = _mm512_inserti32x4(_mm512_castsi128_si512(b[0]), b[1], 1);
        codes = _mm512_inserti32x4(_mm512_inserti32x4(codes, b[2], 2), b[3], 3);
        for (int jj = 0; jj < 4; jj++)
            _mm512_store_si512((void *)vq->q[h][c][jj],
                               _mm512_permutexvar_epi32(_mm512_add_epi32(base, _mm512_set1_epi32(jj)), codes));
        int k = q4 ? 8 : 128;
        _mm512_store_si512((void *)vq->corr[h][c],
                           _mm512_mask_blend_epi32(0xf0f0, _mm512_set1_epi32(k * gsum[0]), _mm512_set1_epi32(k * gsum[1])));
        _mm512_store_ps(vq->qs[h][c], _mm512_mask_blend_ps(0xf0f0, _mm512_set1_ps(gs[0]), _mm512_set1_ps(gs[1])));
    }
}

TDM_TARGET_VNNI static AI void scores_vnni_f(const float *const *q, int64_t G, const int8_t *k,
                                             int64_t rs, int64_t n, int64_t d, float scale,
                                             float *out, int64_t ld, const int8_t *vnext, bool q4) {
    int64_t chunks = (d + 63) / 64;
    if (d < 16 || chunks > VN_MAXC ||
        rs > (q4 ? TDM_KV_I4_ROW(VN_MAXC * 64) : TDM_KV_I8_ROW(VN_MAXC * 64))) {
        if (q4) scores_avx24(q, G, k, rs, n, d, scale, out, ld, vnext);
        else scores_avx2(q, G, k, rs, n, d, scale, out, ld, vnext);
        return;
    }
    int NC = (int)chunks;
    int64_t ng = (d + GROUP - 1) / GROUP, so = scales_at(d, q4);
    __mmask64 cm[VN_MAXC]; /* the code bytes of each chunk */
    chunk_masks(d, NC, q4, cm);
    vt_query vq;
    for (int t = 0; t < 16; t++) vq.ridx[t] = (int32_t)(t * rs);
    for (int c = 0; c < NC; c++) {
        vq.two[c] = 2 * c + 1 < ng;
        vq.soff[c] = (int32_t)(so + 4 * c - (vq.two[c] ? 0 : 2));
    }
    for (int64_t h0 = 0; h0 < G; h0 += QHEADS) {
        int hn = G - h0 < QHEADS ? (int)(G - h0) : QHEADS;
        for (int h = 0; h < hn; h++) vt_head(&vq, h, q[h0 + h], d, NC, ng, scale, q4);
        float *o = out + h0 * ld;
        bool pf = h0 == 0;
        const int8_t *vn = h0 == 0 ? vnext : NULL;
#define VT_CASE(HN_)                                                                            \
    case HN_:                                                                                   \
        switch (NC) {                                                                           \
        case 1: vt_rows(&vq, HN_, 1, k, rs, n, cm, pf, vn, o, ld, q4); break;                     \
        case 2: vt_rows(&vq, HN_, 2, k, rs, n, cm, pf, vn, o, ld, q4); break;                     \
        default: vt_rows(&vq, HN_, NC, k, rs, n, cm, pf, vn, o, ld, q4); break;                   \
        }                                                                                       \
        break;
        switch (hn) {
            VT_CASE(1)
            VT_CASE(2)
            VT_CASE(3)
            VT_CASE(4)
        }
#undef VT_CASE
    }
}
SCORES_PAIR(TDM_TARGET_VNNI, scores_vnni, scores_vnni_f)

/* p.V: 64 columns (two scale groups) x HN heads of accumulators in registers. The rows go in
 * blocks of PV_ROWS: first each head's weights times the rows' scales, w[h][gg][t] =
 * p[h][t] * s_t(group gg) (16 rows a step: one gather of the scales per group), then per row
 * the codes widened (unscaled) and one FMA per 16 columns and head with the broadcast weight
 * of the column's group. NV vectors of 16 columns (masks m). */
#define PV_ROWS 64

TDM_TARGET_AVX512 static AI void pv_weights_avx512(const float *p, int64_t ld, int HN,
                                                   const int8_t *v, int64_t rs, int64_t cnt,
                                                   int64_t so, int64_t g0, int ngg,
                                                   float (*w)[2][PV_ROWS]) {
    const __m512i step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)rs));
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t t = 0; t < cnt; t += 16) {
        __mmask16 m = mask_of(cnt - t);
        const int8_t *r = v + t * rs;
        for (int gg = 0; gg < 2; gg++) {
            __m512 sk = _mm512_setzero_ps();
            if (gg < ngg) /* the scale as the high half of the dword that ends with it */
                sk = _mm512_castsi512_ps(_mm512_and_si512(
                    _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, step,
                                                (const void *)(r + so + 2 * (g0 + gg) - 2), 1),
                    hi));
            for (int h = 0; h < HN; h++)
                _mm512_storeu_ps(w[h][gg] + t, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + h * ld + t), sk));
        }
    }
}

TDM_TARGET_AVX512 static AI void pv_block_avx512(const float *p, int64_t ld, int HN, int NV,
                                                 const __mmask16 *m, const int8_t *v, int64_t rs,
                                                 int64_t n, int64_t d, int64_t i0, float *y,
                                                 int64_t ys, bool prefetch) {
    float w[QHEADS][2][PV_ROWS];
    int64_t g0 = i0 / GROUP, ng = (d + GROUP - 1) / GROUP;
    int ngg = ng - g0 >= 2 ? 2 : 1;
    __m512 acc[QHEADS][4];
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) acc[h][c] = _mm512_maskz_loadu_ps(m[c], y + h * ys + i0 + 16 * c);
    for (int64_t t0 = 0; t0 < n; t0 += PV_ROWS) {
        int64_t cnt = n - t0 < PV_ROWS ? n - t0 : PV_ROWS;
        const int8_t *vb = v + t0 * rs;
        pv_weights_avx512(p + t0, ld, HN, vb, rs, cnt, d, g0, ngg, w); /* scales at d */
        for (int64_t t = 0; t < cnt; t++) {
            const int8_t *r = vb + t * rs + i0;
            if (prefetch) _mm_prefetch((const char *)(r + I8_AHEAD), _MM_HINT_T0);
            for (int c = 0; c < NV; c++) {
                __m128i cb = m[c] == 0xffff ? _mm_loadu_si128((const __m128i *)(r + 16 * c))
                                            : _mm_maskz_loadu_epi8(m[c], r + 16 * c);
                __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(cb));
                for (int h = 0; h < HN; h++)
                    acc[h][c] = _mm512_fmadd_ps(_mm512_set1_ps(w[h][c / 2][t]), x, acc[h][c]);
            }
        }
    }
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < NV; c++) _mm512_mask_storeu_ps(y + h * ys + i0 + 16 * c, m[c], acc[h][c]);
}

TDM_TARGET_AVX512 static void pv_avx512(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                        int64_t rs, int64_t n, int64_t d, float *y, int64_t ys) {
    if (d < 2) { /* the scale gathers read the dword ending with a scale */
        pv_avx2(p, ld, G, v, rs, n, d, y, ys);
        return;
    }
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
#define PV_CASE(NV_)                                                                            \
    case NV_:                                                                                   \
        switch (hn) {                                                                           \
        case 1: pv_block_avx512(ph, ld, 1, NV_, m, v, rs, n, d, i0, yh, ys, pf); break;         \
        case 2: pv_block_avx512(ph, ld, 2, NV_, m, v, rs, n, d, i0, yh, ys, pf); break;         \
        case 3: pv_block_avx512(ph, ld, 3, NV_, m, v, rs, n, d, i0, yh, ys, pf); break;         \
        default: pv_block_avx512(ph, ld, 4, NV_, m, v, rs, n, d, i0, yh, ys, pf); break;        \
        }                                                                                       \
        break;
            switch (nv) {
                PV_CASE(1)
                PV_CASE(2)
                PV_CASE(3)
                PV_CASE(4)
            }
#undef PV_CASE
        }
    }
}

/* ---- AVX-512 VNNI p.V ----
 * The weights p[h][t] * s_t (the row's group scale) of a block of PVQ_ROWS rows rounded to
 * int16 against the block's largest (per head and group: 2^-15 of it, far below the codes'
 * own error), two rows' codes interleaved as int16 pairs and vpdpwssd adds both rows'
 * products per column: half the multiplies of the float form. Per block of rows:
 *   - one gather a 16 rows reads both groups' scales (the dword at so + 2 g0: g0 in its low
 *     half, g0 + 1 in the high one; a lone last group: the dword that ends with it);
 *   - each head and group's largest weight is taken in registers as the weights are made,
 *     and they are rounded from p and the stored scales in one more pass (no float weights
 *     stored and read back), both groups packed by one vpackssdw;
 *   - the two rows' code bytes are interleaved before they are widened, as unsigned codes:
 *     4-bit, vpunpck[lh]bw then vpmovzxbw (each 16-bit lane one byte, two codes; AND 15 and
 *     >> 4 give the low and high nibbles' pairs); 8-bit, the codes + 128 (xor 0x80) widened
 *     against zero within the lanes; 4 or 6 shuffles a pair of rows (8 before);
 *   - the 8 * sum(w) (4-bit) or 128 * sum(w) (8-bit) the unsigned codes add is taken off each
 *     block's int32 sums (exact; in float, a large weight's share left a residue in every
 *     column).
 * Each 256-bit half of a widened vector holds one group: 4-bit, lanes 0-7 its columns
 * [0-7 | 16-23 | 8-15 | 24-31] (vectors X & 15, X >> 4, Y & 15, Y >> 4); 8-bit, vector c's
 * dword (L, j) column 16 L + 4 c + j; both put back in order at the end. |w| <= 32767, codes
 * <= 255: a block's int32 sums stay below 2^30. attn_rows (1000 rows x 3 heads): 4-bit 3.21 us,
 * 8-bit 3.47 (4.31 and 3.81 with the float weights stored and read back, a gather per group and 8
 * shuffles a pair); the multiplies alone (one vpdpwssd a cycle on Zen 5) take 1.6. Blocks of 128
 * rows took 2.97 / 3.22 us, but a softmax's small weights then share the step of a larger
 * largest: 1.4x the error of 64 rows against float32 weights on peaked weights (the
 * cache's perplexity on SmolLM2 moved by about 1%). */

/* acc += the pairs' products of x and w (vpdpwssd) in acc's register: GCC 12's intrinsic
 * copies the accumulator to and from another register around each one in pvq_block's loop,
 * whose accumulators fill the register file (attn_rows p.V 4-bit 3.28 us with the intrinsic,
 * 3.20 with this; 8-bit 3.55 and 3.47) */
TDM_TARGET_VNNI static AI void dpwssd_acc(__m512i *acc, __m512i x, __m512i w) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpwssd %2, %1, %0" : "+v"(*acc) : "v"(x), "v"(w));
#else
    *acc = _mm512_dpwssd_epi32(*acc, x, w);
#endif
}

TDM_TARGET_VNNI static AI void pvq_block(const float *p, int64_t ld, int HN, const int8_t *v,
                                          int64_t rs, int64_t n, int64_t d, int64_t i0,
                                          __mmask64 cm, float *y, int64_t ys, bool q4) {
    int64_t so = scales_at(d, q4), g0 = i0 / GROUP, ng = (d + GROUP - 1) / GROUP;
    bool two = ng - g0 >= 2;
    const int8_t *vs = v + (two ? so + 2 * g0 : so + 2 * g0 - 2), *vc = v + (q4 ? i0 / 2 : i0);
    const __m512i step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)rs));
    const __m512i hi16 = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i nib = _mm512_set1_epi16(15);
    _Alignas(64) float acc[QHEADS][4][16];
    memset(acc, 0, sizeof acc);
    for (int64_t t0 = 0; t0 < n; t0 += PVQ_ROWS) {
        int64_t cnt = n - t0 < PVQ_ROWS ? n - t0 : PVQ_ROWS;
        _Alignas(64) float sc[2][PVQ_ROWS];
        /* per head, 16 rows a 64 bytes (vpackssdw of both groups): dword 4L + m holds rows
         * 4L + 2m, + 1 of group 0, dword 4L + 2 + m the same of group 1 */
        _Alignas(64) int32_t wq[QHEADS][PVQ_ROWS];
        __m512 mx[QHEADS][2];
        for (int h = 0; h < HN; h++) mx[h][0] = mx[h][1] = _mm512_setzero_ps();
        for (int64_t t = 0; t < cnt; t += 16) {
            __mmask16 m = mask_of(cnt - t);
            __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, step,
                                                    (const void *)(vs + (t0 + t) * rs), 1);
            __m512 s0 = _mm512_castsi512_ps(two ? _mm512_slli_epi32(g, 16) : _mm512_and_si512(g, hi16));
            __m512 s1 = two ? _mm512_castsi512_ps(_mm512_and_si512(g, hi16)) : _mm512_setzero_ps();
            _mm512_store_ps(sc[0] + t, s0);
            _mm512_store_ps(sc[1] + t, s1);
            for (int h = 0; h < HN; h++) {
                __m512 pv = _mm512_maskz_loadu_ps(m, p + h * ld + t0 + t);
                mx[h][0] = _mm512_max_ps(mx[h][0], _mm512_abs_ps(_mm512_mul_ps(pv, s0)));
                mx[h][1] = _mm512_max_ps(mx[h][1], _mm512_abs_ps(_mm512_mul_ps(pv, s1)));
            }
        }
        /* each head and group against its block's largest weight: a bound such as max|p| *
         * max|s| lets a row of large scale and small weight cost the others their bits (the
         * tiny model's 8-bit prefill / decode logits: 2.3e-3 apart, 1e-4 with the largest) */
        float bs[QHEADS][2];
        __m512 inv[QHEADS][2];
        for (int h = 0; h < HN; h++)
            for (int gg = 0; gg < 2; gg++) {
                float m = _mm512_reduce_max_ps(mx[h][gg]);
                bs[h][gg] = m / 32767.0f;
                inv[h][gg] = _mm512_set1_ps(m > 0.0f ? 32767.0f / m : 0.0f);
            }
        __m512i qs[QHEADS][2];
        for (int h = 0; h < HN; h++) qs[h][0] = qs[h][1] = _mm512_setzero_si512();
        for (int64_t t = 0; t < cnt; t += 16) { /* rows past cnt: p reads 0, so w = 0 */
            __mmask16 m = mask_of(cnt - t);
            __m512 s0 = _mm512_load_ps(sc[0] + t), s1 = _mm512_load_ps(sc[1] + t);
            for (int h = 0; h < HN; h++) {
                __m512 pv = _mm512_maskz_loadu_ps(m, p + h * ld + t0 + t);
                __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(pv, s0), inv[h][0]));
                __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(pv, s1), inv[h][1]));
                _mm512_store_si512((void *)(wq[h] + t), _mm512_packs_epi32(q0, q1));
                qs[h][0] = _mm512_add_epi32(qs[h][0], q0);
                qs[h][1] = _mm512_add_epi32(qs[h][1], q1);
            }
        }
        __m512i ia[QHEADS][4];
        for (int h = 0; h < HN; h++)
            for (int c = 0; c < 4; c++) ia[h][c] = _mm512_setzero_si512();
        const int8_t *vb = vc + t0 * rs;
        for (int64_t t = 0; t < cnt; t += 2) {
            const int8_t *ra = vb + t * rs, *rb = t + 1 < cnt ? ra + rs : ra; /* weight 0 */
            _mm_prefetch((const char *)(ra + I8_AHEAD), _MM_HINT_T0);
            __m512i x[4];
            if (q4) {
                __m256i a, b;
                if ((uint32_t)cm == 0xffffffffu) {
                    a = _mm256_loadu_si256((const __m256i *)(const void *)ra);
                    b = _mm256_loadu_si256((const __m256i *)(const void *)rb);
                } else {
                    a = _mm256_maskz_loadu_epi8((__mmask32)cm, ra);
                    b = _mm256_maskz_loadu_epi8((__mmask32)cm, rb);
                }
                __m512i X = _mm512_cvtepu8_epi16(_mm256_unpacklo_epi8(a, b));
                __m512i Y = _mm512_cvtepu8_epi16(_mm256_unpackhi_epi8(a, b));
                x[0] = _mm512_and_si512(X, nib), x[1] = _mm512_srli_epi16(X, 4);
                x[2] = _mm512_and_si512(Y, nib), x[3] = _mm512_srli_epi16(Y, 4);
            } else { /* codes + 128 (unsigned), the two rows' bytes interleaved, widened against
                        zero within the lanes: x[c] dword (L, j) = column 16 L + 4 c + j */
                __m512i a = _mm512_maskz_loadu_epi8(cm, ra), b = _mm512_maskz_loadu_epi8(cm, rb);
                const __m512i sb = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
                __m512i P = _mm512_xor_si512(_mm512_unpacklo_epi8(a, b), sb);
                __m512i Q = _mm512_xor_si512(_mm512_unpackhi_epi8(a, b), sb);
                x[0] = _mm512_unpacklo_epi8(P, z), x[1] = _mm512_unpackhi_epi8(P, z);
                x[2] = _mm512_unpacklo_epi8(Q, z), x[3] = _mm512_unpackhi_epi8(Q, z);
            }
            for (int h = 0; h < HN; h++) {
                int64_t u = t - ((t >> 1) & 1); /* the pair's group-0 dword */
                __m512i w = _mm512_mask_set1_epi32(_mm512_set1_epi32(wq[h][u]), 0xff00, wq[h][u + 2]);
                for (int c = 0; c < 4; c++) dpwssd_acc(&ia[h][c], x[c], w);
            }
        }
        for (int h = 0; h < HN; h++) { /* less the codes' offset times the block's weights, in
                                          int32 (exact: a large weight leaves no float residue) */
            int zk = q4 ? 8 : 128;
            __m512i corr = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(zk * _mm512_reduce_add_epi32(qs[h][0])),
                                                   _mm512_set1_epi32(zk * _mm512_reduce_add_epi32(qs[h][1])));
            __m512 s = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(bs[h][0]), _mm512_set1_ps(bs[h][1]));
            for (int c = 0; c < 4; c++)
                _mm512_store_ps(acc[h][c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ia[h][c], corr)), s,
                                                           _mm512_load_ps(acc[h][c])));
        }
    }
    /* 4-bit: columns 16 k .. 16 k + 15 from the halves of two vectors: k = 0: X & 15, Y & 15
     * (low halves); 1: X >> 4, Y >> 4 (low); 2, 3: the same, high halves. 8-bit: 128-bit lane k
     * of the four vectors in turn */
    const __m512i lo = _mm512_set_epi32(23, 22, 21, 20, 19, 18, 17, 16, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i up = _mm512_set_epi32(31, 30, 29, 28, 27, 26, 25, 24, 15, 14, 13, 12, 11, 10, 9, 8);
    int64_t wcols = d - i0 < 64 ? d - i0 : 64;
    for (int h = 0; h < HN; h++) {
        __m512 t[2];
        if (!q4) {
            t[0] = _mm512_shuffle_f32x4(_mm512_load_ps(acc[h][0]), _mm512_load_ps(acc[h][1]), _MM_SHUFFLE(1, 0, 1, 0));
            t[1] = _mm512_shuffle_f32x4(_mm512_load_ps(acc[h][2]), _mm512_load_ps(acc[h][3]), _MM_SHUFFLE(1, 0, 1, 0));
        }
        for (int k = 0; k < 4; k++) {
            if (!q4 && k == 2) {
                t[0] = _mm512_shuffle_f32x4(_mm512_load_ps(acc[h][0]), _mm512_load_ps(acc[h][1]), _MM_SHUFFLE(3, 2, 3, 2));
                t[1] = _mm512_shuffle_f32x4(_mm512_load_ps(acc[h][2]), _mm512_load_ps(acc[h][3]), _MM_SHUFFLE(3, 2, 3, 2));
            }
            __m512 r = q4 ? _mm512_permutex2var_ps(_mm512_load_ps(acc[h][k & 1]), k < 2 ? lo : up,
                                                   _mm512_load_ps(acc[h][2 + (k & 1)]))
                          : (k & 1) ? _mm512_shuffle_f32x4(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1))
                                    : _mm512_shuffle_f32x4(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0));
            __mmask16 m = mask_of(wcols - 16 * k);
            float *o = y + h * ys + i0 + 16 * k;
            _mm512_mask_storeu_ps(o, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, o), r));
        }
    }
}

TDM_TARGET_VNNI static AI void pv_vnni_f(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                         int64_t rs, int64_t n, int64_t d, float *y, int64_t ys,
                                         bool q4) {
    if (d < 2) { /* the scale gathers read the dword ending with a scale */
        if (q4) pv_avx24(p, ld, G, v, rs, n, d, y, ys);
        else pv_avx2(p, ld, G, v, rs, n, d, y, ys);
        return;
    }
    __mmask64 cms[VN_MAXC * 2];
    chunk_masks(d, (int)((d + 63) / 64), q4, cms);
    for (int64_t i0 = 0; i0 < d; i0 += 64) {
        __mmask64 cm = cms[i0 / 64];
        for (int64_t h0 = 0; h0 < G; h0 += QHEADS) {
            int hn = G - h0 < QHEADS ? (int)(G - h0) : QHEADS;
            const float *ph = p + h0 * ld;
            float *yh = y + h0 * ys;
            switch (hn) {
            case 1: pvq_block(ph, ld, 1, v, rs, n, d, i0, cm, yh, ys, q4); break;
            case 2: pvq_block(ph, ld, 2, v, rs, n, d, i0, cm, yh, ys, q4); break;
            case 3: pvq_block(ph, ld, 3, v, rs, n, d, i0, cm, yh, ys, q4); break;
            default: pvq_block(ph, ld, 4, v, rs, n, d, i0, cm, yh, ys, q4); break;
            }
        }
    }
}
PV_PAIR(TDM_TARGET_VNNI, pv_vnni, pv_vnni_f)

/* tdm_llm_kv4_rotate in two vectors of 16: the same stages (h = 1, 2, 4, 8 within each
 * vector by lane swaps, 16 across them) and the same sums and differences, so the same
 * result bit for bit */
TDM_TARGET_AVX512 static void rotate_avx512(float *x, int64_t d) {
    const __m512 sc = _mm512_set1_ps(0.17677669529663688f);
    for (int64_t g0 = 0; g0 + GROUP <= d; g0 += GROUP) {
        __m512 v[2] = {_mm512_loadu_ps(x + g0), _mm512_loadu_ps(x + g0 + 16)};
        for (int k = 0; k < 2; k++) { /* lane i pairs with i ^ h; the upper one takes y - x */
            __m512 y = _mm512_permute_ps(v[k], 0xb1);
            v[k] = _mm512_mask_sub_ps(_mm512_add_ps(v[k], y), 0xaaaa, y, v[k]);
            y = _mm512_permute_ps(v[k], 0x4e);
            v[k] = _mm512_mask_sub_ps(_mm512_add_ps(v[k], y), 0xcccc, y, v[k]);
            y = _mm512_shuffle_f32x4(v[k], v[k], 0xb1);
            v[k] = _mm512_mask_sub_ps(_mm512_add_ps(v[k], y), 0xf0f0, y, v[k]);
            y = _mm512_shuffle_f32x4(v[k], v[k], 0x4e);
            v[k] = _mm512_mask_sub_ps(_mm512_add_ps(v[k], y), 0xff00, y, v[k]);
        }
        _mm512_storeu_ps(x + g0, _mm512_mul_ps(_mm512_add_ps(v[0], v[1]), sc));
        _mm512_storeu_ps(x + g0 + 16, _mm512_mul_ps(_mm512_sub_ps(v[0], v[1]), sc));
    }
}

/* tdm_llm_kv_quantize_row for rows of whole groups (the others there), the same bytes: per 32
 * values the largest |x|, its bfloat16 scale rounded up, round-to-nearest-even codes clamped
 * to +-127 (NaN as 0, as the scalar conversion gives) */
TDM_TARGET_AVX512 static void quantize_avx512(const float *x, int64_t d, int8_t *row) {
    if (d % GROUP != 0) {
        tdm_llm_kv_quantize_row(x, d, row);
        return;
    }
    for (int64_t g0 = 0; g0 < d; g0 += GROUP) {
        __m512 v[2];
        for (int k = 0; k < 2; k++) {
            v[k] = _mm512_loadu_ps(x + g0 + 16 * k);
            v[k] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v[k], v[k], _CMP_ORD_Q), v[k]);
        }
        float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
        uint16_t sb;
        float inv = tdm_llm_kv_scale8(mx, &sb);
        for (int k = 0; k < 2; k++)
            _mm_storeu_si128((__m128i *)(void *)(row + g0 + 16 * k),
                             _mm512_cvtepi32_epi8(round_codes16(v[k], inv, -127.0f, 127.0f)));
        memcpy(row + d + 2 * (g0 / GROUP), &sb, sizeof sb);
    }
}

/* tdm_llm_kv4_quantize_row for rows of whole groups (d % 32 == 0, the others there), the same
 * bytes: rotate_avx512's stages, the value of largest magnitude (the first of them, as the
 * scalar loop keeps it), its scale, round-to-nearest-even codes (NaN as 0: code 8), two
 * codes a byte. Each new cache row of a decode step goes through it. */
TDM_TARGET_AVX512 static void quantize4_avx512(const float *x0, int64_t d, int8_t *row) {
    if (d % GROUP != 0 || d > TDM_LLM_KV_I8_MAX_D) {
        tdm_llm_kv4_quantize_row(x0, d, row);
        return;
    }
    _Alignas(64) float x[TDM_LLM_KV_I8_MAX_D];
    memcpy(x, x0, (size_t)d * sizeof(float));
    rotate_avx512(x, d);
    int64_t ng = d / GROUP;
    for (int64_t g = 0; g < ng; g++) {
        __m512 v[2];
        for (int k = 0; k < 2; k++) {
            v[k] = _mm512_load_ps(x + GROUP * g + 16 * k);
            v[k] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v[k], v[k], _CMP_ORD_Q), v[k]);
        }
        __m512 a0 = _mm512_abs_ps(v[0]), a1 = _mm512_abs_ps(v[1]);
        float mx = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        uint32_t at = (uint32_t)_mm512_cmp_ps_mask(a0, _mm512_set1_ps(mx), _CMP_EQ_OQ) |
                      (uint32_t)_mm512_cmp_ps_mask(a1, _mm512_set1_ps(mx), _CMP_EQ_OQ) << 16;
        float m = mx > 0.0f ? x[GROUP * g + __builtin_ctz(at)] : 0.0f; /* the first largest */
        uint16_t sb;
        float inv = tdm_llm_kv_scale4(mx, m, &sb);
        __m512i c[2];
        for (int k = 0; k < 2; k++)
            c[k] = _mm512_add_epi32(round_codes16(v[k], inv, -8.0f, 7.0f), _mm512_set1_epi32(8));
        _mm_storeu_si128((__m128i *)(void *)(row + 16 * g),
                         _mm512_cvtepi32_epi8(_mm512_or_si512(c[0], _mm512_slli_epi32(c[1], 4))));
        memcpy(row + 16 * ng + 2 * g, &sb, sizeof sb);
    }
}

static const tdm_llm_i8_fns fns_avx512 = {scores_avx2, pv_avx512, NULL,
    quantize_avx512, dequantize_avx2, TDM_ISA_AVX512_CORE};
static const tdm_llm_i8_fns fns_vnni = {scores_vnni, pv_vnni, NULL,
    quantize_avx512, dequantize_avx2, TDM_ISA_AVX512_CORE_VNNI};
static const tdm_llm_i8_fns fns4_vnni = {scores_vnni4, pv_vnni4, rotate_avx512,
    quantize4_avx512, dequantize_avx24, TDM_ISA_AVX512_CORE_VNNI};
#endif

const tdm_llm_i8_fns *tdm_llm_i8_fns_for(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX512_CORE_VNNI) return &fns_vnni;
    if (level >= TDM_ISA_AVX512_CORE) return &fns_avx512;
    if (level >= TDM_ISA_AVX2) return &fns_avx2;
#endif
    (void)level;
    return &fns_portable;
}

const tdm_llm_i8_fns *tdm_llm_i4_fns_for(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX512_CORE_VNNI) return &fns4_vnni;
    if (level >= TDM_ISA_AVX2) return &fns4_avx2;
#endif
    (void)level;
    return &fns4_portable;
}
