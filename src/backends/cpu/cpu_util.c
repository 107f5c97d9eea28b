#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"

void tdm_strides(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

void tdm_broadcast_strides(int in_rank, const int64_t *in_dims, int out_rank,
                           const int64_t *out_dims, int64_t *strides) {
    int64_t s = 1;
    int off = out_rank - in_rank;
    for (int i = out_rank - 1; i >= 0; i--) {
        int j = i - off;
        if (j < 0 || in_dims[j] == 1) {
            strides[i] = 0;
        } else {
            strides[i] = s;
        }
        if (j >= 0) s *= in_dims[j];
    }
    (void)out_dims;
}

void *tdm_kscratch(tdm_kernel_ctx *ctx, size_t bytes) { return tdm_alloc(ctx->alloc, bytes); }
