/* The AVX2 decode loops of MatMulNBitsPacked (the layout and the sums: k_nbits_pack.c's
 * head comment): int8 activations by vpmaddubsw + vpmaddwd, float activations by FMA. */
#include "backends/cpu/k_nbits_pack.h"
#include "backends/cpu/cpu_avx2.h"
#include "core/half.h"

#ifdef TDM_SIMD_X86
#include <immintrin.h>

#ifndef NBP_RB
/* AVX2 int8, 4 bits: rows of A a pass over both halves of a panel (bench_nbits 3072 x 576
 * M = 8, 1 thread, Zen 3: 4 rows 171 us, 3 rows 196, 2 rows 190) */
#define NBP_RB 4
#endif
#ifndef NBP_R8
/* AVX2 int8, 8 bits: rows of A a pass (bench_nbits 768 x 576 M = 8 without zero points, 1
 * thread, Zen 3: 4 rows 66.6 us, 3 rows 73.1, 2 rows 68.9; the nibble loops 84.2) */
#define NBP_R8 4
#endif

#ifndef NBP_PFD_AVX2
/* Bytes of software prefetch distance of the one-row loops (4-bit int8, float) and the 8-bit
 * loop's first pass over a panel. Weights from memory (bench_nbits BENCH_COPIES=64, Zen 3
 * avx2), 3072 x 576 4-bit int8 M = 1: 1 thread 76-84 us with none, 58-76 at 1.5-4 KiB; 2
 * threads 46-57 against 34-50; the 8-bit head 49152 x 576 at 2 threads 1045-1245 against
 * 851-1072. SmolLM2 decode (tandem bench --llm tg128, smol_off), medians: 1 thread 151 -> 177
 * tok/s, 2 threads 216 -> 265; the float folder 1 thread 95-96 -> 100, 2 threads 166 either
 * way (bench/llm/results-2026-12-05-s30-avx2-prefetch-zen3.md). Not in i8avx2_rows4: there
 * it cost the 512-token prefill 7% at 1 thread (590-604 -> 533-564 tok/s; the loop's code, not
 * the prefetch's work: bench_nbits M = 512 is unchanged), and M = 8 is bound by the arithmetic
 * either way. */
#define NBP_PFD_AVX2 2048
#endif

/* ---- AVX2: the panel as two halves of 8 rows ---- */

__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline __m256 ld8x(const uint8_t *p,
                                                                           bool f16) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p))
               : _mm256_loadu_ps((const float *)p);
}

__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline void
finish256(const tdm_nbits_pjob *j, int64_t p, int64_t m, const __m256 *acc, const __m256 *accz,
          bool mzs) {
    float t[TDM_NBP_ROWS];
    for (int h = 0; h < 2; h++) {
        __m256 z = accz[h];
        if (!mzs) z = _mm256_mul_ps(z, _mm256_set1_ps((float)(1 << (j->pk->bits - 1))));
        _mm256_storeu_ps(t + 8 * h, _mm256_sub_ps(acc[h], z));
    }
    store_rows(j, p, m, t);
}

/* The rows' zero-point chains for one block: accz[r][h] += z_h * asum[r][b] (the same order for
 * any R as for one row) */
__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline void
zp_rows(__m256 (*accz)[2], __m256 z0, __m256 z1, const float *as, int64_t nb, int64_t b,
        const int R) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const __m256 asb = _mm256_set1_ps(as[r * nb + b]);
        accz[r][0] = _mm256_fmadd_ps(z0, asb, accz[r][0]);
        accz[r][1] = _mm256_fmadd_ps(z1, asb, accz[r][1]);
    }
}

/* The loops of several rows hold R <= 4 rows' sums */
_Static_assert(NBP_RB <= 4 && NBP_R8 <= 4, "the AVX2 int8 loops take at most 4 rows a pass");

