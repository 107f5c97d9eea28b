#!/usr/bin/env python3
"""A/B timing of tandem builds on one real model against ONNX Runtime, for a change's effect
on a busy machine: rounds alternate every build (each in a process of its own, through
tdm.py) with ORT (in this process), and the figure that matters is the median process CPU
time per run (other processes inflate it far less than wall time).

    .venv/bin/python bench/real/ab_time.py --model magika --threads 1 --rounds 5 \\
        --lib /tmp/before/libtandem.so --lib build/libtandem.so

A --lib may carry one environment setting for its runs: NAME=VALUE:PATH; the name `opt`
sets the session's optimisation level instead (opt=0:build/libtandem.so for --opt-level 0).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import packages  # noqa: E402
import realmodels  # noqa: E402
import runner  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a key of realmodels.MODELS")
    ap.add_argument("--lib", action="append", required=True, help="[NAME=VALUE:]libtandem.so")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=1.0, help="s per measurement")
    ap.add_argument("--site", default=packages.DEFAULT_SITE)
    a = ap.parse_args()
    m = realmodels.BY_KEY[a.model]
    dirs = packages.ensure(a.site, sorted({m.package, "pillow"}))
    sys.path.insert(0, dirs["pillow"])
    with tempfile.TemporaryDirectory() as tmp:
        case = m.make(realmodels.Ctx(a.site, os.path.join(REPO, "build", "tandem"), tmp))
        feeds = os.path.join(tmp, "feeds.npz")
        np.savez(feeds, **case.feeds)
        sess = runner.ort_session(case.path, a.threads)
        for _ in range(3):
            sess.run(None, case.feeds)
        got = {lib: [] for lib in a.lib}
        ort = []
        for _ in range(a.rounds):
            for lib in a.lib:
                env, path, opt = dict(os.environ), lib, "1"
                if ":" in lib and "=" in lib.split(":", 1)[0]:
                    kv, path = lib.split(":", 1)
                    k, v = kv.split("=", 1)
                    if k == "opt":
                        opt = v
                    else:
                        env[k] = v
                r = subprocess.run([sys.executable, runner.TDM_WORKER, "time", "--lib", path,
                                    "--model", case.path, "--feeds", feeds, "--threads",
                                    str(a.threads), "--duration", str(a.duration),
                                    "--opt-level", opt],
                                   capture_output=True, text=True, env=env)
                if r.returncode:
                    sys.exit(f"{lib}: {r.stderr.strip()}")
                got[lib].append(json.loads(r.stdout))
            lat, cpu = [], []
            start = time.perf_counter()
            while not lat or time.perf_counter() - start < a.duration:
                c0, t0 = time.process_time(), time.perf_counter()
                sess.run(None, case.feeds)
                lat.append((time.perf_counter() - t0) * 1e3)
                cpu.append((time.process_time() - c0) * 1e3)
            ort.append({"p50": float(np.median(lat)), "cpu_p50": float(np.median(cpu)),
                        "min": min(lat)})
    o_cpu = np.median([x["cpu_p50"] for x in ort])
    o_p50 = np.median([x["p50"] for x in ort])
    print(f"{a.model}, {a.threads} thread(s), {a.rounds} rounds; load {os.getloadavg()[0]:.1f}")
    print(f"  ORT: p50 {o_p50:.3f} ms, CPU {o_cpu:.3f} ms/run, min {min(x['min'] for x in ort):.3f}")
    for lib, rs in got.items():
        t_cpu = np.median([x["cpu_p50"] for x in rs])
        t_p50 = np.median([x["p50"] for x in rs])
        print(f"  {lib}: p50 {t_p50:.3f} ms, CPU {t_cpu:.3f} ms/run, "
              f"min {min(x['min'] for x in rs):.3f}; tandem/ORT wall {t_p50 / o_p50:.2f}, "
              f"CPU {t_cpu / o_cpu:.2f}")


if __name__ == "__main__":
    main()
