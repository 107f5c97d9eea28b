/* Shared by the kernel table entries of tandem's own CUDA kernels (src/backends/cuda/
 * k_ops*.c): device pointers of inputs and outputs, launcher results as statuses, and
 * the dtype masks the tables use. C11; the launchers are in kernels/cuda_ops.h.
 *
 * Every run() reads shapes and attributes on the host, then calls launchers on the
 * device's compute stream (cuda_device.h). Gather waits for the device to report an
 * out-of-range index (except while the stream is captured into a CUDA graph: then such
 * rows are zeros); small integer inputs in device memory (Slice starts, axes, pads, Resize
 * scales) are read with cuda_read_ints / kops_read_floats, which wait too. */
#ifndef TDM_BACKENDS_CUDA_KERNELS_K_OPS_H
#define TDM_BACKENDS_CUDA_KERNELS_K_OPS_H

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/kernels/cuda_ops.h"
#include "ops/op.h"

/* dtype masks of the tables */
#define KOPS_F (TDM_T(TDM_FLOAT) | TDM_T(TDM_FLOAT16) | TDM_T(TDM_BFLOAT16))
#define KOPS_I (TDM_T(TDM_INT32) | TDM_T(TDM_INT64))
#define KOPS_B TDM_T(TDM_BOOL)
/* element sizes 1, 2, 4, 8: what the data-movement kernels move */
#define KOPS_ANY                                                                         \
    (KOPS_F | KOPS_I | KOPS_B | TDM_T(TDM_DOUBLE) | TDM_T(TDM_INT8) | TDM_T(TDM_UINT8) |  \
     TDM_T(TDM_INT16) | TDM_T(TDM_UINT16) | TDM_T(TDM_UINT32) | TDM_T(TDM_UINT64))

/* The compute stream of the device running ctx (as the launchers take it). */
static inline void *kops_stream(const tdm_kernel_ctx *ctx) {
    return (void *)cuda_ctx_device(ctx)->stream;
}

/* Device pointer of input i (NULL for an omitted input) / of output i. Errors when the
 * tensor is not in this device's memory (an empty tensor passes with its pointer). */
tdm_status *kops_in(const tdm_kernel_ctx *ctx, int i, const void **p);
tdm_status *kops_out(const tdm_kernel_ctx *ctx, int i, void **p);
/* A launcher's result as a status naming the node (NULL for 0). */
tdm_status *kops_status(const tdm_kernel_ctx *ctx, int err, const char *what);
/* Device-to-device copy of `bytes` on the compute stream. */
tdm_status *kops_copy(const tdm_kernel_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Reads up to `max` float values of input i (float32, float16 or float64; host or device
 * memory) into vals, *count set. */
tdm_status *kops_read_floats(const tdm_kernel_ctx *ctx, int i, const char *what, float *vals,
                             int max, int *count);
/* Element size of a tensor's dtype for the data-movement kernels (1, 2, 4 or 8), or an
 * error naming the node. */
tdm_status *kops_elem_size(const tdm_kernel_ctx *ctx, const tdm_tensor *t, int *size);

#endif
