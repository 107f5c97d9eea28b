/* tandem's internal fused operators (domain "tandem"). Graph passes (src/graph/fuse_*.c)
 * rewrite standard ONNX patterns into them; the CPU backend runs them with oneDNN post-ops
 * (k_dnnl_*.c) or with the reference kernels (k_fused.c). They never appear in a model file.
 *
 * FusedConv   inputs: X, W, B (optional), Z (optional, same shape as Y)
 *             attributes: every Conv attribute (auto_pad, dilations, group, kernel_shape,
 *             pads, strides) plus
 *               activation: string, one of "" (none), "Relu", "LeakyRelu", "Clip",
 *                           "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu" (erf
 *                           form), "GeluTanh", "Swish" (x * Sigmoid(x), SiLU)
 *               activation_params: floats — LeakyRelu {alpha}; Clip {min, max};
 *                           HardSigmoid {alpha, beta}
 *               activation_affine: floats {scale, shift} (optional, with an activation)
 *             Y = activation(Conv(X, W) + B + Z)       (Z is added before the activation)
 *             Y = scale * Y + shift                    (with activation_affine)
 *
 * FusedMatMul inputs: A, B, bias (optional, 1-D of size N, broadcast over the last axis)
 *             attributes: activation: "", "Relu", "Gelu" (erf form), "GeluTanh"
 *             Y = activation(MatMul(A, B) + bias)      (MatMul's numpy batching rules)
 *
 * Attention   inputs: Q [B,H,S,D], K [B,H,T,D], V [B,H,T,Dv], mask (optional, additive,
 *             broadcastable to [B,H,S,T])
 *             attributes: scale (float, default 1/sqrt(D))
 *             Y [B,H,S,Dv] = Softmax(Q·K^T · scale + mask, last axis) · V
 */
#ifndef TDM_OPS_FUSED_H
#define TDM_OPS_FUSED_H

#define TDM_FUSED_DOMAIN "tandem"

/* Channel-blocked layout operators (src/graph/fuse_blocked.c makes them; shape rules in
 * src/ops/fused_layout.c). A blocked tensor is a float tensor whose shape spells the layout
 * out: plain [N, C, d1..dk] <-> blocked [N, ceil(C/B), d1..dk, B]; channel c sits at
 * [n, c/B, ..., c%B] and the padding channels (c >= C) hold zeros where ToBlocked or a
 * convolution wrote them (other producers may leave any finite value there).
 *
 * ToBlocked   X plain (rank >= 3) -> Y blocked; attribute block (int).
 * FromBlocked X blocked -> Y plain; attributes block, channels (C).
 * BlockedConv inputs X (blocked, or plain when its rank is W's), W, B, Z (optional, blocked
 *             like Y); FusedConv's attributes plus block; Y blocked.
 * BlockedPool X blocked -> Y blocked; attributes op ("MaxPool", "AveragePool",
 *             "GlobalAveragePool", "GlobalMaxPool"), that op's attributes read as of opset
 *             src_opset, channels, block. */
#include "ops/op.h"

tdm_status *tdm_fused_infer_to_blocked(tdm_infer_ctx *ctx);
tdm_status *tdm_fused_infer_from_blocked(tdm_infer_ctx *ctx);
tdm_status *tdm_fused_infer_blocked_conv(tdm_infer_ctx *ctx);
tdm_status *tdm_fused_infer_blocked_pool(tdm_infer_ctx *ctx);

#endif
