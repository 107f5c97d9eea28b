/* Private to the decode loops of MatMulNBitsPacked (k_nbits_pack.c: portable, AVX-512, AMX;
 * k_nbits_pack_avx2.c: AVX2): the panel helpers, the one-function-per-form macros and the
 * AVX2 loops' entry. */
#ifndef TDM_K_NBITS_PACK_H
#define TDM_K_NBITS_PACK_H

#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nbits.h"

#ifndef NBP_PFD
#define NBP_PFD 0 /* bytes of software prefetch distance of the AVX-512 float loop of one row (k_nbits_pack.c); 0: none. Not measured there (its several-row sibling gained from 2 KiB on Zen 5: NBP_PFD_FROWS; the AVX2 loops from 2 KiB on Zen 3: NBP_PFD_AVX2 in k_nbits_pack_avx2.c) */
#endif

static inline const uint8_t *panel_of(const tdm_nbits_pjob *j, int64_t p) {
    return j->P + p * j->pk->pstride;
}

/* Y for the 16 rows of panel p and A's row m from y[16] (the padding rows dropped). */
static inline void store_rows(const tdm_nbits_pjob *j, int64_t p, int64_t m, const float *y) {
    int64_t n0 = p * TDM_NBP_ROWS, cnt = j->pk->N - n0 < TDM_NBP_ROWS ? j->pk->N - n0 : TDM_NBP_ROWS;
    float *o = j->Y + m * j->pk->N + n0;
    for (int64_t r = 0; r < cnt; r++) o[r] = j->bias ? y[r] + j->bias[n0 + r] : y[r];
}

#ifdef TDM_SIMD_X86
#define TDM_TARGET_AVX2_F16 __attribute__((target("avx2,fma,f16c")))

static inline int32_t ld32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

typedef int32_t __attribute__((may_alias, aligned(1))) i32u; /* an unaligned dword of A */

/* Asks for the lines of a block record's bytes dist bytes ahead (dist 0: nothing). */
static inline void pf_record(const uint8_t *rec, int64_t bytes, const int64_t dist) {
    if (dist > 0)
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(rec + dist + o, 0, 3);
}

/* One function per (bits, scale / mz form): the flags become constants in the loops. */
#define NBP_FORMS(X, prefix, panel, target)                                                     \
    X(prefix##_4, panel, target, true, false, false, false)                                     \
    X(prefix##_4s, panel, target, true, true, false, false)                                     \
    X(prefix##_4z, panel, target, true, false, true, false)                                     \
    X(prefix##_4sz, panel, target, true, true, true, false)                                     \
    X(prefix##_4szh, panel, target, true, true, true, true)                                     \
    X(prefix##_4zh, panel, target, true, false, true, true)                                     \
    X(prefix##_8, panel, target, false, false, false, false)                                    \
    X(prefix##_8s, panel, target, false, true, false, false)                                    \
    X(prefix##_8z, panel, target, false, false, true, false)                                    \
    X(prefix##_8sz, panel, target, false, true, true, false)                                    \
    X(prefix##_8szh, panel, target, false, true, true, true)                                    \
    X(prefix##_8zh, panel, target, false, false, true, true)
#define NBP_DEF(name, panel, target, q4, s16, mzs, z16)                                        \
    target static void name(const tdm_nbits_pjob *j, int64_t p0, int64_t p1) {                \
        for (int64_t p = p0; p < p1; p++) panel(j, p, q4, s16, mzs, z16);                      \
    }
#define NBP_PICK(name, panel, target, q4, s16, mzs, z16)                                       \
    if (q4 == (pk->bits == 4) && s16 == !!(pk->form & TDM_NBP_S16) &&                          \
        mzs == !!(pk->form & TDM_NBP_MZ) && (!mzs || z16 == !!(pk->form & TDM_NBP_MZ16)))      \
        return name;

/* The AVX2 loop of pk's form: int8 activations (vpmaddubsw) or float (FMA); NULL if none. */
tdm_nbits_prows_fn tdm_nbits_pk_pick_avx2(const tdm_nbits_pk *pk, bool int8);
#endif

#endif
