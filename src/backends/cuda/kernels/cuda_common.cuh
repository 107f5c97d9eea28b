/* Private to the kernel .cu files: float conversions of the 16-bit types, launch geometry,
 * the launch-result helper and dtype dispatch. */
#ifndef TDM_BACKENDS_CUDA_KERNELS_CUDA_COMMON_CUH
#define TDM_BACKENDS_CUDA_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cuda/kernels/cuda_ops.h"

typedef __half tcu_half;
typedef __nv_bfloat16 tcu_bf16;

/* float <-> element conversions */
__device__ __forceinline__ float tcu_to_f(float v) { return v; }
__device__ __forceinline__ float tcu_to_f(double v) { return (float)v; }
__device__ __forceinline__ float tcu_to_f(tcu_half v) { return __half2float(v); }
__device__ __forceinline__ float tcu_to_f(tcu_bf16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T tcu_from_f(float v) { return (T)v; }
template <> __device__ __forceinline__ tcu_half tcu_from_f<tcu_half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ tcu_bf16 tcu_from_f<tcu_bf16>(float v) {
    return __float2bfloat16_rn(v);
}

#define TCU_THREADS 256
/* blocks for n items, one item per thread, capped (kernels loop over the rest) */
static inline unsigned tcu_blocks(int64_t n, int threads = TCU_THREADS) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65536) b = 65536;
    return (unsigned)b;
}

#define TCU_STREAM(s) ((cudaStream_t)(s))

/* grid-stride loop over [0, n) */
#define TCU_FOR(i, n)                                                                      \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

/* the result of the launch just made */
static inline int tcu_launched(void) { return (int)cudaGetLastError(); }

/* The launcher body LAUNCH(T) instantiated for the float types; `default` answers
 * TCU_E_DTYPE. Use: TCU_FLOAT_DISPATCH(dtype, LAUNCH). */
#define TCU_FLOAT_CASES(LAUNCH)                                                            \
    case TCU_F32: LAUNCH(float); break;                                                    \
    case TCU_F16: LAUNCH(tcu_half); break;                                                 \
    case TCU_BF16: LAUNCH(tcu_bf16); break;

/* Kernels are launched with a by-value copy of a descriptor struct. */

#endif
