/* Decode loops of MatMulNBitsPacked (the packed layout of ops/nbits_pack.h; contract of the
 * job in k_nbits.h). One pass over a panel of 16 rows of W reads one linear run of bytes
 * (per block: the codes of the 16 rows, then their scales and s * zp), so a whole matrix is
 * one stream for the hardware prefetcher, helped by a software prefetch a fixed distance
 * ahead. Each int32 / float lane of a vector is one row of W: no horizontal sums, 16 outputs
 * per panel stored at once.
 *
 *   Y[m, n] = sum_b s[n, b] * dot_b(m, n) - sum_b mz[n, b] * asum[m, b]
 *
 * int8 paths (accuracy_level 4): A quantized per block (codes qa, scale sa, natural order),
 * dot_b = sa_b * sum qa q: vpdpbusd (AVX-512 VNNI) or vpmaddubsw + vpmaddwd (AVX2) of the
 * codes of 16 (8) rows against a broadcast dword of qa; asum = sa * sum qa (A's int8 model).
 * float paths (other levels): the codes widened in registers and multiplied with broadcast
 * elements of A; asum = A's float sums. The zero-point term is one multiply-add per block
 * (hoisted out of the codes' loop). */
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nbits_pack.h"
#include "core/half.h"

#ifndef NBP_PERM
#define NBP_PERM 1 /* float path, 4 bits: vpermps of a 0..15 table instead of and + cvtdq2ps (measured in the caches: 35-36 us against 40-45 for 1536 x 576) */
#endif
#ifndef NBP_AMX_MIN
/* int8 rows of A from which the AMX loops run (fewer: the VNNI loops). bench_nbits, 4-bit
 * blocks of 32, 2 threads, weights from L3, us a call, VNNI / AMX (the 8-row tile, by pairs of
 * blocks): 3072 x 576 M = 4 31 / 42, M = 5 43 / 42, M = 6 47-49 / 44-45, M = 7 59 / 45-47;
 * 960 x 576 M = 7 20-21 / 16-17 (AMX Xeon, bench/llm/results-2026-12-06-s41-amx.md) */
#define NBP_AMX_MIN 6
#endif
#if defined(TDM_SIMD_X86) && (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define NBP_AMX 1 /* the compiler has AMX's intrinsics */
#else
#define NBP_AMX 0
#endif
#ifndef NBP_PFD_FROWS
#define NBP_PFD_FROWS 2048 /* bytes of software prefetch distance of the AVX-512 float loops of several rows (bench_nbits BENCH_COPIES=32, Zen 5, 1 thread, M = 8: 3072 x 576 4-bit 352 us with none, 285 at 2 KiB (1, 4 and 8 KiB within 3%); the 8-bit head 49152 x 576 5810 against 4650) */
#endif
#ifndef NBP_PFD_I8
#define NBP_PFD_I8 4096 /* the same for the AVX-512 VNNI and AMX int8 loops (measured on the AMX Xeon, weights from L3 (bench_nbits BENCH_COPIES=64), 1 thread, 3072 x 576 4-bit: M = 1 41 us against 80-87 with none, M = 8 85-95 against 150-170 (1 KiB: 121-131, 2 KiB: 94-102, 8 KiB: 87-102); the 8-bit head M = 8 1560-1584 against 2494-2979) */
#endif

/* ---- portable ---- */

static void pk_rows_portable(const tdm_nbits_pjob *j, int64_t p0, int64_t p1) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2;
    for (int64_t p = p0; p < p1; p++) {
        for (int64_t m = 0; m < j->M; m++) {
            float y[TDM_NBP_ROWS];
            for (int r = 0; r < TDM_NBP_ROWS; r++) {
                int64_t n = p * TDM_NBP_ROWS + r;
                float acc = 0.0f, accz = 0.0f;
                for (int64_t b = 0; b < pk->nb; b++) {
                    const uint8_t *rec = panel_of(j, p) + b * pk->bstride;
                    float s, mz, d = 0.0f;
                    if (n < pk->N) tdm_nbits_pk_sz(pk, j->P, n, b, &s, &mz);
                    else s = mz = 0.0f;
                    if (j->int8) {
                        const int8_t *q = (const int8_t *)j->a + m * j->kq + b * bs;
                        int32_t di = 0;
                        for (int64_t g = 0; g < pk->groups; g++)
                            for (int e = 0; e < 4; e++) {
                                uint8_t v = rec[g * 64 + 4 * r + e];
                                if (pk->bits == 8) di += q[4 * g + e] * v;
                                else di += q[4 * g + e] * (v & 15) + q[half + 4 * g + e] * (v >> 4);
                            }
                        d = j->sa[m * pk->nb + b] * (float)di;
                    } else {
                        const float *x = (const float *)j->a + m * j->kq + b * bs;
                        for (int64_t g = 0; g < pk->groups; g++)
                            for (int e = 0; e < 4; e++) {
                                uint8_t v = rec[g * 64 + 4 * r + e];
                                if (pk->bits == 8) d += x[4 * g + e] * (float)v;
                                else
                                    d += x[4 * g + e] * (float)(v & 15) +
                                         x[half + 4 * g + e] * (float)(v >> 4);
                            }
                    }
                    acc += s * d;
                    accz += mz * j->asum[m * pk->nb + b];
                }
                y[r] = acc - accz;
            }
            store_rows(j, p, m, y);
        }
    }
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>

#define TDM_TARGET_VNNI_F16                                                                     \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))
#define TDM_TARGET_512_F16                                                                      \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

/* ---- AVX-512 ---- */

/* 16 values (float16 or float32) at p */
__attribute__((always_inline)) TDM_TARGET_512_F16 static inline __m512 ld16x(const uint8_t *p,
                                                                           bool f16) {
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p))
               : _mm512_loadu_ps((const float *)p);
}

__attribute__((always_inline)) TDM_TARGET_512_F16 static inline void
finish512(const tdm_nbits_pjob *j, int64_t p, int64_t m, __m512 acc, __m512 accz, bool mzs) {
    if (!mzs) accz = _mm512_mul_ps(accz, _mm512_set1_ps((float)(1 << (j->pk->bits - 1))));
    __m512 y = _mm512_sub_ps(acc, accz);
    int64_t n0 = p * TDM_NBP_ROWS, cnt = j->pk->N - n0;
    if (cnt >= TDM_NBP_ROWS) {
        if (j->bias) y = _mm512_add_ps(y, _mm512_loadu_ps(j->bias + n0));
        _mm512_storeu_ps(j->Y + m * j->pk->N + n0, y);
        return;
    }
    float t[TDM_NBP_ROWS];
    _mm512_storeu_ps(t, y);
    store_rows(j, p, m, t);
}