/* 4 bits: rows m0 .. m0 + R - 1 of A against both halves of panel p in one pass, one group of
 * the block at a time (R and G known at compile time). Each broadcast dword of A serves the two
 * halves: the low nibbles of both halves against the rows' low dwords, then the high nibbles
 * (the codes loaded again from L1) against the high ones, so the live vectors are 2 code
 * vectors and 2R int16 sums, added in place (tdm_avx2_add16_acc). Kept a loop: unrolled, GCC hoisted the
 * products and spilled them. Per 256 products of a row: 8 vpmaddubsw + 8 vpaddw + 2 broadcasts
 * + 1/R of the unpacking. The former loop (a pass per half, 4 groups unpacked at once: 8 code
 * vectors, spilled sums) broadcast every dword twice (bench_nbits 3072 x 576 M = 8, 1 thread,
 * Zen 3 avx2: 189 -> 171 us); the one after it (4 code vectors live, GCC's adds copied back)
 * kept its int16 sums on the stack: bench_nbits 1536 x 576, 1 thread, Zen 3, us, three
 * alternating rounds: M = 8 83.6-86.3 -> 75.9-77.2, M = 4 42.2-45.5 -> 38.8-40.6, M = 3
 * 40.4-40.5 -> 35.5-37.6, M = 512 5649-5691 -> 5254-5284; 576 x 1536 M = 8 86.8-89.7 ->
 * 77.7-81.1. Its group loop now runs at the speed of a synthetic loop of the same
 * instructions (11.2 cycles a group of 4 rows; the four vector pipes take vpaddw, vpand,
 * vpsrlw and the broadcasts, two of them vpmaddubsw), the block's scaling ~17 cycles more.
 * int16 sums: at most 8 vpmaddubsw of <= 2 * 15 * 128 (lo and hi nibbles) before each
 * vpmaddwd. Per row and half the same float operations in the same order as the loop of one
 * row (acc += cvt(d) * (s * sa) by block; the zero-point chain), so each row's Y is the one of
 * that row alone (the int32 block sums are exact in any order). */
__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline void
i8avx2_rows4(const tdm_nbits_pjob *j, int64_t p, int64_t m0, const int R, const int G, bool s16,
             bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, cb = 64 * G, kq = j->kq, nb = pk->nb;
    const int64_t bstride = pk->bstride, zoff = cb + pk->sbytes;
    const int sw = s16 ? 2 : 4, zw = z16 ? 2 : 4;
    const uint8_t *base = panel_of(j, p);
    const __m256i nib = _mm256_set1_epi8(15), one = _mm256_set1_epi16(1);
    const int8_t *qa = (const int8_t *)j->a + m0 * kq;
    const float *sa = j->sa + m0 * nb, *as = j->asum + m0 * nb;
    __m256 acc[4][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = base + b * bstride;
        const int8_t *q = qa + b * bs;
        __m256i di[4][2];
#pragma GCC unroll 4
        for (int g0 = 0; g0 < G; g0 += 4) {
            __m256i t[4][2];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) t[r][0] = t[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int g = g0; g < g0 + 4; g++) {
                const __m256i *cv = (const __m256i *)(rec + 64 * g);
                __m256i c0 = _mm256_and_si256(_mm256_loadu_si256(cv), nib);
                __m256i c1 = _mm256_and_si256(_mm256_loadu_si256(cv + 1), nib);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    __m256i a = _mm256_set1_epi32(*(const i32u *)(q + r * kq + 4 * g));
                    tdm_avx2_add16_acc(&t[r][0], _mm256_maddubs_epi16(c0, a));
                    tdm_avx2_add16_acc(&t[r][1], _mm256_maddubs_epi16(c1, a));
                }
                c0 = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256(cv), 4), nib);
                c1 = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256(cv + 1), 4), nib);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    __m256i a = _mm256_set1_epi32(*(const i32u *)(q + r * kq + half + 4 * g));
                    tdm_avx2_add16_acc(&t[r][0], _mm256_maddubs_epi16(c0, a));
                    tdm_avx2_add16_acc(&t[r][1], _mm256_maddubs_epi16(c1, a));
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                for (int h = 0; h < 2; h++) {
                    __m256i d = _mm256_madd_epi16(t[r][h], one);
                    di[r][h] = g0 == 0 ? d : _mm256_add_epi32(di[r][h], d);
                }
        }
        const __m256 s0 = ld8x(rec + cb, s16), s1 = ld8x(rec + cb + 8 * sw, s16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m256 sab = _mm256_set1_ps(sa[r * nb + b]);
            const __m256 f0 = _mm256_cvtepi32_ps(di[r][0]), f1 = _mm256_cvtepi32_ps(di[r][1]);
            acc[r][0] = _mm256_fmadd_ps(f0, _mm256_mul_ps(s0, sab), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(f1, _mm256_mul_ps(s1, sab), acc[r][1]);
        }
    }
    /* the zero-point sums: a second, cheap pass over the records */
    __m256 accz[4][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) accz[r][0] = accz[r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = base + b * bstride;
        const __m256 z0 = mzs ? ld8x(rec + zoff, z16) : ld8x(rec + cb, s16);
        const __m256 z1 = mzs ? ld8x(rec + zoff + 8 * zw, z16) : ld8x(rec + cb + 8 * sw, s16);
        zp_rows(accz, z0, z1, as, nb, b, R);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) finish256(j, p, m0 + r, acc[r], accz[r], mzs);
}

