#!/usr/bin/env python3
"""com.microsoft contrib operator tests: small one-node models on random data with ONNX
Runtime's outputs as the reference, in the node-test layout
(tests/models_contrib/NAME/model.onnx + test_data_set_0/{input,output}_N.pb), and the
malformed cases of these ops in tests/bad_models/contrib_* (expect.txt as
tests/bad_models/README.md describes).

Ops: BiasGelu, FastGelu, QuickGelu, BiasAdd, SkipLayerNormalization, FusedMatMul, FusedConv,
QLinearAdd/Mul/Sigmoid/LeakyRelu/GlobalAveragePool/Concat, NhwcMaxPool, Attention,
MultiHeadAttention, QAttention, EmbedLayerNormalization, MatMulIntegerToFloat,
DynamicQuantizeMatMul, DynamicQuantizeLSTM — several cases each (broadcast shapes, masks,
int8 and uint8, optional inputs and outputs).

Quantized outputs must match ONNX Runtime exactly (the conformance test compares integers
exactly); float outputs within the tolerance of the ctest (tests/CMakeLists.txt).

Deterministic (fixed seeds). Usage: tools/make_contrib_models.py [OUT_DIR] [BAD_DIR]
(defaults tests/models_contrib, tests/bad_models)"""
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F32 = np.float32
MS = "com.microsoft"


def make_model(name, nodes, feeds, consts=None, opset=17):
    inputs = []
    for k, a in feeds.items():
        if a is None:
            continue
        inputs.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
    outs = []
    for n in nodes[-1:]:
        outs += [onnx.ValueInfoProto(name=o) for o in n.output if o]
    inits = [numpy_helper.from_array(v, k) for k, v in (consts or {}).items()]
    g = helper.make_graph(nodes, name, inputs, outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                          producer_name="tandem-tools")
    m.ir_version = 10
    return m


