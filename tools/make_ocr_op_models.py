#!/usr/bin/env python3
"""Tests of the CPU paths the PP-OCR models take (issue 16): small models on random data with
ONNX Runtime's outputs as the reference, in the node-test layout
(tests/models_ocr/NAME/model.onnx + test_data_set_0/{input,output}_N.pb).

ConvTranspose's row-tiled kernel (src/backends/cpu/k_nn_conv.c).

Cases: the PP-OCR DB head's 2x2 stride-2 upsampling (every output written once: the "exact"
path, tiles in parallel), strides equal to kernels of other sizes and groups, overlapping
kernels with pads and output padding (tiles one after the other), dilations, 1-D, output
padding that leaves the last row to the bias alone, rows too wide for one tile; and an FPN
step (Conv -> nearest Resize -> Add -> Conv) whose Resize runs on the channel-blocked tensor;
Concats of blocked tensors whose channel counts are not multiples of the block (BlockedConcat;
the padding lanes of a Sigmoid's output are not zero); Softmax over long last-axis rows (a recognizer's classes; the SIMD row kernel) with tails; YOLOv8's C2f block (Conv -> Split
on the channels -> bottleneck Convs + residual Add -> Concat -> Conv), whose Split runs on the
channel-blocked tensor when the halves are whole blocks (sizes as an input, an attribute, an
even split, opset 18's num_outputs; and halves that are not whole blocks, left plain); large
Concats and Splits of one image (outer 1), whose copies run in 32 KiB pieces on every thread
(pieces that start and end inside a part), and blocking / unblocking copies of odd sizes;
Softmax over an axis that is not the last (YOLOv8's distribution over 16 bins), with tails;
a convolution whose blocked input holds fewer channels than an AVX-512 block (unblocked first);
squeeze-excitation products on blocked tensors and other broadcasts of one input along the dim
above short rows (the broadcast engine's tiles).

Deterministic (fixed seed). Usage: tools/make_ocr_op_models.py [OUT_DIR] (default tests/models_ocr)"""
import os
import sys

import numpy as np
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_contrib_models import ROOT, save  # noqa: E402

F32 = np.float32


