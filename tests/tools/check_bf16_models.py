#!/usr/bin/env python3
"""The bf16 test (ctest bf16_model_tests*, issue 20 item 4): `--precision bf16` on the cpu.

On a CPU whose oneDNN runs avx512_core_bf16 or AMX: the float CNN and MLP of
tools/make_int8_models.py (convolutions grouped / depthwise / strided with fused
activations, a residual Add, Concat, MatMul + Add, Gemm with transB) run by `tandem run
--precision bf16` at 1 and 2 threads, against ONNX Runtime's float32 outputs. bf16 keeps 8
bits of mantissa (a relative rounding of 2^-9 per input), the products accumulate in f32:
the check asks max |got - want| <= RTOL * max |want| (RTOL 2e-2) and cosine >= 0.999. It
also asks that the bf16 run differs from tandem's own fp32 run (so bf16 primitives did run:
an fp32 run is within 1e-4 of ORT), and that a result moved by 3 * RTOL fails the check.

Under an ISA without AVX512_BF16 (the ctest _capped runs TANDEM_CPU_ISA=avx512_core), and on
such a CPU: `--precision bf16` must fail with a message naming AVX512_BF16 (never a silent
emulation), and fp32 must still run; with another device next to the cpu (opencl:0,cpu,
when there is one) the session runs, the cpu staying in fp32.

    .venv/bin/python tests/tools/check_bf16_models.py --tandem build/tandem
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import make_int8_models as mk  # noqa: E402

RTOL, COS = 2e-2, 0.999
BF16_ISAS = ("avx512_core_bf16", "avx512_core_amx")


def cpu_isa(tandem):
    out = subprocess.run([tandem, "devices"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("cpu "):
            return line.split()[-1]
    return "?"


def run_tandem(tandem, model, feeds, threads, precision, devices="cpu"):
    with tempfile.TemporaryDirectory() as d:
        cmd = [tandem, "run", model, "--threads", str(threads), "--precision", precision,
               "--devices", devices, "--output-dir", os.path.join(d, "out")]
        for k, v in feeds.items():
            f = os.path.join(d, k + ".npy")
            np.save(f, v)
            cmd += ["--input", f"{k}={f}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            return None, r.stderr.strip()
        return {k[:-4]: np.load(os.path.join(d, "out", k))
                for k in os.listdir(os.path.join(d, "out")) if k.endswith(".npy")}, ""


def errors(got, want):
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    rel = float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))
    cos = float(g @ w / max(np.linalg.norm(g) * np.linalg.norm(w), 1e-30))
    return rel, cos


def passes(got, want):
    rel, cos = errors(got, want)
    return rel <= RTOL and cos >= COS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    a = ap.parse_args()
    isa = cpu_isa(a.tandem)
    has_bf16 = isa in BF16_ISAS
    print(f"cpu ISA: {isa} ({'bf16 kernels' if has_bf16 else 'no bf16: refusal expected'})")
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for name, (model, shape) in (("cnn_b2", mk.cnn(2)), ("mlp", mk.mlp())):
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(model, path)
            x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
            want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
                None, {"x": x})[0]
            cases.append((name, path, {"x": x}, want))
        for name, path, feeds, want in cases:
            if not has_bf16:
                got, err = run_tandem(a.tandem, path, feeds, 1, "bf16")
                ok = got is None and "AVX512_BF16" in err
                print(f"{name}: bf16 refused: {'yes' if ok else 'NO'} ({err[-200:]})")
                fails += not ok
                got, err = run_tandem(a.tandem, path, feeds, 1, "fp32")
                ok = got is not None and errors(got["y"], want)[0] <= 1e-4
                print(f"{name}: fp32 still runs: {'yes' if ok else 'NO'} {err[-200:]}")
                fails += not ok
                # next to another device the cpu stays in fp32 (a warning), the session runs
                if name == "mlp" and "opencl:0" in subprocess.run(
                        [a.tandem, "devices"], capture_output=True, text=True).stdout:
                    got, err = run_tandem(a.tandem, path, feeds, 1, "bf16", "opencl:0,cpu")
                    ok = got is not None and errors(got["y"], want)[0] <= 1e-3
                    print(f"{name}: bf16 on opencl:0,cpu runs: {'yes' if ok else 'NO'} {err[-200:]}")
                    fails += not ok
                continue
            f32, err = run_tandem(a.tandem, path, feeds, 1, "fp32")
            if f32 is None:
                print(f"{name}: fp32 run failed: {err}")
                fails += 1
                continue
            for threads in (1, 2):
                got, err = run_tandem(a.tandem, path, feeds, threads, "bf16")
                if got is None:
                    print(f"{name} t{threads}: bf16 run failed: {err}")
                    fails += 1
                    continue
                rel, cos = errors(got["y"], want)
                rel32, _ = errors(f32["y"], want)
                ok = rel <= RTOL and cos >= COS
                # bf16 really ran: its error is well above fp32's (which is ~1e-6)
                ran = rel > 10 * rel32 and rel > 1e-4
                print(f"{name} t{threads}: bf16 vs ORT fp32: max rel {rel:.2e} cosine {cos:.6f} "
                      f"(fp32 run: max rel {rel32:.1e}) -> {'ok' if ok else 'FAIL'}"
                      f"{'' if ran else ' (bf16 primitives did NOT run)'}")
                fails += (not ok) + (not ran)
                bad = got["y"].copy()
                k = int(np.argmax(np.abs(want)))
                bad.flat[k] += 3 * RTOL * float(np.max(np.abs(want)))
                if passes(bad, want):
                    print(f"{name}: the check cannot fail (a moved element passed)")
                    fails += 1
    print("PASS" if not fails else f"FAIL ({fails})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