/* Rows m0 .. m0 + R - 1 (R <= 4) of A against panel p, each block's codes loaded and unpacked
 * once for the R rows (the batched decode of the LLM engine: one step's sequences share every
 * panel pass). Per row the same sums in the same order as one row at a time. */
__attribute__((always_inline)) TDM_TARGET_VNNI_F16 static inline void
vnni_panel_rows(const tdm_nbits_pjob *j, int64_t p, int64_t m0, int R, bool q4, bool s16,
                bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, G = pk->groups, cb = 64 * G;
    const uint8_t *base = panel_of(j, p);
    const __m512i nib = _mm512_set1_epi8(15);
    __m512 acc[4], accz[4];
    for (int r = 0; r < 4; r++) acc[r] = accz[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < pk->nb; b++) {
        const uint8_t *rec = base + b * pk->bstride;
        if (m0 == 0) pf_record(rec, pk->bstride, NBP_PFD_I8);
        __m512i u[16]; /* q4: low nibbles of group g in u[g], high in u[8 + g]; q8: u[g] */
        for (int64_t g = 0; g < G; g++) {
            __m512i v = _mm512_loadu_si512(rec + 64 * g);
            if (q4) {
                u[g] = _mm512_and_si512(v, nib);
                u[8 + g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            } else {
                u[g] = v;
            }
        }
        __m512 s = ld16x(rec + cb, s16);
        __m512 z = mzs ? ld16x(rec + cb + pk->sbytes, z16) : s;
        for (int r = 0; r < R; r++) {
            const int64_t m = m0 + r;
            const int8_t *q = (const int8_t *)j->a + m * j->kq + b * bs;
            __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
            for (int64_t g = 0; g < G; g++) {
                if (q4) {
                    d0 = _mm512_dpbusd_epi32(d0, u[g], _mm512_set1_epi32(ld32(q + 4 * g)));
                    d1 = _mm512_dpbusd_epi32(d1, u[8 + g], _mm512_set1_epi32(ld32(q + half + 4 * g)));
                } else if (g & 1) {
                    d1 = _mm512_dpbusd_epi32(d1, u[g], _mm512_set1_epi32(ld32(q + 4 * g)));
                } else {
                    d0 = _mm512_dpbusd_epi32(d0, u[g], _mm512_set1_epi32(ld32(q + 4 * g)));
                }
            }
            __m512 df = _mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1));
            acc[r] = _mm512_fmadd_ps(df, _mm512_mul_ps(s, _mm512_set1_ps(j->sa[m * pk->nb + b])),
                                     acc[r]);
            accz[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(j->asum[m * pk->nb + b]), accz[r]);
        }
    }
    for (int r = 0; r < R; r++) finish512(j, p, m0 + r, acc[r], accz[r], mzs);
}

/* d += u . (the dword of A at q broadcast) */
__attribute__((always_inline)) TDM_TARGET_VNNI_F16 static inline __m512i dp_bcast(__m512i d,
                                                                                __m512i u,
                                                                                const int8_t *q) {
    return _mm512_dpbusd_epi32(d, u, _mm512_set1_epi32(*(const i32u *)q));
}

/* vnni_panel_rows with the block's groups G and the rows R known at compile time (G = 4: 4
 * bits in blocks of 32; G = 8: 8 bits in blocks of 32 or 4 bits in blocks of 64): the unpacked
 * codes and the R rows' accumulators stay in registers (the general loop above keeps them in
 * memory: its trip counts are not constants). Same sums in the same order, so each row's Y is
 * the one of a call of that row alone. */