/* 8 bits: rows m0 .. m0 + R - 1 of A against both halves of panel p, by the signed codes
 * w = u - 128 in [-128, 127]: vpmaddubsw of |w| (<= 128, unsigned) against A's codes with w's
 * sign (|a| <= 127, see the quantiser), each pair <= 2 * 128 * 127 = 32512, then vpmaddwd into
 * int32. Per 32 products of a row: vpsignb, vpmaddubsw, vpmaddwd, vpaddd; the former loop split
 * each code into nibbles (two vpmaddubsw and two vpaddw, the unpacking, a zero-point pass)
 * (bench_nbits 49152 x 576 8-bit, 2 threads, weights from memory, Zen 3 avx2: M = 1 823 -> 715
 * us, M = 3 1855 -> 1056, M = 8 3279 -> 2325). A block's sum is Sum w a = Sum u a - 128 Sum a
 * exactly, so without zero points (the default 128: an 8-bit LM head) Y = Sum_b s sa Sum w a,
 * the codes' sum less the zero-point term without its cancellation; with them the block's
 * term is (s zp - 128 s) * asum. Every row, alone or with others, takes this loop (R = 1
 * alone), so each row's Y is the one of that row alone. */
__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline void
i8avx2_rows8(const tdm_nbits_pjob *j, int64_t p, int64_t m0, const int R, bool s16, bool mzs,
             bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, G = pk->groups, cb = 64 * G, kq = j->kq, nb = pk->nb;
    const int64_t bstride = pk->bstride, zoff = cb + pk->sbytes;
    const int sw = s16 ? 2 : 4, zw = z16 ? 2 : 4;
    const uint8_t *base = panel_of(j, p);
    const __m256i off = _mm256_set1_epi8((char)0x80), one = _mm256_set1_epi16(1);
    const int8_t *qa = (const int8_t *)j->a + m0 * kq;
    const float *sa = j->sa + m0 * nb, *as = j->asum + m0 * nb;
    __m256 acc[4][2], accz[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = accz[r][0] = accz[r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = base + b * bstride;
        const int8_t *q = qa + b * bs;
        if (m0 == 0) pf_record(rec, bstride, NBP_PFD_AVX2);
        __m256i d[4][2];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) d[r][0] = d[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int64_t g = 0; g < G; g++) {
            const __m256i *c = (const __m256i *)(rec + 64 * g);
            __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(c), off);
            __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256(c + 1), off);
            __m256i u0 = _mm256_abs_epi8(w0), u1 = _mm256_abs_epi8(w1);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256i a = _mm256_set1_epi32(*(const i32u *)(q + r * kq + 4 * g));
                __m256i p0 = _mm256_maddubs_epi16(u0, _mm256_sign_epi8(a, w0));
                __m256i p1 = _mm256_maddubs_epi16(u1, _mm256_sign_epi8(a, w1));
                d[r][0] = _mm256_add_epi32(d[r][0], _mm256_madd_epi16(p0, one));
                d[r][1] = _mm256_add_epi32(d[r][1], _mm256_madd_epi16(p1, one));
            }
        }
        const __m256 s0 = ld8x(rec + cb, s16), s1 = ld8x(rec + cb + 8 * sw, s16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256 sab = _mm256_set1_ps(sa[r * nb + b]);
            const __m256 f0 = _mm256_cvtepi32_ps(d[r][0]), f1 = _mm256_cvtepi32_ps(d[r][1]);
            acc[r][0] = _mm256_fmadd_ps(f0, _mm256_mul_ps(s0, sab), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(f1, _mm256_mul_ps(s1, sab), acc[r][1]);
        }
        if (mzs) { /* zero points: (s zp - 128 s) * asum, by block */
            const __m256 c128 = _mm256_set1_ps(128.0f);
            const __m256 z0 = _mm256_fnmadd_ps(s0, c128, ld8x(rec + zoff, z16));
            const __m256 z1 = _mm256_fnmadd_ps(s1, c128, ld8x(rec + zoff + 8 * zw, z16));
            zp_rows(accz, z0, z1, as, nb, b, R);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float y[TDM_NBP_ROWS];
        _mm256_storeu_ps(y, mzs ? _mm256_sub_ps(acc[r][0], accz[r][0]) : acc[r][0]);
        _mm256_storeu_ps(y + 8, mzs ? _mm256_sub_ps(acc[r][1], accz[r][1]) : acc[r][1]);
        store_rows(j, p, m0 + r, y);
    }
}