def save(out_dir, name, node, feeds, consts=None, opset=17, ref=None):
    """One-node model (or a node list) over `feeds` (name -> array; None = omitted input) and
    constant initializers `consts`; ORT runs it and its outputs become the reference. `ref`:
    standard nodes computing the same outputs, for an op ONNX Runtime has no CPU kernel for
    (ORT runs those instead)."""
    nodes = node if isinstance(node, list) else [node]
    m = make_model(name, nodes, feeds, consts, opset)
    mref = make_model(name, ref, feeds, consts, opset) if ref else m
    if ref:
        del mref.graph.output[:]
        mref.graph.output.extend(onnx.ValueInfoProto(name=o) for o in nodes[-1].output if o)
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(mref.SerializeToString(), so, providers=["CPUExecutionProvider"])
    fed = {k: a for k, a in feeds.items() if a is not None}
    res = sess.run(None, fed)
    del m.graph.output[:]
    for o, a in zip(sess.get_outputs(), res):
        a = np.asarray(a)
        m.graph.output.append(helper.make_tensor_value_info(
            o.name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, inp in enumerate(sess.get_inputs()):
        t = numpy_helper.from_array(fed[inp.name], inp.name)
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for i, (o, a) in enumerate(zip(sess.get_outputs(), res)):
        a = np.asarray(a)
        if a.dtype == F32:
            assert np.isfinite(a).all(), name
        t = numpy_helper.from_array(a, o.name)
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    print(f"{name}: " + ", ".join(f"{o.name}{list(np.asarray(a).shape)}"
                                  for o, a in zip(sess.get_outputs(), res)))


def bad(bad_dir, name, node, feeds, code, msg, consts=None, session=True, otype=T.FLOAT):
    """A malformed model: tandem must refuse it with `code` and a message containing `msg`."""
    nodes = node if isinstance(node, list) else [node]
    m = make_model(name, nodes, feeds, consts)
    del m.graph.output[:]
    m.graph.output.extend(helper.make_tensor_value_info(o, otype, None) for o in nodes[-1].output if o)
    d = os.path.join(bad_dir, "contrib_" + name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    onnx.save(m, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "expect.txt"), "w") as f:
        f.write(f"{code}\n{msg}\n" + ("session\n" if session else ""))
    print(f"bad contrib_{name}")


def rnd(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


def q8(rng, dt, *shape):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dt)


def scal(v, dt=F32):
    return np.array(v, dtype=dt)


# ---------------------------------------------------------------- simple float ops

def gelu_family(out, rng):
    x = rnd(rng, 2, 5, 24, scale=2.0)
    b = rnd(rng, 24)
    save(out, "bias_gelu", helper.make_node("BiasGelu", ["A", "B"], ["C"], domain=MS), {"A": x, "B": b})
    save(out, "bias_gelu_2d", helper.make_node("BiasGelu", ["A", "B"], ["C"], domain=MS),
         {"A": rnd(rng, 3, 1500, scale=3.0), "B": rnd(rng, 1500)})
    save(out, "fast_gelu", helper.make_node("FastGelu", ["X"], ["Y"], domain=MS), {"X": x})
    save(out, "fast_gelu_bias", helper.make_node("FastGelu", ["X", "bias"], ["Y"], domain=MS),
         {"X": rnd(rng, 3, 1100, scale=3.0), "bias": rnd(rng, 1100)})
    save(out, "quick_gelu", helper.make_node("QuickGelu", ["X"], ["Y"], domain=MS), {"X": x})
    save(out, "quick_gelu_alpha", helper.make_node("QuickGelu", ["X"], ["Y"], domain=MS, alpha=1.1),
         {"X": rnd(rng, 4, 777, scale=4.0)})
    save(out, "ms_gelu", helper.make_node("Gelu", ["X"], ["Y"], domain=MS), {"X": x})
    # ONNX Runtime runs BiasAdd only on CUDA: the reference is (X + bias) + skip
    save(out, "bias_add", helper.make_node("BiasAdd", ["X", "bias", "skip"], ["Y"], domain=MS),
         {"X": rnd(rng, 2, 9, 32), "bias": rnd(rng, 32), "skip": rnd(rng, 2, 9, 32)},
         ref=[helper.make_node("Add", ["X", "bias"], ["xb"]), helper.make_node("Add", ["xb", "skip"], ["Y"])])


def skip_ln(out, rng):
    h = 48
    x = rnd(rng, 2, 7, h)
    g, b, bias = rnd(rng, h), rnd(rng, h), rnd(rng, h)
    n = lambda ins, outs, **kw: helper.make_node("SkipLayerNormalization", ins, outs, domain=MS, **kw)
    save(out, "skip_ln", n(["x", "s", "g", "b"], ["y"]), {"x": x, "s": rnd(rng, 2, 7, h), "g": g, "b": b})
    save(out, "skip_ln_all_outputs", n(["x", "s", "g", "b", "bias"], ["y", "mean", "inv", "sum"], epsilon=1e-5),
         {"x": x, "s": rnd(rng, 2, 7, h), "g": g, "b": b, "bias": bias})
    save(out, "skip_ln_bcast_skip_1sh", n(["x", "s", "g", "", "bias"], ["y", "", "", "sum"]),
         {"x": x, "s": rnd(rng, 1, 7, h), "g": g, "bias": bias})
    save(out, "skip_ln_bcast_skip_sh", n(["x", "s", "g", "b"], ["y", "mean"]),
         {"x": x, "s": rnd(rng, 7, h), "g": g, "b": b})
    save(out, "skip_ln_2d", n(["x", "s", "g"], ["y", "", "inv"]),
         {"x": rnd(rng, 5, 96), "s": rnd(rng, 5, 96), "g": rnd(rng, 96)})


def fused_matmul(out, rng):
    n = lambda **kw: helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain=MS, **kw)
    save(out, "fused_matmul_2d", n(alpha=0.5), {"A": rnd(rng, 5, 7), "B": rnd(rng, 7, 3)})
    save(out, "fused_matmul_transA", n(transA=1), {"A": rnd(rng, 7, 5), "B": rnd(rng, 7, 3)})
    save(out, "fused_matmul_transB_batch", n(transB=1, alpha=2.0),
         {"A": rnd(rng, 2, 3, 5, 16), "B": rnd(rng, 2, 3, 9, 16)})
    save(out, "fused_matmul_transAB_bcast", n(transA=1, transB=1, alpha=0.25),
         {"A": rnd(rng, 4, 16, 6), "B": rnd(rng, 1, 9, 16)})
    save(out, "fused_matmul_batch_2d_b", n(alpha=1.5), {"A": rnd(rng, 2, 3, 5, 64), "B": rnd(rng, 64, 33)})
    save(out, "fused_matmul_bcast_a", n(transB=1), {"A": rnd(rng, 5, 8), "B": rnd(rng, 3, 4, 8)})


def fused_conv(out, rng):
    x = rnd(rng, 1, 4, 9, 9)
    w = rnd(rng, 6, 4, 3, 3, scale=0.3)
    b = rnd(rng, 6)
    n = lambda ins, **kw: helper.make_node("FusedConv", ins, ["Y"], domain=MS, **kw)
    save(out, "fused_conv_relu", n(["X", "W", "B"], activation="Relu", pads=[1, 1, 1, 1]), {"X": x}, {"W": w, "B": b})
    save(out, "fused_conv_leaky_z", n(["X", "W", "B", "Z"], activation="LeakyRelu", activation_params=[0.2]),
         {"X": x, "Z": rnd(rng, 1, 6, 7, 7)}, {"W": w, "B": b})
    save(out, "fused_conv_clip_stride", n(["X", "W"], activation="Clip", activation_params=[-0.5, 0.7], strides=[2, 2]),
         {"X": rnd(rng, 2, 4, 10, 10)}, {"W": w})
    save(out, "fused_conv_sigmoid", n(["X", "W", "B"], activation="Sigmoid", group=2),
         {"X": x}, {"W": rnd(rng, 6, 2, 3, 3), "B": b})
    save(out, "fused_conv_hardsigmoid_dyn_w", n(["X", "W", "B"], activation="HardSigmoid", activation_params=[0.2, 0.5]),
         {"X": x, "W": w, "B": b})
    save(out, "fused_conv_tanh", n(["X", "W"], activation="Tanh"), {"X": x}, {"W": w})


# ---------------------------------------------------------------- quantized element-wise ops

def qlinear(out, rng):
    for dt, tag in ((np.uint8, "u8"), (np.int8, "s8")):
        zp = lambda v: scal(v if dt == np.uint8 else v - 128, dt)
        a, b = q8(rng, dt, 2, 3, 17), q8(rng, dt, 2, 3, 17)
        for op in ("QLinearAdd", "QLinearMul"):
            low = op[7:].lower()
            node = helper.make_node(op, ["A", "as", "az", "B", "bs", "bz", "cs", "cz"], ["C"], domain=MS)
            cs = 0.09 if op == "QLinearAdd" else 0.6
            save(out, f"qlinear_{low}_{tag}", node,
                 {"A": a, "as": scal(0.05), "az": zp(120), "B": b, "bs": scal(0.031), "bz": zp(131),
                  "cs": scal(cs), "cz": zp(125)})
            save(out, f"qlinear_{low}_{tag}_bcast", node,
                 {"A": q8(rng, dt, 4, 1, 5), "as": scal(0.021), "az": zp(100), "B": q8(rng, dt, 3, 1),
                  "bs": scal(0.07), "bz": zp(140), "cs": scal(cs * 0.8), "cz": zp(128)})
            save(out, f"qlinear_{low}_{tag}_scalar",
                 helper.make_node(op, ["A", "as", "az", "B", "bs", "bz", "cs", "cz"], ["C"], domain=MS),
                 {"A": q8(rng, dt, 3, 33), "as": scal(0.013), "az": zp(128), "B": q8(rng, dt, 1),
                  "bs": scal(0.11), "bz": zp(128), "cs": scal(cs * 0.3), "cz": zp(128)})
            # many values: rounding ties of the float formula show up
            save(out, f"qlinear_{low}_{tag}_many", node,
                 {"A": q8(rng, dt, 4, 1000), "as": scal(0.05), "az": zp(119), "B": q8(rng, dt, 4, 1000),
                  "bs": scal(0.025), "bz": zp(133), "cs": scal(cs * 0.7), "cz": zp(127)})
        x = q8(rng, dt, 2, 4, 11)
        save(out, f"qlinear_sigmoid_{tag}",
             helper.make_node("QLinearSigmoid", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS),
             {"X": x, "xs": scal(0.05), "xz": zp(128), "ys": scal(1 / 256), "yz": zp(0)})
        save(out, f"qlinear_sigmoid_{tag}_nozp",
             helper.make_node("QLinearSigmoid", ["X", "xs", "", "ys", "yz"], ["Y"], domain=MS),
             {"X": x, "xs": scal(0.031), "ys": scal(1 / 200), "yz": zp(0)})
        save(out, f"qlinear_leaky_relu_{tag}",
             helper.make_node("QLinearLeakyRelu", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS, alpha=0.13),
             {"X": x, "xs": scal(0.05), "xz": zp(110), "ys": scal(0.04), "yz": zp(90)})
        # every input value once: the whole lookup table
        every = np.arange(256, dtype=np.int64).astype(np.uint8).view(dt).reshape(16, 16)
        save(out, f"qlinear_sigmoid_{tag}_every_value",
             helper.make_node("QLinearSigmoid", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS),
             {"X": every, "xs": scal(0.037), "xz": zp(131), "ys": scal(1 / 255), "yz": zp(0)})
        save(out, f"qlinear_leaky_relu_{tag}_every_value",
             helper.make_node("QLinearLeakyRelu", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS, alpha=0.21),
             {"X": every, "xs": scal(0.043), "xz": zp(125), "ys": scal(0.029), "yz": zp(101)})
        save(out, f"qlinear_concat_{tag}_every_value",
             helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], ["Y"], domain=MS, axis=0),
             {"ys": scal(0.031), "yz": zp(117), "a": every, "as": scal(0.047), "az": zp(133), "b": every,
              "bs": scal(0.013), "bz": zp(128)})
        save(out, f"qlinear_gap_{tag}",
             helper.make_node("QLinearGlobalAveragePool", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS),
             {"X": q8(rng, dt, 2, 5, 6, 7), "xs": scal(0.05), "xz": zp(120), "ys": scal(0.03), "yz": zp(130)})
        save(out, f"qlinear_gap_{tag}_channels_last",
             helper.make_node("QLinearGlobalAveragePool", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS,
                              channels_last=1),
             {"X": q8(rng, dt, 2, 4, 5, 6), "xs": scal(0.02), "xz": zp(127), "ys": scal(0.011), "yz": zp(128)})
        save(out, f"qlinear_concat_{tag}",
             helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz", "c", "cs", "cz"],
                              ["Y"], domain=MS, axis=1),
             {"ys": scal(0.05), "yz": zp(128), "a": q8(rng, dt, 2, 3, 4), "as": scal(0.05), "az": zp(128),
              "b": q8(rng, dt, 2, 1, 4), "bs": scal(0.031), "bz": zp(100), "c": q8(rng, dt, 2, 5, 4),
              "cs": scal(0.08), "cz": zp(140)})
        save(out, f"qlinear_concat_{tag}_last_axis",
             helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], ["Y"],
                              domain=MS, axis=-1),
             {"ys": scal(0.02), "yz": zp(120), "a": q8(rng, dt, 3, 2), "as": scal(0.07), "az": zp(128),
              "b": q8(rng, dt, 3, 5), "bs": scal(0.02), "bz": zp(120)})
        ap = lambda **kw: helper.make_node("QLinearAveragePool", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS, **kw)
        save(out, f"qlinear_avg_pool_{tag}", ap(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             {"X": q8(rng, dt, 2, 3, 9, 9), "xs": scal(0.05), "xz": zp(120), "ys": scal(0.03), "yz": zp(130)})
        save(out, f"qlinear_avg_pool_{tag}_count_pad_ceil", ap(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 1, 1],
                                                              count_include_pad=1, ceil_mode=1),
             {"X": q8(rng, dt, 1, 4, 8, 7), "xs": scal(0.02), "xz": zp(128), "ys": scal(0.02), "yz": zp(128)})
        save(out, f"qlinear_avg_pool_{tag}_many", ap(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
             {"X": q8(rng, dt, 1, 8, 20, 20), "xs": scal(0.02), "xz": zp(127), "ys": scal(0.02), "yz": zp(129)})
        save(out, f"qlinear_avg_pool_{tag}_channels_last", ap(kernel_shape=[3, 2], channels_last=1, auto_pad="SAME_UPPER"),
             {"X": q8(rng, dt, 2, 6, 5, 3), "xs": scal(0.04), "xz": zp(110), "ys": scal(0.05), "yz": zp(125)})
        save(out, f"nhwc_max_pool_{tag}",
             helper.make_node("NhwcMaxPool", ["x"], ["y"], domain=MS, kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             {"x": q8(rng, dt, 2, 9, 9, 5)})
        save(out, f"nhwc_max_pool_{tag}_ceil_dil",
             helper.make_node("NhwcMaxPool", ["x"], ["y"], domain=MS, kernel_shape=[2, 3], strides=[2, 1],
                              dilations=[1, 2], ceil_mode=1),
             {"x": q8(rng, dt, 1, 8, 10, 3)})


# ---------------------------------------------------------------- attention

def attention(out, rng):
    B, S, IN, N = 2, 5, 16, 2
    x = rnd(rng, B, S, IN)
    w = rnd(rng, IN, 48, scale=0.4)
    bias = rnd(rng, 48, scale=0.2)
    n = lambda ins, outs=("Y",), **kw: helper.make_node("Attention", ins, list(outs), domain=MS, num_heads=N, **kw)
    save(out, "attention", n(["x", "w", "b"]), {"x": x, "w": w, "b": bias})
    save(out, "attention_const_weights_no_bias", n(["x", "w"]), {"x": x}, {"w": w})
    save(out, "attention_mask_1d", n(["x", "w", "b", "m"]), {"x": x, "w": w, "b": bias, "m": np.array([3, 5], np.int32)})
    save(out, "attention_mask_range", n(["x", "w", "b", "m"]),
         {"x": x, "w": w, "b": bias, "m": np.array([4, 5, 1, 0], np.int32)})
    m2 = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]], np.int32)
    save(out, "attention_mask_2d", n(["x", "w", "b", "m"]), {"x": x, "w": w, "b": bias, "m": m2})
    m3 = (rng.random((B, S, S)) > 0.3).astype(np.int32)
    m3[:, :, 0] = 1
    save(out, "attention_mask_3d_scale", n(["x", "w", "b", "m"], scale=0.3), {"x": x, "w": w, "b": bias, "m": m3})
    save(out, "attention_unidirectional", n(["x", "w", "b"], unidirectional=1), {"x": x, "w": w, "b": bias})
    save(out, "attention_qkv_hidden_sizes", n(["x", "w", "b"], qkv_hidden_sizes=[16, 16, 24]),
         {"x": x, "w": rnd(rng, IN, 56, scale=0.4), "b": rnd(rng, 56)})
    save(out, "attention_attn_bias", n(["x", "w", "b", "", "", "ab"]),
         {"x": x, "w": w, "b": bias, "ab": rnd(rng, 1, N, S, S)})
    P = 3
    past = rnd(rng, 2, B, N, P, 8)
    save(out, "attention_past_present_gpt2", n(["x", "w", "b", "m", "past"], ("Y", "present"), unidirectional=1),
         {"x": x, "w": w, "b": bias, "m": np.ones((B, P + S), np.int32), "past": past})
    mdec = np.ones((B, P + 1), np.int32)
    mdec[0, 1] = 0
    save(out, "attention_decode_past_mask", n(["x", "w", "b", "m", "past"], ("Y", "present"), unidirectional=1),
         {"x": rnd(rng, B, 1, IN), "w": w, "b": bias, "m": mdec, "past": past})
    # 8 query rows or more: the GEMM path of the kernel
    S2, P2 = 12, 4
    m_long = np.ones((B, P2 + S2), np.int32)
    m_long[1, 2:5] = 0
    save(out, "attention_long_causal_past_mask",
         n(["x", "w", "b", "m", "past"], ("Y", "present"), unidirectional=1),
         {"x": rnd(rng, B, S2, IN), "w": w, "b": bias, "m": m_long, "past": rnd(rng, 2, B, N, P2, 8)})
    save(out, "attention_long_causal_attn_bias", n(["x", "w", "b", "", "", "ab"], unidirectional=1),
         {"x": rnd(rng, B, S2, IN), "w": w, "b": bias, "ab": rnd(rng, B, N, S2, S2)})
    save(out, "attention_long_mask_1d", n(["x", "w", "b", "m"]),
         {"x": rnd(rng, B, S2, IN), "w": w, "b": bias, "m": np.array([7, 12], np.int32)})
    save(out, "attention_big_heads", helper.make_node("Attention", ["x", "w", "b", "m"], ["Y"], domain=MS, num_heads=4),
         {"x": rnd(rng, 1, 33, 64), "w": rnd(rng, 64, 192, scale=0.2), "b": rnd(rng, 192),
          "m": np.array([29], np.int32)})


