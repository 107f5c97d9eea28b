#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

fuzz_model:  tests/models/*/model.onnx, every ONNX node-test model under 4 KB, the small
             malformed models of tests/bad_models, the models of the other test folders
             (LLM ops, contrib and ML operators) under 8 KB, the tiny random Llama of
             tests/llm/models/tiny_genai, and PagedAttention / GroupQueryAttention models over
             float, float16, 8- and 4-bit caches made here (llm_seeds; needs the onnx package)
fuzz_tensor: a few small input_N.pb TensorProtos of every data type the node tests use
fuzz_wire:   a sample of both, plus the deep-nesting bad models

Usage: tests/fuzz/make_corpus.py [--node-dir /usr/share/libonnx-testdata/data/node]
The corpus is deterministic (sorted walk); keep it under ~2 MB.
"""
import argparse
import glob
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def copy(src, dst_dir, name):
    os.makedirs(dst_dir, exist_ok=True)
    shutil.copyfile(src, os.path.join(dst_dir, name))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node-dir", default="/usr/share/libonnx-testdata/data/node")
    args = ap.parse_args()
    corpus = os.path.join(HERE, "corpus")
    for t in ("fuzz_model", "fuzz_tensor", "fuzz_wire"):
        shutil.rmtree(os.path.join(corpus, t), ignore_errors=True)

    model_dir = os.path.join(corpus, "fuzz_model")
    wire_dir = os.path.join(corpus, "fuzz_wire")
    tensor_dir = os.path.join(corpus, "fuzz_tensor")

    for m in sorted(glob.glob(os.path.join(ROOT, "tests", "models", "*", "model.onnx"))):
        copy(m, model_dir, "model_" + os.path.basename(os.path.dirname(m)) + ".onnx")

    node_models = sorted(glob.glob(os.path.join(args.node_dir, "test_*", "model.onnx")))
    small = [m for m in node_models if os.path.getsize(m) < 4096]
    for i, m in enumerate(small):
        name = os.path.basename(os.path.dirname(m))
        copy(m, model_dir, name + ".onnx")
        if i % 8 == 0:
            copy(m, wire_dir, name + ".onnx")

    for folder in ("models_llm", "models_llm_attn", "models_llm_attn_f16", "models_contrib",
                   "models_ml", "models_onnx_ml", "models_ocr"):
        for m in sorted(glob.glob(os.path.join(ROOT, "tests", folder, "*", "model.onnx"))):
            if os.path.getsize(m) < 8192:
                copy(m, model_dir, folder + "_" + os.path.basename(os.path.dirname(m)) + ".onnx")
    copy(os.path.join(ROOT, "tests", "llm", "models", "tiny_genai", "model.onnx"), model_dir,
         "llm_tiny_genai.onnx")
    llm_seeds(model_dir)

    for case in ("cyclic_graph", "undefined_input", "unknown_op", "no_default_opset",
                 "raw_data_short", "dims_overflow", "negative_dims", "deep_subgraph_nesting",
                 "sequence_input", "external_past_end"):
        p = os.path.join(ROOT, "tests", "bad_models", case, "model.onnx")
        if os.path.exists(p):
            copy(p, model_dir, "bad_" + case + ".onnx")
    for case in ("deep_protobuf_nesting", "deep_subgraph_nesting", "truncated_model", "garbage_8_bytes"):
        p = os.path.join(ROOT, "tests", "bad_models", case, "model.onnx")
        if os.path.exists(p):
            copy(p, wire_dir, "bad_" + case + ".onnx")

    # tensors: up to 4 per data type (first by sorted path), each under 600 bytes
    sys.path.insert(0, HERE)
    per_type = {}
    for p in sorted(glob.glob(os.path.join(args.node_dir, "test_*", "test_data_set_0", "input_*.pb"))):
        if os.path.getsize(p) > 600:
            continue
        with open(p, "rb") as f:
            data = f.read()
        dt = data_type_of(data)
        if per_type.get(dt, 0) >= 4:
            continue
        per_type[dt] = per_type.get(dt, 0) + 1
        name = os.path.basename(os.path.dirname(os.path.dirname(p))) + "_" + os.path.basename(p)
        copy(p, tensor_dir, name)
        if per_type[dt] == 1:
            copy(p, wire_dir, "tensor_" + name)

    total = 0
    for t in ("fuzz_model", "fuzz_tensor", "fuzz_wire"):
        files = glob.glob(os.path.join(corpus, t, "*"))
        size = sum(os.path.getsize(f) for f in files)
        total += size
        print(f"{t}: {len(files)} files, {size} bytes")
    print(f"total {total} bytes")
    return 0


def llm_seeds(model_dir):
    """PagedAttention and GroupQueryAttention nodes over tandem's cache forms (float32 BSHD,
    float16, 8- and 4-bit rows in the BHSD layout), with their tables as initializers (valid:
    the mutator changes their elements) or as inputs (the harness's random values)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    rng = np.random.default_rng(51)

    def vi(name, dtype, shape):
        return helper.make_tensor_value_info(name, dtype, shape)

    def i32(name, a):
        return numpy_helper.from_array(np.array(a, np.int32), name)

    def rope(n, half):
        ang = np.outer(np.arange(n), 1.0 / 10000 ** (np.arange(half) / half)).astype(np.float32)
        return [numpy_helper.from_array(np.cos(ang), "cos"), numpy_helper.from_array(np.sin(ang), "sin")]

    def write(name, node, inputs, inits, outputs):
        g = helper.make_graph([node], name, inputs, outputs, initializer=inits)
        m = helper.make_model(g, opset_imports=opsets, producer_name="tandem-fuzz")
        m.ir_version = 10
        with open(os.path.join(model_dir, "llm_" + name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())

    F, H16, I8, U8, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32
    cache_t = {"f32": F, "f16": H16, "i8": I8, "i4": U8}

    def row_bytes(kind, d):
        groups = (d + 31) // 32
        return d + 2 * groups if kind == "i8" else 18 * groups if kind == "i4" else d

    # name, cache kind, H, KVH, D, NB, BS, cu, past, block table, attrs, tables as inputs, packed
    paged = [
        ("paged_f32_bshd", "f32", 2, 1, 8, 4, 4, [0, 2, 3], [1, 2], [[0, 1], [2, 3]], {}, False, False),
        ("paged_f32_tables_in", "f32", 2, 1, 8, 4, 4, [0, 2, 3], [1, 2], [[0, 1], [2, 3]], {}, True, False),
        ("paged_f16_bhsd_rotary", "f16", 4, 2, 8, 3, 8, [0, 1, 2], [4, 9], [[0, 1], [2, 0]],
         {"do_rotary": 1, "tandem_kv_layout": "BHSD"}, False, False),
        ("paged_i4_decode_window", "i4", 3, 1, 32, 3, 16, [0, 1, 2], [5, 20], [[0, 0], [2, 1]],
         {"do_rotary": 1, "local_window_size": 8, "tandem_kv_layout": "BHSD"}, False, False),
        ("paged_i8_packed_chunk", "i8", 2, 1, 32, 2, 16, [0, 5], [3], [[1, 0]],
         {"softcap": 30.0, "tandem_kv_layout": "BHSD"}, False, True),
        ("paged_i4_tables_in", "i4", 2, 2, 32, 2, 16, [0, 1], [7], [[1]],
         {"tandem_kv_layout": "BHSD"}, True, False),
    ]
    for name, kind, H, KVH, D, NB, BS, cu, past, bt, attrs, tables_in, packed in paged:
        T, bhsd = cu[-1], attrs.get("tandem_kv_layout") == "BHSD"
        cshape = [NB, KVH, BS, row_bytes(kind, D)] if bhsd else [NB, BS, KVH, D]
        inputs = [vi("query", F, [T, (H + 2 * KVH) * D if packed else H * D])]
        names = ["query", "", ""] if packed else ["query", "key", "value"]
        if not packed:
            inputs += [vi("key", F, [T, KVH * D]), vi("value", F, [T, KVH * D])]
        inputs += [vi("key_cache", cache_t[kind], cshape), vi("value_cache", cache_t[kind], cshape)]
        names += ["key_cache", "value_cache", "cu", "past", "bt"]
        inits = []
        if tables_in:
            inputs += [vi("cu", I32, [len(cu)]), vi("past", I32, [len(past)]), vi("bt", I32, [len(bt), len(bt[0])])]
        else:
            inits += [i32("cu", cu), i32("past", past), i32("bt", bt)]
        if attrs.get("do_rotary"):
            inits += rope(64, D // 2)
            names += ["cos", "sin"]
        if name == "paged_i8_packed_chunk":
            inits.append(numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "sink"))
            names += ["", "", "", "sink"]
        node = helper.make_node("PagedAttention", names, ["output", "key_cache_out", "value_cache_out"],
                                domain="com.microsoft", num_heads=H, kv_num_heads=KVH, **attrs)
        write(name, node, inputs, inits, [vi("output", F, None), vi("key_cache_out", cache_t[kind], None),
                                          vi("value_cache_out", cache_t[kind], None)])

    # GroupQueryAttention over 8- / 4-bit past caches [B, KVH, P, row bytes]
    for name, kind, B, S, H, KVH, D, P, seqlens, total, attrs in [
        ("gqa_i4_decode", "i4", 1, 1, 2, 1, 32, 4, [4], 5, {}),
        ("gqa_i8_rotary_b2", "i8", 2, 1, 4, 2, 32, 6, [6, 3], 7, {"do_rotary": 1}),
        ("gqa_i4_prompt_window", "i4", 1, 4, 2, 1, 64, 0, [3], 4, {"local_window_size": 2}),
    ]:
        cshape = [B, KVH, P, row_bytes(kind, D)]
        inputs = [vi("query", F, [B, S, H * D]), vi("key", F, [B, S, KVH * D]), vi("value", F, [B, S, KVH * D]),
                  vi("past_key", cache_t[kind], cshape), vi("past_value", cache_t[kind], cshape)]
        inits = [i32("seqlens_k", seqlens), i32("total_sequence_length", total)]
        names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
        if attrs.get("do_rotary"):
            inits += rope(64, D // 2)
            names += ["cos", "sin"]
        node = helper.make_node("GroupQueryAttention", names, ["output", "present_key", "present_value"],
                                domain="com.microsoft", num_heads=H, kv_num_heads=KVH, **attrs)
        write(name, node, inputs, inits,
              [vi("output", F, None), vi("present_key", cache_t[kind], None),
               vi("present_value", cache_t[kind], None)])


def data_type_of(data):
    """TensorProto.data_type (field 2, varint) from the wire bytes, or -1."""
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        if key is None:
            return -1
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(data, i)
            if field == 2:
                return v
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        elif wt == 2:
            n, i = varint(data, i)
            if n is None:
                return -1
            i += n
        else:
            return -1
    return -1


def varint(data, i):
    v, shift = 0, 0
    while i < len(data):
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, i
        shift += 7
    return None, i


if __name__ == "__main__":
    sys.exit(main())