__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline void
i8avx2_panel(const tdm_nbits_pjob *j, int64_t p, bool q4, bool s16, bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, G = pk->groups, cb = 64 * G;
    const uint8_t *base = panel_of(j, p);
    const __m256i nib = _mm256_set1_epi8(15), one = _mm256_set1_epi16(1);
    const int sw = s16 ? 2 : 4, zw = z16 ? 2 : 4;
    int64_t m0 = 0;
    if (!q4) {
        for (; m0 + NBP_R8 <= j->M; m0 += NBP_R8) i8avx2_rows8(j, p, m0, NBP_R8, s16, mzs, z16);
        if (m0 + 2 <= j->M) i8avx2_rows8(j, p, m0, 2, s16, mzs, z16), m0 += 2;
        for (; m0 < j->M; m0++) i8avx2_rows8(j, p, m0, 1, s16, mzs, z16);
        return;
    }
    /* 4 bits: runs of NBP_RB rows (G of 4 or 8: blocks of 32 or 64), the last 3 rows one pass
     * (M = 3 87 us against 104; 2 rows: no gain); the rows left one at a time below (the same
     * float operations per row) */
    if (G == 4) {
        for (; m0 + NBP_RB <= j->M; m0 += NBP_RB) i8avx2_rows4(j, p, m0, NBP_RB, 4, s16, mzs, z16);
        if (j->M - m0 == 3) i8avx2_rows4(j, p, m0, 3, 4, s16, mzs, z16), m0 += 3;
    } else if (G == 8) {
        for (; m0 + NBP_RB <= j->M; m0 += NBP_RB) i8avx2_rows4(j, p, m0, NBP_RB, 8, s16, mzs, z16);
        if (j->M - m0 == 3) i8avx2_rows4(j, p, m0, 3, 8, s16, mzs, z16), m0 += 3;
    }
    for (int64_t m = m0; m < j->M; m++) {
        const int8_t *qa = (const int8_t *)j->a + m * j->kq;
        const float *sa = j->sa + m * pk->nb, *as = j->asum + m * pk->nb;
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        __m256 accz[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < pk->nb; b++) {
            const uint8_t *rec = base + b * pk->bstride;
            const int8_t *q = qa + b * bs;
            if (m == 0) pf_record(rec, pk->bstride, NBP_PFD_AVX2);
            __m256i d[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            /* int16 sums of at most 8 vpmaddubsw (each <= 2 * 15 * 128, the low and high
             * nibbles' products together): one vpmaddwd per 4 groups */
            for (int64_t g0 = 0; g0 < G; g0 += 4) {
                __m256i t16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                for (int64_t g = g0; g < g0 + 4 && g < G; g++) {
                    __m256i al = _mm256_set1_epi32(ld32(q + 4 * g));
                    __m256i ah = _mm256_set1_epi32(ld32(q + half + 4 * g));
                    for (int h = 0; h < 2; h++) {
                        __m256i v = _mm256_loadu_si256((const __m256i *)(rec + 64 * g + 32 * h));
                        __m256i lo = _mm256_and_si256(v, nib);
                        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                        __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(lo, al),
                                                      _mm256_maddubs_epi16(hi, ah));
                        t16[h] = _mm256_add_epi16(t16[h], ph);
                    }
                }
                for (int h = 0; h < 2; h++)
                    d[h] = _mm256_add_epi32(d[h], _mm256_madd_epi16(t16[h], one));
            }
            __m256 sab = _mm256_set1_ps(sa[b]), asb = _mm256_set1_ps(as[b]);
            for (int h = 0; h < 2; h++) {
                __m256 s = ld8x(rec + cb + 8 * sw * h, s16);
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[h]), _mm256_mul_ps(s, sab), acc[h]);
                __m256 z = mzs ? ld8x(rec + cb + pk->sbytes + 8 * zw * h, z16) : s;
                accz[h] = _mm256_fmadd_ps(z, asb, accz[h]);
            }
        }
        finish256(j, p, m, acc, accz, mzs);
    }
}

