/* Fusion passes: rewrite standard ONNX patterns into tandem's fused operators
 * (src/ops/fused.h). Each pass keeps the model's numerics within the tolerances stated in
 * its unit test. */
#ifndef TDM_GRAPH_FUSE_H
#define TDM_GRAPH_FUSE_H

#include "graph/graph.h"

/* Runs every fusion pass once over g (nodes replaced are marked dead; the caller compacts
 * and re-infers shapes), then over the bodies of its If / Loop / Scan nodes at any depth
 * (each body compacted and its shapes inferred here; the CPU-only rewrites included, since
 * only the CPU runs control flow). *count receives the number of rewrites. */
tdm_status *tdm_graph_fuse(tdm_graph *g, int *count);

/* The blocked-layout pass (fuse_blocked.c): rewrites chains of convolutions, poolings and
 * element-wise ops to keep tensors channel-blocked in blocks of `block` (ops/fused.h;
 * or channels-last as `channels_last`, a tdm_channels_last, says; `threads`, the CPU
 * threads the plan runs on, takes part in that choice when the batch is known). Run
 * it after tdm_graph_fuse (and compaction) and only when the session's nodes will run on
 * the CPU backend (its kernels are the only ones for the blocked ops). Same contract as
 * tdm_graph_fuse. */
tdm_status *tdm_graph_fuse_blocked(tdm_graph *g, int64_t block, int channels_last, int threads,
                                   int *count);

/* Rewrites into ops only the CPU backend has (run only when the session's nodes will run on
 * the CPU alone, after tdm_graph_fuse): a decomposed tanh GELU left over by the MatMul and
 * Conv fusions becomes com.microsoft FastGelu (graph/fuse_matmul.c); a dilated 1-D
 * convolution's pads become a Pad in front of it, and a Transpose(0, 2, 1[, 3]) feeding a
 * convolution along one axis becomes one ConvNwc1d (graph/fuse_conv.c). Same contract as
 * tdm_graph_fuse. */
tdm_status *tdm_graph_fuse_cpu(tdm_graph *g, int *count);

/* The QDQ pass (fuse_qdq.c): DequantizeLinear -> op -> QuantizeLinear patterns of quantized
 * models become the integer operators QConv, QMatMul, QAdd, QMul, QLut, QGlobalAveragePool
 * (ops/fused.h), or the op on the 8-bit tensors. Run it before constant folding (which
 * would turn DQ(constant weights) into float weights). Same contract as tdm_graph_fuse. */
tdm_status *tdm_graph_fuse_qdq(tdm_graph *g, int *count);

/* MatMulNBits with constant weights -> tandem's MatMulNBitsPacked (graph/fuse_nbits.c,
 * layout in ops/nbits_pack.h): the weights repacked once, the originals freed where nothing
 * else reads them. Only for graphs whose nodes run on the CPU backend (its kernel is the only
 * one for the packed op). Same contract as tdm_graph_fuse. */
tdm_status *tdm_graph_pack_nbits(tdm_graph *g, int *count);

#endif