__attribute__((always_inline)) TDM_TARGET_VNNI_F16 static inline void
vnni_rows_fixed(const tdm_nbits_pjob *j, int64_t p, int64_t m0, const int R, const int G,
                bool q4, bool s16, bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, cb = 64 * G, kq = j->kq, nb = pk->nb;
    const uint8_t *base = panel_of(j, p);
    const __m512i nib = _mm512_set1_epi8(15);
    const int8_t *qa = (const int8_t *)j->a + m0 * kq;
    const float *sa = j->sa + m0 * nb, *as = j->asum + m0 * nb;
    __m512 acc[8], accz[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = accz[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = base + b * pk->bstride;
        if (m0 == 0) pf_record(rec, pk->bstride, NBP_PFD_I8);
        __m512i u[16];
#pragma GCC unroll 16
        for (int g = 0; g < G; g++) {
            __m512i v = _mm512_loadu_si512(rec + 64 * g);
            if (q4) {
                u[g] = _mm512_and_si512(v, nib);
                u[8 + g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            } else {
                u[g] = v;
            }
        }
        __m512 s = ld16x(rec + cb, s16);
        __m512 z = mzs ? ld16x(rec + cb + pk->sbytes, z16) : s;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const int8_t *q = qa + r * kq + b * bs;
            /* two chains (the low and high nibbles, or even and odd groups: integer sums, so
             * any order gives the same), half the latency of one: at 8 rows one chain's
             * 8 dependent vpdpbusd a block outlast the 64 products' issue slots */
            __m512i d = _mm512_setzero_si512(), e = _mm512_setzero_si512();
#pragma GCC unroll 16
            for (int g = 0; g < G; g++) {
                if (q4) {
                    d = dp_bcast(d, u[g], q + 4 * g);
                    e = dp_bcast(e, u[8 + g], q + half + 4 * g);
                } else if (g & 1) {
                    e = dp_bcast(e, u[g], q + 4 * g);
                } else {
                    d = dp_bcast(d, u[g], q + 4 * g);
                }
            }
            d = _mm512_add_epi32(d, e);
            __m512 df = _mm512_cvtepi32_ps(d);
            acc[r] = _mm512_fmadd_ps(df, _mm512_mul_ps(s, _mm512_set1_ps(sa[r * nb + b])), acc[r]);
            accz[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(as[r * nb + b]), accz[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) finish512(j, p, m0 + r, acc[r], accz[r], mzs);
}

/* The M rows against panel p in fixed runs of 8 rows when the block's unpacked codes take at
 * most 8 registers (4 bits in blocks of 32, 8 bits in blocks of 32: with the 8 rows' 16
 * accumulators 24 of the 32 zmm registers), else of 4, then 2 and 1; G is 4 or 8. Measured
 * on the AMX Xeon (1 thread, M = 8, CPU time, best of 15 rounds, alternating, load 2-3):
 * 3072 x 576 4-bit 78-82 us against 84-89 with runs of 4, 576 x 1536 41-42 against 44-47,
 * the 49152 x 576 8-bit head 1649-1915 against 1846-2175. */
__attribute__((always_inline)) TDM_TARGET_VNNI_F16 static inline void
vnni_rows_multi(const tdm_nbits_pjob *j, int64_t p, const int G, bool q4, bool s16, bool mzs,
                bool z16) {
    int64_t m = 0;
    if ((q4 ? 2 * G : G) <= 8)
        for (; m + 8 <= j->M; m += 8) vnni_rows_fixed(j, p, m, 8, G, q4, s16, mzs, z16);
    for (; m + 4 <= j->M; m += 4) vnni_rows_fixed(j, p, m, 4, G, q4, s16, mzs, z16);
    for (; m + 2 <= j->M; m += 2) vnni_rows_fixed(j, p, m, 2, G, q4, s16, mzs, z16);
    if (m < j->M) vnni_rows_fixed(j, p, m, 1, G, q4, s16, mzs, z16);
}

__attribute__((always_inline)) TDM_TARGET_VNNI_F16 static inline void
vnni_panel(const tdm_nbits_pjob *j, int64_t p, bool q4, bool s16, bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, G = pk->groups, cb = 64 * G;
    const uint8_t *base = panel_of(j, p);
    const __m512i nib = _mm512_set1_epi8(15);
    if (j->M > 1 && G == 4) {
        vnni_rows_multi(j, p, 4, q4, s16, mzs, z16);
        return;
    }
    if (j->M > 1 && G == 8) {
        vnni_rows_multi(j, p, 8, q4, s16, mzs, z16);
        return;
    }
    if (j->M > 1 && G <= (q4 ? 8 : 16)) { /* several rows: each block unpacked once for 4 */
        for (int64_t m0 = 0; m0 < j->M; m0 += 4)
            vnni_panel_rows(j, p, m0, j->M - m0 < 4 ? (int)(j->M - m0) : 4, q4, s16, mzs, z16);
        return;
    }
    for (int64_t m = 0; m < j->M; m++) {
        const int8_t *qa = (const int8_t *)j->a + m * j->kq;
        const float *sa = j->sa + m * pk->nb, *as = j->asum + m * pk->nb;
        __m512 acc = _mm512_setzero_ps(), accz = _mm512_setzero_ps();
        for (int64_t b = 0; b < pk->nb; b++) {
            const uint8_t *rec = base + b * pk->bstride;
            const int8_t *q = qa + b * bs;
            if (m == 0) pf_record(rec, pk->bstride, NBP_PFD_I8);
            __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
            for (int64_t g = 0; g < G; g++) {
                __m512i v = _mm512_loadu_si512(rec + 64 * g);
                if (q4) {
                    __m512i lo = _mm512_and_si512(v, nib);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                    d0 = _mm512_dpbusd_epi32(d0, lo, _mm512_set1_epi32(ld32(q + 4 * g)));
                    d1 = _mm512_dpbusd_epi32(d1, hi, _mm512_set1_epi32(ld32(q + half + 4 * g)));
                } else if (g & 1) {
                    d1 = _mm512_dpbusd_epi32(d1, v, _mm512_set1_epi32(ld32(q + 4 * g)));
                } else {
                    d0 = _mm512_dpbusd_epi32(d0, v, _mm512_set1_epi32(ld32(q + 4 * g)));
                }
            }
            __m512 s = ld16x(rec + cb, s16);
            __m512 df = _mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1));
            acc = _mm512_fmadd_ps(df, _mm512_mul_ps(s, _mm512_set1_ps(sa[b])), acc);
            __m512 z = mzs ? ld16x(rec + cb + pk->sbytes, z16) : s;
            accz = _mm512_fmadd_ps(z, _mm512_set1_ps(as[b]), accz);
        }
        finish512(j, p, m, acc, accz, mzs);
    }
}

/* One widened chain of the float loops: chain c (0..7) of a group. 4 bits: the nibble of byte
 * c & 3, high when c >= 4 (shift 8 (c & 3) + 4 (c >> 2)); 8 bits: byte c & 3 (v is then group
 * g for c < 4, g + 1 for c >= 4). */
__attribute__((always_inline)) TDM_TARGET_512_F16 static inline __m512
f512_chain_w(__m512i v, const int c, bool q4, __m512 tab, const __m512i *sel) {
    if (q4) {
        __m512i sh = _mm512_srli_epi32(v, 8 * (c & 3) + 4 * (c >> 2));
#if NBP_PERM
        return _mm512_permutexvar_ps(sh, tab);
#else
        (void)tab;
        return _mm512_cvtepi32_ps(_mm512_and_si512(sh, _mm512_set1_epi32(15)));
#endif
    }
    return _mm512_cvtepi32_ps(_mm512_shuffle_epi8(v, sel[c & 3]));
}

/* Chains c and c + 1 of one block for rows 0 .. R - 1: out[r] = t[c] + t[c + 1], each chain
 * over the groups in order from zero, as the loop of one row runs it. */
__attribute__((always_inline)) TDM_TARGET_512_F16 static inline void
f512_chain_pair(const uint8_t *rec, const float *x, int64_t kq, int64_t G, int64_t half,
                const int c, const int R, bool q4, __m512 tab, const __m512i *sel, __m512 *out) {
    __m512 u0[4], u1[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) u0[r] = u1[r] = _mm512_setzero_ps();
    const int64_t gstep = q4 ? 1 : 2;
    for (int64_t g = 0; g < G; g += gstep) {
        __m512i v = _mm512_loadu_si512(rec + 64 * (g + (!q4 && c >= 4)));
        __m512 w0 = f512_chain_w(v, c, q4, tab, sel), w1 = f512_chain_w(v, c + 1, q4, tab, sel);
        const int64_t i0 = q4 && c >= 4 ? half + 4 * g + (c - 4) : 4 * g + c;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            u0[r] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[r * kq + i0]), u0[r]);
            u1[r] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[r * kq + i0 + 1]), u1[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) out[r] = _mm512_add_ps(u0[r], u1[r]);
}

