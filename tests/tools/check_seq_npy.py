#!/usr/bin/env python3
"""`tandem run` with sequence, map and optional values as folders of .npy files (src/cli/npy.c):
a sequence input given as DIR/0.npy, DIR/1.npy, ..., sequence outputs written as folders, and a
ZipMap classifier's sequence of maps (keys.npy / keys.txt + values.npy per map), each compared
with ONNX Runtime. Exit 0 when all match."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

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


def run(tandem, model, inputs, tmp):
    args = [tandem, "run", model, "--output-dir", os.path.join(tmp, "out")]
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"FAIL: {' '.join(args)}\n{r.stderr}")
    return os.path.join(tmp, "out")


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
        # 2. ZipMap classifiers: a sequence of maps per row
        # (int64 labels: `run` cannot write the string model's string label tensor as .npy)
        for name in ("ml_zipmap_random_forest_int",):
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
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