def case(out, name, x_shape, m, k, rs, bias=True, group=1, **attrs):
    c = x_shape[1]
    w = (rs.randn(c, m // group, *k) * 0.2).astype(F32)
    x = rs.randn(*x_shape).astype(F32)
    consts = {"w": w}
    ins = ["x", "w"]
    if bias:
        consts["b"] = rs.randn(m).astype(F32)
        ins.append("b")
    node = helper.make_node("ConvTranspose", ins, ["y"], kernel_shape=list(k), group=group, **attrs)
    save(out, name, node, {"x": x}, consts, opset=17)


def fpn(out, name, rs, c, ctm, nearest_mode, scale):
    """Conv -> Resize (nearest) -> Add(Conv of the larger map) -> Conv: the blocked-layout pass
    takes the Resize on the channel-blocked tensor (src/graph/fuse_blocked.c)."""
    h, w = 5, 7
    x1 = rs.randn(1, 8, h, w).astype(F32)
    x2 = rs.randn(1, 8, h * scale, w * scale).astype(F32)
    consts = {"w1": (rs.randn(c, 8, 1, 1) * 0.3).astype(F32), "w2": (rs.randn(c, 8, 3, 3) * 0.2).astype(F32),
              "w3": (rs.randn(c, c, 3, 3) * 0.2).astype(F32), "roi": np.zeros(0, F32),
              "sc": np.array([1, 1, scale, scale], F32)}
    nodes = [helper.make_node("Conv", ["x1", "w1"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Resize", ["ar", "roi", "sc"], ["up"], mode="nearest",
                              coordinate_transformation_mode=ctm, nearest_mode=nearest_mode),
             helper.make_node("Conv", ["x2", "w2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["up", "b"], ["s"]),
             helper.make_node("Conv", ["s", "w3"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    save(out, name, nodes, {"x1": x1, "x2": x2}, consts, opset=13)


def concat(out, name, rs, chans, n=1, after_relu=False):
    """Convs -> Concat on the channels -> Conv: with channel counts that are not multiples of
    the block, the blocked-layout pass makes a BlockedConcat (src/graph/fuse_blocked.c)."""
    x = rs.randn(n, 6, 9, 11).astype(F32)
    consts, nodes, cat = {}, [], []
    for k, c in enumerate(chans):
        consts[f"w{k}"] = (rs.randn(c, 6, 3, 3) * 0.3).astype(F32)
        nodes.append(helper.make_node("Conv", ["x", f"w{k}"], [f"c{k}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        if after_relu:
            nodes.append(helper.make_node("Sigmoid", [f"c{k}"], [f"s{k}"]))
        cat.append(f"s{k}" if after_relu else f"c{k}")
    nodes.append(helper.make_node("Concat", cat, ["cat"], axis=1))
    consts["wy"] = (rs.randn(7, sum(chans), 3, 3) * 0.2).astype(F32)
    nodes.append(helper.make_node("Conv", ["cat", "wy"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    save(out, name, nodes, {"x": x}, consts, opset=13)


def add_broadcast(out, name, rs, c):
    """Conv [1, c, 1, 7] + Conv [1, c, 5, 7] -> Conv: an Add of blocked tensors with the same
    channels whose H broadcasts (the blocked pass converts it; N, H, W broadcast alike)."""
    x1 = rs.randn(1, 8, 1, 7).astype(F32)
    x2 = rs.randn(1, 8, 5, 7).astype(F32)
    consts = {"w1": (rs.randn(c, 8, 1, 1) * 0.3).astype(F32), "w2": (rs.randn(c, 8, 3, 3) * 0.2).astype(F32),
              "w3": (rs.randn(5, c, 3, 3) * 0.2).astype(F32)}
    nodes = [helper.make_node("Conv", ["x1", "w1"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x2", "w2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["a", "b"], ["s"]),
             helper.make_node("Conv", ["s", "w3"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    save(out, name, nodes, {"x1": x1, "x2": x2}, consts, opset=13)


def softmax(out, name, rs, shape, axis, opset):
    x = (rs.randn(*shape) * 4).astype(F32)
    save(out, name, helper.make_node("Softmax", ["x"], ["y"], axis=axis), {"x": x}, opset=opset)


def c2f(out, name, rs, c, opset, form, n=1, hw=(9, 13)):
    """Conv -> Sigmoid -> Split(c, c) -> Conv -> Conv -> Add(half 1) -> Concat(half 0, half 1,
    bottleneck) -> Conv: the blocked pass splits the blocked tensor when c is a whole number of
    blocks (src/graph/fuse_blocked.c). form: how Split gets its sizes."""
    x = rs.randn(n, 5, *hw).astype(F32)
    consts = {"w1": (rs.randn(2 * c, 5, 1, 1) * 0.4).astype(F32),
              "wa": (rs.randn(c, c, 3, 3) * 0.15).astype(F32),
              "wb": (rs.randn(c, c, 3, 3) * 0.15).astype(F32),
              "wy": (rs.randn(6, 3 * c, 1, 1) * 0.2).astype(F32), "by": rs.randn(6).astype(F32)}
    split_in, attrs = ["a"], {"axis": 1 if form != "neg_axis" else -3}
    if form in ("input", "neg_axis"):
        consts["sp"] = np.array([c, c], np.int64)
        split_in.append("sp")
    elif form == "attr":
        attrs["split"] = [c, c]
    elif form == "num_outputs":
        attrs["num_outputs"] = 2
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a0"], kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["a0"], ["a"]),
             helper.make_node("Split", split_in, ["h0", "h1"], **attrs),
             helper.make_node("Conv", ["h1", "wa"], ["m0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["m0"], ["m1"]),
             helper.make_node("Conv", ["m1", "wb"], ["m2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["h1", "m2"], ["m"]),
             helper.make_node("Concat", ["h0", "h1", "m"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wy", "by"], ["y"], kernel_shape=[1, 1])]
    save(out, name, nodes, {"x": x}, consts, opset=opset)


def big_concat_split(out, name, rs, shape, chans, axis=1):
    """Split(x) into `chans` along `axis` -> Relu on one part -> Concat in another order: copies
    larger than a 32 KiB piece, with parts that are not whole pieces."""
    x = rs.randn(*shape).astype(F32)
    outs = [f"p{k}" for k in range(len(chans))]
    nodes = [helper.make_node("Split", ["x", "sp"], outs, axis=axis),
             helper.make_node("Relu", ["p0"], ["r0"]),
             helper.make_node("Concat", outs[:0:-1] + ["r0", "x"], ["y"], axis=axis)]
    save(out, name, nodes, {"x": x}, {"sp": np.array(chans, np.int64)}, opset=13)


def block_roundtrip(out, name, rs, shape, c):
    """Conv -> Sigmoid -> graph output (an unblocking copy of c channels on shape's H x W) and
    -> Conv: blocking and unblocking copies with tails of channels and pixels."""
    x = rs.randn(*shape).astype(F32)
    consts = {"w1": (rs.randn(c, shape[1], 3, 3) * 0.3).astype(F32),
              "w2": (rs.randn(3, c, 1, 1) * 0.3).astype(F32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Conv", ["s", "w2"], ["y"], kernel_shape=[1, 1]),
             helper.make_node("Mul", ["s", "s"], ["z"])]
    save(out, name, nodes, {"x": x}, consts, opset=13)


def stem_12(out, name, rs, n, hw):
    """Conv(5 -> 12) -> Relu -> Conv(12 -> 24, 2x2) -> Relu -> Conv: PP-HGNetV2's stem, whose
    second convolution reads 12 channels, fewer than an AVX-512 block: oneDNN offers only its
    reference kernel for that blocked input, so the kernel unblocks X first."""
    x = rs.randn(n, 5, *hw).astype(F32)
    consts = {"w1": (rs.randn(12, 5, 3, 3) * 0.3).astype(F32), "b1": rs.randn(12).astype(F32),
              "w2": (rs.randn(24, 12, 2, 2) * 0.3).astype(F32),
              "w3": (rs.randn(7, 24, 3, 3) * 0.2).astype(F32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["b"], kernel_shape=[2, 2]),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "w3"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    save(out, name, nodes, {"x": x}, consts, opset=13)


def se_block(out, name, rs, c, hw, op="Mul", rep_first=False):
    """A squeeze-excitation product on channel-blocked tensors: Conv -> a; GlobalAveragePool ->
    1x1 Convs -> HardSigmoid -> s [1, c, 1, 1]; op(a, s) (or op(s, a)) -> Conv. The blocked
    product repeats s's 16 lanes along the pixels (the broadcast engine's tiled rows)."""
    x = rs.randn(1, 8, *hw).astype(F32)
    consts = {"w1": (rs.randn(c, 8, 3, 3) * 0.2).astype(F32), "w2": (rs.randn(8, c, 1, 1) * 0.3).astype(F32),
              "w3": (rs.randn(c, 8, 1, 1) * 0.3).astype(F32), "w4": (rs.randn(6, c, 1, 1) * 0.2).astype(F32)}
    ab = ["s", "a"] if rep_first else ["a", "s"]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["a"], ["g"]),
             helper.make_node("Conv", ["g", "w2"], ["g1"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["g1"], ["g2"]),
             helper.make_node("Conv", ["g2", "w3"], ["g3"], kernel_shape=[1, 1]),
             helper.make_node("HardSigmoid", ["g3"], ["s"], alpha=1.0 / 6, beta=0.5),
             helper.make_node(op, ab, ["p"]),
             helper.make_node("Conv", ["p", "w4"], ["y"], kernel_shape=[1, 1])]
    save(out, name, nodes, {"x": x}, consts, opset=13)


def bcast_rows(out, name, rs, op, a_shape, b_shape, dtype=F32):
    """op(a, b) where one input repeats along the dim above short inner rows (the broadcast
    engine's tiled path: several tiles, a last partial tile, both operand orders)."""
    if np.issubdtype(dtype, np.integer):
        a = rs.randint(-50, 50, size=a_shape).astype(dtype)
        b = rs.randint(1, 50, size=b_shape).astype(dtype)
    else:
        a, b = rs.randn(*a_shape).astype(dtype), rs.randn(*b_shape).astype(dtype)
    save(out, name, helper.make_node(op, ["a", "b"], ["y"]), {"a": a, "b": b}, opset=13)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "models_ocr")
    os.makedirs(out, exist_ok=True)
    rs = np.random.RandomState(16)
    case(out, "convt_k2s2_db_head", (1, 24, 20, 48), 24, (2, 2), rs, strides=[2, 2])
    case(out, "convt_k2s2_one_channel", (1, 24, 30, 40), 1, (2, 2), rs, strides=[2, 2])
    case(out, "convt_k2s2_batch2_odd", (2, 5, 7, 9), 3, (2, 2), rs, strides=[2, 2])
    case(out, "convt_k3s3_group2_nobias", (1, 6, 9, 11), 4, (3, 3), rs, bias=False, group=2,
         strides=[3, 3])
    case(out, "convt_k2x3_s2x3", (1, 4, 10, 7), 5, (2, 3), rs, strides=[2, 3])
    case(out, "convt_k1s1", (1, 7, 6, 5), 3, (1, 1), rs)
    case(out, "convt_k3s2_pads_outpad", (1, 8, 33, 20), 6, (3, 3), rs, strides=[2, 2],
         pads=[1, 1, 1, 1], output_padding=[1, 1])
    case(out, "convt_k4s2_pads", (2, 3, 12, 13), 5, (4, 4), rs, strides=[2, 2], pads=[1, 2, 1, 0])
    case(out, "convt_k3s1_dil2", (1, 4, 11, 9), 3, (3, 3), rs, dilations=[2, 2], pads=[2, 2, 2, 2])
    case(out, "convt_k2s2_outpad", (1, 4, 8, 6), 3, (2, 2), rs, strides=[2, 2], output_padding=[1, 1])
    case(out, "convt_1d_k4s2", (2, 5, 37), 4, (4,), rs, strides=[2], pads=[1, 1])
    case(out, "convt_1d_k2s2", (1, 6, 50), 3, (2,), rs, strides=[2])
    case(out, "convt_k4s4_wide_rows", (1, 4, 2, 520), 8, (4, 4), rs, strides=[4, 4])
    fpn(out, "blocked_resize_fpn_asym", rs, 24, "asymmetric", "floor", 2)
    fpn(out, "blocked_resize_fpn_half_pixel", rs, 20, "half_pixel", "round_prefer_floor", 4)
    concat(out, "blocked_concat_4x24", rs, [24, 24, 24, 24])
    concat(out, "blocked_concat_mixed_batch2", rs, [5, 16, 12, 3], n=2, after_relu=True)
    concat(out, "blocked_concat_two", rs, [20, 9])
    add_broadcast(out, "blocked_mul_broadcast_h", rs, 20)
    softmax(out, "softmax_long_rows", rs, (1, 5, 4099), 2, 13)
    softmax(out, "softmax_short_rows", rs, (2, 3, 7, 33), -1, 13)
    softmax(out, "softmax_opset11_coerced", rs, (3, 4, 5), 1, 11)
    case(out, "convt_k3s2_wide_rows", (1, 4, 3, 1000), 8, (3, 3), rs, strides=[2, 2], pads=[1, 1, 1, 1])
    c2f(out, "blocked_split_c2f_input", rs, 16, 13, "input")
    c2f(out, "blocked_split_c2f_neg_axis_batch2", rs, 32, 13, "neg_axis", n=2, hw=(5, 6))
    c2f(out, "blocked_split_c2f_attr", rs, 48, 11, "attr", hw=(4, 7))
    c2f(out, "blocked_split_c2f_even", rs, 16, 13, "even", hw=(11, 3))
    c2f(out, "blocked_split_c2f_num_outputs", rs, 16, 18, "num_outputs")
    c2f(out, "blocked_split_c2f_unaligned", rs, 12, 13, "input")
    c2f(out, "blocked_split_c2f_half_block", rs, 8, 13, "input")
    big_concat_split(out, "concat_split_large_channels", rs, (1, 37, 41, 53), [5, 19, 13])
    big_concat_split(out, "concat_split_large_batch2_w", rs, (2, 3, 29, 311), [1, 200, 110], axis=3)
    block_roundtrip(out, "block_copy_odd_channels_pixels", rs, (1, 4, 23, 61), 21)
    block_roundtrip(out, "block_copy_batch3_tail", rs, (3, 2, 33, 17), 35)
    softmax(out, "softmax_axis1_bins", rs, (1, 16, 4, 531), 1, 13)
    softmax(out, "softmax_axis_mid_batch2_tail", rs, (2, 3, 7, 259), -3, 13)
    softmax(out, "softmax_axis2_one_row", rs, (3, 5, 1, 2), 2, 17)
    stem_12(out, "blocked_conv_in12_stem", rs, 1, (37, 45))
    stem_12(out, "blocked_conv_in12_stem_batch2", rs, 2, (9, 600))
    se_block(out, "blocked_se_mul", rs, 40, (6, 37))
    se_block(out, "blocked_se_sub_repeated_first", rs, 24, (13, 50), op="Sub", rep_first=True)
    bcast_rows(out, "bcast_rows_add_tiles", rs, "Add", (2, 3, 1000, 8), (2, 3, 1, 8))
    bcast_rows(out, "bcast_rows_sub_first_i64", rs, "Sub", (3, 1, 5), (3, 700, 5), np.int64)
    bcast_rows(out, "bcast_rows_div_inner12", rs, "Div", (2, 50, 12), (2, 1, 12))


if __name__ == "__main__":
    main()