/* Float path: rows m0 .. m0 + R - 1 (R <= 4) of A against panel p, each group's codes widened
 * once for the R rows (f512_panel's loop of one row widens them for every row: at 8 rows the
 * widening, not the FMAs, bounded the step). A block runs as four passes over its groups, one
 * per chain pair (t0, t1), (t2, t3), (t4, t5), (t6, t7), each with 2R independent FMA chains;
 * the pair sums fold into the sum tree as they come, so at most 6R vectors are live (R = 4:
 * 24 of the 32 registers). Per row the same operations in the same order as the loop of one
 * row (each chain over the groups in order, the same tree, acc and accz fused the same way),
 * so each row's Y is that row's alone (test_rows_invariant). */
__attribute__((always_inline)) TDM_TARGET_512_F16 static inline void
f512_rows(const tdm_nbits_pjob *j, int64_t p, int64_t m0, const int R, bool q4, bool s16,
          bool mzs, bool z16, const __m512i *sel) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, G = pk->groups, cb = 64 * G, kq = j->kq;
    const int64_t nb = pk->nb;
    const uint8_t *base = panel_of(j, p);
    const __m512 tab = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float *xa = (const float *)j->a + m0 * kq;
    const float *as = j->asum + m0 * nb;
    __m512 acc[4], accz[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc[r] = accz[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = base + b * pk->bstride;
        const float *x = xa + b * bs;
        if (m0 == 0) pf_record(rec, pk->bstride, NBP_PFD_FROWS); /* the first rows' pass */
        __m512 lo[4], hi[4], q[4];
        f512_chain_pair(rec, x, kq, G, half, 0, R, q4, tab, sel, lo);
        f512_chain_pair(rec, x, kq, G, half, 2, R, q4, tab, sel, q);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) lo[r] = _mm512_add_ps(lo[r], q[r]);
        f512_chain_pair(rec, x, kq, G, half, 4, R, q4, tab, sel, hi);
        f512_chain_pair(rec, x, kq, G, half, 6, R, q4, tab, sel, q);
        __m512 s = ld16x(rec + cb, s16);
        __m512 z = mzs ? ld16x(rec + cb + pk->sbytes, z16) : s;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 d = _mm512_add_ps(lo[r], _mm512_add_ps(hi[r], q[r]));
            acc[r] = _mm512_fmadd_ps(d, s, acc[r]);
            accz[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(as[r * nb + b]), accz[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) finish512(j, p, m0 + r, acc[r], accz[r], mzs);
}

__attribute__((always_inline)) TDM_TARGET_512_F16 static inline void
f512_panel(const tdm_nbits_pjob *j, int64_t p, bool q4, bool s16, bool mzs, bool z16) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, half = bs / 2, G = pk->groups, cb = 64 * G;
    const uint8_t *base = panel_of(j, p);
    const __m512i nib = _mm512_set1_epi32(15), byte = _mm512_set1_epi32(255);
    const __m512 tab = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i sel[4]; /* vpshufb controls: byte e of each dword to its low byte, zeros above */
    for (int e = 0; e < 4; e++) {
        const int z = (int)0xffffff00;
        sel[e] = _mm512_or_si512(_mm512_set1_epi32(z),
                                 _mm512_add_epi32(_mm512_set1_epi32(e),
                                                  _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4,
                                                                    8, 12, 0, 4, 8, 12)));
    }
    (void)nib, (void)tab, (void)byte;
    int64_t m = 0;
    for (; m + 4 <= j->M; m += 4) f512_rows(j, p, m, 4, q4, s16, mzs, z16, sel);
    if (j->M - m == 3) f512_rows(j, p, m, 3, q4, s16, mzs, z16, sel), m += 3;
    if (j->M - m == 2) f512_rows(j, p, m, 2, q4, s16, mzs, z16, sel), m += 2;
    for (; m < j->M; m++) {
        const float *xa = (const float *)j->a + m * j->kq;
        const float *as = j->asum + m * pk->nb;
        __m512 acc = _mm512_setzero_ps(), accz = _mm512_setzero_ps();
        for (int64_t b = 0; b < pk->nb; b++) {
            const uint8_t *rec = base + b * pk->bstride;
            const float *x = xa + b * bs;
            if (m == 0) pf_record(rec, pk->bstride, NBP_PFD);
            __m512 t[8];
            for (int i = 0; i < 8; i++) t[i] = _mm512_setzero_ps();
            for (int64_t g = 0; g < G; g++) {
                __m512i v = _mm512_loadu_si512(rec + 64 * g);
                const float *xl = x + 4 * g;
                if (q4) {
                    const float *xh = x + half + 4 * g;
#if NBP_PERM
/* a nibble to float by vpermps of the table 0..15 (it reads the low 4 bits of each index) */
#define NBP_NIB(e)                                                                              \
    t[e] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 8 * (e)), tab),         \
                           _mm512_set1_ps(xl[e]), t[e]);                                        \
    t[4 + (e)] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 8 * (e) + 4), tab), \
                                 _mm512_set1_ps(xh[e]), t[4 + (e)]);
#else
#define NBP_NIB(e)                                                                              \
    t[e] = _mm512_fmadd_ps(                                                                     \
        _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * (e)), nib)),               \
        _mm512_set1_ps(xl[e]), t[e]);                                                           \
    t[4 + (e)] = _mm512_fmadd_ps(                                                               \
        _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * (e) + 4), nib)),           \
        _mm512_set1_ps(xh[e]), t[4 + (e)]);
#endif
                    NBP_NIB(0) NBP_NIB(1) NBP_NIB(2) NBP_NIB(3)
#undef NBP_NIB
                } else {
                    /* two groups a step (G is even for 8 bits): 8 chains, fixed registers */
                    __m512i v1 = _mm512_loadu_si512(rec + 64 * (g + 1));
/* byte e of each row's dword, zero-extended by vpshufb (one op, not a shift and a mask) */
#define NBP_BYTE(e)                                                                             \
    t[e] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_shuffle_epi8(v, sel[e])),                \
                           _mm512_set1_ps(xl[e]), t[e]);                                        \
    t[4 + (e)] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_shuffle_epi8(v1, sel[e])),         \
                                 _mm512_set1_ps(xl[4 + (e)]), t[4 + (e)]);
                    NBP_BYTE(0) NBP_BYTE(1) NBP_BYTE(2) NBP_BYTE(3)
#undef NBP_BYTE
                    g++;
                }
            }
            __m512 d = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(t[0], t[1]), _mm512_add_ps(t[2], t[3])),
                                     _mm512_add_ps(_mm512_add_ps(t[4], t[5]), _mm512_add_ps(t[6], t[7])));
            __m512 s = ld16x(rec + cb, s16);
            acc = _mm512_fmadd_ps(d, s, acc);
            __m512 z = mzs ? ld16x(rec + cb + pk->sbytes, z16) : s;
            accz = _mm512_fmadd_ps(z, _mm512_set1_ps(as[b]), accz);
        }
        finish512(j, p, m, acc, accz, mzs);
    }
}

