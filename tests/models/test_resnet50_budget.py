"""ctest resnet50_budget (issue 21): ResNet-50 under accelerator budgets on the test device and opencl:0.

    test_resnet50_budget.py --tandem build/tandem --repo . --out build/resnet50_budget [--devices test:0,opencl:0]

The model is the bench's ResNet-50 (bench/models.py: torchvision v1.5 shape, random weights with a
fixed seed, 25.5M parameters, 97.5 MiB of float32), batch fixed to 1. ONNX Runtime's output on a
fixed random image is the reference. For each device (test:0 with TANDEM_TEST_DEVICES=1, opencl:0
where the build and machine have one), `tandem run --devices DEV,cpu --placement DEV
--device-memory DEV=P% --residency streamed` for P = 100, 50, 25, 10 (a share of the weights on
top of the activations), and the cost model's pick (no --residency) at 25%: the output must equal
ONNX Runtime's within the model tests' tolerances (rtol 1e-3, atol 1e-4), and the device's
monitor peak (bytes) must not exceed the budget that `tandem plan --json` resolves for the same
options; on test:0 the bytes uploaded from pinned (registered) host memory in the run must equal the
plan's streamed bytes per run. Prints one table row per run. Exit 77 without onnx/onnxruntime in this Python.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--devices", default="test:0,opencl:0")
    ap.add_argument("--budgets", default="100,50,25,10")
    a = ap.parse_args()
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
    except ImportError:
        print("SKIPPED: needs numpy, onnx and onnxruntime")
        sys.exit(77)
    sys.path.insert(0, os.path.join(a.repo, "bench"))
    import models

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "resnet50.onnx")
    if not os.path.exists(path):
        m = models.resnet50()
        for vi in list(m.graph.input) + list(m.graph.output):
            d = vi.type.tensor_type.shape.dim[0]
            d.ClearField("dim_param")
            d.dim_value = 1
        onnx.save(m, path)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    xin = os.path.join(a.out, "input.npy")
    np.save(xin, x)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    wb = sum(int(np.prod(t.dims)) * 4 for t in onnx.load(path, load_external_data=False).graph.initializer)
    print(f"ResNet-50: weights {wb} B ({wb / 1048576:.1f} MiB); output range {np.ptp(ref):.3f}")
    env = dict(os.environ, TANDEM_TEST_DEVICES="1")
    env.setdefault("POCL_CACHE_DIR", os.path.join(a.out, "pocl"))
    bad = 0
    print("| device | budget | residency | plan | budget B | peak B | streamed B/run | uploaded B | pinned B | max abs diff "
          "| ok | s |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for dev in a.devices.split(","):
        runs = [(int(p), "streamed") for p in a.budgets.split(",")] + [(25, "auto")]
        for pct, res in runs:
            opts = ["--devices", f"{dev},cpu", "--placement", dev, "--device-memory", f"{dev}={pct}%"]
            if res != "auto":
                opts += ["--residency", res]
            # the run's thread count: the cost model's streamed set depends on it
            p = subprocess.run([a.tandem, "plan", path, "--json", "--threads", "1"] + opts, capture_output=True,
                               text=True, env=env)
            if p.returncode:
                if dev != "test:0" and ("unknown device" in p.stderr or "not available" in p.stderr
                                        or "no device" in p.stderr.lower()):
                    print(f"SKIP {dev}: {p.stderr.strip()[-200:]}")
                    break
                print(f"FAIL {dev} {pct}% {res}: plan: {p.stderr.strip()[-400:]}")
                bad += 1
                continue
            plan = json.loads(p.stdout)
            pb = plan.get("budget") or {}
            budget = ((pb.get("devices") or {}).get(dev) or {}).get("budget_bytes", 0)
            od = os.path.join(a.out, f"out_{dev.replace(':', '_')}_{pct}_{res}")
            t0 = time.time()
            r = subprocess.run([a.tandem, "run", path, "--input", f"input={xin}", "--output-dir", od,
                                "--threads", "1"] + opts, capture_output=True, text=True, env=env)
            secs = time.time() - t0
            if r.returncode:
                print(f"FAIL {dev} {pct}% {res}: run: {r.stderr.strip()[-400:]}")
                bad += 1
                continue
            mm = re.search(re.escape(dev) + r" peak [0-9.]+ MiB.*\(peak (\d+) B, uploaded (\d+) B, "
                           r"of which from pinned memory (\d+) B\)", r.stderr)
            peak, up, pinned = (int(mm.group(1)), int(mm.group(2)), int(mm.group(3))) if mm else (-1, -1, -1)
            streamed = int(pb.get("bytes_streamed_per_run", 0))
            # test:0 registers the streamed weights (pinned); opencl:0 has no registration
            want_pinned = streamed if dev.startswith("test:") else 0
            if res == "streamed" and pinned != want_pinned:  # (auto: plan and run may choose apart)
                print(f"FAIL {dev} {pct}% {res}: {pinned} B uploaded from pinned memory, want {want_pinned} B")
                bad += 1
            y = np.load(os.path.join(od, "output.npy"))
            diff = float(np.max(np.abs(y - ref)))
            ok = y.shape == ref.shape and np.allclose(y, ref, rtol=1e-3, atol=1e-4)
            if not ok:
                print(f"FAIL {dev} {pct}% {res}: output off by {diff}")
                bad += 1
            if peak < 0 or not budget or peak > budget:
                print(f"FAIL {dev} {pct}% {res}: peak {peak} B vs budget {budget} B")
                bad += 1
            print(f"| {dev} | {pct}% | {res} | {pb.get('choice', '?')} | {budget} | {peak} | "
                  f"{int(pb.get('bytes_streamed_per_run', 0))} | {up} | {pinned} | {diff:.2e} | {'yes' if ok else 'NO'} | "
                  f"{secs:.1f} |")
    if bad:
        sys.exit(f"FAIL: {bad} check(s)")
    print("PASS")


if __name__ == "__main__":
    main()
