/* What the quantised KV cache's attention files share (k_llm_gqa_i8.c: the scalar routines,
 * portable, AVX2 and the choice of level; k_llm_gqa_i8_avx512.c: the AVX-512 forms). Private
 * to those two files. */
#ifndef TANDEM_BACKENDS_CPU_K_LLM_GQA_I8_H
#define TANDEM_BACKENDS_CPU_K_LLM_GQA_I8_H

#include <string.h>

#include "backends/cpu/k_llm.h"

#define GROUP TDM_KV_I8_GROUP
#define AI __attribute__((always_inline)) inline

/* The 4-bit cache (q4, kv_type "int4"; ops/kv_int8.h TDM_KV_I4_ROW) goes through the same
 * routines with the row's codes read another way: every routine of the two files takes a q4
 * flag that is a constant where it is instantiated (the entry points come in pairs), so each
 * form compiles to its own code. A 4-bit group (16 bytes) widens to its 32 codes in order: the
 * low nibbles are values 0..15, the high ones 16..31; the codes less 8 are the signed values
 * (the integer variants take c - 8, or c with 8 * sum(q) taken off, as the 8-bit forms take
 * c + 128 with 128 * sum(q)). The scales follow the codes: at byte d (8-bit) or 16 per group
 * (4-bit). */
static inline int64_t scales_at(int64_t d, bool q4) {
    return q4 ? 16 * ((d + GROUP - 1) / GROUP) : d;
}

/* Heads per pass over the rows (the quantised queries on the stack). */
#define QHEADS 4

#define PVQ_ROWS 64 /* rows per block of integer p.V weights (AVX2, AVX-512 VNNI) */

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

/* The block-list entry points (tdm_llm_i8_fns.scores_blk / pv_blk) of a level for both forms:
 * NAME##_scores / NAME##_pv (8-bit) and NAME##4_scores / NAME##4_pv (4-bit). The scores return
 * false, nothing done, where TAKES(bs, d, rs, q4) is false (what the level's routines do not
 * take: the caller then gathers the rows); p.V is called only where they took the call. Both run
 * the level's routines over the block list:
 * SANY(q, G, k, blk, bs, rs, n, d, scale, out, ld, vnext, q4, blocks) and
 * PANY(p, ld, G, v, blk, bs, rs, n, d, y, ys, q4, blocks), the contiguous forms' bodies (k, v,
 * vnext NULL; q4 and blocks constants). */
#define BLK_FORM(ATTR, NAME, TAKES, SANY, PANY, Q4)                                             \
    ATTR static bool NAME##_scores(const float *const *q, int64_t G, const int8_t *const *blk,   \
                                   int64_t bs, int64_t rs, int64_t n, int64_t d, float scale,    \
                                   float *out, int64_t ld) {                                     \
        if (!TAKES(bs, d, rs, Q4)) return false;                                                 \
        SANY(q, G, NULL, blk, bs, rs, n, d, scale, out, ld, NULL, Q4, true);                     \
        return true;                                                                             \
    }                                                                                            \
    ATTR static void NAME##_pv(const float *p, int64_t ld, int64_t G, const int8_t *const *blk,  \
                               int64_t bs, int64_t rs, int64_t n, int64_t d, float *y,           \
                               int64_t ys) {                                                     \
        PANY(p, ld, G, NULL, blk, bs, rs, n, d, y, ys, Q4, true);                                \
    }
#define BLK_PAIR(ATTR, NAME, TAKES, SANY, PANY)                                                 \
    BLK_FORM(ATTR, NAME, TAKES, SANY, PANY, false)                                              \
    BLK_FORM(ATTR, NAME##4, TAKES, SANY, PANY, true)

#ifdef TDM_SIMD_X86
/* the levels' tables: AVX2 (k_llm_gqa_i8.c), AVX-512 without and with VNNI
 * (k_llm_gqa_i8_avx512.c; the 4-bit cache has no AVX-512 table without VNNI) */
extern const tdm_llm_i8_fns tdm_llm_i8_fns_avx2, tdm_llm_i4_fns_avx2;
extern const tdm_llm_i8_fns tdm_llm_i8_fns_avx512, tdm_llm_i8_fns_vnni, tdm_llm_i4_fns_vnni;
#endif

#endif
