#!/usr/bin/env python3
"""Small int8 models made by ONNX Runtime's quantize_static (QDQ and QOperator forms) from
small generated float CNNs / MLPs, with ONNX Runtime's outputs as the reference, in the
node-test layout (tests/models_int8/NAME/model.onnx + test_data_set_0/{input,output}_N.pb),
for tests/tools/check_int8_models.py (ctest int8_model_tests*).

Cases (each quantized with 16 calibration samples of the same distribution as the input):
  cnn_qdq_u8      Conv+Relu, Conv+Relu6 (Clip), MaxPool, 1x1 Conv, depthwise Conv, residual
                  Add (+Relu), Concat, GlobalAveragePool, Flatten, Gemm; uint8 activations,
                  per-channel int8 weights (QDQ)
  cnn_qdq_s8      the same with int8 activations
  cnn_qdq_b3      the same network at batch 3 (the kernels' per-image split)
  cnn_qdq_tensor  per-tensor weights
  cnn_act         Conv with SiLU (Sigmoid, Mul), depthwise Conv with hard-swish (HardSigmoid,
                  Mul), 1x1 Conv with hard-swish as Add, Clip, Mul, Div, 1x1 Conv with Tanh, 1x1 Conv with LeakyRelu, Concat, residual Add,
                  GlobalAveragePool, Gemm; the residual sum is a second output (QDQ, uint8:
                  tandem's QLut tables and channels-last int8 regions with an edge)
  cnn_chain       PP-LCNetV3's blocks as paddle2onnx writes them: Conv, a scalar affine
                  (Mul, Add), hard-swish as x * Clip(x + 3, 0, 6) / 6 with Constant-node
                  bounds, another affine; SiLU as x * Sigmoid(x); an inner result that is also
                  a graph output; quantized with only Conv's inputs and outputs quantized, so
                  the element-wise chains are float between DQ and Q (tandem: one QLut each)
  qdq_move        written in QDQ form by hand (no quantizer), scales chosen to differ:
                  LeakyRelu, Split with an output of the input's quantization and an int8 one of a
                  smaller scale (saturating), Concat of three differently quantized inputs,
                  nearest Resize x2 and MaxPool each into a new quantization, convolutions
                  between; the Resize result is a second output, a third adds per-channel
                  (int8) and per-pixel (uint8) constants to the last convolution's, a fourth
                  is its squeeze-excitation (x * HardSigmoid(Conv(GlobalAveragePool(x)))), a
                  fifth the input's GlobalAveragePool
                  (tandem: the data-movement ops on 8-bit tensors with requantising tables,
                  channels-last; QAdd's broadcasting rows; QMul; QGlobalAveragePool)
  qdq_deconv      written in QDQ form by hand: Conv, then ConvTranspose 2x2 stride 2 with a
                  per-channel (axis 1) weight, an int32 bias and Relu, a second one to a
                  single channel (PP-OCR's DB head), an overlapping 3x3 stride 2 one with pads
                  and output_padding, a grouped per-tensor one with an input zero point, a
                  dilated one (oneDNN's int8 deconvolution has no dilations: tandem's
                  reference kernel); the first is also an output (tandem: QConvTranspose,
                  channels-last in the int8 layout pass)
  mlp_qdq         MatMul+Add+Relu, MatMul+Add, Gemm(transB) on [6, 64] rows (QDQ)
  cnn_qop         QOperator form (QLinearConv, QLinearMatMul; quantized ops Conv / MatMul
                  only)
  mlp_qop         QOperator form of the MLP (QLinearMatMul)
  mlp_dyn         quantize_dynamic of the MLP (DynamicQuantizeLinear -> MatMulInteger, int8
                  weights): no output quantization step, compared with a float tolerance
Deterministic: fixed seeds. Usage: tools/make_int8_models.py [OUT_DIR] [--only=qdq_deconv]
(default tests/models_int8; its folders are replaced, or with --only that case's alone)."""
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)


