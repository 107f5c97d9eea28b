#!/usr/bin/env python3
"""Tree-ensemble throughput: tandem against ONNX Runtime on scikit-learn models converted with
skl2onnx (a random forest classifier and regressor, a gradient-boosting classifier and
regressor) and XGBoost / LightGBM models converted with onnxmltools (a classifier and a
regressor each), 100k rows, 1 and 2 threads.

    .venv/bin/python bench/ml/bench_trees.py [--tandem build/tandem] [--rows 100000]
        [--threads 1,2] [--rounds 3] [--only SUBSTRING]

Both engines get the same float32 rows (a .npy file for `tandem bench --input`); each round
runs tandem (`tandem bench --json`, a fresh process, p50 of --iterations runs) and ONNX
Runtime (this process, intra_op_num_threads=N, p50 of as many runs) in alternation; the table
shows the median over rounds and the ratio tandem/ORT (< 1: tandem faster). Labels and
probabilities are compared before timing. Needs scikit-learn and skl2onnx
(tools/requirements-ml.txt). Prints markdown; --out FILE writes it too."""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
from skl2onnx import to_onnx
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                              RandomForestClassifier, RandomForestRegressor)

OPSETS = {"": 17, "ai.onnx.ml": 3}


def cpu_line():
    flags = open("/proc/cpuinfo").read()
    isa = "avx512" if " avx512f" in flags else "avx2" if " avx2" in flags else "sse"
    model = next((l.split(":", 1)[1].strip() for l in flags.splitlines() if l.startswith("model name")), "?")
    return f"{model}, {os.cpu_count()} cores, ISA {isa}, load {os.getloadavg()[0]:.1f}"


def models(rows):
    xc, yc = make_classification(n_samples=4000, n_features=20, n_informative=12, n_classes=4,
                                 random_state=0)
    xr, yr = make_regression(n_samples=4000, n_features=20, random_state=1)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, 20)).astype(np.float32)
    out = []
    rf = RandomForestClassifier(n_estimators=100, max_depth=10, random_state=0).fit(xc, yc)
    out.append(("random forest classifier (100 trees, depth 10, 4 classes)",
                to_onnx(rf, xc[:1].astype(np.float32), target_opset=OPSETS,
                        options={"zipmap": False})))
    gb = GradientBoostingClassifier(n_estimators=100, max_depth=4, random_state=0).fit(xc[:1500], yc[:1500])
    out.append(("gradient boosting classifier (100 rounds x 4 classes, depth 4)",
                to_onnx(gb, xc[:1].astype(np.float32), target_opset=OPSETS,
                        options={"zipmap": False})))
    rr = RandomForestRegressor(n_estimators=100, max_depth=10, random_state=0).fit(xr, yr)
    out.append(("random forest regressor (100 trees, depth 10)",
                to_onnx(rr, xr[:1].astype(np.float32), target_opset=OPSETS)))
    gr = GradientBoostingRegressor(n_estimators=200, max_depth=5, random_state=0).fit(xr, yr)
    out.append(("gradient boosting regressor (200 rounds, depth 5)",
                to_onnx(gr, xr[:1].astype(np.float32), target_opset=OPSETS)))
    import lightgbm
    import onnxmltools
    import xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType
    ft = [("input", FloatTensorType([None, 20]))]
    m = xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=0, n_jobs=1).fit(xc, yc)
    out.append(("XGBoost classifier (100 rounds x 4 classes, depth 6)",
                onnxmltools.convert_xgboost(m, initial_types=ft, target_opset=15)))
    m = xgboost.XGBRegressor(n_estimators=200, max_depth=6, random_state=0, n_jobs=1).fit(xr, yr)
    out.append(("XGBoost regressor (200 rounds, depth 6)",
                onnxmltools.convert_xgboost(m, initial_types=ft, target_opset=15)))
    m = lightgbm.LGBMClassifier(n_estimators=100, num_leaves=31, verbose=-1, n_jobs=1,
                                random_state=0).fit(xc, yc)
    out.append(("LightGBM classifier (100 rounds x 4 classes, 31 leaves)",
                onnxmltools.convert_lightgbm(m, initial_types=ft, zipmap=False, target_opset=15)))
    m = lightgbm.LGBMRegressor(n_estimators=200, num_leaves=31, verbose=-1, n_jobs=1,
                               random_state=0).fit(xr, yr)
    out.append(("LightGBM regressor (200 rounds, 31 leaves)",
                onnxmltools.convert_lightgbm(m, initial_types=ft, target_opset=15)))
    return x, out


