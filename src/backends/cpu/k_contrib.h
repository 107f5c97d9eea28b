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

/* Quantization as ONNX Runtime's MLAS does it: round half to even of v, plus zp, saturated
 * to the type's range (int8 or uint8). */
static inline int tdm_contrib_sat(tdm_dtype t, float v) {
    float lo = t == TDM_INT8 ? -128.0f : 0.0f, hi = t == TDM_INT8 ? 127.0f : 255.0f;
    v = v < lo ? lo : v > hi ? hi : v;
    return (int)v;
}

#endif