def mha(out, rng):
    B, S, L, N, H = 2, 4, 6, 2, 8
    q, k, v = rnd(rng, B, S, N * H), rnd(rng, B, L, N * H), rnd(rng, B, L, N * H)
    n = lambda ins, outs=("Y",), **kw: helper.make_node("MultiHeadAttention", ins, list(outs), domain=MS, num_heads=N, **kw)
    save(out, "mha_cross", n(["q", "k", "v"]), {"q": q, "k": k, "v": v})
    save(out, "mha_bias_mask_2d", n(["q", "k", "v", "b", "m"]),
         {"q": q, "k": k, "v": v, "b": rnd(rng, 3 * N * H), "m": np.array([[1, 1, 1, 0, 1, 0], [1] * 6], np.int32)})
    save(out, "mha_mask_1d", n(["q", "k", "v", "", "m"], scale=0.5),
         {"q": q, "k": k, "v": v, "m": np.array([4, 6], np.int32)})
    save(out, "mha_mask_3d", n(["q", "k", "v", "", "m"]),
         {"q": q, "k": k, "v": v, "m": (rng.random((B, S, L)) > 0.3).astype(np.int32)})
    qs = rnd(rng, B, S, N * H)
    save(out, "mha_self_attn_bias_unidirectional", n(["q", "k", "v", "", "", "ab"], unidirectional=1),
         {"q": qs, "k": rnd(rng, B, S, N * H), "v": rnd(rng, B, S, N * H), "ab": rnd(rng, B, 1, S, S)})
    P = 3
    save(out, "mha_past_present", n(["q", "k", "v", "b", "", "", "pk", "pv"], ("Y", "pk_out", "pv_out")),
         {"q": q, "k": rnd(rng, B, S, N * H), "v": rnd(rng, B, S, N * H), "b": rnd(rng, 3 * N * H),
          "pk": rnd(rng, B, N, P, H), "pv": rnd(rng, B, N, P, H)})
    save(out, "mha_v_hidden_differs", n(["q", "k", "v", "b"]),
         {"q": q, "k": k, "v": rnd(rng, B, L, N * 12), "b": rnd(rng, 2 * N * H + N * 12)})
    S2, L2 = 10, 11
    save(out, "mha_long_mask_3d_attn_bias", n(["q", "k", "v", "b", "m", "ab"]),
         {"q": rnd(rng, B, S2, N * H), "k": rnd(rng, B, L2, N * H), "v": rnd(rng, B, L2, N * H),
          "b": rnd(rng, 3 * N * H), "m": (rng.random((B, S2, L2)) > 0.3).astype(np.int32),
          "ab": rnd(rng, 1, N, S2, L2)})
    save(out, "mha_long_past_unidirectional", n(["q", "k", "v", "", "m", "", "pk", "pv"], ("Y", "pk_out", "pv_out"),
                                                unidirectional=1),
         {"q": rnd(rng, B, S2, N * H), "k": rnd(rng, B, S2, N * H), "v": rnd(rng, B, S2, N * H),
          "m": np.array([[1] * 13, [1] * 9 + [0] * 4], np.int32), "pk": rnd(rng, B, N, 3, H), "pv": rnd(rng, B, N, 3, H)})
    save(out, "mha_bnsh_kv", n(["q", "k", "v", "", "m"]),
         {"q": q, "k": rnd(rng, B, N, L, H), "v": rnd(rng, B, N, L, H), "m": np.array([[1, 1, 1, 1, 0, 0], [1] * 6], np.int32)})


