/* Private to the unary kernel family (k_unary*.c): op codes, parameters and the float32
 * element loops shared by the float32, float16 and bfloat16 paths. */
#ifndef TDM_CPU_K_UNARY_H
#define TDM_CPU_K_UNARY_H

#include <stdint.h>

#include "backends/cpu/cpu_kernels.h"

typedef enum tdm_uop {
    TDM_U_ABS,
    TDM_U_NEG,
    TDM_U_RECIPROCAL,
    TDM_U_SQRT,
    TDM_U_EXP,
    TDM_U_LOG,
    TDM_U_ERF,
    TDM_U_SIN,
    TDM_U_COS,
    TDM_U_TAN,
    TDM_U_ASIN,
    TDM_U_ACOS,
    TDM_U_ATAN,
    TDM_U_SINH,
    TDM_U_COSH,
    TDM_U_ASINH,
    TDM_U_ACOSH,
    TDM_U_ATANH,
    TDM_U_CEIL,
    TDM_U_FLOOR,
    TDM_U_ROUND,
    TDM_U_SIGN,
    TDM_U_RELU,
    TDM_U_LEAKY_RELU,
    TDM_U_SIGMOID,
    TDM_U_TANH,
    TDM_U_HARD_SIGMOID,
    TDM_U_HARD_SWISH,
    TDM_U_ELU,
    TDM_U_SELU,
    TDM_U_CELU,
    TDM_U_SOFTPLUS,
    TDM_U_SOFTSIGN,
    TDM_U_THRESHOLDED_RELU,
    TDM_U_SHRINK,
    TDM_U_MISH,
    TDM_U_GELU,      /* exact: x * Phi(x) */
    TDM_U_GELU_TANH, /* tanh approximation */
    TDM_U_CLIP,
} tdm_uop;

/* An op with its attributes. Unused fields stay zero. */
typedef struct tdm_uparams {
    tdm_uop op;
    float alpha, beta, gamma; /* LeakyRelu/Elu/Selu/Celu/HardSigmoid/ThresholdedRelu */
    float lambd, bias;        /* Shrink */
    float lo, hi;             /* Clip bounds for the float32/float16/bfloat16 paths */
    double dlo, dhi;          /* Clip bounds for double */
    int64_t ilo, ihi;         /* Clip bounds for signed integers */
    uint64_t ulo, uhi;        /* Clip bounds for unsigned integers */
} tdm_uparams;

/* The float32 loops, y[i] = op(x[i]) for i in [0, n) (x and y must not overlap; serial), are
 * the device's unary_f32 variant (cpu_simd.h, k_unary_f32.c). */

/* Cast and CastLike: converts in[0] to out[0]'s dtype (k_unary_cast.c). */
tdm_status *tdm_unary_cast(tdm_kernel_ctx *ctx);

#endif
