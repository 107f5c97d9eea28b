#!/usr/bin/env python3
"""Decode at depth D against decode at depth 10 per KV cache type (issue 19: decode@1000 >= 90% of
decode@10), side by side in one run: for each round, for each (binary, kv type) in turn,

    TANDEM bench MODEL --llm --threads T --depth D --gen-tokens 64 --prompt-tokens 128 --repetitions 3
                 --kv-type KV --json

for D = 10 and D = --depth (default 1000). Prints per (binary, kv type) the median over rounds of the
tg64 @ dD figures, wall-clock tokens/s and tokens per second of the process's CPU time (steadier on a
shared machine), and the ratios @D / @10.

Usage: run_kv_depth.py --model /work/smol_off [--tandem build/tandem] [--old OLD_TANDEM]
                       [--kv auto,int8] [--threads 1] [--rounds 2] [--depth 1000]
--old runs a second binary (e.g. the branch point's) with kv type auto as a baseline."""
import argparse
import json
import statistics
import subprocess


def run(tandem, model, kv, depth, threads):
    cmd = [tandem, "bench", model, "--llm", "--threads", str(threads), "--depth", str(depth),
           "--gen-tokens", "64", "--prompt-tokens", "128", "--repetitions", "3", "--json"]
    if kv != "auto":
        cmd += ["--kv-type", kv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {r.stderr.strip()}")
    j = json.loads(r.stdout)
    cpu = j.get("tg_depth_cpu", {}).get("tokens_per_s", {}).get("mean", float("nan"))
    return j["tg_depth"]["tokens_per_s"]["mean"], cpu, j["pp"]["tokens_per_s"]["mean"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--old")
    ap.add_argument("--kv", default="auto,int8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--depth", type=int, default=1000)
    a = ap.parse_args()
    configs = [("new", a.tandem, kv) for kv in a.kv.split(",")]
    if a.old:
        configs.insert(0, ("old", a.old, "auto"))
    res = {(n, kv): {10: [], a.depth: []} for n, _, kv in configs}
    for r in range(a.rounds):
        for n, binary, kv in configs:
            for d in (10, a.depth):
                wall, cpu, pp = run(binary, a.model, kv, d, a.threads)
                res[(n, kv)][d].append((wall, cpu))
                print(f"round {r} {n} {kv} d{d}: tg64 {wall:.1f} t/s wall, {cpu:.1f} t/s cpu (pp128 {pp:.0f})",
                      flush=True)
    print(f"\n| binary | kv | tg64 @ d10 wall / cpu | tg64 @ d{a.depth} wall / cpu | ratio wall | ratio cpu |")
    print("|---|---|---|---|---|---|")
    for n, _, kv in configs:
        m = {d: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
             for d, v in res[(n, kv)].items()}
        print(f"| {n} | {kv} | {m[10][0]:.1f} / {m[10][1]:.1f} | {m[a.depth][0]:.1f} / {m[a.depth][1]:.1f} | "
              f"{m[a.depth][0] / m[10][0]:.2f} | {m[a.depth][1] / m[10][1]:.2f} |")


if __name__ == "__main__":
    main()
