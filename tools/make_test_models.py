#!/usr/bin/env python3
"""Builds the model tests in tests/models/ and the bundled default model in models/default/.

Each model is a small, randomly initialised version of a real architecture, written the way
exporters (PyTorch, tf2onnx) write them. Reference outputs come from ONNX Runtime
(CPUExecutionProvider, graph optimisations disabled, one thread). Layout is the ONNX node-test
layout that `tandem conformance` reads:

    tests/models/NAME/model.onnx
    tests/models/NAME/test_data_set_0/input_N.pb   (serialized TensorProto)
    tests/models/NAME/test_data_set_0/output_N.pb

Everything is deterministic (fixed seeds), so re-running the script rewrites identical files.

Usage:
    tools/make_test_models.py                 # all model tests into tests/models/
    tools/make_test_models.py --only bert_layer
    tools/make_test_models.py --default       # models/default/ (model.onnx, input.npy, ...)
    tools/make_test_models.py --list
"""
import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # ONNX Runtime and tandem both accept it
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Builder:
    """Collects nodes and initializers; names are generated from a prefix and a counter."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = {}

    def name(self, prefix):
        n = self.count.get(prefix, 0)
        self.count[prefix] = n + 1
        return f"{prefix}_{n}"

    def weight(self, prefix, shape, scale=0.1):
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(prefix, arr)

    def const(self, prefix, arr):
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, n_out=1, name=None, **attrs):
        name = name or self.name(op_type.lower())
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]

    def op_to(self, op_type, inputs, output, **attrs):
        """A node whose single output has a chosen name (graph outputs)."""
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=self.name(op_type.lower()),
                                           **attrs))
        return output

    # ---- layers ----
    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=True):
        pad = k // 2 if pad is None else pad
        w = self.weight("conv_w", (cout, cin // group, k, k))
        ins = [x, w] + ([self.weight("conv_b", (cout,))] if bias else [])
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad, pad, pad, pad], group=group, dilations=[1, 1])

    def bn(self, x, c):
        r = self.rng
        scale = self.const("bn_scale", (1.0 + 0.1 * r.standard_normal(c)).astype(np.float32))
        bias = self.const("bn_bias", (0.1 * r.standard_normal(c)).astype(np.float32))
        mean = self.const("bn_mean", (0.1 * r.standard_normal(c)).astype(np.float32))
        var = self.const("bn_var", r.uniform(0.5, 1.5, c).astype(np.float32))
        return self.op("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5,
                       momentum=0.9)

    def gemm(self, x, nin, nout, trans_b=True):
        w = self.weight("fc_w", (nout, nin) if trans_b else (nin, nout))
        b = self.weight("fc_b", (nout,))
        return self.op("Gemm", [x, w, b], alpha=1.0, beta=1.0, transB=1 if trans_b else 0)

    def linear(self, x, nin, nout):
        """PyTorch nn.Linear on a 3-D input: MatMul with a [in, out] weight, then Add."""
        w = self.weight("linear_w", (nin, nout))
        b = self.weight("linear_b", (nout,))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def graph(self, name, inputs, outputs):
        return helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)


def make_model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="tandem-tools", producer_version="1")
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m, full_check=True)
    return m


def tensor_vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


# ---------------------------------------------------------------------------------------------
# Models. Each returns (model, {input name: array}).


def resnet(seed, classes, softmax_output=False):
    b = Builder(seed)
    x = "input"
    h = b.conv(x, 3, 16, 7, stride=2, pad=3)
    h = b.op("Relu", [b.bn(h, 16)])
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def basic_block(h, cin, cout, stride):
        y = b.op("Relu", [b.bn(b.conv(h, cin, cout, 3, stride=stride, bias=False), cout)])
        y = b.bn(b.conv(y, cout, cout, 3, bias=False), cout)
        if stride != 1 or cin != cout:
            sc = b.bn(b.conv(h, cin, cout, 1, stride=stride, pad=0, bias=False), cout)
        else:
            sc = h
        return b.op("Relu", [b.op("Add", [y, sc])])

    h = basic_block(h, 16, 16, 1)
    h = basic_block(h, 16, 16, 1)
    h = basic_block(h, 16, 32, 2)
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h], axis=1)
    if softmax_output:
        logits = b.gemm(h, 32, classes)
        b.op_to("Softmax", [logits], "probabilities", axis=-1)
        outs = [tensor_vi("probabilities", TensorProto.FLOAT, [1, classes])]
    else:
        w = b.weight("fc_w", (classes, 32))
        bias = b.weight("fc_b", (classes,))
        b.op_to("Gemm", [h, w, bias], "logits", transB=1)
        outs = [tensor_vi("logits", TensorProto.FLOAT, [1, classes])]
    g = b.graph("resnet_blocks", [tensor_vi(x, TensorProto.FLOAT, [1, 3, 64, 64])], outs)
    inp = np.random.default_rng(seed + 1000).standard_normal((1, 3, 64, 64)).astype(np.float32)
    return make_model(g), {x: inp}


def resnet_blocks():
    return resnet(1, 10)


def mobilenet_block():
    b = Builder(2)
    x = "input"
    lo = b.const("clip_min", np.array(0.0, np.float32))
    hi = b.const("clip_max", np.array(6.0, np.float32))

    def act(h, kind):
        if kind == "relu6":
            return b.op("Clip", [h, lo, hi])
        return b.op("HardSwish", [h])

    def inverted_residual(h, cin, cout, expand, stride, kind):
        mid = cin * expand
        y = act(b.bn(b.conv(h, cin, mid, 1, pad=0, bias=False), mid), kind)
        y = act(b.bn(b.conv(y, mid, mid, 3, stride=stride, group=mid, bias=False), mid), kind)
        y = b.bn(b.conv(y, mid, cout, 1, pad=0, bias=False), cout)
        if stride == 1 and cin == cout:
            y = b.op("Add", [h, y])
        return y

    h = b.op("Clip", [b.bn(b.conv(x, 3, 16, 3, stride=2, bias=False), 16), lo, hi])  # 32x32
    h = inverted_residual(h, 16, 16, 6, 1, "relu6")
    h = inverted_residual(h, 16, 24, 4, 2, "relu6")  # 16x16
    h = inverted_residual(h, 24, 24, 3, 1, "relu6")
    h = inverted_residual(h, 24, 24, 3, 1, "hardswish")
    h = inverted_residual(h, 24, 32, 3, 2, "hardswish")  # 8x8
    h = b.op("HardSwish", [b.bn(b.conv(h, 32, 64, 1, pad=0, bias=False), 64)])
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h], axis=1)
    w = b.weight("fc_w", (10, 64))
    bias = b.weight("fc_b", (10,))
    b.op_to("Gemm", [h, w, bias], "logits", transB=1)
    g = b.graph("mobilenet_block", [tensor_vi(x, TensorProto.FLOAT, ["batch", 3, 64, 64])],
                [tensor_vi("logits", TensorProto.FLOAT, ["batch", 10])])
    inp = np.random.default_rng(2000).standard_normal((2, 3, 64, 64)).astype(np.float32)
    return make_model(g), {x: inp}


def bert_layer():
    b = Builder(3)
    hidden, heads, ffn, vocab, max_pos = 64, 4, 256, 100, 32
    head_dim = hidden // heads
    batch, seq = 2, 16
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731

    def layer_norm(x):
        g = b.const("ln_gamma", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
        be = b.const("ln_beta", (0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
        return b.op("LayerNormalization", [x, g, be], axis=-1, epsilon=1e-12)

    def dim_of(x, axis):
        """Exporter style: Shape -> Gather(axis) -> Unsqueeze: a 1-element int64 tensor."""
        s = b.op("Shape", [x])
        d = b.op("Gather", [s, b.const("idx", i64(axis))], axis=0)
        return b.op("Unsqueeze", [d, b.const("axes", i64([0]))])

    # embeddings
    words = b.op("Gather", [b.weight("word_emb", (vocab, hidden)), "input_ids"], axis=0)
    seq_len = dim_of("input_ids", 1)
    pos_ids = b.const("position_ids", np.arange(max_pos, dtype=np.int64)[None, :])
    pos_ids = b.op("Slice", [pos_ids, b.const("starts", i64([0])), seq_len,
                             b.const("axes", i64([1])), b.const("steps", i64([1]))])
    pos = b.op("Gather", [b.weight("pos_emb", (max_pos, hidden)), pos_ids], axis=0)
    types = b.op("Gather", [b.weight("type_emb", (2, hidden)), "token_type_ids"], axis=0)
    emb = b.op("Add", [b.op("Add", [words, types]), pos])
    h = layer_norm(emb)

    # extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m = b.op("Unsqueeze", ["attention_mask", b.const("axes", i64([1]))])
    m = b.op("Unsqueeze", [m, b.const("axes", i64([2]))])
    m = b.op("Cast", [m], to=TensorProto.FLOAT)
    m = b.op("Sub", [b.const("one", np.array(1.0, np.float32)), m])
    mask = b.op("Mul", [m, b.const("neg", np.array(-10000.0, np.float32))])

    # self-attention
    bs, sq = dim_of(h, 0), dim_of(h, 1)
    heads_shape = b.op("Concat", [bs, sq, b.const("nh", i64([heads])),
                                  b.const("hd", i64([head_dim]))], axis=0)

    def split_heads(x, perm):
        return b.op("Transpose", [b.op("Reshape", [x, heads_shape])], perm=perm)

    q = split_heads(b.linear(h, hidden, hidden), [0, 2, 1, 3])
    k = split_heads(b.linear(h, hidden, hidden), [0, 2, 3, 1])
    v = split_heads(b.linear(h, hidden, hidden), [0, 2, 1, 3])
    scores = b.op("MatMul", [q, k])
    scores = b.op("Div", [scores, b.const("sqrt_d", np.array(np.sqrt(head_dim), np.float32))])
    scores = b.op("Add", [scores, mask])
    probs = b.op("Softmax", [scores], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged_shape = b.op("Concat", [dim_of(ctx, 0), dim_of(ctx, 1),
                                   b.const("hidden", i64([hidden]))], axis=0)
    ctx = b.op("Reshape", [ctx, merged_shape])
    attn = b.linear(ctx, hidden, hidden)
    h = layer_norm(b.op("Add", [attn, h]))

    # feed-forward with the erf form of GELU, as torch.onnx writes it
    f = b.linear(h, hidden, ffn)
    e = b.op("Erf", [b.op("Div", [f, b.const("sqrt2", np.array(1.4142135381698608, np.float32))])])
    e = b.op("Add", [e, b.const("one", np.array(1.0, np.float32))])
    f = b.op("Mul", [b.op("Mul", [f, e]), b.const("half", np.array(0.5, np.float32))])
    f = b.linear(f, ffn, hidden)
    out = layer_norm(b.op("Add", [f, h]))
    b.op_to("Identity", [out], "last_hidden_state")

    # pooler: first token -> dense -> tanh
    first = b.op("Gather", ["last_hidden_state", b.const("idx", i64(0))], axis=1)
    pooled = b.gemm(first, hidden, hidden)
    b.op_to("Tanh", [pooled], "pooler_output")

    ids_t = lambda n: tensor_vi(n, TensorProto.INT64, ["batch", "seq"])  # noqa: E731
    g = b.graph("bert_layer", [ids_t("input_ids"), ids_t("attention_mask"), ids_t("token_type_ids")],
                [tensor_vi("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden]),
                 tensor_vi("pooler_output", TensorProto.FLOAT, ["batch", hidden])])
    r = np.random.default_rng(3000)
    ids = r.integers(0, vocab, (batch, seq), dtype=np.int64)
    att = np.ones((batch, seq), np.int64)
    att[1, 11:] = 0  # second sequence is padded
    tt = np.zeros((batch, seq), np.int64)
    tt[:, 8:] = 1
    return make_model(g), {"input_ids": ids, "attention_mask": att, "token_type_ids": tt}


def dlrm_like():
    b = Builder(4)
    n_dense, emb_dim = 13, 16
    tables = [50, 30, 20]
    batch = 8
    h = "dense_features"
    for nin, nout in [(n_dense, 32), (32, 32), (32, emb_dim)]:
        h = b.op("Relu", [b.gemm(h, nin, nout)])
    axes1 = b.const("axes", np.array([1], np.int64))
    stack = [b.op("Unsqueeze", [h, axes1])]
    for t, rows in enumerate(tables):
        table = b.weight("emb_table", (rows, emb_dim), scale=1.0)  # embeddings are O(1)
        e = b.op("Gather", [table, f"sparse_{t}"], axis=0)
        stack.append(b.op("Unsqueeze", [e, axes1]))
    z = b.op("Concat", stack, axis=1)  # [batch, 4, emb_dim]
    zz = b.op("MatMul", [z, b.op("Transpose", [z], perm=[0, 2, 1])])  # [batch, 4, 4]
    flat = b.op("Flatten", [zz], axis=1)  # [batch, 16]
    n = len(tables) + 1
    upper = [i * n + j for i in range(n) for j in range(i + 1, n)]
    inter = b.op("Gather", [flat, b.const("pairs", np.array(upper, np.int64))], axis=1)
    top = b.op("Concat", [h, inter], axis=1)
    nin = emb_dim + len(upper)
    for nout in [32, 16]:
        top = b.op("Relu", [b.gemm(top, nin, nout)])
        nin = nout
    b.op_to("Sigmoid", [b.gemm(top, nin, 1)], "click_probability")
    inputs = [tensor_vi(h_name, TensorProto.FLOAT, ["batch", n_dense]) for h_name in ["dense_features"]]
    inputs += [tensor_vi(f"sparse_{t}", TensorProto.INT64, ["batch"]) for t in range(len(tables))]
    g = b.graph("dlrm_like", inputs, [tensor_vi("click_probability", TensorProto.FLOAT, ["batch", 1])])
    r = np.random.default_rng(4000)
    # dense features as DLRM feeds them: log(1 + count)
    feeds = {"dense_features": np.log1p(r.integers(0, 200, (batch, n_dense))).astype(np.float32)}
    for t, rows in enumerate(tables):
        feeds[f"sparse_{t}"] = r.integers(0, rows, (batch,), dtype=np.int64)
    return make_model(g), feeds


def yolo_like_head():
    b = Builder(5)
    anchors, classes = 3, 4
    per = 5 + classes
    x = "images"

    def silu(h):
        return b.op("Mul", [h, b.op("Sigmoid", [h])])

    c1 = silu(b.bn(b.conv(x, 3, 16, 3, stride=2, bias=False), 16))  # 32x32
    c2 = b.op("LeakyRelu", [b.conv(c1, 16, 32, 3, stride=2)], alpha=0.1)  # 16x16
    c3 = b.op("LeakyRelu", [b.conv(c2, 32, 64, 3, stride=2)], alpha=0.1)  # 8x8
    up = b.conv(c3, 64, 32, 1, pad=0)
    scales = b.const("scales", np.array([1.0, 1.0, 2.0, 2.0], np.float32))
    up = b.op("Resize", [up, "", scales], mode="nearest",
              coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # 16x16
    p3 = b.op("Concat", [up, c2], axis=1)  # 64 x 16x16

    def head(feat, cin, size):
        y = b.conv(feat, cin, anchors * per, 1, pad=0)
        y = b.op("Reshape", [y, b.const("shape", np.array([0, anchors, per, size, size], np.int64))])
        y = b.op("Transpose", [y], perm=[0, 1, 3, 4, 2])
        return b.op("Reshape", [y, b.const("shape", np.array([0, -1, per], np.int64))])

    det = b.op("Concat", [head(p3, 64, 16), head(c3, 64, 8)], axis=1)  # [batch, 960, 9]
    det = b.op("Sigmoid", [det])
    i64 = lambda v: b.const("s", np.array(v, np.int64))  # noqa: E731
    b.op_to("Slice", [det, i64([0]), i64([4]), i64([2])], "boxes")
    obj = b.op("Slice", [det, i64([4]), i64([5]), i64([2]), i64([1])])
    cls = b.op("Slice", [det, i64([5]), i64([np.iinfo(np.int64).max]), i64([-1])])  # exporter-style open end
    b.op_to("Mul", [obj, cls], "scores")
    n_boxes = anchors * (16 * 16 + 8 * 8)
    g = b.graph("yolo_like_head", [tensor_vi(x, TensorProto.FLOAT, ["batch", 3, 64, 64])],
                [tensor_vi("boxes", TensorProto.FLOAT, ["batch", n_boxes, 4]),
                 tensor_vi("scores", TensorProto.FLOAT, ["batch", n_boxes, classes])])
    inp = np.random.default_rng(5000).standard_normal((2, 3, 64, 64)).astype(np.float32)
    return make_model(g), {x: inp}


def mlp_dynamic_batch():
    b = Builder(6)
    h = b.op("Flatten", ["input"], axis=1)
    h = b.op("Relu", [b.gemm(h, 32, 64)])
    w = b.weight("fc_w", (64, 10))
    bias = b.weight("fc_b", (10,))
    logits = b.op_to("Add", [b.op("MatMul", [h, w]), bias], "logits")
    b.op_to("Softmax", [logits], "probabilities", axis=-1)
    g = b.graph("mlp_dynamic_batch", [tensor_vi("input", TensorProto.FLOAT, ["batch", 4, 8])],
                [tensor_vi("logits", TensorProto.FLOAT, ["batch", 10]),
                 tensor_vi("probabilities", TensorProto.FLOAT, ["batch", 10])])
    inp = np.random.default_rng(6000).standard_normal((3, 4, 8)).astype(np.float32)
    return make_model(g), {"input": inp}


def hardswish_dw():
    """A PP-OCR-style backbone piece (issue 16): 1x1 Conv -> hard-swish -> depthwise Conv ->
    1x1 Conv, twice: first with hard-swish as Add/Clip/Mul/Div (how exporters decompose it),
    then as the HardSwish op before a strided 5x5 depthwise Conv. On AVX-512 the first depthwise
    Conv made oneDNN pick its reference kernel; a test checks that no node runs one."""
    b = Builder(8)
    x = "input"
    three = b.const("three", np.array(3.0, np.float32))
    zero = b.const("zero", np.array(0.0, np.float32))
    six = b.const("six", np.array(6.0, np.float32))
    h = b.conv(x, 16, 64, 1, pad=0)
    a = b.op("Clip", [b.op("Add", [h, three]), zero, six])
    h = b.op("Div", [b.op("Mul", [h, a]), six])
    h = b.conv(h, 64, 64, 3, group=64)
    h = b.conv(h, 64, 24, 1, pad=0)
    h = b.op("HardSwish", [b.conv(h, 24, 72, 1, pad=0)])
    h = b.conv(h, 72, 72, 5, stride=2, group=72)
    w = b.weight("conv_w", (40, 72, 1, 1))
    bias = b.weight("conv_b", (40,))
    b.op_to("Conv", [h, w, bias], "features", kernel_shape=[1, 1], strides=[1, 1],
            pads=[0, 0, 0, 0], group=1, dilations=[1, 1])
    g = b.graph("hardswish_dw", [tensor_vi(x, TensorProto.FLOAT, [1, 16, 40, 40])],
                [tensor_vi("features", TensorProto.FLOAT, [1, 40, 20, 20])])
    inp = np.random.default_rng(8000).standard_normal((1, 16, 40, 40)).astype(np.float32)
    return make_model(g), {x: inp}


def magika_like():
    """magika's shape of network as jax2tf writes it (issue 16): MatMul + bias -> GELU (tanh
    form, 0.044715 x^3 as x * (x * (0.044715 * x))) -> Unsqueeze -> whole-axis Slice ->
    Transpose -> 5x1 Conv over a column (W = 1) -> whole-axis Slice -> Squeeze -> Add(bias)
    -> GELU -> GlobalMaxPool; and a strided, padded 3x1 Conv over the same column. tandem fuses
    the first GELU into the MatMul, makes the second one FastGelu, drops the Slices and runs the
    column convolutions as rows."""
    b = Builder(9)
    x = "input"
    i64 = lambda v: b.const("idx", np.array(v, np.int64))

    def gelu(h):
        c = b.const("gelu_c", np.array(0.044715, np.float32))
        t = b.op("Mul", [h, b.op("Mul", [h, b.op("Mul", [c, h])])])
        t = b.op("Mul", [b.const("gelu_k", np.array(0.7978845834732056, np.float32)),
                         b.op("Add", [h, t])])
        t = b.op("Add", [b.const("one", np.ones((1, 1, 1), np.float32)), b.op("Tanh", [t])])
        t = b.op("Mul", [b.const("half", np.array(0.5, np.float32)), t])
        return b.op("Mul", [h, t])

    h = b.op("Add", [b.op("MatMul", [x, b.weight("w", (16, 32))]), b.weight("b", (1, 1, 32))])
    h = gelu(h)                                                    # [N, 40, 32]
    h = b.op("Unsqueeze", [h, i64([3])])                           # [N, 40, 32, 1]
    h = b.op("Slice", [h, i64([0, 0, 0, 0]), i64([10**9] * 4), i64([0, 2, 1, 3]), i64([1] * 4)])
    h = b.op("Transpose", [h], perm=[0, 2, 1, 3])                  # [N, 32, 40, 1]
    w = b.weight("conv_w", (24, 32, 5, 1))
    c = b.op("Conv", [h, w], kernel_shape=[5, 1], strides=[1, 1], dilations=[1, 1], group=1)
    c = b.op("Slice", [c, i64([0, 0, 0, 0]), i64([2**31 - 1] * 3 + [1]), i64([0, 1, 2, 3])])
    c = b.op("Squeeze", [c, i64([3])])                             # [N, 24, 36]
    c = gelu(b.op("Add", [c, b.weight("conv_b", (1, 24, 1))]))
    b.op_to("GlobalMaxPool", [c], "pooled")                        # [N, 24, 1]
    w2 = b.weight("conv_w", (8, 32, 3, 1))
    b.op_to("Conv", [h, w2, b.weight("conv_b", (8,))], "strided", kernel_shape=[3, 1],
            strides=[2, 1], pads=[1, 0, 1, 0], dilations=[1, 1], group=1)  # [N, 8, 20, 1]
    g = b.graph("magika_like", [tensor_vi(x, TensorProto.FLOAT, ["batch", 40, 16])],
                [tensor_vi("pooled", TensorProto.FLOAT, ["batch", 24, 1]),
                 tensor_vi("strided", TensorProto.FLOAT, ["batch", 8, 20, 1])])
    inp = np.random.default_rng(9000).standard_normal((3, 40, 16)).astype(np.float32)
    return make_model(g), {x: inp}


def attacut_like():
    """attacut's shape of network (issue 16): embedding -> three dilated Conv1d branches ->
    Transpose -> Unsqueeze -> Concat -> ReduceMax (torch.stack(...).max(dim)), which tandem runs
    as one element-wise Max; also stacks that stay as they are: ReduceMean over a negative
    axis and ReduceMin with keepdims=1."""
    b = Builder(10)
    x = "input"
    i64 = lambda v: b.const("idx", np.array(v, np.int64))
    h = b.op("Gather", [b.weight("emb", (30, 12), scale=1.0), x], axis=0)     # [1, L, 12]
    h = b.op("Transpose", [h], perm=[0, 2, 1])                               # [1, 12, L]
    branches = []
    for k, d in ((3, 1), (5, 3), (9, 2)):
        w = b.weight("conv_w", (20, 12, k))
        c = b.op("Conv", [h, w, b.weight("conv_b", (20,))], kernel_shape=[k], dilations=[d],
                 pads=[d * (k - 1) // 2] * 2, strides=[1], group=1)
        branches.append(b.op("Transpose", [c], perm=[0, 2, 1]))              # [1, L, 20]
    st = b.op("Concat", [b.op("Unsqueeze", [t, i64([3])]) for t in branches], axis=3)
    m = b.op("ReduceMax", [st], axes=[3], keepdims=0)                        # [1, L, 20]
    b.op_to("Relu", [b.op("Add", [b.op("MatMul", [m, b.weight("fc_w", (20, 4))]),
                                  b.weight("fc_b", (4,))])], "scores")
    st2 = b.op("Concat", [b.op("Unsqueeze", [t, i64([0])]) for t in branches], axis=0)
    b.op_to("ReduceMean", [st2], "mean", axes=[-4], keepdims=0)              # [1, L, 20]
    st3 = b.op("Concat", [b.op("Unsqueeze", [t, i64([1])]) for t in branches[:2]], axis=1)
    b.op_to("ReduceMin", [st3], "min_kept", axes=[1], keepdims=1)            # [1, 1, L, 20]
    g = b.graph("attacut_like", [tensor_vi(x, TensorProto.INT64, [1, "seq_len"])],
                [tensor_vi("scores", TensorProto.FLOAT, [1, "seq_len", 4]),
                 tensor_vi("mean", TensorProto.FLOAT, [1, "seq_len", 20]),
                 tensor_vi("min_kept", TensorProto.FLOAT, [1, 1, "seq_len", 20])])
    inp = np.random.default_rng(10000).integers(0, 30, (1, 37)).astype(np.int64)
    return make_model(g), {x: inp}


MODELS = {
    "resnet_blocks": resnet_blocks,
    "mobilenet_block": mobilenet_block,
    "bert_layer": bert_layer,
    "dlrm_like": dlrm_like,
    "yolo_like_head": yolo_like_head,
    "mlp_dynamic_batch": mlp_dynamic_batch,
    "hardswish_dw": hardswish_dw,
    "magika_like": magika_like,
    "attacut_like": attacut_like,
}

# ---------------------------------------------------------------------------------------------


def reference(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(names, feeds)


def weight_bytes(model):
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def write_case(out_dir, model, feeds):
    if weight_bytes(model) > 2 * 1024 * 1024:
        raise SystemExit(f"{out_dir}: weights exceed 2 MB")
    names, outs = reference(model, feeds)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    data_dir = os.path.join(out_dir, "test_data_set_0")
    os.makedirs(data_dir)
    onnx.save(model, os.path.join(out_dir, "model.onnx"))
    init_names = {t.name for t in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in init_names]
    for i, name in enumerate(graph_inputs):
        t = numpy_helper.from_array(feeds[name], name)
        with open(os.path.join(data_dir, f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for i, (name, arr) in enumerate(zip(names, outs)):
        if not np.all(np.isfinite(arr)):
            raise SystemExit(f"{out_dir}: output {name} is not finite")
        t = numpy_helper.from_array(arr, name)
        with open(os.path.join(data_dir, f"output_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    return names, outs


def write_default(out_dir):
    model, feeds = resnet(7, 10, softmax_output=True)
    model.graph.name = "tandem_default_classifier"
    model.doc_string = ("tandem's bundled default model: a small ResNet-style image classifier "
                        "(1x3x64x64 -> 10 class probabilities) with random, untrained weights. "
                        "Made by tools/make_test_models.py --default.")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    onnx.save(model, path)
    if os.path.getsize(path) > 1024 * 1024:
        raise SystemExit("the default model is over 1 MB")
    names, outs = reference(model, feeds)
    np.save(os.path.join(out_dir, "input.npy"), feeds["input"])
    np.save(os.path.join(out_dir, "expected_output.npy"), outs[0])
    print(f"default: {path} ({os.path.getsize(path)} bytes), top class {int(np.argmax(outs[0]))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "models"),
                    help="folder for the model tests (default: tests/models)")
    ap.add_argument("--only", action="append", choices=sorted(MODELS), help="build only these")
    ap.add_argument("--default", action="store_true",
                    help="write the bundled default model into models/default/ instead")
    ap.add_argument("--default-out", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--list", action="store_true", help="list the model tests and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return 0
    if args.default:
        write_default(args.default_out)
        return 0
    for name in args.only or MODELS:
        model, feeds = MODELS[name]()
        out_dir = os.path.join(args.out, name)
        names, outs = write_case(out_dir, model, feeds)
        shapes = ", ".join(f"{n}{list(o.shape)}" for n, o in zip(names, outs))
        print(f"{name}: {len(model.graph.node)} nodes, {weight_bytes(model)} weight bytes -> {shapes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