def qattention(out, rng):
    B, S, IN, N = 2, 5, 16, 2
    for xt, wt in ((np.uint8, np.int8), (np.uint8, np.uint8)):  # ORT: uint8 input only
        tag = f"{np.dtype(xt).name[0]}{np.dtype(wt).name[0]}".replace("u", "u").replace("i", "s")
        x, w = q8(rng, xt, B, S, IN), q8(rng, wt, IN, 48)
        xz = scal(130 if xt == np.uint8 else 3, xt)
        feeds = {"x": x, "w": w, "b": rnd(rng, 48), "xs": scal(0.02), "ws": scal(0.01), "m": np.array([5, 3], np.int32),
                 "xz": xz, "wz": scal(120 if wt == np.uint8 else -2, wt)}
        save(out, f"qattention_{tag}", helper.make_node("QAttention", ["x", "w", "b", "xs", "ws", "m", "xz", "wz"], ["Y"],
                                                       domain=MS, num_heads=N), feeds)
    x, w = q8(rng, np.uint8, B, S, IN), q8(rng, np.int8, IN, 48)
    save(out, "qattention_per_column_unidirectional_past",
         helper.make_node("QAttention", ["x", "w", "b", "xs", "ws", "", "xz", "wz", "past"], ["Y", "present"],
                          domain=MS, num_heads=N, unidirectional=1),
         {"x": x, "w": w, "b": rnd(rng, 48), "xs": scal(0.03), "ws": (rng.random(48) * 0.02 + 0.001).astype(F32),
          "xz": scal(128, np.uint8), "wz": q8(rng, np.int8, 48), "past": rnd(rng, 2, B, N, 2, 8)})
    save(out, "qattention_no_zero_points",
         helper.make_node("QAttention", ["x", "w", "b", "xs", "ws"], ["Y"], domain=MS, num_heads=4),
         {"x": x, "w": w, "b": rnd(rng, 48), "xs": scal(0.03), "ws": scal(0.01)})