def conv(nodes, inits, rng, x, cin, cout, k, name, group=1, stride=1, act=None):
    w = (rng.standard_normal((cout, cin // group, k, k)) * (1.5 / np.sqrt(cin // group * k * k)))
    b = rng.standard_normal(cout) * 0.1
    inits += [numpy_helper.from_array(w.astype(np.float32), name + "_w"),
              numpy_helper.from_array(b.astype(np.float32), name + "_b")]
    nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name],
                                  kernel_shape=[k, k], pads=[k // 2] * 4, group=group,
                                  strides=[stride, stride], name=name))
    if act == "relu":
        nodes.append(helper.make_node("Relu", [name], [name + "_r"], name=name + "_relu"))
        return name + "_r"
    if act == "relu6":
        inits += [numpy_helper.from_array(np.array(0, np.float32), name + "_lo"),
                  numpy_helper.from_array(np.array(6, np.float32), name + "_hi")]
        nodes.append(helper.make_node("Clip", [name, name + "_lo", name + "_hi"], [name + "_r"],
                                      name=name + "_clip"))
        return name + "_r"
    return name


def cnn(batch, seed=1):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    h = conv(nodes, inits, rng, "x", 3, 16, 3, "c1", act="relu")
    h = conv(nodes, inits, rng, h, 16, 16, 3, "c2", act="relu6")
    nodes.append(helper.make_node("MaxPool", [h], ["p1"], kernel_shape=[2, 2], strides=[2, 2],
                                  name="pool"))
    a = conv(nodes, inits, rng, "p1", 16, 32, 1, "c3", act="relu")
    a = conv(nodes, inits, rng, a, 32, 32, 3, "dw", group=32, act="relu")
    a = conv(nodes, inits, rng, a, 32, 32, 1, "c4")
    s = conv(nodes, inits, rng, "p1", 16, 32, 1, "sc")
    nodes.append(helper.make_node("Add", [a, s], ["res"], name="res_add"))
    nodes.append(helper.make_node("Relu", ["res"], ["res_r"], name="res_relu"))
    b = conv(nodes, inits, rng, "res_r", 32, 24, 3, "c5", stride=2, act="relu")
    c = conv(nodes, inits, rng, "res_r", 32, 24, 3, "c6", stride=2, act="relu")
    nodes.append(helper.make_node("Concat", [b, c], ["cat"], axis=1, name="cat"))
    nodes.append(helper.make_node("GlobalAveragePool", ["cat"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    wf = rng.standard_normal((10, 48)) * 0.3
    inits.append(numpy_helper.from_array(wf.astype(np.float32), "fc_w"))
    inits.append(numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "fc_b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1, name="fc"))
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [batch, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), [batch, 3, 32, 32]


def mlp(seed=2):
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def lin(x, k, n, name, act):
        inits.append(numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), name + "_w"))
        inits.append(numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), name + "_b"))
        nodes.append(helper.make_node("MatMul", [x, name + "_w"], [name + "_m"], name=name))
        nodes.append(helper.make_node("Add", [name + "_m", name + "_b"], [name + "_a"], name=name + "_add"))
        if act:
            nodes.append(helper.make_node("Relu", [name + "_a"], [name + "_r"], name=name + "_relu"))
            return name + "_r"
        return name + "_a"

    h = lin("x", 64, 128, "l1", True)
    h = lin(h, 128, 96, "l2", True)
    inits.append(numpy_helper.from_array((rng.standard_normal((40, 96)) / np.sqrt(96)).astype(np.float32), "g_w"))
    inits.append(numpy_helper.from_array((rng.standard_normal(40) * 0.1).astype(np.float32), "g_b"))
    nodes.append(helper.make_node("Gemm", [h, "g_w", "g_b"], ["y"], transB=1, name="gemm"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 40])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), [6, 64]


