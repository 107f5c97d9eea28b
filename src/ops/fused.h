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
 * QConv       inputs: QLinearConv's (x, x_scale, x_zero_point, w, w_scale, w_zero_point,
 *             y_scale, y_zero_point, B int32 optional); Conv's attributes plus
 *               qmin, qmax: ints (optional) — Y is clamped to [qmin, qmax] after the
 *                           requantisation (a Relu / Clip before the QuantizeLinear, exact:
 *                           quantizing is monotonic)
 *               x_nhwc, y_nhwc: ints (optional, 2-D only) — X / Y channels-last
 *                           [N, H, W, C] instead of NCHW (graph/fuse_qdq.c's int8 layout
 *                           pass writes them)
 *             Y = clamp(QLinearConv(...))
 * QConvTranspose inputs: QConv's, with W [C, M / group, k...] int8 (ConvTranspose's layout;
 *             w_scale per-tensor, or [M] when group is 1) and B int32 [M] optional;
 *             ConvTranspose's attributes plus qmin, qmax, x_nhwc, y_nhwc as QConv
 *             Y = clamp(round((ConvTranspose(x - x_zp, w) + B[m]) * x_scale * w_scale[m]
 *                 / y_scale) + y_zp)                  (the sum exact in int32)
 * QMatMul     inputs: QLinearMatMul's 8 (a, a_scale, a_zp, b, b_scale per-tensor or per
 *             column, b_zp, y_scale, y_zp) plus bias (int32 [N], optional, in units of
 *             a_scale * b_scale[n], added to the accumulator); attributes qmin, qmax as QConv
 * QAdd        inputs: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp (per-tensor);
 *             attributes qmin, qmax as QConv
 *             Y = clamp(round(((a - a_zp) a_scale + (b - b_zp) b_scale) / y_scale) + y_zp)
 *             (numpy broadcasting of a and b)
 * QMul        inputs and attributes as QAdd;
 *             Y = clamp(round(((a - a_zp) a_scale) ((b - b_zp) b_scale) / y_scale) + y_zp)
 *             (the float operations of DequantizeLinear -> Mul -> QuantizeLinear)
 * QLut        inputs: x (8-bit), table (8-bit constant [256]); Y[i] = table[byte of x[i]]
 *             (x's shape, the table's type): an 8-bit function of one 8-bit input
 * QGlobalAveragePool inputs: x, x_scale, x_zp, y_scale, y_zp (per-tensor, 8-bit x and y);
 *             attribute nhwc (int, optional): X channels-last [N, d1.., C] and Y [N, 1.., C]
 *             Y = clamp(round(mean over the spatial dims of (x - x_zp) x_scale / y_scale) + y_zp)
 * MaxPoolNhwc X [N, H, W, C] (8-bit) -> Y [N, OH, OW, C]: MaxPool's window with its
 *             attributes (read as of opset src_opset), no Indices
 * These eight never appear in a model file either: graph/fuse_qdq.c makes them from
 * DequantizeLinear -> op -> QuantizeLinear patterns.
 *
 * ConvNwc1d   inputs: X [N, L, C] or [N, L, C, D] (a sequence, channels last), W [O, C, k]
 *             or [O, C, k, 1] (Conv's weights, X's rank), B [O] (optional)
 *             attributes: pads (ints {begin, end} along L; default none),
 *               activation (string: "" or "GeluTanh", applied last; default "")
 *             Y [N, O, L'] or [N, O, L', D], L' = L + begin + end - k + 1:
 *             Y[n, o, p(, d)] = B[o] + sum over t < k, c < C of
 *                               W[o, c, t] X[n, p + t - begin, c(, d)]
 *             (X zero outside [0, L)): Conv(Transpose(X, perm 0, 2, 1[, 3]), W, B) with
 *             stride, dilation and group 1 (graph/fuse_conv.c makes it; CPU alone; the fast
 *             path is D = 1)
 *
 * Attention   inputs: Q [B,H,S,D], K [B,H,T,D], V [B,H,T,Dv], mask (optional, additive,
 *             broadcastable to [B,H,S,T])
 *             attributes: scale (float, default 1/sqrt(D))
 *             Y [B,H,S,Dv] = Softmax(Q·K^T · scale + mask, last axis) · V
 */