def embed_ln(out, rng):
    B, S, H, V = 2, 6, 24, 40
    ids = rng.integers(0, V, (B, S)).astype(np.int32)
    seg = rng.integers(0, 2, (B, S)).astype(np.int32)
    feeds = {"ids": ids, "seg": seg, "we": rnd(rng, V, H), "pe": rnd(rng, 16, H), "se": rnd(rng, 2, H),
             "g": rnd(rng, H), "b": rnd(rng, H), "m": np.array([[1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 1, 1]], np.int32)}
    n = lambda ins, outs, **kw: helper.make_node("EmbedLayerNormalization", ins, outs, domain=MS, **kw)
    save(out, "embed_ln", n(["ids", "seg", "we", "pe", "se", "g", "b", "m"], ["y", "mi", "es"]), feeds)
    f2 = {k: feeds[k] for k in ("ids", "we", "pe", "g", "b")}
    save(out, "embed_ln_no_segment_eps", n(["ids", "", "we", "pe", "", "g", "b"], ["y", "mi"], epsilon=1e-5), f2)
    f3 = dict(f2, pid=rng.integers(0, 16, (1, S)).astype(np.int32))
    save(out, "embed_ln_position_ids", n(["ids", "", "we", "pe", "", "g", "b", "", "pid"], ["y", "mi"]), f3)