def cnn_act(seed=4):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def act(x, op, **kw):
        nodes.append(helper.make_node(op, [x], [x + "_" + op.lower()], name=x + "_" + op, **kw))
        return x + "_" + op.lower()

    def mul(a, b, name):
        nodes.append(helper.make_node("Mul", [a, b], [name], name=name))
        return name
    h = conv(nodes, inits, rng, "x", 3, 16, 3, "a1")
    h = mul(h, act(h, "Sigmoid"), "a1_silu")
    d = conv(nodes, inits, rng, h, 16, 16, 3, "a2", group=16)
    d = mul(d, act(d, "HardSigmoid", alpha=1.0 / 6, beta=0.5), "a2_hswish")
    # hard-swish as exporters decompose it: x * Clip(x + 3, 0, 6) / 6
    e = conv(nodes, inits, rng, d, 16, 16, 1, "a2b")
    inits += [numpy_helper.from_array(np.array(v, np.float32), f"a2b_{k}")
              for k, v in (("three", 3), ("zero", 0), ("six", 6))]
    nodes.append(helper.make_node("Add", [e, "a2b_three"], ["a2b_p3"], name="a2b_add3"))
    nodes.append(helper.make_node("Clip", ["a2b_p3", "a2b_zero", "a2b_six"], ["a2b_c"],
                                  name="a2b_clip"))
    nodes.append(helper.make_node("Mul", [e, "a2b_c"], ["a2b_m"], name="a2b_mul"))
    nodes.append(helper.make_node("Div", ["a2b_m", "a2b_six"], ["a2b_hs"], name="a2b_div"))
    t = act(conv(nodes, inits, rng, "a2b_hs", 16, 16, 1, "a3"), "Tanh")
    lr = act(conv(nodes, inits, rng, t, 16, 16, 1, "a4"), "LeakyRelu", alpha=0.1)
    nodes.append(helper.make_node("Add", [lr, h], ["a_res"], name="a_res_add"))
    b = conv(nodes, inits, rng, "a_res", 16, 8, 3, "a5", act="relu")
    c = conv(nodes, inits, rng, "a_res", 16, 8, 1, "a6", act="relu")
    nodes.append(helper.make_node("Concat", [b, c], ["a_cat"], axis=1, name="a_cat"))
    nodes.append(helper.make_node("GlobalAveragePool", ["a_cat"], ["a_gap"], name="a_gap"))
    nodes.append(helper.make_node("Flatten", ["a_gap"], ["a_flat"], name="a_flat"))
    inits.append(numpy_helper.from_array((rng.standard_normal((10, 16)) * 0.3).astype(np.float32), "a_fw"))
    inits.append(numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "a_fb"))
    nodes.append(helper.make_node("Gemm", ["a_flat", "a_fw", "a_fb"], ["y"], transB=1, name="a_fc"))
    g = helper.make_graph(nodes, "cnn_act",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10]),
                           helper.make_tensor_value_info("a_res", TensorProto.FLOAT,
                                                         [1, 16, 16, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), [1, 3, 16, 16]


def cnn_chain(seed=5):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def scalar(name, v, constant_node=False):
        t = numpy_helper.from_array(np.array(v, np.float32), name)
        if constant_node:
            nodes.append(helper.make_node("Constant", [], [name], value=t, name=name + "_const"))
        else:
            inits.append(t)
        return name

    def op(kind, ins, name):
        nodes.append(helper.make_node(kind, ins, [name], name=name))
        return name

    def affine(x, name):
        m = op("Mul", [scalar(name + "_s", float(rng.uniform(0.5, 2))), x], name + "_mul")
        return op("Add", [m, scalar(name + "_b", float(rng.uniform(-1, 1)))], name + "_add")

    def hswish(x, name):
        p3 = op("Add", [x, scalar(name + "_three", 3.0, True)], name + "_p3")
        c = op("Clip", [p3, scalar(name + "_lo", 0.0, True), scalar(name + "_hi", 6.0, True)],
               name + "_clip")
        return op("Div", [op("Mul", [x, c], name + "_m"), scalar(name + "_six", 6.0, True)],
                  name + "_div")

    h = conv(nodes, inits, rng, "x", 3, 16, 3, "c1")
    h = affine(hswish(affine(h, "c1a"), "c1h"), "c1b")
    h = conv(nodes, inits, rng, h, 16, 16, 3, "c2", group=16)
    s = op("Mul", [h, op("Sigmoid", [h], "c2_sig")], "c2_silu")
    h = conv(nodes, inits, rng, s, 16, 16, 1, "c3")
    inner = affine(h, "c3a")  # also a graph output: the chain after it stays apart
    h = hswish(inner, "c3h")
    y = conv(nodes, inits, rng, h, 16, 8, 1, "c4")
    g = helper.make_graph(nodes, "cnn_chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("c4", TensorProto.FLOAT, [1, 8, 16, 16]),
                           helper.make_tensor_value_info(inner, TensorProto.FLOAT,
                                                         [1, 16, 16, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), [1, 3, 16, 16]


def qdq_move(seed=6):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v), name))
        return name

    def q(x, name, s, zp, t=np.uint8):
        nodes.append(helper.make_node("QuantizeLinear", [x, const(name + "_s", np.float32(s)),
                                                         const(name + "_z", t(zp))], [name]))
        return name

    def dq(xq, name=None):
        name = name or xq + "_dq"
        n = next(n for n in nodes if n.output[0] == xq)
        nodes.append(helper.make_node("DequantizeLinear", [xq, n.input[1], n.input[2]], [name]))
        return name

    def conv(x, cin, cout, k, name):
        w = rng.standard_normal((cout, cin, k, k)) * (1.5 / np.sqrt(cin * k * k))
        # (|w| <= 63: pair sums of uint8 x int8 products stay below 2^15, so CPUs without
        # VNNI, whose kernels saturate them, are exact too)
        ws = (np.abs(w).reshape(cout, -1).max(1) / 63).astype(np.float32)
        wq = np.clip(np.round(w / ws[:, None, None, None]), -63, 63).astype(np.int8)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        nodes.append(helper.make_node(
            "DequantizeLinear", [const(name + "_wq", wq), const(name + "_ws", ws),
                                 const(name + "_wz", np.zeros(cout, np.int8))], [name + "_w"], axis=0))
        nodes.append(helper.make_node("Conv", [x, name + "_w", const(name + "_b", b)], [name],
                                      kernel_shape=[k, k], pads=[k // 2] * 4))
        return name

    q0 = q("x", "q0", 0.03, 128)
    q1 = q(conv(dq(q0), 8, 16, 3, "c1"), "q1", 0.08, 120)
    nodes.append(helper.make_node("LeakyRelu", [dq(q1)], ["act"], alpha=0.25))
    q2 = q("act", "q2", 0.04, 10)
    nodes.append(helper.make_node("Split", [dq(q2), const("sizes", np.array([6, 10], np.int64))],
                                  ["sa", "sb"], axis=1))
    a = q("sa", "qa", 0.04, 10)  # the input's quantization: no table
    b = q("sb", "qb", 0.01, -5, np.int8)  # int8, a quarter of the scale: saturates
    q3 = q(conv(dq(b), 10, 10, 3, "c2"), "q3", 0.06, 128)
    nodes.append(helper.make_node("Concat", [dq(a), dq(q3), dq(q1, "q1_dq3")], ["cat"], axis=1))
    q4 = q("cat", "q4", 0.05, 100)
    nodes.append(helper.make_node("Resize", [dq(q4), "", const("scales", np.array(
        [1, 1, 2, 2], np.float32))], ["up"], mode="nearest"))
    q5 = q("up", "q5", 0.045, 90)
    nodes.append(helper.make_node("MaxPool", [dq(q5)], ["mp"], kernel_shape=[2, 2],
                                  strides=[2, 2]))
    q6 = q("mp", "q6", 0.055, 95)
    q7 = q(conv(dq(q6), 32, 24, 1, "c3"), "q7", 0.1, 128)  # (24: vector and scalar tails)
    # broadcasting sums with 8-bit constants: per channel (int8), per pixel (uint8)
    nodes.append(helper.make_node("DequantizeLinear", [
        const("bc_q", rng.integers(-100, 100, (1, 24, 1, 1)).astype(np.int8)),
        const("bc_s", np.float32(0.02)), const("bc_z", np.int8(3))], ["bc"]))
    dq(q7, "y")
    nodes.append(helper.make_node("Add", [dq(q7), "bc"], ["sum1"]))
    q8 = q("sum1", "q8", 0.11, 120)
    nodes.append(helper.make_node("DequantizeLinear", [
        const("bp_q", rng.integers(0, 255, (1, 1, 12, 12)).astype(np.uint8)),
        const("bp_s", np.float32(0.01)), const("bp_z", np.uint8(128))], ["bp"]))
    nodes.append(helper.make_node("Add", ["bp", dq(q8)], ["sum2"]))
    dq(q("sum2", "q9", 0.1, 125), "s")
    # squeeze-excitation: x * HardSigmoid(Conv(GlobalAveragePool(x))), per channel
    nodes.append(helper.make_node("GlobalAveragePool", [dq(q7, "q7_dq2")], ["gap"]))
    qc4 = q(conv(dq(q("gap", "qg", 0.02, 128)), 24, 24, 1, "c4"), "qc4", 0.05, 128)
    nodes.append(helper.make_node("HardSigmoid", [dq(qc4)], ["hs"], alpha=0.2, beta=0.5))
    nodes.append(helper.make_node("Mul", [dq(q7, "q7_dq3"), dq(q("hs", "qhs", 1 / 255, 0))],
                                  ["se"]))
    dq(q("se", "qse", 0.07, 100), "e")
    nodes.append(helper.make_node("GlobalAveragePool", [dq(q0, "q0_dq2")], ["gap0"]))
    dq(q("gap0", "qgap0", 0.003, 128), "g")  # (on the input: plain layout)
    dq(q5, "r")
    g = helper.make_graph(nodes, "qdq_move",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 12, 12]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 32, 24, 24]),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 24, 12, 12]),
                           helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 24, 12, 12]),
                           helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 8, 1, 1])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m, [1, 8, 12, 12]