#ifndef TDM_OPS_FUSED_H
#define TDM_OPS_FUSED_H

/* Only the graph passes make nodes of this domain: the loader refuses a model that names it
 * (src/onnx/loader.c), since the kernels rely on what the passes checked */
#define TDM_FUSED_DOMAIN "tandem"

/* Channel-blocked layout operators (src/graph/fuse_blocked.c makes them; shape rules in
 * src/ops/fused_layout.c). A blocked tensor is a float tensor whose shape spells the layout
 * out: plain [N, C, d1..dk] <-> blocked [N, ceil(C/B), d1..dk, B]; channel c sits at
 * [n, c/B, ..., c%B] and the padding channels (c >= C) hold zeros where ToBlocked or a
 * convolution wrote them (other producers may leave any finite value there).
 * The attribute block is B (8 or 16 in practice), or TDM_BLOCK_CHANNELS_LAST: then each
 * tensor's one block holds all its C channels, [N, 1, d1..dk, C], which is channels-last
 * memory (NHWC) without padding; B is then per tensor, so an op whose input and output
 * differ in channels (BlockedConv) has different blocks on each side.
 *
 * ToBlocked   X plain (rank >= 3) -> Y blocked; attribute block (int).
 * FromBlocked X blocked -> Y plain; attributes block, channels (C).
 * BlockedConv inputs X (blocked, or plain when its rank is W's), W, B, Z (optional, blocked
 *             like Y); FusedConv's attributes plus block; Y blocked.
 * BlockedPool X blocked -> Y blocked; attributes op ("MaxPool", "AveragePool",
 *             "GlobalAveragePool", "GlobalMaxPool"), that op's attributes read as of opset
 *             src_opset, channels, block.
 * BlockedConcat X1..Xk blocked -> Y blocked, concatenated on the channels; attributes block,
 *             channels (ints: each input's channel count). For counts that are not multiples
 *             of the block (a Concat of whole blocks stays a Concat on the block axis); Y's
 *             padding channels are zero. */
#include "ops/op.h"

/* The block attribute of the channels-last form (one block of all C channels). */
#define TDM_BLOCK_CHANNELS_LAST (-1)

/* Where the blocked-layout pass takes the channels-last form (a device's answer,
 * tdm_device_iface.channels_last; tdm_graph_fuse_blocked). */
typedef enum tdm_channels_last {
    TDM_CL_NEVER = 0,  /* channel blocks only */
    TDM_CL_SUITED = 1, /* where the graph suits it (the pass judges) */
    TDM_CL_ALWAYS = 2, /* wherever there are convolutions */
} tdm_channels_last;

/* TDM_CL_SUITED keeps channel blocks from this many images per thread on (oneDNN's
 * channel-blocked kernels gain from a batch, its channels-last ones do not): in the pass
 * where the batch is known, else in the latency strategy's second plan (a dynamic batch). */
#define TDM_CL_MAX_IMAGES_PER_THREAD 8

tdm_status *tdm_fused_infer_to_blocked(tdm_infer_ctx *ctx);
tdm_status *tdm_fused_infer_from_blocked(tdm_infer_ctx *ctx);
tdm_status *tdm_fused_infer_blocked_conv(tdm_infer_ctx *ctx);
tdm_status *tdm_fused_infer_blocked_pool(tdm_infer_ctx *ctx);
tdm_status *tdm_fused_infer_blocked_concat(tdm_infer_ctx *ctx);
/* ops/misc_quant.c, shared with QConv / QMatMul */
tdm_status *tdm_misc_infer_qlinear_conv(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_qlinear_matmul(tdm_infer_ctx *c);
/* ops/nn_conv.c, shared with QConvTranspose */
tdm_status *tdm_nn_infer_conv_transpose(tdm_infer_ctx *ctx);

#endif
