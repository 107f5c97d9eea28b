#!/usr/bin/env python3
"""Mixed CPU + OpenCL runs against the best single device, with asynchronous and blocking copies.

For each model (bench/models.py, batch 1) and each configuration, bench/mixed_bench.c (built
here against the build's libtandem) runs the model on random inputs for --duration seconds
after 3 warm-up runs and reports the p50 latency; configurations alternate, --rounds rounds,
the median of the rounds is shown.

  cpu         --devices cpu
  opencl      --devices opencl:0,cpu --placement opencl:0 (the CPU only for what opencl:0
              does not claim)
  auto        --devices cpu,opencl:0 --placement auto (cost-model placement, HEFT)
  auto-sync   the same with TANDEM_SYNC_COPIES=1 (the executor's blocking copies)
  split       --devices opencl:0,cpu --placement first with affinity rules that put some op
              types on the CPU (tensors cross both ways in every block): the copy path itself
  split-sync  the same with TANDEM_SYNC_COPIES=1

The target (issue 5): auto's p50 at most 5% above the best single device's
(best / auto >= 0.95). --configs picks a subset (e.g. cpu,opencl,auto for placement only).

    /tmp/venv/bin/python bench/run_mixed.py --build build-ocl3
writes bench/results/opencl-async-<date>.md (--no-write prints only).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

MODELS = {
    "mobilenetv2": (lambda: models.mobilenetv2(), "Add=cpu"),
    "resnet50": (lambda: models.resnet50(), "Add=cpu"),
    "bert-2layer-seq64": (lambda: models.bert_base(seq=64, layers=2), "Softmax=cpu"),
}

CONFIGS = [
    ("cpu", "cpu", "auto", None, False),
    ("opencl", "opencl:0,cpu", "opencl:0", None, False),
    ("auto", "cpu,opencl:0", "auto", None, False),
    ("auto-sync", "cpu,opencl:0", "auto", None, True),
    ("split", "opencl:0,cpu", "first", "AFFINITY", False),
    ("split-sync", "opencl:0,cpu", "first", "AFFINITY", True),
]


def run(exe, model, devices, placement, affinity, threads, duration, sync, env):
    e = dict(env)
    if sync:
        e["TANDEM_SYNC_COPIES"] = "1"
    else:
        e.pop("TANDEM_SYNC_COPIES", None)
    cmd = [exe, model, devices, placement, affinity or "-", str(threads), str(duration)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=e).stdout
    return json.loads(out)["p50_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--note", default="")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS),
                    help="comma-separated subset of " + ", ".join(c[0] for c in CONFIGS))
    ap.add_argument("--title", default="Mixed CPU + OpenCL runs, asynchronous copies")
    a = ap.parse_args()
    want = a.configs.split(",")
    configs = [c for c in CONFIGS if c[0] in want]
    for need in ("cpu", "opencl", "auto"):
        if need not in want:
            ap.error(f"--configs must include {need}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.abspath(a.build)
    env = dict(os.environ)
    env.setdefault("POCL_CACHE_DIR", os.path.join(build, "pocl-cache"))
    load0 = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "mixed_bench")
        subprocess.run(["cc", "-O2", os.path.join(root, "bench", "mixed_bench.c"), "-I",
                        os.path.join(root, "include"), "-L", build, "-ltandem",
                        f"-Wl,-rpath,{build}", "-o", exe], check=True)
        for name in a.models.split(","):
            build_model, affinity = MODELS[name]
            path = os.path.join(tmp, f"{name}.onnx")
            onnx.save(build_model(), path)
            times = {c[0]: [] for c in configs}
            for r in range(a.rounds):
                order = configs if r % 2 == 0 else configs[::-1]
                for label, devices, placement, aff, sync in order:
                    aff = affinity if aff == "AFFINITY" else aff
                    times[label].append(run(exe, path, devices, placement, aff, a.threads,
                                            a.duration, sync, env))
            med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            results[name] = (med, times, affinity)
            best = min(med["cpu"], med["opencl"])
            print(f"{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()) +
                  f" ms; best/auto {best / med['auto']:.3f}", flush=True)
    load1 = os.getloadavg()[0]
    devs = subprocess.run([os.path.join(build, "tandem"), "devices"], capture_output=True, text=True,
                          env=env).stdout
    today = datetime.date.today().isoformat()
    lines = [
        f"# {a.title} — {today}",
        "",
        f"Generated by `bench/run_mixed.py --build {a.build} --models {a.models} --configs {a.configs} "
        f"--rounds {a.rounds} --duration {a.duration}`{(' ' + a.note) if a.note else ''}.",
        "",
        f"Batch 1, {a.threads} threads, p50 latency over {a.duration} s per configuration after 3 "
        f"warm-up runs, configurations alternating, {a.rounds} rounds, median of the rounds "
        "(ms). best = the faster of `cpu` and `opencl`; the target is best / auto >= 0.95. "
        "`-sync` = TANDEM_SYNC_COPIES=1 (blocking copies). `split` forces tensors across "
        "devices with affinity rules (shown) to measure the copy path itself.",
        "",
    ]
    split = "split" in want and "split-sync" in want
    lines += ["| model | " + " | ".join(c[0] for c in configs) + " | best / auto |" +
              (" split-sync / split | split affinity |" if split else ""),
              "|---|" + "---:|" * (len(configs) + 1) + ("---:|---|" if split else "")]
    for name, (med, times, affinity) in results.items():
        best = min(med["cpu"], med["opencl"])
        lines.append(f"| {name} | " + " | ".join(f"{med[c[0]]:.2f}" for c in configs) +
                     f" | {best / med['auto']:.3f} |" +
                     (f" {med['split-sync'] / med['split']:.3f} | `{affinity}` |" if split else ""))
    lines += ["", "Rounds (ms):", ""]
    for name, (med, times, _) in results.items():
        lines.append(f"- {name}: " + "; ".join(f"{k} {', '.join(f'{x:.2f}' for x in v)}"
                                               for k, v in times.items()))
    lines += ["", "Devices (`tandem devices`):", "", "```", devs.rstrip(), "```", "",
              f"Load average at start {load0:.2f}, at end {load1:.2f}. The machine was shared "
              "(2 cores, several other engineers building and testing at the same time): "
              "compare configurations of the same round, not absolute figures."]
    text = "\n".join(lines) + "\n"
    if a.no_write:
        print(text)
        return
    out = a.out or os.path.join(root, "bench", "results", f"opencl-async-{today}.md")
    with open(out, "w") as f:
        f.write(text)
    print("wrote", out)


if __name__ == "__main__":
    sys.exit(main())