def tandem_ms(tandem, path, npy, name, threads, iters):
    r = subprocess.run([tandem, "bench", path, "--input", f"{name}={npy}", "--threads", str(threads),
                        "--iterations", str(iters), "--warmup", "1", "--json"],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"tandem bench failed: {r.stderr}")
    return json.loads(r.stdout)["latency_ms"]["p50"]


def ort_ms(sess, feeds, iters):
    sess.run(None, feeds)
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        t.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(t))


def check(tandem, path, npy, name, sess, feeds, tmp):
    outdir = os.path.join(tmp, "out")
    r = subprocess.run([tandem, "run", path, "--input", f"{name}={npy}", "--output-dir", outdir],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"tandem run failed: {r.stderr}")
    names = json.load(open(os.path.join(outdir, "names.json")))
    got = {v: np.load(os.path.join(outdir, k)) for k, v in names.items()}
    for o, want in zip(sess.get_outputs(), sess.run(None, feeds)):
        g = got[o.name]
        if want.dtype.kind in "iu":
            assert np.array_equal(g, want), f"{o.name}: labels differ in {np.sum(g != want)} rows"
        else:
            # scores within 1e-5 of the output's scale (ONNX Runtime sums float scores in float,
            # tandem in double: regression outputs in the hundreds differ in float's last bits)
            tol = 1e-5 * max(1.0, float(np.abs(want).max()))
            assert np.abs(g - want).max() <= tol, f"{o.name}: max err {np.abs(g - want).max()} > {tol}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--only", default="", help="run the models whose title contains this (A|B: either)")
    ap.add_argument("--out")
    a = ap.parse_args()
    x, ms = models(a.rows)
    lines = [f"# Tree ensembles: tandem vs ONNX Runtime {ort.__version__}, {a.rows} rows",
             "", f"CPU: {cpu_line()}; {platform.platform()}",
             f"Command: `.venv/bin/python bench/ml/bench_trees.py --rows {a.rows} --threads {a.threads} "
             f"--rounds {a.rounds} --iterations {a.iterations}`",
             "", "| model | threads | tandem ms | ORT ms | tandem/ORT |", "|---|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "x.npy")
        np.save(npy, x)
        for title, m in ms:
            if not any(o.lower() in title.lower() for o in a.only.split("|")):
                continue
            path = os.path.join(tmp, "m.onnx")
            with open(path, "wb") as f:
                f.write(m.SerializeToString())
            name = m.graph.input[0].name
            feeds = {name: x}
            check(a.tandem, path, npy, name, ort.InferenceSession(path, providers=["CPUExecutionProvider"]), feeds, tmp)
            for t in [int(v) for v in a.threads.split(",")]:
                so = ort.SessionOptions()
                so.intra_op_num_threads = t
                so.inter_op_num_threads = 1
                sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                tt, oo = [], []
                for _ in range(a.rounds):
                    tt.append(tandem_ms(a.tandem, path, npy, name, t, a.iterations))
                    oo.append(ort_ms(sess, feeds, a.iterations))
                tm, om = float(np.median(tt)), float(np.median(oo))
                lines.append(f"| {title} | {t} | {tm:.1f} | {om:.1f} | {tm / om:.2f} |")
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
