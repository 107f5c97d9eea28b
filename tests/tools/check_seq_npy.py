#!/usr/bin/env python3
"""`tandem run` with sequence, map and optional values as folders of .npy files (src/cli/npy.c):
a sequence input given as DIR/0.npy, DIR/1.npy, ..., sequence outputs written as folders, and a
ZipMap classifier's sequence of maps (keys.npy / keys.txt + values.npy per map), each compared
with ONNX Runtime; string tensors in and out as numpy 'U' arrays (and 'S' in); a sequence input
whose items have the wrong element type refused with a clear message. Exit 0 when all match."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_value(base):
    """PATH.npy -> array; folder PATH -> list (sequence) or dict (map)."""
    if os.path.isfile(base + ".npy"):
        return np.load(base + ".npy")
    if os.path.isfile(os.path.join(base, "values.npy")):
        vals = np.load(os.path.join(base, "values.npy"))
        if os.path.isfile(os.path.join(base, "keys.npy")):
            keys = list(np.load(os.path.join(base, "keys.npy")))
        else:
            with open(os.path.join(base, "keys.txt")) as f:
                keys = f.read().splitlines()
        return dict(zip(keys, vals))
    items, i = [], 0
    while os.path.exists(os.path.join(base, f"{i}.npy")) or os.path.isdir(os.path.join(base, str(i))):
        items.append(read_value(os.path.join(base, str(i))))
        i += 1
    return items


def same(got, want, tol):
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            same(g, w, tol) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and sorted(map(str, got)) == sorted(map(str, want)) and all(
            abs(float(got[k]) - float(want[k])) <= tol for k in got)
    want = np.asarray(want)
    return got.shape == want.shape and (np.allclose(got, want, rtol=tol, atol=tol)
                                        if want.dtype.kind == "f" else np.array_equal(got, want))


def run(tandem, model, inputs, tmp, fail=False):
    out = tempfile.mkdtemp(dir=tmp)  # a fresh folder: no file of an earlier run is read back
    args = [tandem, "run", model, "--output-dir", out]
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if fail:
        return r
    if r.returncode:
        sys.exit(f"FAIL: {' '.join(args)}\n{r.stderr}")
    return out


def strings(tandem, tmp, rng):
    """String tensors as .npy: 'U' (UTF-32, any character) in and out, 'S' (bytes) in."""
    fails = 0
    ident = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])], "strings",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [None, None])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [None, None])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = os.path.join(tmp, "ident.onnx")
    with open(path, "wb") as f:
        f.write(ident.SerializeToString())
    want = np.array([["héllo", "", "日本語"], ["a b", "emoji \U0001F389", "x" * 40]])
    for kind, arr in (("U", want), ("S", np.array([["abc", ""], ["d", "efgh"]], dtype="S"))):
        np.save(os.path.join(tmp, "s.npy"), arr)
        out = run(tandem, path, {"s": os.path.join(tmp, "s.npy")}, tmp)
        got = np.load(os.path.join(out, "t.npy"))
        expect = arr.astype("U") if kind == "S" else arr
        ok = got.dtype.kind == "U" and np.array_equal(got, expect)
        print(f"{'ok  ' if ok else 'FAIL'} strings '{kind}' in, 'U' out: {got.dtype} {got.ravel()[:3]}")
        fails += not ok
    # converted models with string inputs / outputs, against ONNX Runtime
    for name in ("ml_label_encoder_str_int", "ml_label_encoder_int_str", "ml_zipmap_logistic_strings",
                 "ml_logistic_string_labels"):
        d = os.path.join(ROOT, "tests", "models_ml", name)
        sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        shape = [v if isinstance(v, int) else (5 if i == 0 else 1) for i, v in enumerate(inp.shape)]
        if inp.type == "tensor(string)":
            cats = ["a"]
            for node in __import__("onnx").load(os.path.join(d, "model.onnx")).graph.node:
                for at in node.attribute:
                    if at.name == "keys_strings":
                        cats = [v.decode() for v in at.strings]
            n = int(np.prod(shape))
            x = np.array((cats * n)[: n - 1] + ["not a key, é"]).reshape(shape)
        elif inp.type == "tensor(int64)":
            x = rng.integers(-1, 4, size=shape)
        else:
            x = rng.standard_normal((5, inp.shape[1])).astype(np.float32)
        np.save(os.path.join(tmp, "in.npy"), x)
        out = run(tandem, os.path.join(d, "model.onnx"), {inp.name: os.path.join(tmp, "in.npy")}, tmp)
        for o, want in zip(sess.get_outputs(), sess.run(None, {inp.name: x})):
            got = read_value(os.path.join(out, o.name))
            if isinstance(want, np.ndarray) and want.dtype == object:
                want = want.astype("U")
            ok = same(got, want, 1e-5)
            print(f"{'ok  ' if ok else 'FAIL'} {name} {o.name}")
            fails += not ok
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    tandem = ap.parse_args().tandem
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        # 1. seq_ops: a sequence input from a folder, sequence outputs as folders
        model = os.path.join(ROOT, "tests", "models", "seq_ops", "model.onnx")
        rng = np.random.default_rng(3)
        s = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
        x = rng.standard_normal((2, 3)).astype(np.float32)
        os.makedirs(os.path.join(tmp, "s"))
        for i, a in enumerate(s):
            np.save(os.path.join(tmp, "s", f"{i}.npy"), a)
        np.save(os.path.join(tmp, "x.npy"), x)
        out = run(tandem, model, {"s": os.path.join(tmp, "s"), "x": os.path.join(tmp, "x.npy")}, tmp)
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        for o, want in zip(sess.get_outputs(), sess.run(None, {"s": s, "x": x})):
            got = read_value(os.path.join(out, o.name))
            ok = same(got, want, 1e-6)
            print(f"{'ok  ' if ok else 'FAIL'} seq_ops {o.name}")
            fails += not ok
        # 1b. the same sequence fed with int64 items: refused before anything runs
        os.makedirs(os.path.join(tmp, "si"))
        for i, a in enumerate(s):
            np.save(os.path.join(tmp, "si", f"{i}.npy"), a.astype(np.int64))
        r = run(tandem, model, {"s": os.path.join(tmp, "si"), "x": os.path.join(tmp, "x.npy")}, tmp, fail=True)
        ok = r.returncode != 0 and "input 's' is a sequence of float32 tensors, but its item 0 is int64" in r.stderr
        print(f"{'ok  ' if ok else 'FAIL'} seq_ops with int64 items refused: {r.stderr.strip()}")
        fails += not ok
        # 2. ZipMap classifiers: a sequence of maps per row
        for name in ("ml_zipmap_random_forest_int", "ml_zipmap_logistic_strings"):
            d = os.path.join(ROOT, "tests", "models_ml", name)
            sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
            inp = sess.get_inputs()[0]
            xs = rng.standard_normal((5, inp.shape[1])).astype(np.float32)
            np.save(os.path.join(tmp, "xs.npy"), xs)
            out = run(tandem, os.path.join(d, "model.onnx"), {inp.name: os.path.join(tmp, "xs.npy")}, tmp)
            for o, want in zip(sess.get_outputs(), sess.run(None, {inp.name: xs})):
                base = os.path.join(out, o.name)
                got = read_value(base)
                ok = same(got, want, 1e-5)
                print(f"{'ok  ' if ok else 'FAIL'} {name} {o.name}")
                fails += not ok
        fails += strings(tandem, tmp, rng)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
