"""Benchmark models built with onnx.helper: random weights (fixed seed), opset 17, dynamic batch.

Each builder returns an onnx.ModelProto. The graphs follow what exporters produce for the real
networks (PyTorch 1.x style: BatchNorm folded into Conv, ReLU6 as Clip, LayerNorm and GELU
decomposed, attention through Reshape/Transpose with an additive mask).
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    """Collects nodes, initializers and names; `op` returns the output name(s)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.counter = {}

    def name(self, base):
        n = self.counter.get(base, 0)
        self.counter[base] = n + 1
        return f"{base}_{n}" if n else base

    def init(self, base, array):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(self, base, shape, std):
        w = self.rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(std)
        return self.init(base, w)

    def const(self, value, dtype=np.float32):
        """A Constant node, as the PyTorch exporter emits for scalars and shape pieces."""
        out = self.name("const")
        arr = np.array(value, dtype=dtype)
        self.nodes.append(helper.make_node("Constant", [], [out], name=out,
                                           value=numpy_helper.from_array(arr, out)))
        return out

    def op(self, op_type, inputs, n_out=1, base=None, **attrs):
        base = base or op_type.lower()
        outs = [self.name(base) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def input(self, name, elem_type, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, name, elem_type, shape):
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def model(self, graph_name):
        g = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tandem-bench")
        m.ir_version = 8
        return m

    # -- layers -------------------------------------------------------------------------------
    def conv(self, x, cin, cout, k, stride=1, groups=1, gain=2.0, base="conv"):
        """Conv with bias (BatchNorm folded in, as eval-mode exports do); He-scaled weights."""
        fan_in = cin // groups * k * k
        w = self.weight(base + ".weight", (cout, cin // groups, k, k), np.sqrt(gain / fan_in))
        b = self.weight(base + ".bias", (cout,), 0.01)
        p = k // 2
        return self.op("Conv", [x, w, b], base=base, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[p, p, p, p], group=groups, dilations=[1, 1])

    def gemm(self, x, cin, cout, base="fc"):
        """torch.nn.Linear on a 2-D input: Gemm with transB=1."""
        w = self.weight(base + ".weight", (cout, cin), np.sqrt(2.0 / cin))
        b = self.weight(base + ".bias", (cout,), 0.01)
        return self.op("Gemm", [x, w, b], base=base, alpha=1.0, beta=1.0, transB=1)


# ---- ResNet-50 (torchvision v1.5: stride on the 3x3 of the bottleneck) -----------------------

def resnet50(seed=50):
    g = GraphBuilder(seed)
    x = g.input("input", TensorProto.FLOAT, ["batch", 3, 224, 224])
    x = g.op("Relu", [g.conv(x, 3, 64, 7, 2, base="conv1")])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (planes, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2),
                                                      (512, 3, 2)]):
        for b in range(blocks):
            s = stride if b == 0 else 1
            pre = f"layer{stage + 1}.{b}"
            y = g.op("Relu", [g.conv(x, cin, planes, 1, base=pre + ".conv1")])
            y = g.op("Relu", [g.conv(y, planes, planes, 3, s, base=pre + ".conv2")])
            # small gain on the last conv keeps the residual sum bounded with random weights
            y = g.conv(y, planes, planes * 4, 1, gain=0.1, base=pre + ".conv3")
            sc = x
            if b == 0:
                sc = g.conv(x, cin, planes * 4, 1, s, gain=1.0, base=pre + ".downsample")
            x = g.op("Relu", [g.op("Add", [y, sc])])
            cin = planes * 4
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    out = g.gemm(x, 2048, 1000)
    g.nodes[-1].output[0] = "output"
    g.output("output", TensorProto.FLOAT, ["batch", 1000])
    return g.model("resnet50")


# ---- MobileNetV2 (torchvision, width 1.0) ----------------------------------------------------

def mobilenetv2(seed=2):
    g = GraphBuilder(seed)
    zero, six = g.const(0.0), g.const(6.0)

    def relu6(v):
        return g.op("Clip", [v, zero, six])

    x = g.input("input", TensorProto.FLOAT, ["batch", 3, 224, 224])
    x = relu6(g.conv(x, 3, 32, 3, 2, base="features.0"))
    cin, idx = 32, 1
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            pre = f"features.{idx}"
            y = x
            if t != 1:
                y = relu6(g.conv(y, cin, hidden, 1, base=pre + ".expand"))
            y = relu6(g.conv(y, hidden, hidden, 3, stride, groups=hidden, base=pre + ".dw"))
            y = g.conv(y, hidden, c, 1, gain=1.0, base=pre + ".project")
            if stride == 1 and cin == c:
                y = g.op("Add", [x, y])
            x, cin, idx = y, c, idx + 1
    x = relu6(g.conv(x, 320, 1280, 1, base=f"features.{idx}"))
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    g.gemm(x, 1280, 1000, base="classifier.1")
    g.nodes[-1].output[0] = "output"
    g.output("output", TensorProto.FLOAT, ["batch", 1000])
    return g.model("mobilenetv2")


# ---- BERT-base encoder, as torch 1.x exports HuggingFace BertModel ---------------------------

def bert_base(seed=768, seq=128, layers=12, hidden=768, heads=12, ffn=3072, vocab=30522):
    g = GraphBuilder(seed)
    head_dim = hidden // heads
    ids = g.input("input_ids", TensorProto.INT64, ["batch", seq])
    mask = g.input("attention_mask", TensorProto.INT64, ["batch", seq])

    def layer_norm(v, pre):
        gamma = g.init(pre + ".weight", np.ones(hidden, np.float32))
        beta = g.init(pre + ".bias", np.zeros(hidden, np.float32))
        mean = g.op("ReduceMean", [v], axes=[-1], keepdims=1)
        d = g.op("Sub", [v, mean])
        var = g.op("ReduceMean", [g.op("Pow", [d, g.const(2.0)])], axes=[-1], keepdims=1)
        den = g.op("Sqrt", [g.op("Add", [var, g.const(1e-12)])])
        return g.op("Add", [g.op("Mul", [g.op("Div", [d, den]), gamma]), beta])

    def linear(v, cin, cout, pre):
        """nn.Linear on a 3-D input: MatMul with the transposed weight, then Add."""
        w = g.weight(pre + ".weight", (cin, cout), 0.02)
        b = g.weight(pre + ".bias", (cout,), 0.02)
        return g.op("Add", [g.op("MatMul", [v, w]), b])

    def dim(v, axis):
        """Shape(v)[axis] as a 1-element tensor: Shape -> Gather -> Unsqueeze."""
        s = g.op("Gather", [g.op("Shape", [v]), g.const(axis, np.int64)], axis=0)
        return g.op("Unsqueeze", [s, g.const([0], np.int64)])

    # embeddings: word + token type (buffered zeros) + position (buffered arange)
    word = g.op("Gather", [g.weight("embeddings.word_embeddings.weight", (vocab, hidden), 0.02),
                           ids], axis=0)
    tt_ids = g.init("embeddings.token_type_ids", np.zeros((1, seq), np.int64))
    pos_ids = g.init("embeddings.position_ids", np.arange(seq, dtype=np.int64)[None, :])
    tt = g.op("Gather", [g.weight("embeddings.token_type_embeddings.weight", (2, hidden), 0.02),
                         tt_ids], axis=0)
    pos = g.op("Gather", [g.weight("embeddings.position_embeddings.weight", (512, hidden), 0.02),
                          pos_ids], axis=0)
    h = layer_norm(g.op("Add", [g.op("Add", [word, tt]), pos]), "embeddings.LayerNorm")

    # extended attention mask: (1 - mask[:, None, None, :].float()) * -10000
    m = g.op("Unsqueeze", [mask, g.const([1], np.int64)])
    m = g.op("Unsqueeze", [m, g.const([2], np.int64)])
    m = g.op("Cast", [m], to=TensorProto.FLOAT)
    m = g.op("Mul", [g.op("Sub", [g.const(1.0), m]), g.const(-10000.0)])

    for i in range(layers):
        pre = f"encoder.layer.{i}"

        def heads_view(v):
            shape = g.op("Concat", [dim(v, 0), dim(v, 1), g.const([heads], np.int64),
                                    g.const([head_dim], np.int64)], axis=0)
            return g.op("Reshape", [v, shape])

        q = g.op("Transpose", [heads_view(linear(h, hidden, hidden, pre + ".attention.self.query"))],
                 perm=[0, 2, 1, 3])
        k = g.op("Transpose", [heads_view(linear(h, hidden, hidden, pre + ".attention.self.key"))],
                 perm=[0, 2, 3, 1])
        v = g.op("Transpose", [heads_view(linear(h, hidden, hidden, pre + ".attention.self.value"))],
                 perm=[0, 2, 1, 3])
        scores = g.op("Div", [g.op("MatMul", [q, k]), g.const(float(np.sqrt(head_dim)))])
        probs = g.op("Softmax", [g.op("Add", [scores, m])], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        shape = g.op("Concat", [dim(ctx, 0), dim(ctx, 1), g.const([hidden], np.int64)], axis=0)
        ctx = g.op("Reshape", [ctx, shape])
        a = linear(ctx, hidden, hidden, pre + ".attention.output.dense")
        h = layer_norm(g.op("Add", [a, h]), pre + ".attention.output.LayerNorm")
        f = linear(h, hidden, ffn, pre + ".intermediate.dense")
        # GELU as torch 1.x exports it: x * 0.5 * (1 + erf(x / sqrt(2)))
        e = g.op("Erf", [g.op("Div", [f, g.const(1.4142135381698608)])])
        f = g.op("Mul", [g.op("Mul", [f, g.op("Add", [e, g.const(1.0)])]), g.const(0.5)])
        f = linear(f, ffn, hidden, pre + ".output.dense")
        h = layer_norm(g.op("Add", [f, h]), pre + ".output.LayerNorm")

    g.nodes[-1].output[0] = "last_hidden_state"
    h = "last_hidden_state"
    first = g.op("Gather", [h, g.const(0, np.int64)], axis=1)
    w = g.weight("pooler.dense.weight", (hidden, hidden), 0.02)
    b = g.weight("pooler.dense.bias", (hidden,), 0.02)
    g.op("Tanh", [g.op("Gemm", [first, w, b], alpha=1.0, beta=1.0, transB=1)])
    g.nodes[-1].output[0] = "pooler_output"
    g.output("last_hidden_state", TensorProto.FLOAT, ["batch", seq, hidden])
    g.output("pooler_output", TensorProto.FLOAT, ["batch", hidden])
    return g.model("bert_base")


# ---- DLRM-like: bottom MLP, embedding tables, dot interaction, top MLP -----------------------

def dlrm(seed=13, tables=8, rows=100_000, dim=64):
    g = GraphBuilder(seed)
    dense = g.input("dense_x", TensorProto.FLOAT, ["batch", 13])
    sparse = g.input("sparse_idx", TensorProto.INT64, ["batch", tables])
    x, cin = dense, 13
    for i, cout in enumerate([512, 256, dim]):
        x, cin = g.op("Relu", [g.gemm(x, cin, cout, base=f"bot_l.{i}")]), cout
    feats = [g.op("Unsqueeze", [x, g.const([1], np.int64)])]
    for t in range(tables):
        col = g.op("Gather", [sparse, g.const(t, np.int64)], axis=1)            # [B]
        emb = g.op("Gather", [g.weight(f"emb_l.{t}.weight", (rows, dim), 0.05), col], axis=0)
        feats.append(g.op("Unsqueeze", [emb, g.const([1], np.int64)]))          # [B,1,dim]
    n = tables + 1
    t_ = g.op("Concat", feats, axis=1)                                           # [B,n,dim]
    z = g.op("MatMul", [t_, g.op("Transpose", [t_], perm=[0, 2, 1])])          # [B,n,n]
    z = g.op("Flatten", [z], axis=1)                                             # [B,n*n]
    li = [i * n + j for i in range(n) for j in range(i)]                         # strictly lower
    z = g.op("Gather", [z, g.init("interaction_index", np.array(li, np.int64))], axis=1)
    x, cin = g.op("Concat", [x, z], axis=1), dim + len(li)
    for i, cout in enumerate([512, 256]):
        x, cin = g.op("Relu", [g.gemm(x, cin, cout, base=f"top_l.{i}")]), cout
    g.op("Sigmoid", [g.gemm(x, cin, 1, base="top_l.2")])
    g.nodes[-1].output[0] = "probability"
    g.output("probability", TensorProto.FLOAT, ["batch", 1])
    return g.model("dlrm")


BUILDERS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2, "bert": bert_base, "dlrm": dlrm}


# ---- FLOP count --------------------------------------------------------------------------------

def _skeleton(model):
    """A light copy for shape inference: the large initializers become typed graph inputs;
    small ones (shape pieces, indices) keep their data."""
    m = onnx.ModelProto()
    m.ir_version = model.ir_version
    m.opset_import.extend(model.opset_import)
    g = m.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    for t in model.graph.initializer:
        if np.prod(t.dims, dtype=np.int64) <= 4096:
            g.initializer.append(t)
        else:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return m


def count_flops(model, batch=1):
    """2 * multiply-accumulates of Conv, MatMul and Gemm at the given batch size."""
    m = _skeleton(model)
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            dims[0].dim_value = batch
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    shapes = {}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)

    def known(name):
        s = shapes.get(name)
        if s is None or any(d is None for d in s):
            raise ValueError(f"shape of '{name}' not inferred")
        return s

    macs = 0
    for n in m.graph.node:
        if n.op_type == "Conv":
            out, w = known(n.output[0]), known(n.input[1])
            macs += int(np.prod(out, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
        elif n.op_type == "MatMul":
            a, out = known(n.input[0]), known(n.output[0])
            macs += int(np.prod(out, dtype=np.int64)) * a[-1]
        elif n.op_type == "Gemm":
            a, out = known(n.input[0]), known(n.output[0])
            trans_a = next((at.i for at in n.attribute if at.name == "transA"), 0)
            macs += int(np.prod(out, dtype=np.int64)) * (a[0] if trans_a else a[1])
    return 2 * macs