def qdq_deconv(seed=7):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v), name))
        return name

    def q(x, name, s, zp, t=np.uint8):
        nodes.append(helper.make_node("QuantizeLinear", [x, const(name + "_s", np.float32(s)),
                                                         const(name + "_z", t(zp))], [name]))
        return name

    def dq(xq, name=None):
        name = name or xq + "_dq"
        n = next(n for n in nodes if n.output[0] == xq)
        nodes.append(helper.make_node("DequantizeLinear", [xq, n.input[1], n.input[2]], [name]))
        return name

    def weight(name, shape, axis, per_channel=True):
        w = rng.standard_normal(shape) * (1.5 / np.sqrt(np.prod(shape) / shape[axis]))
        # (|w| <= 63: CPUs without VNNI, whose pair sums saturate, are exact too)
        red = tuple(d for d in range(len(shape)) if d != axis)
        ws = (np.abs(w).max(red) / 63).astype(np.float32) if per_channel else \
            np.float32(np.abs(w).max() / 63)
        bs = ws.reshape([-1 if d == axis else 1 for d in range(len(shape))]) if per_channel else ws
        wq = np.clip(np.round(w / bs), -63, 63).astype(np.int8)
        zp = np.zeros(shape[axis], np.int8) if per_channel else np.int8(0)
        kw = {"axis": axis} if per_channel else {}
        nodes.append(helper.make_node("DequantizeLinear", [
            const(name + "_wq", wq), const(name + "_ws", ws), const(name + "_wz", zp)],
            [name + "_w"], **kw))
        return name + "_w", ws

    def bias(name, n, xs, ws):
        b = rng.standard_normal(n) * 0.1
        bs = (np.float32(xs) * ws).astype(np.float32) * np.ones(n, np.float32)
        nodes.append(helper.make_node("DequantizeLinear", [
            const(name + "_bq", np.round(b / bs).astype(np.int32)), const(name + "_bs", bs),
            const(name + "_bz", np.zeros(n, np.int32))], [name + "_b"], axis=0))
        return name + "_b"

    def deconv(x, xs, cin, cout, k, name, group=1, per_channel=True, **attrs):
        w, ws = weight(name, (cin, cout // group, k, k), 1, per_channel)
        nodes.append(helper.make_node("ConvTranspose", [x, w, bias(name, cout, xs, ws)], [name],
                                      kernel_shape=[k, k], group=group, **attrs))
        return name

    q0 = q("x", "q0", 0.03, 128)
    w1, _ = weight("c1", (16, 8, 3, 3), 0)
    nodes.append(helper.make_node("Conv", [dq(q0), w1], ["c1"], kernel_shape=[3, 3],
                                  pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["c1"], ["c1r"]))
    q1 = q("c1r", "q1", 0.04, 0)
    nodes.append(helper.make_node("Relu", [deconv(dq(q1), 0.04, 16, 12, 2, "d1", strides=[2, 2])],
                                  ["d1r"]))
    q2 = q("d1r", "q2", 0.05, 0)
    dq(q2, "y1")
    q3 = q(deconv(dq(q2, "q2_dq2"), 0.05, 12, 1, 2, "d2", strides=[2, 2]), "q3", 0.06, 120)
    dq(q3, "y2")
    q4 = q(deconv(dq(q1, "q1_dq2"), 0.04, 16, 10, 3, "d3", strides=[2, 2], pads=[1, 1, 1, 1],
                  output_padding=[1, 1]), "q4", 0.07, 110)
    dq(q4, "y3")
    q5 = q(deconv(dq(q0, "q0_dq2"), 0.03, 8, 6, 2, "d4", group=2, per_channel=False,
                  strides=[2, 2]), "q5", 0.05, 125)
    dq(q5, "y4")
    q6 = q(deconv(dq(q1, "q1_dq3"), 0.04, 16, 4, 3, "d5", strides=[2, 2], dilations=[2, 2],
                  pads=[2, 2, 2, 2]), "q6", 0.05, 100)
    dq(q6, "y5")
    g = helper.make_graph(nodes, "qdq_deconv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 12])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 12, 20, 24]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 1, 40, 48]),
                           helper.make_tensor_value_info("y3", TensorProto.FLOAT, [1, 10, 20, 24]),
                           helper.make_tensor_value_info("y4", TensorProto.FLOAT, [1, 6, 20, 24]),
                           helper.make_tensor_value_info("y5", TensorProto.FLOAT, [1, 4, 19, 23])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m, [1, 8, 10, 12]


class Reader(CalibrationDataReader):
    def __init__(self, shape, seed, n=16):
        rng = np.random.default_rng(seed)
        self.data = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]
        self.i = 0

    def get_next(self):
        if self.i >= len(self.data):
            return None
        self.i += 1
        return self.data[self.i - 1]


def quantize(model, shape, path, fmt, act_type, per_channel, ops=None):
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "float.onnx")
        onnx.save(model, src)
        quantize_static(src, path, Reader(shape, 100), quant_format=fmt,
                        activation_type=act_type, weight_type=QuantType.QInt8,
                        per_channel=per_channel, op_types_to_quantize=ops)


def write_case(out, name, model_path, shape, seed):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    shutil.move(model_path, os.path.join(d, "model.onnx"))
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})
    ds = os.path.join(d, "test_data_set_0")
    with open(os.path.join(ds, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    for i, (o, v) in enumerate(zip(sess.get_outputs(), y)):
        with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    ops = sorted({n.op_type for n in onnx.load(os.path.join(d, "model.onnx")).graph.node})
    print(f"{name}: {', '.join(ops)}")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--only=")]
    only = [a[7:] for a in sys.argv[1:] if a.startswith("--only=")]
    out = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models_int8")
    if only:  # one case (re)written, the others left as they are
        with tempfile.TemporaryDirectory() as tmp:
            for name in only:
                if name != "qdq_deconv":
                    sys.exit(f"--only: {name} cannot be written alone")
                if os.path.isdir(os.path.join(out, name)):
                    shutil.rmtree(os.path.join(out, name))
                model, shape = qdq_deconv()
                path = os.path.join(tmp, name + ".onnx")
                onnx.save(model, path)
                write_case(out, name, path, shape, 1104)
        return
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    U8, S8 = QuantType.QUInt8, QuantType.QInt8
    QDQ, QOP = QuantFormat.QDQ, QuantFormat.QOperator
    cases = [  # name, model maker, format, activation type, per channel, ops
        ("cnn_qdq_u8", lambda: cnn(1), QDQ, U8, True, None),
        ("cnn_qdq_s8", lambda: cnn(1), QDQ, S8, True, None),
        ("cnn_qdq_b3", lambda: cnn(3), QDQ, U8, True, None),
        ("cnn_qdq_tensor", lambda: cnn(1), QDQ, U8, False, None),
        ("mlp_qdq", mlp, QDQ, U8, True, None),
        ("cnn_qop", lambda: cnn(2), QOP, U8, True, ["Conv", "MatMul"]),
        ("mlp_qop", mlp, QOP, U8, False, ["MatMul"]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, make, fmt, at, pc, ops) in enumerate(cases):
            model, shape = make()
            path = os.path.join(tmp, name + ".onnx")
            quantize(model, shape, path, fmt, at, pc, ops)
            write_case(out, name, path, shape, 1000 + i)
        model, shape = mlp()
        src, path = os.path.join(tmp, "mlp_float.onnx"), os.path.join(tmp, "mlp_dyn.onnx")
        onnx.save(model, src)
        quantize_dynamic(src, path, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
        write_case(out, "mlp_dyn", path, shape, 1000 + len(cases))
        model, shape = cnn_act()  # (added later: after the others, whose seeds stay)
        path = os.path.join(tmp, "cnn_act.onnx")
        quantize(model, shape, path, QDQ, U8, True)
        write_case(out, "cnn_act", path, shape, 1001 + len(cases))
        model, shape = cnn_chain()
        path = os.path.join(tmp, "cnn_chain.onnx")
        quantize(model, shape, path, QDQ, U8, True, ["Conv"])
        write_case(out, "cnn_chain", path, shape, 1002 + len(cases))
        model, shape = qdq_move()  # (already QDQ: no quantizer)
        path = os.path.join(tmp, "qdq_move.onnx")
        onnx.save(model, path)
        write_case(out, "qdq_move", path, shape, 1003 + len(cases))
        model, shape = qdq_deconv()  # (already QDQ)
        path = os.path.join(tmp, "qdq_deconv.onnx")
        onnx.save(model, path)
        write_case(out, "qdq_deconv", path, shape, 1104)


if __name__ == "__main__":
    main()
