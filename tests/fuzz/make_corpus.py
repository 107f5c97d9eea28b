#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

fuzz_model:  tests/models/*/model.onnx, every ONNX node-test model under 4 KB and the small
             malformed models of tests/bad_models
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