NBP_FORMS(NBP_DEF, vnni, vnni_panel, TDM_TARGET_VNNI_F16)
NBP_FORMS(NBP_DEF, f512, f512_panel, TDM_TARGET_512_F16)

/* ---- AMX (int8 activations, NBP_AMX_MIN rows or more) ----
 *
 * The rows of A in tiles of R = 8 or 16 rows (8 when M <= 8, so an 8-row decode step does not
 * pay for 16), each block of a panel one TDPBSUD (or one per 64 of its elements) of A's int8
 * codes (signed, natural order: A's scratch rows read as a tile) against the block's codes
 * (unsigned) as AMX's B tile: dword rows of 64 bytes, 4 bytes per row of W, which is the
 * packed record itself for 8 bits; 4 bits: the low nibbles' groups (elements 0 .. bs/2 - 1)
 * then the high nibbles' (bs/2 .. bs - 1), split into a ring of 4 blocks on the stack two
 * blocks ahead. Each block's int32 sums (the tile stored) then take the VNNI loop's float
 * steps per row: cvt, times s * sa, added to acc, block by block, and the zero-point sums
 * likewise. The integer sums are exact, so every row's Y equals the VNNI loops' (and a row
 * computed alone): batch invariance holds across the switch at NBP_AMX_MIN rows.
 * Rows: tiles of R rows from m = 0; the last tile of an M >= R call ends at row M (it
 * overlaps the one before, whose rows it does not store again); M < R reads A's scratch rows
 * up to R, zeros (tdm_nbits_pk_arows). Tiles are configured per task (LDTILECFG) and released
 * at its end (TILERELEASE), so nothing of the tile state outlives a call.
 * Measured on the AMX Xeon (1 thread, CPU time, weights in L2, load 3.6-4.4): 3072 x 576
 * 4-bit, M = 8 75.0 us against 82.2 with the VNNI loops, M = 16 132.9 against 167.9, M = 64
 * 561-581 against 689; the tile instructions (~13 ns a block) do not overlap with the
 * scaling, so an 8-row call stays ~2.5x a 1-row one (bench/llm/results-2026-12-03-s16-amx-
 * streams.md). Splitting a panel's blocks once for all row tiles (M > R): no gain. With the
 * weights beyond L2 (the model's case) each block record is prefetched NBP_PFD_I8 ahead by the
 * first row tile: without it memory and tile work add up (M = 8 150 us against 75 from L2).
 * A call of one tile (M <= R: the decode steps of up to 16 streams) first lays its rows' sa and
 * asum out by block, R floats side by side (rows past M zero): the scaling then broadcasts
 * from one pointer at fixed offsets for every row, with no row-range tests, where the general
 * form kept R row offsets (spilled) and tested each row against r0 / r1 (the same operations
 * per kept row, so the same values; 8-stream SmolLM2 decode at 2 threads +2-5% tok/cpu-s, ahead
 * in 16 of 18 alternating rounds: bench/llm/results-2026-12-03-pool22-s20-amx.md). */
#if NBP_AMX

#define TDM_TARGET_AMX                                                                          \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,"  \
                          "avx2,fma,f16c")))

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* Elements of a block per TDPBSUD: the block (up to 64), else 64, 32 or 16 dividing it. */
static inline int64_t amx_kt(int64_t bs) {
    if (bs <= 64) return bs;
    return bs % 64 == 0 ? 64 : bs % 32 == 0 ? 32 : 16;
}

/* Rows of A per tile for an M-row call. */
static inline int amx_rows(int64_t M) { return M <= 8 ? 8 : 16; }

#define AMX_MAX_BS4 256 /* 4 bits: larger blocks (their split ring past 16 KiB) take VNNI */
#define AMX_TR_NB 128  /* blocks of a row up to which a one-tile call sets its scales side by side */

/* The AMX loops take this call. */
static inline bool amx_takes(const tdm_nbits_pk *pk, int64_t M) {
    return M >= NBP_AMX_MIN && (pk->bits == 8 || pk->bs <= AMX_MAX_BS4);
}

/* The codes of a 4-bit block record as B tiles into o (bs * 16 bytes): per group g, its low
 * nibbles to dword row g, its high nibbles to row G + g. */
__attribute__((always_inline)) TDM_TARGET_AMX static inline void amx_split(const uint8_t *rec,
                                                                          int64_t G, uint8_t *o) {
    const __m512i nib = _mm512_set1_epi8(15);
    for (int64_t g = 0; g < G; g++) {
        __m512i v = _mm512_loadu_si512(rec + 64 * g);
        _mm512_store_si512(o + 64 * g, _mm512_and_si512(v, nib));
        _mm512_store_si512(o + 64 * (G + g), _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
    }
}

/* Tile tc = A (rows of q, stride kq) . B (bt: the block as B tiles) over the block's bs
 * elements. Tile numbers are immediates: one function per C tile (4, used in turn), with A
 * and B tiles of its parity; amx_store: tile t to c (R rows of 16 int32). */
#define AMX_DP_FN(name, tc, ta, tb)                                                             \
    __attribute__((always_inline)) TDM_TARGET_AMX static inline void name(                      \
        const int8_t *q, int64_t kq, const uint8_t *bt, int64_t bs, int64_t kt) {               \
        _tile_zero(tc);                                                                         \
        for (int64_t k0 = 0; k0 < bs; k0 += kt) {                                               \
            _tile_loadd(ta, q + k0, kq);                                                        \
            _tile_loadd(tb, bt + 16 * k0, 64);                                                  \
            _tile_dpbsud(tc, ta, tb);                                                           \
        }                                                                                       \
    }
AMX_DP_FN(amx_dp0, 0, 4, 6)
AMX_DP_FN(amx_dp1, 1, 5, 7)
AMX_DP_FN(amx_dp2, 2, 4, 6)
AMX_DP_FN(amx_dp3, 3, 5, 7)
#undef AMX_DP_FN

__attribute__((always_inline)) TDM_TARGET_AMX static inline void
amx_dp(int t, const int8_t *q, int64_t kq, const uint8_t *bt, int64_t bs, int64_t kt) {
    switch (t) {
    case 0: amx_dp0(q, kq, bt, bs, kt); break;
    case 1: amx_dp1(q, kq, bt, bs, kt); break;
    case 2: amx_dp2(q, kq, bt, bs, kt); break;
    default: amx_dp3(q, kq, bt, bs, kt); break;
    }
}

__attribute__((always_inline)) TDM_TARGET_AMX static inline void amx_store(int t, int32_t *c) {
    switch (t) {
    case 0: _tile_stored(0, c, 64); break;
    case 1: _tile_stored(1, c, 64); break;
    case 2: _tile_stored(2, c, 64); break;
    default: _tile_stored(3, c, 64); break;
    }
}

/* One block's int32 sums (ce: R rows of 16) into the R rows' accumulators, the VNNI loop's
 * float steps: acc += cvt(sums) * (s * sa), and (zin) accz += z * asum, with the rows' sa and
 * asum side by side (ts, tz). Both AMX block loops scale through it, so that their values are
 * the same by construction. */
__attribute__((always_inline)) TDM_TARGET_AMX static inline void
amx_scale_block(const int32_t *ce, __m512 sc, __m512 z, const float *ts, const float *tz,
                const int R, bool zin, __m512 *acc, __m512 *accz) {
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        __m512 df = _mm512_cvtepi32_ps(_mm512_load_si512(ce + 16 * r));
        acc[r] = _mm512_fmadd_ps(df, _mm512_mul_ps(sc, _mm512_set1_ps(ts[r])), acc[r]);
        if (zin) accz[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(tz[r]), accz[r]);
    }
}

