/* CPU kernels of the shape family: helpers shared by k_shape*.c and the kernel entry points
 * that k_shape.c puts in the family table. */
#ifndef TDM_CPU_K_SHAPE_H
#define TDM_CPU_K_SHAPE_H

#include "backends/cpu/cpu_kernels.h"
#include "ops/shape_impl.h"

/* ---- helpers (k_shape_util.c) ---- */

/* Gathers a strided view into contiguous memory: for every index (i_0..i_{rank-1}) of
 * `dims` in row-major order, the next element of `dst` is src[sum_k i_k * sstrides[k]]
 * (strides in elements, may be 0 or negative). `es` is the element size in bytes. Uses the
 * pool for large copies. */
void tdm_kshape_strided_copy(tdm_threadpool *pool, size_t es, int rank, const int64_t *dims,
                             const void *src, const int64_t *sstrides, void *dst);
/* For STRING outputs whose pointers were moved from inputs (or left NULL): replaces each
 * entry with a copy owned by the output (NULL becomes ""). On failure the entries not yet
 * copied are set to NULL and an out-of-memory status is returned. No-op for other types. */
tdm_status *tdm_kshape_own_strings(tdm_tensor *out);
/* Writes v converted to dtype `dt` at dst (bool: v != 0). */
void tdm_kshape_store(tdm_dtype dt, void *dst, double v);
/* Fills n elements of `es` bytes with a copy of the element at `val`. */
void tdm_kshape_fill(void *dst, int64_t n, const void *val, size_t es);
/* Copies a tensor's elements into another of the same dtype and count (strings by pointer;
 * call tdm_kshape_own_strings after). */
void tdm_kshape_copy_data(tdm_tensor *dst, const tdm_tensor *src);
/* Normalises index v (negative wraps once) against an axis of size n; error naming the node
 * when out of range. */
tdm_status *tdm_kshape_norm_index(const tdm_node *node, int64_t v, int64_t n, int64_t *out);
/* Reads element i of an integer index tensor (int32 or int64). */
static inline int64_t tdm_kshape_index_at(const tdm_tensor *t, int64_t i) {
    return t->dtype == TDM_INT32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* ---- kernels ---- */

/* k_shape_move.c */
tdm_status *tdm_kshape_transpose(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_concat(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_split(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_slice(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_pad(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_depthtospace(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_spacetodepth(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_expand(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_tile(tdm_kernel_ctx *ctx);
/* k_shape_index.c */
tdm_status *tdm_kshape_gather(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_gather_elements(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_gather_nd(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_scatter_nd(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_scatter_elements(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_onehot(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_compress(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_nonzero(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_trilu(tdm_kernel_ctx *ctx);
tdm_status *tdm_kshape_reverse_sequence(tdm_kernel_ctx *ctx);

#endif