def qmm(out, rng):
    for at, bt in ((np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)):
        tag = {np.uint8: "u8", np.int8: "s8"}[at] + {np.uint8: "u8", np.int8: "s8"}[bt]
        a, b = q8(rng, at, 3, 7, 40), q8(rng, bt, 40, 9)
        save(out, f"matmul_int_to_float_{tag}",
             helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"], ["y"], domain=MS),
             {"a": a, "b": b, "as": scal(0.02), "bs": scal(0.05), "az": scal(7 if at == np.int8 else 130, at),
              "bz": scal(-3 if bt == np.int8 else 125, bt), "bias": rnd(rng, 9)})
    save(out, "matmul_int_to_float_per_column_batch_a",
         helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz"], ["y"], domain=MS),
         {"a": q8(rng, np.uint8, 2, 5, 16), "b": q8(rng, np.int8, 16, 6), "as": scal(0.1),
          "bs": (rng.random(6) * 0.1).astype(F32), "az": scal(120, np.uint8), "bz": q8(rng, np.int8, 6)})
    save(out, "matmul_int_to_float_no_zp",
         helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs"], ["y"], domain=MS),
         {"a": q8(rng, np.uint8, 4, 32), "b": q8(rng, np.int8, 32, 5), "as": scal(0.1), "bs": scal(0.03)},
         {})
    for bt, tag in ((np.int8, "s8"), (np.uint8, "u8")):
        a = rnd(rng, 2, 6, 48)
        b = q8(rng, bt, 48, 10)
        save(out, f"dynamic_quantize_matmul_{tag}",
             helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"], ["y"], domain=MS),
             {"a": a, "b": b, "bs": scal(0.02), "bz": scal(2 if bt == np.int8 else 128, bt), "bias": rnd(rng, 10)})
    save(out, "dynamic_quantize_matmul_per_column_positive_a",
         helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bz"], ["y"], domain=MS),
         {"a": np.abs(rnd(rng, 7, 32)) + 0.5, "b": q8(rng, np.int8, 32, 12), "bs": (rng.random(12) * 0.05).astype(F32),
          "bz": q8(rng, np.int8, 12)})
    save(out, "dynamic_quantize_matmul_const_b",
         helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs"], ["y"], domain=MS),
         {"a": rnd(rng, 4, 3, 20)}, {"b": q8(rng, np.int8, 20, 8), "bs": scal(0.04)})


def dq_lstm(out, rng):
    S, B, I, H = 5, 3, 10, 6
    G = 4 * H
    ins = ["X", "W", "R", "B", "sl", "h0", "c0", "P", "ws", "wz", "rs", "rz"]

    def case(name, D, wt, direction, with_bias=True, with_state=False, with_peep=False, per_col=False, outs=("Y", "Yh", "Yc")):
        feeds = {"X": rnd(rng, S, B, I), "W": q8(rng, wt, D, I, G), "R": q8(rng, wt, D, H, G)}
        feeds["B"] = rnd(rng, D, 2 * G, scale=0.3) if with_bias else None
        feeds["sl"] = None
        feeds["h0"] = rnd(rng, D, B, H, scale=0.5) if with_state else None
        feeds["c0"] = rnd(rng, D, B, H, scale=0.5) if with_state else None
        feeds["P"] = rnd(rng, D, 3 * H, scale=0.3) if with_peep else None
        feeds["ws"] = ((rng.random((D, G)) * 0.01 + 0.005) if per_col else (rng.random(D) * 0.01 + 0.005)).astype(F32)
        feeds["wz"] = (q8(rng, wt, D) // 8).astype(wt) if wt == np.int8 else scal([120] * D, np.uint8)
        feeds["rs"] = ((rng.random((D, G)) * 0.01 + 0.005) if per_col else (rng.random(D) * 0.01 + 0.005)).astype(F32)
        feeds["rz"] = (q8(rng, wt, D) // 8).astype(wt) if wt == np.int8 else scal([130] * D, np.uint8)
        node = helper.make_node("DynamicQuantizeLSTM", [k if feeds[k] is not None else "" for k in ins], list(outs),
                                domain=MS, hidden_size=H, direction=direction)
        save(out, name, node, feeds)

    case("dq_lstm_forward_s8", 1, np.int8, "forward")
    case("dq_lstm_forward_u8_state", 1, np.uint8, "forward", with_state=True)
    case("dq_lstm_reverse_per_column_peephole", 1, np.int8, "reverse", with_peep=True, per_col=True)
    case("dq_lstm_bidirectional", 2, np.int8, "bidirectional", with_state=True, with_peep=True)
    case("dq_lstm_bidirectional_no_bias_yh_only", 2, np.uint8, "bidirectional", with_bias=False, outs=("", "Yh"))


def save_model(out_dir, name, m, feeds):
    """A whole model (already built) over `feeds`, ORT's outputs as the reference."""
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    res = sess.run(None, feeds)
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, inp in enumerate(sess.get_inputs()):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[inp.name], inp.name).SerializeToString())
    for i, (o, a) in enumerate(zip(sess.get_outputs(), res)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(a), o.name).SerializeToString())
    ops = sorted({n.op_type for n in m.graph.node if n.domain == MS})
    print(f"{name}: contrib ops {ops}")


