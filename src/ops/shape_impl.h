/* Shape family internals shared by the schema files (ops/shape*.c) and the CPU kernels
 * (backends/cpu/k_shape*.c): shape functions and the parameter plans that both the shape
 * function and the kernel need (so that the two can never disagree). */
#ifndef TDM_OPS_SHAPE_IMPL_H
#define TDM_OPS_SHAPE_IMPL_H

#include "ops/op.h"

/* shape_layout.c */
tdm_status *tdm_shape_infer_transpose(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_concat(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_split(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_slice(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_pad(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_depthtospace(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_spacetodepth(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_expand(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_tile(tdm_infer_ctx *c);
/* shape_index.c */
tdm_status *tdm_shape_infer_gather(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_gather_elements(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_gather_nd(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_scatter(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_onehot(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_compress(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_nonzero(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_trilu(tdm_infer_ctx *c);
tdm_status *tdm_shape_infer_reverse_sequence(tdm_infer_ctx *c);

/* Transpose: the permutation (attribute, default reversed), validated against rank. */
tdm_status *tdm_shape_transpose_perm(const tdm_node *node, int rank, int *perm);

/* Shape: the range [start, end) of dims returned (opset 15 start/end attributes). */
void tdm_shape_shape_range(const tdm_node *node, int opset, int rank, int *start, int *end);

/* Range: element count; error when delta is 0, a value is NaN or the count is too large. */
tdm_status *tdm_shape_range_count(const tdm_node *node, const tdm_tensor *start,
                                  const tdm_tensor *limit, const tdm_tensor *delta, int64_t *n);

/* Slice: args[0..3] = starts, ends, axes, steps tensors (NULL = absent; ignored before
 * opset 10, where the attributes are read). For an input of `rank` dims (a dim may be
 * TDM_DIM_UNKNOWN), fills per dim the first index and the step, and the output dims
 * (unknown where the input dim is). */
tdm_status *tdm_shape_slice_plan(const tdm_node *node, int opset, const tdm_tensor *const *args,
                                 int rank, const int64_t *dims, int64_t *start, int64_t *step,
                                 int64_t *out_dims);

enum { TDM_PAD_CONSTANT, TDM_PAD_REFLECT, TDM_PAD_EDGE, TDM_PAD_WRAP };
/* Pad: the mode attribute. */
tdm_status *tdm_shape_pad_mode(const tdm_node *node, int *mode);
/* Pad: begin/end pads per dim (attributes before opset 11; `pads` and `axes` inputs after,
 * NULL = absent). */
tdm_status *tdm_shape_pad_plan(const tdm_node *node, int opset, const tdm_tensor *pads,
                               const tdm_tensor *axes, int rank, int64_t *begin, int64_t *end);

#endif
