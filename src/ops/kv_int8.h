/* tandem's 8-bit and 4-bit KV caches.
 *
 * The 8-bit cache (the generator's kv_type "int8"; GroupQueryAttention with int8
 * past / present, backends/cpu/k_llm_gqa_i8.c): one cache row (a kv head's key or value at
 * one position) is
 *     head_dim int8 codes c[i], then ceil(head_dim / 32) scales s_g as bfloat16 (2 bytes each,
 *     native order), one per group of 32 codes:  x[i] ~ s_g * c[i], g = i / 32,
 * the int8 counterpart of GGUF's Q8_0 blocks. The cache tensor is int8 [batch, kv_heads,
 * length, TDM_KV_I8_ROW(head_dim)]; its bytes are what the generator's memory budget counts. */
#ifndef TDM_OPS_KV_INT8_H
#define TDM_OPS_KV_INT8_H

#define TDM_KV_I8_GROUP 32 /* codes per scale */
#define TDM_KV_I8_ROW(d) ((d) + 2 * (((d) + TDM_KV_I8_GROUP - 1) / TDM_KV_I8_GROUP))
#define TDM_KV_I8_MAX_HEAD_DIM 1024 /* head sizes the 8- and 4-bit caches take */

#include <stdint.h>

/* tandem's 4-bit KV cache (the generator's kv_type "int4"; GroupQueryAttention with uint8
 * past / present): one cache row is ceil(head_dim / 32) groups of 16 bytes, then one
 * bfloat16 scale s_g per group (2 bytes each, native order):
 *     byte j of group g: low nibble = code of value 32 g + j, high nibble = code of value
 *     32 g + 16 + j (j < 16; the codes of values past head_dim are 8),
 *     y[i] ~ s_g * (c[i] - 8), c in [0, 15],
 * the layout of GGUF's Q4_0 blocks (scale = the group's value of largest magnitude / -8),
 * where y is the row x with each whole group of 32 values rotated by the orthonormal
 * Walsh-Hadamard matrix H / sqrt(32) (its own inverse; a last group shorter than 32 is not
 * rotated): a channel far larger than the others spreads over the group instead of taking
 * its scale, and dot products are unchanged when the query is rotated the same way. The
 * cache tensor is uint8 [batch, kv_heads, length, TDM_KV_I4_ROW(head_dim)]; the row length
 * does not give head_dim back (the query's width does). */
#define TDM_KV_I4_ROW(d) (18 * (((d) + TDM_KV_I8_GROUP - 1) / TDM_KV_I8_GROUP))

/* The head_dim whose rows are `row` bytes long; -1 when none is. */
static inline int64_t tdm_kv_i8_head_dim(int64_t row) {
    for (int64_t d = row; d > 0 && TDM_KV_I8_ROW(d) >= row; d--)
        if (TDM_KV_I8_ROW(d) == row) return d;
    return -1;
}

#endif
