/* CPU kernels: misc family. The kernels live in k_misc_*.c; this file holds the family's
 * table and a small conversion helper they share. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "ops/fused.h"

/* k_misc_resize.c */
tdm_status *tdm_misc_resize_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_upsample_run(tdm_kernel_ctx *ctx);
/* k_misc_detect.c */
tdm_status *tdm_misc_nms_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_roialign_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_gridsample_run(tdm_kernel_ctx *ctx);
/* k_misc_linalg.c */
tdm_status *tdm_misc_unique_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_det_run(tdm_kernel_ctx *ctx);
/* k_misc_signal.c */
tdm_status *tdm_misc_hann_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_hamming_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_blackman_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_dft_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_stft_run(tdm_kernel_ctx *ctx);
/* k_misc_quant.c */
tdm_status *tdm_misc_quantize_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_dequantize_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_dynquant_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_matmul_integer_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qlinear_matmul_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_conv_integer_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qlinear_conv_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qconv_transpose_run(tdm_kernel_ctx *ctx); /* k_misc_qdeconv.c */
tdm_status *tdm_misc_qadd_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qmul_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qgap_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qlut_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_maxpool_nhwc_run(tdm_kernel_ctx *ctx);

void tdm_misc_store_f64(tdm_dtype dt, double v, void *buf);

/* Writes value v as one element of dtype dt into buf (rounded and saturated for ints). */
void tdm_misc_store_f64(tdm_dtype dt, double v, void *buf) {
    double rv = nearbyint(v);
    if (rv != rv) rv = 0; /* NaN to an integer type */
#define SAT(T, lo, hi) { T t_ = (T)(rv < (lo) ? (lo) : rv > (hi) ? (hi) : rv); memcpy(buf, &t_, sizeof t_); } break
    switch (dt) {
    case TDM_FLOAT: { float f = (float)v; memcpy(buf, &f, 4); } break;
    case TDM_DOUBLE: memcpy(buf, &v, 8); break;
    case TDM_FLOAT16: { uint16_t h = tdm_f32_to_f16((float)v); memcpy(buf, &h, 2); } break;
    case TDM_BFLOAT16: { uint16_t h = tdm_f32_to_bf16((float)v); memcpy(buf, &h, 2); } break;
    case TDM_INT8: SAT(int8_t, -128.0, 127.0);
    case TDM_UINT8: SAT(uint8_t, 0.0, 255.0);
    case TDM_INT16: SAT(int16_t, -32768.0, 32767.0);
    case TDM_UINT16: SAT(uint16_t, 0.0, 65535.0);
    case TDM_INT32: SAT(int32_t, -2147483648.0, 2147483647.0);
    case TDM_UINT32: SAT(uint32_t, 0.0, 4294967295.0);
    case TDM_INT64: SAT(int64_t, -9223372036854775808.0, 9223372036854774784.0);
    case TDM_UINT64: SAT(uint64_t, 0.0, 18446744073709549568.0);
    case TDM_BOOL: { uint8_t t_ = v != 0; memcpy(buf, &t_, 1); } break;
    default: break;
    }
#undef SAT
}


#define T_IDX (TDM_T(TDM_INT32) | TDM_T(TDM_INT64))
#define T_FD (TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE))
#define T_Q8 (TDM_T(TDM_UINT8) | TDM_T(TDM_INT8))
#define T_QIN (TDM_T(TDM_FLOAT) | TDM_T(TDM_FLOAT16) | TDM_T(TDM_BFLOAT16) | TDM_T(TDM_DOUBLE) | \
               TDM_T(TDM_INT32))
#define T_DQIN (T_Q8 | TDM_T(TDM_INT16) | TDM_T(TDM_UINT16) | TDM_T(TDM_INT32))

const tdm_kernel_def tdm_cpu_kernels_misc[] = {
    {"", "Resize", 10, 0, 0, TDM_T_NUMERIC, tdm_misc_resize_run},
    {"", "Upsample", 7, 0, 0, TDM_T_NUMERIC, tdm_misc_upsample_run},
    {"", "NonMaxSuppression", 10, 0, 0, TDM_T_FLOATS, tdm_misc_nms_run},
    {"", "RoiAlign", 10, 0, 0, T_FD, tdm_misc_roialign_run},
    {"", "GridSample", 16, 0, 0, T_FD, tdm_misc_gridsample_run},
    {"", "Unique", 11, 0, 0, TDM_T_ALL, tdm_misc_unique_run},
    {"", "Det", 11, 0, 0, TDM_T_FLOATS, tdm_misc_det_run},
    {"", "HannWindow", 17, 0, 0, T_IDX, tdm_misc_hann_run},
    {"", "HammingWindow", 17, 0, 0, T_IDX, tdm_misc_hamming_run},
    {"", "BlackmanWindow", 17, 0, 0, T_IDX, tdm_misc_blackman_run},
    {"", "DFT", 17, 0, 0, TDM_T_FLOATS, tdm_misc_dft_run},
    {"", "STFT", 17, 0, 0, TDM_T_FLOATS, tdm_misc_stft_run},
    {"", "QuantizeLinear", 10, 0, 0, T_QIN, tdm_misc_quantize_run},
    {"", "DequantizeLinear", 10, 0, 0, T_DQIN, tdm_misc_dequantize_run},
    {"", "DynamicQuantizeLinear", 11, 0, 0, TDM_T(TDM_FLOAT), tdm_misc_dynquant_run},
    {"", "MatMulInteger", 10, 0, 0, T_Q8, tdm_misc_matmul_integer_run},
    {"", "QLinearMatMul", 10, 0, 0, T_Q8, tdm_misc_qlinear_matmul_run},
    {"", "ConvInteger", 10, 0, 0, T_Q8, tdm_misc_conv_integer_run},
    {"", "QLinearConv", 10, 0, 0, T_Q8, tdm_misc_qlinear_conv_run},
    {TDM_FUSED_DOMAIN, "QConv", 1, 0, 0, T_Q8, tdm_misc_qlinear_conv_run},
    {TDM_FUSED_DOMAIN, "QConvTranspose", 1, 0, 0, T_Q8, tdm_misc_qconv_transpose_run},
    {TDM_FUSED_DOMAIN, "QMatMul", 1, 0, 0, T_Q8, tdm_misc_qlinear_matmul_run},
    {TDM_FUSED_DOMAIN, "QAdd", 1, 0, 0, T_Q8, tdm_misc_qadd_run},
    {TDM_FUSED_DOMAIN, "QMul", 1, 0, 0, T_Q8, tdm_misc_qmul_run},
    {TDM_FUSED_DOMAIN, "QLut", 1, 0, 0, T_Q8, tdm_misc_qlut_run},
    {TDM_FUSED_DOMAIN, "MaxPoolNhwc", 1, 0, 0, T_Q8, tdm_misc_maxpool_nhwc_run},
    {TDM_FUSED_DOMAIN, "QGlobalAveragePool", 1, 0, 0, T_Q8, tdm_misc_qgap_run},
};
const int tdm_cpu_kernels_misc_count =
    (int)(sizeof tdm_cpu_kernels_misc / sizeof tdm_cpu_kernels_misc[0]);
