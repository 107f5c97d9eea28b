/* The AVX-512 forms of the quantised KV cache's attention (with and without VNNI), their
 * row quantisers and the levels' tables; the contract, the numbers and the other forms:
 * k_llm_gqa_i8.c. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_llm_gqa_i8.h"

#ifdef TDM_SIMD_X86
#include <immintrin.h>

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

/* The first of rows t .. t + 15: k + t * rs, or (blocks, a paged cache) in block blk[t / bs] of
 * bs rows (bs a multiple of 16: the 16 rows are in one block). In blocks the rows two groups
 * ahead are asked for into L2 instead of vt_block's fixed distance, which would leave the block. */
TDM_TARGET_VNNI static AI const int8_t *group_at(const int8_t *k, const int8_t *const *blk,
                                                 int64_t bs, int64_t rs, int64_t t, int64_t n,
                                                 bool blocks) {
    if (!blocks) return k + t * rs;
    if (t + 32 < n) {
        const char *a = (const char *)(blk[(t + 32) / bs] + ((t + 32) % bs) * rs);
        for (int64_t o = 0; o < 16 * rs; o += 64) _mm_prefetch(a + o, _MM_HINT_T1);
    }
    return blk[t / bs] + (t % bs) * rs;
}

TDM_TARGET_VNNI static AI void vt_rows(const vt_query *vq, int HN, int NC, const int8_t *k,
                                       const int8_t *const *blk, int64_t bs, int64_t rs, int64_t n,
                                       const __mmask64 *cm, bool prefetch, const int8_t *vnext,
                                       float *out, int64_t ld, bool q4, bool blocks) {
    /* whole blocks (16 rows; 4-bit: every chunk's 32 bytes) without a test per row */
    bool whole = !q4 || (uint32_t)cm[NC - 1] == 0xffffffffu;
    if (blocks) prefetch = false, vnext = NULL;
    int64_t t = 0;
    if (whole)
        for (; t + 16 <= n; t += 16)
            vt_block(vq, HN, NC, group_at(k, blk, bs, rs, t, n, blocks), rs, 16, cm, prefetch,
                     vnext ? vnext + t * rs : NULL, out + t, ld, q4, true);
    for (; t < n; t += 16)
        vt_block(vq, HN, NC, group_at(k, blk, bs, rs, t, n, blocks), rs, n - t < 16 ? n - t : 16,
                 cm, prefetch, vnext ? vnext + t * rs : NULL, out + t, ld, q4, false);
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

/* The head sizes the VNNI scores take (else the AVX2 ones) */
static bool vnni_scores_take(int64_t d, int64_t rs, bool q4) {
    return d >= 16 && (d + 63) / 64 <= VN_MAXC &&
           rs <= (q4 ? TDM_KV_I4_ROW(VN_MAXC * 64) : TDM_KV_I8_ROW(VN_MAXC * 64));
}

/* blocks: rows from the block list blk (vt_rows), k unused */
TDM_TARGET_VNNI static AI void scores_vnni_any(const float *const *q, int64_t G, const int8_t *k,
                                               const int8_t *const *blk, int64_t bs, int64_t rs,
                                               int64_t n, int64_t d, float scale, float *out,
                                               int64_t ld, const int8_t *vnext, bool q4,
                                               bool blocks) {
    int64_t chunks = (d + 63) / 64;
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
        case 1: vt_rows(&vq, HN_, 1, k, blk, bs, rs, n, cm, pf, vn, o, ld, q4, blocks); break;   \
        case 2: vt_rows(&vq, HN_, 2, k, blk, bs, rs, n, cm, pf, vn, o, ld, q4, blocks); break;   \
        default: vt_rows(&vq, HN_, NC, k, blk, bs, rs, n, cm, pf, vn, o, ld, q4, blocks); break; \
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
TDM_TARGET_VNNI static AI void scores_vnni_f(const float *const *q, int64_t G, const int8_t *k,
                                             int64_t rs, int64_t n, int64_t d, float scale,
                                             float *out, int64_t ld, const int8_t *vnext, bool q4) {
    if (!vnni_scores_take(d, rs, q4)) {
        (q4 ? &tdm_llm_i4_fns_avx2 : &tdm_llm_i8_fns_avx2)->scores(q, G, k, rs, n, d, scale, out, ld, vnext);
        return;
    }
    scores_vnni_any(q, G, k, NULL, 16, rs, n, d, scale, out, ld, vnext, q4, false);
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
        tdm_llm_i8_fns_avx2.pv(p, ld, G, v, rs, n, d, y, ys);
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

/* blocks: the rows from the block list blk (row t: blk[t / bsz] + (t % bsz) * rs, bsz a
 * multiple of 16), v unused; each block of PVQ_ROWS rows first lists its rows' addresses */
TDM_TARGET_VNNI static AI void pvq_block(const float *p, int64_t ld, int HN, const int8_t *v,
                                          const int8_t *const *blk, int64_t bsz, int64_t rs,
                                          int64_t n, int64_t d, int64_t i0, __mmask64 cm, float *y,
                                          int64_t ys, bool q4, bool blocks) {
    int64_t so = scales_at(d, q4), g0 = i0 / GROUP, ng = (d + GROUP - 1) / GROUP;
    bool two = ng - g0 >= 2;
    const int64_t soff = two ? so + 2 * g0 : so + 2 * g0 - 2, coff = q4 ? i0 / 2 : i0;
    const int8_t *vs = blocks ? NULL : v + soff, *vc = blocks ? NULL : v + coff; /* v is NULL in blocks */
    const __m512i step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)rs));
    const __m512i hi16 = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i nib = _mm512_set1_epi16(15);
    _Alignas(64) float acc[QHEADS][4][16];
    memset(acc, 0, sizeof acc);
    for (int64_t t0 = 0; t0 < n; t0 += PVQ_ROWS) {
        int64_t cnt = n - t0 < PVQ_ROWS ? n - t0 : PVQ_ROWS;
        const int8_t *rp[PVQ_ROWS]; /* blocks: the rows' addresses */
        if (blocks) {
            for (int64_t t = 0; t < cnt; t += 16) {
                const int8_t *g = blk[(t0 + t) / bsz] + ((t0 + t) % bsz) * rs;
                for (int64_t u = 0; u < 16 && t + u < cnt; u++) rp[t + u] = g + u * rs;
                if (t0 + t + 64 < n) { /* the rows a block ahead, into L2 */
                    const char *a = (const char *)(blk[(t0 + t + 64) / bsz] + ((t0 + t + 64) % bsz) * rs);
                    for (int64_t o = 0; o < 16 * rs; o += 64) _mm_prefetch(a + o, _MM_HINT_T1);
                }
            }
        }
        _Alignas(64) float sc[2][PVQ_ROWS];
        /* per head, 16 rows a 64 bytes (vpackssdw of both groups): dword 4L + m holds rows
         * 4L + 2m, + 1 of group 0, dword 4L + 2 + m the same of group 1 */
        _Alignas(64) int32_t wq[QHEADS][PVQ_ROWS];
        __m512 mx[QHEADS][2];
        for (int h = 0; h < HN; h++) mx[h][0] = mx[h][1] = _mm512_setzero_ps();
        for (int64_t t = 0; t < cnt; t += 16) {
            __mmask16 m = mask_of(cnt - t);
            __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, step,
                                                    (const void *)(blocks ? rp[t] + soff : vs + (t0 + t) * rs), 1);
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
        const int8_t *vb = blocks ? NULL : vc + t0 * rs;
        for (int64_t t = 0; t < cnt; t += 2) {
            const int8_t *ra = blocks ? rp[t] + coff : vb + t * rs;
            const int8_t *rb = t + 1 < cnt ? (blocks ? rp[t + 1] + coff : ra + rs) : ra; /* weight 0 */
            if (!blocks) _mm_prefetch((const char *)(ra + I8_AHEAD), _MM_HINT_T0);
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
            uint32_t zk = q4 ? 8 : 128; /* wrapping: weights from a NaN p are garbage, not UB */
            int32_t c0 = (int32_t)(zk * (uint32_t)_mm512_reduce_add_epi32(qs[h][0]));
            int32_t c1 = (int32_t)(zk * (uint32_t)_mm512_reduce_add_epi32(qs[h][1]));
            __m512i corr = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(c0), _mm512_set1_epi32(c1));
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

TDM_TARGET_VNNI static AI void pv_vnni_any(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                           const int8_t *const *blk, int64_t bs, int64_t rs,
                                           int64_t n, int64_t d, float *y, int64_t ys, bool q4,
                                           bool blocks) {
    __mmask64 cms[VN_MAXC * 2];
    chunk_masks(d, (int)((d + 63) / 64), q4, cms);
    for (int64_t i0 = 0; i0 < d; i0 += 64) {
        __mmask64 cm = cms[i0 / 64];
        for (int64_t h0 = 0; h0 < G; h0 += QHEADS) {
            int hn = G - h0 < QHEADS ? (int)(G - h0) : QHEADS;
            const float *ph = p + h0 * ld;
            float *yh = y + h0 * ys;
            switch (hn) {
            case 1: pvq_block(ph, ld, 1, v, blk, bs, rs, n, d, i0, cm, yh, ys, q4, blocks); break;
            case 2: pvq_block(ph, ld, 2, v, blk, bs, rs, n, d, i0, cm, yh, ys, q4, blocks); break;
            case 3: pvq_block(ph, ld, 3, v, blk, bs, rs, n, d, i0, cm, yh, ys, q4, blocks); break;
            default: pvq_block(ph, ld, 4, v, blk, bs, rs, n, d, i0, cm, yh, ys, q4, blocks); break;
            }
        }
    }
}

TDM_TARGET_VNNI static AI void pv_vnni_f(const float *p, int64_t ld, int64_t G, const int8_t *v,
                                         int64_t rs, int64_t n, int64_t d, float *y, int64_t ys,
                                         bool q4) {
    if (d < 2) { /* the scale gathers read the dword ending with a scale */
        (q4 ? &tdm_llm_i4_fns_avx2 : &tdm_llm_i8_fns_avx2)->pv(p, ld, G, v, rs, n, d, y, ys);
        return;
    }
    pv_vnni_any(p, ld, G, v, NULL, 16, rs, n, d, y, ys, q4, false);
}
PV_PAIR(TDM_TARGET_VNNI, pv_vnni, pv_vnni_f)

/* The block-list forms (tdm_llm_i8_fns.scores_blk / pv_blk). They do not take a block size
 * that is not a multiple of 16 or the head sizes the VNNI scores leave to AVX2 (d < 16 among
 * them, so p.V's scale gathers always have the dword they read). */
static inline bool blk_vnni_takes(int64_t bs, int64_t d, int64_t rs, bool q4) {
    return bs % 16 == 0 && vnni_scores_take(d, rs, q4);
}

BLK_PAIR(TDM_TARGET_VNNI, blk_vnni, blk_vnni_takes, scores_vnni_any, pv_vnni_any)

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

/* The AVX2 routines these levels keep (the 8-bit scores without VNNI, the wideners), through
 * the AVX2 tables (their functions are static in k_llm_gqa_i8.c) */
static void scores_by_avx2(const float *const *q, int64_t G, const int8_t *k, int64_t rs, int64_t n,
                           int64_t d, float scale, float *out, int64_t ld, const int8_t *vnext) {
    tdm_llm_i8_fns_avx2.scores(q, G, k, rs, n, d, scale, out, ld, vnext);
}
static void dequantize_by_avx2(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    tdm_llm_i8_fns_avx2.dequantize_rows(rows, rs, n, d, out);
}
static void dequantize4_by_avx2(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    tdm_llm_i4_fns_avx2.dequantize_rows(rows, rs, n, d, out);
}

const tdm_llm_i8_fns tdm_llm_i8_fns_avx512 = {scores_by_avx2, pv_avx512, NULL,
    quantize_avx512, dequantize_by_avx2, TDM_ISA_AVX512_CORE};
const tdm_llm_i8_fns tdm_llm_i8_fns_vnni = {scores_vnni, pv_vnni, NULL,
    quantize_avx512, dequantize_by_avx2, TDM_ISA_AVX512_CORE_VNNI, blk_vnni_scores, blk_vnni_pv};
const tdm_llm_i8_fns tdm_llm_i4_fns_vnni = {scores_vnni4, pv_vnni4, rotate_avx512,
    quantize4_avx512, dequantize4_by_avx2, TDM_ISA_AVX512_CORE_VNNI, blk_vnni4_scores, blk_vnni4_pv};
#endif