/* Float path: rows m0 .. m0 + R - 1 (R = 2 or 4) of A against panel p, each group's codes
 * widened to floats once for the R rows (the loop below widened them again for every row:
 * 24 integer ops and 8 FMAs per group and row). Per chain pair (t[e], t[4 + e]) a pass over
 * the block's groups: 2R chains in registers, each pair of widened vectors serving R rows.
 * Per row the same operations in the same order as the loop of one row (chain t[i] over the
 * groups in order, the same sum tree, acc and accz fused the same way), so each row's Y is the
 * one of that row alone (test_rows_invariant). */
__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline void
f256_rows(const tdm_nbits_pjob *j, int64_t p, int64_t m0, const int R, bool q4, bool s16,
          bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, G = pk->groups, cb = 64 * G, kq = j->kq;
    const int64_t nb = pk->nb, gstep = q4 ? 1 : 2;
    const uint8_t *base = panel_of(j, p);
    const __m256i mask = _mm256_set1_epi32(q4 ? 15 : 255);
    const int sw = s16 ? 2 : 4, zw = z16 ? 2 : 4;
    const float *xa = (const float *)j->a + m0 * kq;
    const float *as = j->asum + m0 * nb;
    float y[4][TDM_NBP_ROWS];
    for (int h = 0; h < 2; h++) {
        __m256 acc[4], accz[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[r] = accz[r] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *rec = base + b * pk->bstride;
            const float *x = xa + b * bs;
            __m256 t[4][8];
#pragma GCC unroll 4
            for (int e = 0; e < 4; e++) {
                __m256 tl[4], th[4];
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) tl[r] = th[r] = _mm256_setzero_ps();
                for (int64_t g = 0; g < G; g += gstep) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(rec + 64 * g + 32 * h));
                    /* q4: nibbles of byte e, x at 4g + e and half + 4g + e; q8: byte e of
                     * groups g and g + 1, x at 4g + e and 4g + 4 + e */
                    __m256i vh = q4 ? _mm256_srli_epi32(v, 8 * e + 4)
                                    : _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(
                                                            rec + 64 * (g + 1) + 32 * h)),
                                                        8 * e);
                    __m256 wl = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * e), mask));
                    __m256 wh = _mm256_cvtepi32_ps(_mm256_and_si256(vh, mask));
                    const int64_t il = 4 * g + e, ih = q4 ? half + 4 * g + e : 4 * g + 4 + e;
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) {
                        tl[r] = _mm256_fmadd_ps(wl, _mm256_set1_ps(x[r * kq + il]), tl[r]);
                        th[r] = _mm256_fmadd_ps(wh, _mm256_set1_ps(x[r * kq + ih]), th[r]);
                    }
                }
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) t[r][e] = tl[r], t[r][4 + e] = th[r];
            }
            __m256 s = ld8x(rec + cb + 8 * sw * h, s16);
            __m256 z = mzs ? ld8x(rec + cb + pk->sbytes + 8 * zw * h, z16) : s;
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256 dsum = _mm256_add_ps(
                    _mm256_add_ps(_mm256_add_ps(t[r][0], t[r][1]), _mm256_add_ps(t[r][2], t[r][3])),
                    _mm256_add_ps(_mm256_add_ps(t[r][4], t[r][5]), _mm256_add_ps(t[r][6], t[r][7])));
                acc[r] = _mm256_fmadd_ps(dsum, s, acc[r]);
                accz[r] = _mm256_fmadd_ps(z, _mm256_set1_ps(as[r * nb + b]), accz[r]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256 z = accz[r];
            if (!mzs) z = _mm256_mul_ps(z, _mm256_set1_ps((float)(1 << (pk->bits - 1))));
            _mm256_storeu_ps(y[r] + 8 * h, _mm256_sub_ps(acc[r], z));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) store_rows(j, p, m0 + r, y[r]);
}