def ort_tools(out):
    """tests/models/bert_layer through ONNX Runtime's transformer optimizer (EmbedLayerNormalization,
    Attention with the mask index, SkipLayerNormalization, BiasGelu) and then its dynamic
    quantizer (QAttention, MatMulInteger). The optimizer needs sympy (tools/requirements.txt)."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.quantization import QuantType, quantize_dynamic
    src = os.path.join(ROOT, "tests", "models", "bert_layer")
    feeds = {}
    m0 = onnx.load(os.path.join(src, "model.onnx"))
    for i, inp in enumerate(m0.graph.input):
        t = onnx.TensorProto()
        with open(os.path.join(src, "test_data_set_0", f"input_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        feeds[inp.name] = numpy_helper.to_array(t)
    om = optimizer.optimize_model(os.path.join(src, "model.onnx"), model_type="bert", num_heads=4, hidden_size=64,
                                  opt_level=0)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "opt.onnx"), os.path.join(tmp, "q.onnx")
        om.save_model_to_file(a)  # as the tool writes it (with the com.microsoft opset import)
        save_model(out, "ort_optimized_bert_layer", onnx.load(a), feeds)
        quantize_dynamic(a, b, weight_type=QuantType.QInt8, op_types_to_quantize=["Attention", "MatMul"],
                         extra_options={"DefaultTensorType": T.FLOAT})
        save_model(out, "ort_quantized_bert_layer", onnx.load(b), feeds)
        # ONNX Runtime's own extended graph optimizations, saved (DynamicQuantizeMatMul,
        # MatMulIntegerToFloat and the like appear here)
        c = os.path.join(tmp, "ort_ext.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = c
        ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])
        save_model(out, "ort_session_optimized_quantized_bert_layer", onnx.load(c), feeds)


def qgemm(out, rng):
    for at, bt in ((np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)):
        tag = {np.uint8: "u8", np.int8: "s8"}[at] + {np.uint8: "u8", np.int8: "s8"}[bt]
        zp_a = scal(120 if at == np.uint8 else -3, at)
        zp_b = scal(130 if bt == np.uint8 else 2, bt)
        feeds = {"a": q8(rng, at, 5, 40), "as": scal(0.02), "az": zp_a, "b": q8(rng, bt, 40, 7), "bs": scal(0.01),
                 "bz": zp_b, "c": rng.integers(-2000, 2000, 7).astype(np.int32), "ys": scal(0.4),
                 "yz": scal(128 if at == np.uint8 else 0, at)}
        save(out, f"qgemm_{tag}_quantized_out",
             helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"], domain=MS), feeds)
        del feeds["ys"], feeds["yz"]
        save(out, f"qgemm_{tag}_float_out_alpha",
             helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c"], ["y"], domain=MS, alpha=0.7), feeds)
    save(out, "qgemm_long_k_transb",  # K over 256: the sums come in slices
         helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"], domain=MS, transB=1),
         {"a": q8(rng, np.uint8, 3, 700), "as": scal(0.01), "az": scal(3, np.uint8), "b": q8(rng, np.int8, 5, 700),
          "bs": scal(0.002), "bz": scal(-1, np.int8), "c": rng.integers(-5000, 5000, (1, 5)).astype(np.int32),
          "ys": scal(3.0), "yz": scal(130, np.uint8)})
    save(out, "qgemm_transb_per_column_no_c",
         helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "", "ys", "yz"], ["y"], domain=MS, transB=1,
                          transA=1),
         {"a": q8(rng, np.uint8, 33, 4), "as": scal(0.05), "az": scal(128, np.uint8), "b": q8(rng, np.int8, 6, 33),
          "bs": (rng.random(6) * 0.01 + 0.002).astype(F32), "bz": np.zeros(6, np.int8), "ys": scal(0.2),
          "yz": scal(100, np.uint8)})


def ort_quantizer_qoperator(out):
    """tests/models/resnet_blocks through ONNX Runtime's static quantizer in the QOperator format
    (QLinearConv, QLinearAdd, QLinearGlobalAveragePool, QGemm, QuantizeLinear...)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    import tempfile

    class Reader(CalibrationDataReader):
        def __init__(self):
            r = np.random.default_rng(12)
            self.data = [{"input": r.standard_normal((1, 3, 64, 64)).astype(F32)} for _ in range(4)]

        def get_next(self):
            return self.data.pop() if self.data else None

    src = os.path.join(ROOT, "tests", "models", "resnet_blocks", "model.onnx")
    with tempfile.TemporaryDirectory() as tmp:
        q = os.path.join(tmp, "q.onnx")
        quantize_static(src, q, Reader(), quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
        x = np.random.default_rng(13).standard_normal((1, 3, 64, 64)).astype(F32)
        save_model(out, "ort_qoperator_resnet_blocks", onnx.load(q), {"input": x})


def bad_cases(bad_dir, rng):
    x = rnd(rng, 2, 3, 8)
    bad(bad_dir, "bias_gelu_bias_len", helper.make_node("BiasGelu", ["A", "B"], ["C"], domain=MS),
        {"A": x, "B": rnd(rng, 5)}, "invalid argument", "bias has 5 values, expected 8", session=True)
    bad(bad_dir, "skip_ln_gamma_len",
        helper.make_node("SkipLayerNormalization", ["x", "s", "g"], ["y"], domain=MS),
        {"x": x, "s": x, "g": rnd(rng, 7)}, "invalid argument", "gamma has 7 values, expected 8")
    bad(bad_dir, "skip_ln_skip_shape",
        helper.make_node("SkipLayerNormalization", ["x", "s", "g"], ["y"], domain=MS),
        {"x": x, "s": rnd(rng, 2, 4, 8), "g": rnd(rng, 8)}, "invalid argument", "skip must have the input's shape")
    bad(bad_dir, "fused_matmul_trans_batch",
        helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain=MS, transBatchA=1),
        {"A": x, "B": rnd(rng, 2, 8, 3)}, "unsupported", "transBatchA")
    bad(bad_dir, "fused_matmul_k_mismatch",
        helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain=MS, transB=1),
        {"A": x, "B": rnd(rng, 2, 8, 3)}, "invalid argument", "")
    bad(bad_dir, "fused_conv_activation",
        helper.make_node("FusedConv", ["X", "W"], ["Y"], domain=MS, activation="Softsign"),
        {"X": rnd(rng, 1, 2, 5, 5), "W": rnd(rng, 3, 2, 3, 3)}, "invalid argument", "unknown activation 'Softsign'")
    bad(bad_dir, "qlinear_add_zp_type",
        helper.make_node("QLinearAdd", ["A", "as", "az", "B", "bs", "bz", "cs", "cz"], ["C"], domain=MS),
        {"A": q8(rng, np.uint8, 4), "as": scal(0.1), "az": scal(3, np.int8), "B": q8(rng, np.uint8, 4),
         "bs": scal(0.1), "bz": scal(3, np.uint8), "cs": scal(0.1), "cz": scal(3, np.uint8)},
        "invalid argument", "input 2 has type int8, input 0 uint8", otype=T.UINT8)
    bad(bad_dir, "qlinear_sigmoid_scale_vector",
        helper.make_node("QLinearSigmoid", ["X", "xs", "xz", "ys", "yz"], ["Y"], domain=MS),
        {"X": q8(rng, np.uint8, 4), "xs": rnd(rng, 2), "xz": scal(3, np.uint8), "ys": scal(0.1),
         "yz": scal(3, np.uint8)}, "invalid argument", "a scale must be a scalar", otype=T.UINT8)
    bad(bad_dir, "qlinear_concat_triples",
        helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b"], ["Y"], domain=MS, axis=0),
        {"ys": scal(0.1), "yz": scal(3, np.uint8), "a": q8(rng, np.uint8, 4), "as": scal(0.1),
         "az": scal(3, np.uint8), "b": q8(rng, np.uint8, 4)},
        "invalid argument", "X_zero_point) triples", otype=T.UINT8)
    x, w = rnd(rng, 2, 5, 16), rnd(rng, 16, 48)
    bad(bad_dir, "attention_num_heads", helper.make_node("Attention", ["x", "w"], ["Y"], domain=MS),
        {"x": x, "w": w}, "invalid argument", "num_heads must be positive")
    bad(bad_dir, "attention_heads_divide", helper.make_node("Attention", ["x", "w"], ["Y"], domain=MS, num_heads=5),
        {"x": x, "w": w}, "invalid argument", "must be 3 x num_heads (5) x head size")
    bad(bad_dir, "attention_qkv_sizes_sum",
        helper.make_node("Attention", ["x", "w"], ["Y"], domain=MS, num_heads=2, qkv_hidden_sizes=[16, 16, 8]),
        {"x": x, "w": w}, "invalid argument", "qkv_hidden_sizes add up to 40, the weights have 48 columns")
    bad(bad_dir, "attention_mask_4d", helper.make_node("Attention", ["x", "w", "", "m"], ["Y"], domain=MS, num_heads=2),
        {"x": x, "w": w, "m": np.ones((2, 1, 5, 5), np.int32)}, "unsupported", "4-D mask_index")
    bad(bad_dir, "attention_share_buffer",
        helper.make_node("Attention", ["x", "w"], ["Y"], domain=MS, num_heads=2, past_present_share_buffer=1),
        {"x": x, "w": w}, "unsupported", "past_present_share_buffer")
    bad(bad_dir, "mha_packed_qkv", helper.make_node("MultiHeadAttention", ["q"], ["Y"], domain=MS, num_heads=2),
        {"q": rnd(rng, 2, 5, 2, 3, 8)}, "unsupported", "packed QKV")
    bad(bad_dir, "mha_hidden_mismatch", helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["Y"], domain=MS, num_heads=2),
        {"q": rnd(rng, 2, 5, 16), "k": rnd(rng, 2, 5, 12), "v": rnd(rng, 2, 5, 16)}, "invalid argument",
        "query and key hidden sizes differ (16, 12)")
    bad(bad_dir, "embed_ln_hidden", helper.make_node("EmbedLayerNormalization", ["i", "", "we", "pe", "", "g", "b"],
                                                     ["y", "mi"], domain=MS),
        {"i": np.zeros((2, 3), np.int32), "we": rnd(rng, 10, 8), "pe": rnd(rng, 10, 6), "g": rnd(rng, 8), "b": rnd(rng, 8)},
        "invalid argument", "the embeddings differ in hidden size (8, 6)")
    bad(bad_dir, "matmul_int_to_float_a_zp_type",
        helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az"], ["y"], domain=MS),
        {"a": q8(rng, np.uint8, 2, 4), "b": q8(rng, np.int8, 4, 3), "as": scal(0.1), "bs": scal(0.1),
         "az": scal(1, np.int8)}, "invalid argument", "a_zero_point has type int8")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "models_contrib")
    bad_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "bad_models")
    try:  # checked before anything is removed
        import sympy  # noqa: F401
    except ImportError:
        sys.exit("make_contrib_models.py: ONNX Runtime's transformer optimizer needs sympy "
                 "(.venv/bin/pip install -r tools/requirements.txt)")
    # start clean: every case here is made by this script
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for d in os.listdir(bad_dir):
        if d.startswith("contrib_"):
            shutil.rmtree(os.path.join(bad_dir, d))
    gelu_family(out, np.random.default_rng(1))
    skip_ln(out, np.random.default_rng(2))
    fused_matmul(out, np.random.default_rng(3))
    fused_conv(out, np.random.default_rng(4))
    qlinear(out, np.random.default_rng(5))
    attention(out, np.random.default_rng(6))
    mha(out, np.random.default_rng(7))
    qattention(out, np.random.default_rng(8))
    embed_ln(out, np.random.default_rng(9))
    qmm(out, np.random.default_rng(10))
    dq_lstm(out, np.random.default_rng(11))
    qgemm(out, np.random.default_rng(14))
    ort_quantizer_qoperator(out)
    ort_tools(out)
    bad_cases(bad_dir, np.random.default_rng(100))


if __name__ == "__main__":
    main()
