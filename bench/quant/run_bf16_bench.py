#!/usr/bin/env python3
"""bf16 benchmark (issue 20 item 4): `tandem bench --precision bf16` against fp32 on the cpu.

    .venv/bin/python bench/quant/run_bf16_bench.py [--tandem build/tandem]
        [--models resnet50,mobilenetv2] [--batches 1,8] [--threads 1] [--duration S]
        [--rounds N] [--out FILE.md]

Models: the CPU bench's ResNet-50 and MobileNetV2 (bench/models.py: random weights, fixed
seeds, cached in bench/.models/). For every (model, batch, threads) tandem fp32 and tandem
bf16 are measured in alternation for --rounds rounds, each with `tandem bench --json` in a
fresh process; the table shows the median of the rounds' p50 latencies. Accuracy at batch
1 on 4 inputs uniform in [-1, 1): cosine similarity and max relative error (max |bf16 - fp32|
/ max |fp32|) of the output, and top-1 agreement.

ONNX Runtime has no bf16 convolution or matmul kernels on the CPU (its CPU execution provider
runs these ops in float32 only), so there is no ORT bf16 column. Needs a CPU whose oneDNN runs
avx512_core_bf16 or AMX: elsewhere tandem refuses --precision bf16, and so does this script.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import run_cpu_bench as cb  # noqa: E402


def cpu_isa(tandem):
    out = subprocess.run([tandem, "devices"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("cpu "):
            return line.split()[-1]
    return "?"


def bench(tandem, path, batch, threads, precision, duration):
    cmd = [tandem, "bench", path, "--batch", str(batch), "--threads", str(threads),
           "--precision", precision, "--warmup", "2", "--duration", str(duration), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip()[-400:])
    return json.loads(r.stdout)["latency_ms"]["p50"]


def kernels(tandem, path):
    """oneDNN's convolution and matmul implementations in one bf16 run (ONEDNN_VERBOSE), with
    how many primitives ran each: "brgconv_1x1:avx512_core_amx_bf16 x36, ..."."""
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    r = subprocess.run([tandem, "bench", path, "--precision", "bf16", "--threads", "1",
                        "--warmup", "0", "--iterations", "1"], capture_output=True, text=True, env=env)
    seen = {}
    for line in r.stdout.splitlines():
        f = line.split(",")
        if len(f) > 6 and f[:3] == ["onednn_verbose", "exec", "cpu"] and f[3] in ("convolution", "matmul"):
            key = f"{f[4]} ({f[3]}, {f[6].split()[0].split(':')[0]})"
            seen[key] = seen.get(key, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(seen.items(), key=lambda kv: -kv[1])) or "?"


def run_out(tandem, path, x, precision):
    inp = onnx.load(path, load_external_data=False).graph.input[0].name
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "x.npy")
        np.save(f, x)
        r = subprocess.run([tandem, "run", path, "--precision", precision, "--input",
                            f"{inp}={f}", "--output-dir", os.path.join(d, "o")],
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr.strip()[-400:])
        outs = sorted(k for k in os.listdir(os.path.join(d, "o")) if k.endswith(".npy"))
        return np.load(os.path.join(d, "o", outs[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", default=os.path.join(REPO, "build", "tandem"))
    ap.add_argument("--models", default="resnet50,mobilenetv2")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    isa = cpu_isa(a.tandem)
    rows, acc, impl = [], [], []
    for name in a.models.split(","):
        path, _ = cb.get_model(name)
        shape = [int(d.dim_value) or 1 for d in
                 onnx.load(path, load_external_data=False).graph.input[0].type.tensor_type.shape.dim]
        rng = np.random.default_rng(11)
        cos, rel, agree = [], [], 0
        for _ in range(4):
            x = rng.uniform(-1, 1, shape).astype(np.float32)
            f, b = run_out(a.tandem, path, x, "fp32").ravel(), run_out(a.tandem, path, x, "bf16").ravel()
            cos.append(float(f @ b / (np.linalg.norm(f) * np.linalg.norm(b))))
            rel.append(float(np.max(np.abs(f - b)) / np.max(np.abs(f))))
            agree += int(np.argmax(f) == np.argmax(b))
        acc.append((name, min(cos), max(rel), agree, 4))
        impl.append((name, kernels(a.tandem, path)))
        print(f"{name}: cosine min {min(cos):.6f}, max rel {max(rel):.2e}, top-1 {agree}/4", flush=True)
        for batch in [int(v) for v in a.batches.split(",")]:
            for threads in [int(v) for v in a.threads.split(",")]:
                t = {"fp32": [], "bf16": []}
                for _ in range(a.rounds):
                    for p in ("fp32", "bf16"):
                        t[p].append(bench(a.tandem, path, batch, threads, p, a.duration))
                f32, b16 = float(np.median(t["fp32"])), float(np.median(t["bf16"]))
                rows.append((name, batch, threads, f32, b16))
                print(f"{name} b{batch} t{threads}: fp32 {f32:.2f} ms, bf16 {b16:.2f} ms "
                      f"({b16 / f32:.2f}x)", flush=True)
    lines = [f"# bf16 on the CPU ({datetime.date.today().isoformat()})", "",
             f"Machine: cpu ISA {isa}, {os.cpu_count()} "
             "logical cores shared with other users' builds: timings are noisy.", "",
             "Command: `.venv/bin/python bench/quant/run_bf16_bench.py " + " ".join(sys.argv[1:]) + "`", "",
             "Latency: median over rounds of `tandem bench` p50, ms. ONNX Runtime has no bf16 "
             "CPU kernels for Conv/MatMul (no column).", "",
             "| model | batch | threads | tandem fp32 | tandem bf16 | bf16 / fp32 |",
             "|---|---|---|---|---|---|"]
    for n, b, th, f32, b16 in rows:
        lines.append(f"| {n} | {b} | {th} | {f32:.2f} | {b16:.2f} | {b16 / f32:.2f}x |")
    lines += ["", "Accuracy (batch 1, 4 inputs uniform [-1, 1), random-weight models), bf16 vs fp32:", "",
              "| model | cosine min | max rel error | top-1 agreement |", "|---|---|---|---|"]
    for n, c, r, ag, tot in acc:
        lines.append(f"| {n} | {c:.6f} | {r:.2e} | {ag}/{tot} |")
    lines += ["", "oneDNN's implementations in a bf16 run (batch 1, ONEDNN_VERBOSE; the source data type "
              "in parentheses: f32 = a convolution tandem keeps in float32):", ""]
    lines += [f"- {n}: {k}" for n, k in impl]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