/* A one-tile call's rows' scales and sums by block, R side by side (rows past M zero): the
 * scaling then broadcasts from one pointer at fixed offsets (amx_scale_block). */
static inline void amx_side_by_side(const tdm_nbits_pjob *j, const int R, float *tsa, float *tas) {
    const int64_t nb = j->pk->nb;
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < R; r++) {
            tsa[b * R + r] = r < j->M ? j->sa[r * nb + b] : 0.0f;
            tas[b * R + r] = r < j->M ? j->asum[r * nb + b] : 0.0f;
        }
}

/* Rows m0 + r0 .. m0 + r1 - 1 of Y for panel p from the tile of A's rows m0 .. m0 + R - 1.
 * Block b: (4 bits) its codes split into ring slot b % 4 at step b - 2, its products into
 * tile b % 4 at step b, stored at step b + 1, scaled at step b + 2 (AMX runs its instructions
 * in order: a store right after its product waits for it, and the loads stay apart from the
 * arithmetic). Per row: acc += cvt(sums) * (s * sa) and accz += z * asum block by block, the
 * VNNI loop's steps; for R = 16 the accz chains in a second pass (registers). */
__attribute__((always_inline)) TDM_TARGET_AMX static inline void
amx_tile_rows(const tdm_nbits_pjob *j, int64_t p, int64_t m0, const int R, int r0, int r1,
              bool q4, bool s16, bool mzs, bool z16, uint8_t *ring, const float *tsa,
              const float *tas) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t bs = pk->bs, kq = j->kq, nb = pk->nb, kt = amx_kt(bs), G = pk->groups;
    const int64_t cb = 64 * G, bst = pk->bstride, slot = 16 * bs;
    const bool zin = R <= 8; /* the accz chains in the main loop */
    const uint8_t *base = panel_of(j, p);
    const int8_t *qa = (const int8_t *)j->a + m0 * kq;
    const float *sa = j->sa + m0 * nb, *as = j->asum + m0 * nb;
    int32_t c[4][16 * 16] __attribute__((aligned(64)));
    __m512 acc[16], accz[16];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) acc[r] = accz[r] = _mm512_setzero_ps();
    if (q4)
        for (int64_t b = 0; b < 2 && b < nb; b++) amx_split(base + b * bst, G, ring + b * slot);
    for (int64_t b = 0; b < nb + 2; b++) {
        if (m0 == 0 && b < nb) pf_record(base + b * bst, bst, NBP_PFD_I8);
        if (q4 && b + 2 < nb) amx_split(base + (b + 2) * bst, G, ring + ((b + 2) & 3) * slot);
        if (b < nb)
            amx_dp((int)(b & 3), qa + b * bs, kq, q4 ? ring + (b & 3) * slot : base + b * bst,
                   bs, kt);
        if (b >= 1 && b <= nb) amx_store((int)((b - 1) & 3), c[(b - 1) & 3]);
        if (b < 2) continue;
        const int64_t e = b - 2; /* the block scaled */
        const uint8_t *rec = base + e * bst;
        const int32_t *ce = c[e & 3];
        __m512 sc = ld16x(rec + cb, s16);
        __m512 z = zin ? (mzs ? ld16x(rec + cb + pk->sbytes, z16) : sc) : sc;
        if (tsa) { /* every row of the tile, its scales side by side (amx_panels) */
            amx_scale_block(ce, sc, z, tsa + e * R, tas + e * R, R, zin, acc, accz);
            continue;
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            if (r < r0 || r >= r1) continue;
            __m512 df = _mm512_cvtepi32_ps(_mm512_load_si512(ce + 16 * r));
            acc[r] = _mm512_fmadd_ps(df, _mm512_mul_ps(sc, _mm512_set1_ps(sa[r * nb + e])),
                                     acc[r]);
            if (zin) accz[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(as[r * nb + e]), accz[r]);
        }
    }
    if (!zin)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *rec = base + b * bst;
            __m512 z = mzs ? ld16x(rec + cb + pk->sbytes, z16) : ld16x(rec + cb, s16);
            if (tsa) {
                const float *tz = tas + b * R;
#pragma GCC unroll 16
                for (int r = 0; r < R; r++)
                    accz[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(tz[r]), accz[r]);
                continue;
            }
#pragma GCC unroll 16
            for (int r = 0; r < R; r++)
                if (r >= r0 && r < r1)
                    accz[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(as[r * nb + b]), accz[r]);
        }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        if (r >= r0 && r < r1) finish512(j, p, m0 + r, acc[r], accz[r], mzs);
}

/* The 8-row tile's pairs of 32-element 4-bit blocks (amx_pair_takes): one TDPBSUD of 64
 * elements covers blocks 2P and 2P + 1 for the 8 rows, A being ap[P] (16 rows of 64 bytes:
 * rows 0-7 the rows' codes of block 2P then 32 zeros, rows 8-15 32 zeros then those of block
 * 2P + 1) and B the two blocks' split codes, adjacent in the ring (slots 2P % 4 and + 1):
 * C's rows 0-7 are block 2P's sums, rows 8-15 block 2P + 1's, the same integers as a product
 * per block, scaled as amx_tile_rows scales them. Half the tile operations a block (a tile
 * store costs the same for 8 rows as for 16). SmolLM2's 8-stream decode at 2 threads (AMX Xeon,
 * bench/llm/results-2026-12-06-s41-amx.md): the session's run of a step 0.88-0.93 of the
 * blocks one at a time, with the two alternating step by step in one process; steady decode
 * 1533-1647 against 1404-1435 tok/s in 5 alternating runs. Sessions 19 and 38 measured no
 * gain through the engine when a product's panels ran as four tasks a thread. */