__attribute__((always_inline)) TDM_TARGET_AVX2_F16 static inline void
f256_panel(const tdm_nbits_pjob *j, int64_t p, bool q4, bool s16, bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, G = pk->groups, cb = 64 * G;
    const uint8_t *base = panel_of(j, p);
    const __m256i nib = _mm256_set1_epi32(15), byte = _mm256_set1_epi32(255);
    const int sw = s16 ? 2 : 4, zw = z16 ? 2 : 4;
    int64_t m0 = 0;
    for (; m0 + 4 <= j->M; m0 += 4) f256_rows(j, p, m0, 4, q4, s16, mzs, z16);
    if (m0 + 2 <= j->M) f256_rows(j, p, m0, 2, q4, s16, mzs, z16), m0 += 2;
    for (int64_t m = m0; m < j->M; m++) {
        const float *xa = (const float *)j->a + m * j->kq;
        const float *as = j->asum + m * pk->nb;
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        __m256 accz[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < pk->nb; b++) {
            const uint8_t *rec = base + b * pk->bstride;
            const float *x = xa + b * bs;
            if (m == 0) pf_record(rec, pk->bstride, NBP_PFD_AVX2);
            for (int h = 0; h < 2; h++) {
                __m256 t[8]; /* 8 independent FMA chains */
                for (int i = 0; i < 8; i++) t[i] = _mm256_setzero_ps();
                for (int64_t g = 0; g < G; g++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(rec + 64 * g + 32 * h));
                    const float *xl = x + 4 * g;
                    if (q4) {
                        const float *xh = x + half + 4 * g;
                        for (int e = 0; e < 4; e++) {
                            __m256i c0 = _mm256_and_si256(_mm256_srli_epi32(v, 8 * e), nib);
                            __m256i c1 = _mm256_and_si256(_mm256_srli_epi32(v, 8 * e + 4), nib);
                            t[e] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0), _mm256_set1_ps(xl[e]), t[e]);
                            t[4 + e] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1), _mm256_set1_ps(xh[e]),
                                                       t[4 + e]);
                        }
                    } else {
                        /* two groups a step (G is even for 8 bits): 8 chains, fixed registers */
                        __m256i v1 = _mm256_loadu_si256((const __m256i *)(rec + 64 * (g + 1) + 32 * h));
                        for (int e = 0; e < 4; e++) {
                            __m256i c = _mm256_and_si256(_mm256_srli_epi32(v, 8 * e), byte);
                            __m256i c1 = _mm256_and_si256(_mm256_srli_epi32(v1, 8 * e), byte);
                            t[e] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(xl[e]), t[e]);
                            t[4 + e] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1),
                                                       _mm256_set1_ps(xl[4 + e]), t[4 + e]);
                        }
                        g++;
                    }
                }
                __m256 dsum = _mm256_add_ps(
                    _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3])),
                    _mm256_add_ps(_mm256_add_ps(t[4], t[5]), _mm256_add_ps(t[6], t[7])));
                __m256 s = ld8x(rec + cb + 8 * sw * h, s16);
                acc[h] = _mm256_fmadd_ps(dsum, s, acc[h]);
                __m256 z = mzs ? ld8x(rec + cb + pk->sbytes + 8 * zw * h, z16) : s;
                accz[h] = _mm256_fmadd_ps(z, _mm256_set1_ps(as[b]), accz[h]);
            }
        }
        finish256(j, p, m, acc, accz, mzs);
    }
}

NBP_FORMS(NBP_DEF, i8avx2, i8avx2_panel, TDM_TARGET_AVX2_F16)
NBP_FORMS(NBP_DEF, f256, f256_panel, TDM_TARGET_AVX2_F16)

tdm_nbits_prows_fn tdm_nbits_pk_pick_avx2(const tdm_nbits_pk *pk, bool int8) {
    if (int8) {
        NBP_FORMS(NBP_PICK, i8avx2, i8avx2_panel, )
    } else {
        NBP_FORMS(NBP_PICK, f256, f256_panel, )
    }
    return NULL;
}
#endif
