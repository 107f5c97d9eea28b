#!/usr/bin/env python3
"""A/B timing of tandem builds on any model by CPU time, for a change's effect on a busy
machine (bench/real/ab_time.py does the same for the real models, against ORT): each round
runs every build's `tandem bench MODEL` twice (N1 and N2 timed runs, each in a process of
its own) and takes (CPU(N2) - CPU(N1)) / (N2 - N1) as the CPU ms per run (session creation
and warm-up cancel out); builds alternate within a round; prints the medians and the load.

    python3 bench/ab_cpu_time.py bench/.models/resnet50-v1.onnx --threads 1 \
        --build main=/tmp/main-build --build new=build [--build cl=build:TANDEM_CPU_LAYOUT=channels_last]

A build is NAME=DIR[:VAR=VALUE...]: DIR holds `tandem` and its libtandem.so (put first on
LD_LIBRARY_PATH), the VAR=VALUE pairs go into its runs' environment.
"""
import argparse
import os
import resource
import statistics
import subprocess
ap = argparse.ArgumentParser()
ap.add_argument("model"); ap.add_argument("--threads", default="1"); ap.add_argument("--batch", default="1")
ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--n1", type=int, default=3); ap.add_argument("--n2", type=int, default=23)
ap.add_argument("--build", action="append", required=True, help="NAME=BINDIR[:ENV=VAL]")
ap.add_argument("--extra", default="")
a = ap.parse_args()
def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN); return r.ru_utime + r.ru_stime
def run(bindir, env, n):
    e = dict(os.environ); e["LD_LIBRARY_PATH"] = bindir; e.update(env)
    c0 = cpu()
    subprocess.run([bindir + "/tandem", "bench", a.model, "--threads", a.threads, "--batch", a.batch,
                    "--warmup", "2", "--iterations", str(n)] + a.extra.split(), env=e, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cpu() - c0
res = {}
for r in range(a.rounds):
    for b in a.build:
        name, rest = b.split("=", 1)
        parts = rest.split(":"); bindir = parts[0]; env = dict(p.split("=", 1) for p in parts[1:])
        d = (run(bindir, env, a.n2) - run(bindir, env, a.n1)) / (a.n2 - a.n1) * 1000
        res.setdefault(name, []).append(d)
load = open("/proc/loadavg").read().split()[:3]
print(f"{os.path.basename(a.model)} t{a.threads} b{a.batch} load {' '.join(load)}: " +
      ", ".join(f"{k} {statistics.median(v):.2f} ms CPU/run ({' '.join(f'{x:.1f}' for x in v)})" for k, v in res.items()))
