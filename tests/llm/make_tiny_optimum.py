#!/usr/bin/env python3
"""Writes a tiny random decoder-only language model in Hugging Face optimum's export form
(standard ONNX ops only) for the generator's tests: inputs input_ids, attention_mask,
position_ids, past_key_values.{i}.key/value; outputs logits, present.{i}.key/value, where
present = Concat(past, new) along the sequence axis. Attention is causal by position id and
masks padded keys by attention_mask. Deterministic (seeded).

Usage: make_tiny_optimum.py OUT_DIR   (writes model.onnx, config.json, generation_config.json)
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, HEADS, HEAD_DIM, LAYERS, FFN, MAX_POS = 96, 32, 2, 16, 2, 64, 256
EOS = 2


def build():
    rng = np.random.default_rng(1234)
    inits, nodes = [], []

    def w(name, shape, scale=0.3):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=f"n{len(nodes)}", **attrs))
        return outs[0]

    c("one_i64", np.array(1, dtype=np.int64))
    c("zero_i64", np.array(0, dtype=np.int64))
    c("axes_1_3", np.array([1, 3], dtype=np.int64))
    c("axes_1_2", np.array([1, 2], dtype=np.int64))
    c("neg_inf", np.array(-1e9, dtype=np.float32))
    c("eps", np.array(1e-5, dtype=np.float32))
    c("scale", np.array(1.0 / np.sqrt(HEAD_DIM), dtype=np.float32))
    c("shape_bshd", np.array([0, 0, HEADS, HEAD_DIM], dtype=np.int64))
    c("shape_bse", np.array([0, 0, HIDDEN], dtype=np.int64))

    emb = w("embed", (VOCAB, HIDDEN), 1.0)
    pos = w("pos_embed", (MAX_POS, HIDDEN), 0.5)
    x = node("Gather", [emb, "input_ids"], ["tok_e"])
    p = node("Gather", [pos, "position_ids"], ["pos_e"])
    x = node("Add", [x, p], ["h0"])
    # mask [B,1,S,T]: key j visible to query i when j <= position_ids[i] and attention_mask[j]
    t_shape = node("Shape", ["attention_mask"], ["am_shape"])
    t_len = node("Gather", [t_shape, "one_i64"], ["t_len"], axis=0)
    keys = node("Range", ["zero_i64", t_len, "one_i64"], ["key_pos"])
    qpos = node("Unsqueeze", ["position_ids", "axes_1_3"], ["qpos"])  # [B,1,S,1]
    causal = node("LessOrEqual", [keys, qpos], ["causal"])  # [B,1,S,T]
    am = node("Cast", ["attention_mask"], ["am_bool"], to=TensorProto.BOOL)
    am = node("Unsqueeze", [am, "axes_1_2"], ["am4"])  # [B,1,1,T]
    mask = node("And", [causal, am], ["mask"])

    def rmsnorm(v, tag):
        sq = node("Mul", [v, v], [f"{tag}_sq"])
        ms = node("ReduceMean", [sq], [f"{tag}_ms"], axes=[-1], keepdims=1)
        ms = node("Add", [ms, "eps"], [f"{tag}_mse"])
        r = node("Sqrt", [ms], [f"{tag}_rms"])
        y = node("Div", [v, r], [f"{tag}_n"])
        g = c(f"{tag}_g", (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        return node("Mul", [y, g], [f"{tag}_out"])

    for L in range(LAYERS):
        h = rmsnorm(x, f"l{L}_ln1")
        heads = {}
        for nm in ("q", "k", "v"):
            y = node("MatMul", [h, w(f"l{L}_w{nm}", (HIDDEN, HEADS * HEAD_DIM))], [f"l{L}_{nm}"])
            y = node("Reshape", [y, "shape_bshd"], [f"l{L}_{nm}4"])
            heads[nm] = node("Transpose", [y], [f"l{L}_{nm}t"], perm=[0, 2, 1, 3])  # [B,H,S,D]
        pk = node("Concat", [f"past_key_values.{L}.key", heads["k"]], [f"present.{L}.key"], axis=2)
        pv = node("Concat", [f"past_key_values.{L}.value", heads["v"]], [f"present.{L}.value"], axis=2)
        kt = node("Transpose", [pk], [f"l{L}_kT"], perm=[0, 1, 3, 2])
        sc = node("MatMul", [heads["q"], kt], [f"l{L}_sc"])
        sc = node("Mul", [sc, "scale"], [f"l{L}_scs"])
        sc = node("Where", [mask, sc, "neg_inf"], [f"l{L}_scm"])
        pr = node("Softmax", [sc], [f"l{L}_pr"], axis=-1)
        att = node("MatMul", [pr, pv], [f"l{L}_att"])
        att = node("Transpose", [att], [f"l{L}_attt"], perm=[0, 2, 1, 3])
        att = node("Reshape", [att, "shape_bse"], [f"l{L}_att3"])
        o = node("MatMul", [att, w(f"l{L}_wo", (HEADS * HEAD_DIM, HIDDEN))], [f"l{L}_o"])
        x = node("Add", [x, o], [f"l{L}_res1"])
        h = rmsnorm(x, f"l{L}_ln2")
        u = node("MatMul", [h, w(f"l{L}_wu", (HIDDEN, FFN))], [f"l{L}_u"])
        u = node("Relu", [u], [f"l{L}_ur"])
        d = node("MatMul", [u, w(f"l{L}_wd", (FFN, HIDDEN))], [f"l{L}_d"])
        x = node("Add", [x, d], [f"l{L}_res2"])
    h = rmsnorm(x, "final")
    node("MatMul", [h, w("lm_head", (HIDDEN, VOCAB), 1.0)], ["logits"])

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", VOCAB])]
    for L in range(LAYERS):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{L}.{kv}", TensorProto.FLOAT,
                                                        ["batch_size", HEADS, "past_sequence_length", HEAD_DIM]))
            outputs.append(helper.make_tensor_value_info(f"present.{L}.{kv}", TensorProto.FLOAT,
                                                         ["batch_size", HEADS, "total_sequence_length", HEAD_DIM]))
    graph = helper.make_graph(nodes, "tiny_optimum_llm", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_tiny_optimum")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(build(), os.path.join(out, "model.onnx"))
    cfg = {"model_type": "tiny", "vocab_size": VOCAB, "hidden_size": HIDDEN, "num_attention_heads": HEADS,
           "num_key_value_heads": HEADS, "num_hidden_layers": LAYERS, "max_position_embeddings": MAX_POS,
           "bos_token_id": 1, "eos_token_id": EOS}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [EOS, 3]}, f, indent=1)


if __name__ == "__main__":
    main()