#define AMX_PAIR_MAX (AMX_TR_NB / 2) /* pairs of a row: ap on the stack (1 KiB each) */
#ifndef NBP_AMX_PAIR
#define NBP_AMX_PAIR 1 /* 0: blocks one at a time (for A/B runs) */
#endif
static inline bool amx_pair_takes(const tdm_nbits_pk *pk, int64_t M, bool q4) {
    return NBP_AMX_PAIR && q4 && M <= 8 && pk->bs == 32 && pk->nb <= AMX_TR_NB;
}

__attribute__((always_inline)) TDM_TARGET_AMX static inline void
amx_pair_dp(int t, const int8_t *a, const uint8_t *b) {
    switch (t) {
    case 0: _tile_zero(0); _tile_loadd(4, a, 64); _tile_loadd(6, b, 64); _tile_dpbsud(0, 4, 6); break;
    case 1: _tile_zero(1); _tile_loadd(5, a, 64); _tile_loadd(7, b, 64); _tile_dpbsud(1, 5, 7); break;
    case 2: _tile_zero(2); _tile_loadd(4, a, 64); _tile_loadd(6, b, 64); _tile_dpbsud(2, 4, 6); break;
    default: _tile_zero(3); _tile_loadd(5, a, 64); _tile_loadd(7, b, 64); _tile_dpbsud(3, 5, 7); break;
    }
}

