/* tandem's 8-bit KV cache (the generator's kv_type "int8"; GroupQueryAttention with int8
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

#include <stdint.h>

/* The head_dim whose rows are `row` bytes long; -1 when none is. */
static inline int64_t tdm_kv_i8_head_dim(int64_t row) {
    for (int64_t d = row; d > 0 && TDM_KV_I8_ROW(d) >= row; d--)
        if (TDM_KV_I8_ROW(d) == row) return d;
    return -1;
}

#endif
