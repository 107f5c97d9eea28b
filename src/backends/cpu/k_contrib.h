/* CPU kernels of the contrib family (k_contrib*.c, ops/contrib.c): the run functions the
 * table in k_contrib.c lists from the other files, and what they share. Private to the
 * family. */
#ifndef TDM_CPU_K_CONTRIB_H
#define TDM_CPU_K_CONTRIB_H

#include "backends/cpu/cpu_kernels.h"

/* k_contrib_q.c: quantized element-wise ops and NhwcMaxPool (int8 / uint8) */
tdm_status *tdm_contrib_run_qlinear_add(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_qlinear_mul(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_qlinear_lut(tdm_kernel_ctx *ctx); /* QLinearSigmoid, QLinearLeakyRelu */
tdm_status *tdm_contrib_run_qlinear_gap(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_qlinear_concat(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_nhwc_max_pool(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_qgemm(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_qlinear_avg_pool(tdm_kernel_ctx *ctx);

/* k_contrib.c: C = alpha * op(A) . op(B) + beta * C (row-major; lda/ldb/ldc row strides): row
 * blocks of C spread over the context's pool, each oneDNN's serial sgemm (tdm_sgemm where
 * oneDNN declines). */
void tdm_contrib_gemm(tdm_kernel_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* k_contrib.c: Y = alpha * op(A) . op(B) for float32 A (rank ra, dims adims) and B, with
 * MatMul's batch broadcast and 1-D rules (op = transpose of the last two dims when ta / tb);
 * Y holds ycount floats (checked). tdm_sgemm on the context's pool. */
tdm_status *tdm_contrib_matmul(tdm_kernel_ctx *ctx, int ra, const int64_t *adims, const float *A,
                               int rb, const int64_t *bdims, const float *B, bool ta, bool tb,
                               float alpha, float *Y, int64_t ycount);

/* k_contrib_attn.c: Attention, QAttention, MultiHeadAttention, EmbedLayerNormalization */
tdm_status *tdm_contrib_run_attention(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_qattention(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_mha(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_embed_ln(tdm_kernel_ctx *ctx);
/* k_contrib_qmm.c: MatMulIntegerToFloat, DynamicQuantizeMatMul */
tdm_status *tdm_contrib_run_matmul_integer_to_float(tdm_kernel_ctx *ctx);
tdm_status *tdm_contrib_run_dynamic_quantize_matmul(tdm_kernel_ctx *ctx);
/* ... their state: a constant B converted to float once */
tdm_status *tdm_contrib_qmm_prepare(const tdm_node *node, int opset, int n_in, const tdm_tensor *const *in,
                                    const tdm_allocator *a, void **state);
void tdm_contrib_qmm_release(void *state, const tdm_allocator *a);
/* k_contrib_lstm.c */
tdm_status *tdm_contrib_run_dq_lstm(tdm_kernel_ctx *ctx);

/* int8 / uint8 element i of p, and the float copy of n such values minus zp */
static inline int tdm_contrib_ld_q(tdm_dtype t, const void *p, int64_t i) {
    return t == TDM_INT8 ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}

/* Quantization as ONNX Runtime's MLAS does it: round half to even of v, plus zp, saturated
 * to the type's range (int8 or uint8). */
static inline int tdm_contrib_sat(tdm_dtype t, float v) {
    float lo = t == TDM_INT8 ? -128.0f : 0.0f, hi = t == TDM_INT8 ? 127.0f : 255.0f;
    v = v >= lo ? v : lo; /* NaN too */
    v = v <= hi ? v : hi;
    return (int)v;
}

#endif