__attribute__((always_inline)) TDM_TARGET_AMX static inline void
amx_pair_rows(const tdm_nbits_pjob *j, int64_t p, bool s16, bool mzs, bool z16, uint8_t *ring,
              const int8_t *ap, const float *tsa, const float *tas) {
    const tdm_nbits_pk *pk = j->pk;
    const int64_t nb = pk->nb, G = pk->groups, cb = 64 * G, bst = pk->bstride, slot = 16 * 32;
    const int64_t np = (nb + 1) / 2;
    const uint8_t *base = panel_of(j, p);
    int32_t c[4][16 * 16] __attribute__((aligned(64)));
    __m512 acc[8], accz[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) acc[r] = accz[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < 2 && b < nb; b++) amx_split(base + b * bst, G, ring + b * slot);
    for (int64_t q = 0; q < np + 2; q++) {
        for (int64_t b = 2 * q; b < 2 * q + 2 && b < nb; b++) pf_record(base + b * bst, bst, NBP_PFD_I8);
        for (int64_t b = 2 * q + 2; b < 2 * q + 4 && b < nb; b++) /* the next pair's codes */
            amx_split(base + b * bst, G, ring + (b & 3) * slot);
        if (q < np) amx_pair_dp((int)(q & 3), ap + q * 1024, ring + ((2 * q) & 3) * slot);
        if (q >= 1 && q <= np) amx_store((int)((q - 1) & 3), c[(q - 1) & 3]);
        if (q < 2) continue;
        const int32_t *cq = c[(q - 2) & 3];
        for (int h = 0; h < 2; h++) {
            const int64_t e = 2 * (q - 2) + h; /* the block scaled */
            if (e >= nb) break;
            const uint8_t *rec = base + e * bst;
            const int32_t *ce = cq + 16 * 8 * h;
            __m512 sc = ld16x(rec + cb, s16);
            __m512 z = mzs ? ld16x(rec + cb + pk->sbytes, z16) : sc;
            amx_scale_block(ce, sc, z, tsa + e * 8, tas + e * 8, 8, true, acc, accz);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        if (r < j->M) finish512(j, p, r, acc[r], accz[r], mzs);
}

/* Panels p0 .. p1 - 1 of an 8-row call by pairs of blocks (amx_pair_takes): A's pairs laid out
 * once (ap), the rows' scales and sums by block side by side (as amx_panels' one-tile form). */
__attribute__((always_inline)) TDM_TARGET_AMX static inline void
amx_pairs(const tdm_nbits_pjob *j, int64_t p0, int64_t p1, bool s16, bool mzs, bool z16) {
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64; /* C 0-3, A 4-5, B 6-7 */
    _tile_loadconfig(&cfg);
    const int64_t nb = j->pk->nb, np = (nb + 1) / 2, kq = j->kq;
    int8_t ap[AMX_PAIR_MAX * 1024] __attribute__((aligned(64)));
    uint8_t ring[4 * 16 * 32] __attribute__((aligned(64)));
    const int8_t *qa = (const int8_t *)j->a; /* 8 readable rows (tdm_nbits_pk_arows) */
    memset(ap, 0, (size_t)np * 1024);
    for (int64_t q = 0; q < np; q++)
        for (int r = 0; r < 8; r++) {
            int8_t *lo = ap + q * 1024 + 64 * r;
            memcpy(lo, qa + r * kq + 64 * q, 32);
            if (2 * q + 1 < nb) memcpy(lo + 512 + 32, qa + r * kq + 64 * q + 32, 32);
        }
    float tsa[AMX_TR_NB * 8] __attribute__((aligned(64)));
    float tas[AMX_TR_NB * 8] __attribute__((aligned(64)));
    amx_side_by_side(j, 8, tsa, tas);
    for (int64_t p = p0; p < p1; p++) amx_pair_rows(j, p, s16, mzs, z16, ring, ap, tsa, tas);
    _tile_release();
}

/* amx_pairs per 4-bit form, each its own function: inlined into the forms' AMX loops it made
 * their one-block-at-a-time path slower (3072 x 576, M = 8) */
#define AMXP_DEF(name, s16, mzs, z16)                                                           \
    __attribute__((noinline)) TDM_TARGET_AMX static void name(const tdm_nbits_pjob *j,          \
                                                              int64_t p0, int64_t p1) {         \
        amx_pairs(j, p0, p1, s16, mzs, z16);                                                    \
    }
AMXP_DEF(amxp_4, false, false, false)
AMXP_DEF(amxp_4s, true, false, false)
AMXP_DEF(amxp_4z, false, true, false)
AMXP_DEF(amxp_4sz, true, true, false)
AMXP_DEF(amxp_4szh, true, true, true)
AMXP_DEF(amxp_4zh, false, true, true)
#undef AMXP_DEF
__attribute__((always_inline)) static inline void amx_pairs_of(const tdm_nbits_pjob *j,
                                                               int64_t p0, int64_t p1, bool s16,
                                                               bool mzs, bool z16) {
    if (!mzs) (s16 ? amxp_4s : amxp_4)(j, p0, p1);
    else if (!z16) (s16 ? amxp_4sz : amxp_4z)(j, p0, p1);
    else (s16 ? amxp_4szh : amxp_4zh)(j, p0, p1);
}

/* Panels p0 .. p1 - 1, all M rows, in tiles of R rows (see above). */
__attribute__((always_inline)) TDM_TARGET_AMX static inline void
amx_panels(const tdm_nbits_pjob *j, int64_t p0, int64_t p1, const int R, bool q4, bool s16,
           bool mzs, bool z16) {
    const int64_t M = j->M, bs = j->pk->bs, kt = amx_kt(bs), Ma = M > R ? M : R; /* rows readable */
    if (R == 8 && amx_pair_takes(j->pk, M, q4)) {
        amx_pairs_of(j, p0, p1, s16, mzs, z16);
        return;
    }
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.rows[t] = (uint8_t)R, cfg.colsb[t] = 64; /* C */
    for (int t = 4; t < 6; t++) {
        cfg.rows[t] = (uint8_t)R, cfg.colsb[t] = (uint16_t)kt;          /* A */
        cfg.rows[t + 2] = (uint8_t)(kt / 4), cfg.colsb[t + 2] = 64;     /* B */
    }
    _tile_loadconfig(&cfg);
    uint8_t ring[4 * 16 * AMX_MAX_BS4] __attribute__((aligned(64))); /* 4 slots of bs * 16 */
    const int64_t nb = j->pk->nb;
    if (M <= R && nb <= AMX_TR_NB) {
        /* one tile: its rows' scales and sums by block, R side by side */
        float tsa[AMX_TR_NB * 16] __attribute__((aligned(64)));
        float tas[AMX_TR_NB * 16] __attribute__((aligned(64)));
        amx_side_by_side(j, R, tsa, tas);
        for (int64_t p = p0; p < p1; p++)
            amx_tile_rows(j, p, 0, R, 0, (int)M, q4, s16, mzs, z16, ring, tsa, tas);
        _tile_release();
        return;
    }
    for (int64_t p = p0; p < p1; p++)
        for (int64_t done = 0; done < M;) {
            int64_t m0 = done + R <= Ma ? done : Ma - R;
            int r1 = (int)(M - m0 < R ? M - m0 : R);
            amx_tile_rows(j, p, m0, R, (int)(done - m0), r1, q4, s16, mzs, z16, ring, NULL,
                          NULL);
            done = m0 + r1;
        }
    _tile_release();
}

#define NBP_DEF_AMX(name, panel, target, q4, s16, mzs, z16)                                    \
    target static void name(const tdm_nbits_pjob *j, int64_t p0, int64_t p1) {                \
        if (!amx_takes(j->pk, j->M)) {                                                          \
            for (int64_t p = p0; p < p1; p++) vnni_panel(j, p, q4, s16, mzs, z16);              \
            return;                                                                             \
        }                                                                                       \
        if (amx_rows(j->M) == 8) amx_panels(j, p0, p1, 8, q4, s16, mzs, z16);                   \
        else amx_panels(j, p0, p1, 16, q4, s16, mzs, z16);                                      \
    }
NBP_FORMS(NBP_DEF_AMX, amx, vnni_panel, TDM_TARGET_AMX)
#endif /* NBP_AMX */


static tdm_nbits_prows_fn pick_vnni(const tdm_nbits_pk *pk) {
    NBP_FORMS(NBP_PICK, vnni, vnni_panel, )
    return NULL;
}
#if NBP_AMX
static tdm_nbits_prows_fn pick_amx(const tdm_nbits_pk *pk) {
    NBP_FORMS(NBP_PICK, amx, , )
    return NULL;
}
#endif
static tdm_nbits_prows_fn pick_f512(const tdm_nbits_pk *pk) {
    NBP_FORMS(NBP_PICK, f512, f512_panel, )
    return NULL;
}
#endif

tdm_nbits_prows_fn tdm_nbits_pk_pick(int level, const tdm_nbits_pk *pk, bool int8) {
    tdm_nbits_prows_fn f = NULL;
#ifdef TDM_SIMD_X86
#if NBP_AMX
    if (int8 && level >= (int)TDM_ISA_AVX512_CORE_AMX) f = pick_amx(pk);
    else
#endif
    if (int8 && level >= (int)TDM_ISA_AVX512_CORE_VNNI) f = pick_vnni(pk);
    else if (!int8 && level >= (int)TDM_ISA_AVX512_CORE) f = pick_f512(pk);
    else if (level >= (int)TDM_ISA_AVX2) f = tdm_nbits_pk_pick_avx2(pk, int8);
#else
    (void)level;
#endif
    return f ? f : pk_rows_portable;
}

/* Measured on Zen 5 (avx512_core_bf16), 4-bit with zero points, weights from memory, CPU
 * time at 1 thread / wall at 2, us per call, the panel loops against dequantised panels and
 * sgemm (panels a row at a time, as then): 1536 x 576 M = 17 303 / 1181 (1 thread), M = 128
 * 2197 / 3000; 2 threads, M = 128: 3072 x 576 2214 / 3881, 576 x 1536 1155 / 1762, 960 x 576
 * 712 / 976. The AVX2 float loop runs at about half the FMA rate (f256_rows), so there the
 * panels and sgemm remain. */
bool tdm_nbits_pk_any_rows(int level, const tdm_nbits_pk *pk, bool int8) {
    if (int8) return true;
#ifdef TDM_SIMD_X86
    return level >= (int)TDM_ISA_AVX512_CORE && pick_f512(pk) != NULL;
#else
    (void)level, (void)pk;
    return false;
#endif
}

int64_t tdm_nbits_pk_arows(int level, const tdm_nbits_pk *pk, bool int8, int64_t M) {
#if defined(TDM_SIMD_X86) && NBP_AMX
    if (int8 && level >= (int)TDM_ISA_AVX512_CORE_AMX && amx_takes(pk, M) && M < amx_rows(M))
        return amx_rows(M);
#else
    (void)level, (void)pk, (void)int8;
#endif
    return M;
}
