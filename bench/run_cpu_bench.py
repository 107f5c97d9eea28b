#!/usr/bin/env python3
"""CPU benchmark: tandem against ONNX Runtime on ResNet-50, MobileNetV2, BERT-base and a
DLRM-like model, batch 1 and 8, 1 and 2 threads.

    /tmp/venv/bin/python bench/run_cpu_bench.py [--tandem build/tandem] [--quick]
        [--models resnet50,mobilenetv2,bert,dlrm] [--batches 1,8] [--threads 1,2]

Models are generated with onnx.helper (opset 17, random weights, fixed seeds; see models.py)
and cached in bench/.models/. For every (model, batch, threads) the two engines are measured
in alternation for a few rounds: tandem with `tandem bench --json` in a fresh process, ONNX
Runtime in this process (intra_op_num_threads=N, inter_op_num_threads=1, sequential
execution, ORT_ENABLE_ALL). Each round gives a p50 latency; the table shows the median of the
rounds. GFLOP/s counts 2 * multiply-accumulates of Conv/MatMul/Gemm from the graph; the
fraction of peak is against N * the per-core FMA peak of the machine it runs on: a single-core
FMA loop at the widest vector the CPU has (bench/fma_peak.c, 256- or 512-bit), or --peak X
(117 GFLOP/s/core, issue 3's figure, when no C compiler is found).
Before timing, each model's outputs from tandem and ONNX Runtime are compared at batch 1
(--no-check skips this). Results go to bench/results/cpu-<date>.md (--no-write: print only).
Needs numpy, onnx and onnxruntime (tools/requirements.txt).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import models  # noqa: E402

GEN_VERSION = 1  # bump when a builder in models.py changes: the cache is keyed by it
CACHE = os.path.join(HERE, ".models")
ALL_MODELS = ["resnet50", "mobilenetv2", "bert", "dlrm"]
FLOP_MODELS = {"resnet50", "mobilenetv2", "bert"}  # GFLOP/s is meaningless for DLRM
PEAK_GIVEN = 117.0


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- models -------------------------------------------------------------------------------------

def get_model(name):
    """Path of the cached model and its FLOPs per batch item; builds them when missing."""
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"{name}-v{GEN_VERSION}.onnx")
    meta_path = path[:-5] + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path) as f:
            return path, json.load(f)["flops_per_item"]
    log(f"building {name} ...")
    m = models.BUILDERS[name]()
    onnx.checker.check_model(m)
    flops = models.count_flops(m, batch=1)
    tmp = path + ".tmp"
    onnx.save(m, tmp)
    os.replace(tmp, path)
    with open(meta_path, "w") as f:
        json.dump({"flops_per_item": flops, "nodes": len(m.graph.node)}, f)
    return path, flops


ORT_NP_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def make_feeds(sess, batch, seed=1):
    """Random inputs like `tandem bench` makes: floats in [-1, 1), integers in [0, 8),
    dynamic leading dim = batch, other dynamic dims 1."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else (batch if k == 0 else 1) for k, d in enumerate(i.shape)]
        t = ORT_NP_TYPES[i.type]
        if t == np.float32:
            feeds[i.name] = rng.uniform(-1, 1, shape).astype(np.float32)
        else:
            feeds[i.name] = rng.integers(0, 8, shape).astype(t)
    return feeds


def batch_dims(sess):
    """The symbolic names of the inputs' leading dimensions (the batch)."""
    return sorted({i.shape[0] for i in sess.get_inputs() if i.shape and isinstance(i.shape[0], str)})


def ort_session(path, threads, fixed=None):
    """fixed: {dim name: size} given to ONNX Runtime as free-dimension overrides."""
    so = ort.SessionOptions()
    for name, size in (fixed or {}).items():
        so.add_free_dimension_override_by_name(name, size)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


# ---- measurements -------------------------------------------------------------------------------

def measure_ort(sess, feeds, warmup, duration):
    for _ in range(warmup):
        sess.run(None, feeds)
    lat = []
    start = time.perf_counter()
    while not lat or time.perf_counter() - start < duration:
        t0 = time.perf_counter()
        sess.run(None, feeds)
        lat.append((time.perf_counter() - t0) * 1e3)
    return {"p50": float(np.percentile(lat, 50)), "mean": float(np.mean(lat)), "min": min(lat),
            "runs": len(lat)}


def measure_tandem(tandem, path, batch, threads, warmup, duration, fixed=None):
    cmd = [tandem, "bench", path, "--batch", str(batch), "--threads", str(threads),
           "--warmup", str(warmup), "--duration", str(duration), "--json"]
    if fixed:
        cmd += ["--free-dims", ",".join(f"{k}={v}" for k, v in fixed.items())]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"exit {r.returncode}")
    j = json.loads(r.stdout)
    return {"p50": j["latency_ms"]["p50"], "mean": j["latency_ms"]["mean"],
            "min": j["latency_ms"]["min"], "runs": j["iterations"],
            "load_ms": j.get("session_create_ms")}


def check_outputs(tandem, path, sess, threads):
    """Runs batch 1 through both engines on the same inputs; returns a short verdict."""
    feeds = make_feeds(sess, 1, seed=7)
    want = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    with tempfile.TemporaryDirectory() as d:
        cmd = [tandem, "run", path, "--threads", str(threads), "--output-dir", d]
        for k, v in feeds.items():
            np.save(os.path.join(d, f"in_{k}.npy"), v)
            cmd += ["--input", f"{k}={os.path.join(d, f'in_{k}.npy')}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return f"tandem run failed: {r.stderr.strip()}"
        worst = 0.0
        for n, w in zip(names, want):
            g = np.load(os.path.join(d, f"{n}.npy"))
            if g.shape != w.shape:
                return f"output {n}: shape {g.shape}, ORT {w.shape}"
            err = float(np.max(np.abs(g.astype(np.float64) - w)) / (np.max(np.abs(w)) + 1e-12))
            worst = max(worst, err)
    return f"{'ok' if worst < 1e-3 else 'MISMATCH'} (max |diff| / max |ORT| = {worst:.1e})"


def cpu_busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]) - idle


def own_cpu_seconds():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def bench_config(tandem, path, sess, batch, threads, rounds, duration, fixed=None):
    feeds = make_feeds(sess, batch)
    t0 = time.perf_counter()
    sess.run(None, feeds)  # first run: also the time estimate for the warm-up counts
    est = time.perf_counter() - t0
    ort_warm = 1 if est > 0.5 else 3
    tdm_warm = 1 if est > 0.1 else 3  # tandem is several times slower today
    hz = os.sysconf("SC_CLK_TCK")
    busy0, own0, wall0 = cpu_busy_jiffies(), own_cpu_seconds(), time.perf_counter()
    res = {"tandem": [], "ort": [], "error": None}
    for r in range(rounds):
        order = ("tandem", "ort") if r % 2 == 0 else ("ort", "tandem")
        for eng in order:
            if eng == "ort":
                res["ort"].append(measure_ort(sess, feeds, ort_warm, duration))
            elif res["error"] is None:
                try:
                    res["tandem"].append(measure_tandem(tandem, path, batch, threads, tdm_warm,
                                                        duration, fixed))
                except (RuntimeError, ValueError, KeyError) as e:
                    res["error"] = str(e)
    wall = time.perf_counter() - wall0
    busy = (cpu_busy_jiffies() - busy0) / hz
    others = max(0.0, busy - (own_cpu_seconds() - own0))
    res["others_cpu"] = others / (wall * (os.cpu_count() or 1))  # share of all cores
    res["wall_s"] = wall
    return res


def median_p50(rs):
    return float(np.median([r["p50"] for r in rs])) if rs else None


# ---- machine ------------------------------------------------------------------------------------

def measure_peak():
    """Single-core FMA peak from bench/fma_peak.c (needs a C compiler); None if unavailable."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    exe = os.path.join(CACHE, "fma_peak")
    src = os.path.join(HERE, "fma_peak.c")
    os.makedirs(CACHE, exist_ok=True)
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        r = subprocess.run([cc, "-O2", "-mavx2", "-mfma", src, "-o", exe], capture_output=True)
        if r.returncode != 0:
            return None
    r = subprocess.run([exe], capture_output=True, text=True)
    try:
        return float(r.stdout.strip())
    except ValueError:
        return None


def tandem_isa(tandem, path):
    """The CPU instruction-set level tandem's kernels use (tandem bench --json: cpu_isa)."""
    r = subprocess.run([tandem, "bench", path, "--iterations", "1", "--warmup", "0", "--json"],
                       capture_output=True, text=True)
    try:
        return json.loads(r.stdout).get("cpu_isa") or "?"
    except ValueError:
        return "?"


def machine_info(tandem):
    info = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1048576:.1f} GiB"
    except OSError:
        pass

    def git(*args):
        r = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = [l for l in git("status", "--porcelain", "--untracked-files=no").splitlines() if l]
    version = subprocess.run([tandem, "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu": info.get("Model name", platform.processor() or "unknown"),
        "cores": f"{info.get('CPU(s)', os.cpu_count())} CPUs ({info.get('Core(s) per socket', '?')} "
                 f"cores/socket, {info.get('Thread(s) per core', '?')} threads/core, "
                 f"{info.get('Socket(s)', '?')} socket(s))",
        "hypervisor": info.get("Hypervisor vendor", "none"),
        "caches": f"L1d {info.get('L1d cache', '?')}, L2 {info.get('L2 cache', '?')}, "
                  f"L3 {info.get('L3 cache', '?')}",
        "memory": mem,
        "kernel": platform.release(),
        "commit": "commit " + commit
                  + (f" + uncommitted changes in {len(dirty)} tracked files" if dirty else ""),
        "tandem": f"{tandem} ({version})",
        "ort": ort.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


# ---- main ---------------------------------------------------------------------------------------

def parse_list(s, conv=str):
    return [conv(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", default=os.path.join(REPO, "build", "tandem"),
                    help="the tandem command (default: build/tandem)")
    ap.add_argument("--models", default=",".join(ALL_MODELS), help="comma-separated subset of "
                    + ",".join(ALL_MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=None, help="alternations per configuration "
                    "(default 3, --quick 1)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of timed runs per engine per round (default 2.5, --quick 0.5; "
                    "at least one run)")
    ap.add_argument("--quick", action="store_true", help="one short round per configuration")
    ap.add_argument("--peak", type=float, default=None,
                    help="FMA peak GFLOP/s per core for the %%-of-peak column (default: measured "
                    "here by bench/fma_peak.c; 117, issue 3's figure, without a C compiler)")
    ap.add_argument("--use-measured-peak", action="store_true",
                    help="(the default now) use the measured single-core FMA peak")
    ap.add_argument("--build-note", default=None,
                    help="how the tandem binary was built (written to the results instead of "
                    "the repository's state)")
    ap.add_argument("--no-check", action="store_true", help="skip the output comparison")
    ap.add_argument("--fix-batch", action="store_true", help="tell both engines the batch before "
                    "they plan: the inputs' symbolic leading dimension fixed to the batch (ONNX "
                    "Runtime: add_free_dimension_override_by_name; tandem: --free-dims), a session "
                    "per batch")
    ap.add_argument("--no-write", action="store_true", help="do not write bench/results/")
    ap.add_argument("--out", default=None, help="results file (default "
                    "bench/results/cpu-<date>.md)")
    a = ap.parse_args()
    rounds = a.rounds or (1 if a.quick else 3)
    duration = a.duration or (0.5 if a.quick else 2.5)
    names = parse_list(a.models)
    for n in names:
        if n not in models.BUILDERS:
            ap.error(f"unknown model '{n}' (known: {', '.join(ALL_MODELS)})")
    batches, threads_list = parse_list(a.batches, int), parse_list(a.threads, int)
    tandem = os.path.abspath(a.tandem) if os.sep in a.tandem else (shutil.which(a.tandem) or a.tandem)
    if not os.access(tandem, os.X_OK):
        ap.error(f"tandem not found at {tandem} (build it, or pass --tandem PATH)")

    started = datetime.datetime.now()
    load_start = os.getloadavg()
    mach = machine_info(tandem)
    if a.build_note:
        mach["commit"] = a.build_note
    measured_peak = measure_peak()
    if a.peak is None and measured_peak:
        peak, peak_src = measured_peak, "measured here by bench/fma_peak.c"
    elif a.peak is None:
        peak, peak_src = PEAK_GIVEN, "given in issue 3: no C compiler to measure it"
    else:
        peak, peak_src = a.peak, "from --peak"
    log(f"tandem: {mach['tandem']}; ORT {ort.__version__}; peak {peak:.0f} GFLOP/s/core "
        f"({peak_src}); measured FMA peak: {measured_peak}")

    rows, checks, flops = [], {}, {}
    for name in names:
        path, flops[name] = get_model(name)
        if "isa" not in mach:
            mach["isa"] = tandem_isa(tandem, path)
            log(f"tandem's CPU ISA: {mach['isa']} (TANDEM_CPU_ISA="
                f"{os.environ.get('TANDEM_CPU_ISA', 'unset: the best the machine has')})")
        for th in threads_list:
            sess = ort_session(path, th)
            if not a.no_check and name not in checks:
                checks[name] = check_outputs(tandem, path, sess, th)
                log(f"{name}: output check {checks[name]}")
            for b in batches:
                n_rounds = rounds
                # BERT-base at batch 8 takes seconds per run: one timed run a round is plenty
                dur = min(duration, 1.0) if name == "bert" and b >= 8 else duration
                fixed = {d: b for d in batch_dims(sess)} if a.fix_batch else None
                s_b = ort_session(path, th, fixed) if fixed else sess
                res = bench_config(tandem, path, s_b, b, th, n_rounds, dur, fixed)
                del s_b
                row = {"model": name, "batch": b, "threads": th, "tandem": median_p50(res["tandem"]),
                       "ort": median_p50(res["ort"]), "res": res}
                rows.append(row)
                log(format_row(row, flops, peak, plain=True))
            del sess
    load_end = os.getloadavg()
    text = report(rows, flops, peak, peak_src, measured_peak, mach, checks, started, load_start,
                  load_end, rounds, duration, " ".join(sys.argv[1:]), a.fix_batch)
    print(text)
    if not a.no_write:
        out = a.out
        if not out:
            d = os.path.join(HERE, "results")
            os.makedirs(d, exist_ok=True)
            out = os.path.join(d, f"cpu-{started:%Y-%m-%d}.md")
            if os.path.exists(out):
                out = os.path.join(d, f"cpu-{started:%Y-%m-%d-%H%M}.md")
        with open(out, "w") as f:
            f.write(text)
        log(f"wrote {os.path.relpath(out, REPO)}")
    return 0


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def fmt_ms(v):
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def perf_cells(row, flops, peak):
    name, b, th = row["model"], row["batch"], row["threads"]
    if name not in FLOP_MODELS:
        return ["", "", "", ""]
    f = flops[name] * b / 1e9
    cells = []
    for key in ("tandem", "ort"):
        ms = row[key]
        g = f / (ms / 1e3) if ms else None
        cells += [fmt(g, ".1f"), fmt(g / (peak * th) * 100 if g else None, ".0f") + ("%" if g else "")]
    return cells


def format_row(row, flops, peak, plain=False):
    ratio = row["tandem"] / row["ort"] if row["tandem"] and row["ort"] else None
    tdm = fmt_ms(row["tandem"]) if not row["res"]["error"] else "error"
    cells = [row["model"], str(row["batch"]), str(row["threads"]), tdm, fmt_ms(row["ort"]),
             fmt(ratio, ".2f")] + perf_cells(row, flops, peak)
    if plain:
        return "  ".join(c for c in cells if c) + f"  (others used {row['res']['others_cpu']:.0%} " \
            f"of the CPUs)" + (f"  tandem error: {row['res']['error']}" if row["res"]["error"] else "")
    return "| " + " | ".join(cells) + " |"


def report(rows, flops, peak, peak_src, measured_peak, mach, checks, started, load_start, load_end,
           rounds, duration, argv, fix_batch=False):
    L = []
    L.append(f"# CPU benchmark: tandem vs ONNX Runtime — {started:%Y-%m-%d %H:%M}")
    L.append("")
    L.append("Generated by `bench/run_cpu_bench.py" + (f" {argv}" if argv else "") + "`.")
    L.append("")
    L.append("## Machine and software")
    L.append("")
    L.append(f"- CPU: {mach['cpu']}; {mach['cores']}; hypervisor: {mach['hypervisor']}")
    L.append(f"- Caches: {mach['caches']}; memory {mach['memory']}; Linux {mach['kernel']}")
    L.append(f"- tandem: {mach['commit']}; binary {mach['tandem']}")
    L.append(f"- CPU ISA tandem used: {mach.get('isa', '?')} (TANDEM_CPU_ISA="
             f"{os.environ.get('TANDEM_CPU_ISA', 'unset: the best the machine has')}; ORT picks its "
             f"own kernels)")
    L.append(f"- ONNX Runtime {mach['ort']} (CPUExecutionProvider), onnx {mach['onnx']}, numpy "
             f"{mach['numpy']}, Python {mach['python']}")
    mp = f"{measured_peak:.1f} GFLOP/s" if measured_peak else "not measured (no C compiler, or it failed)"
    L.append(f"- FMA peak used for the % columns: {peak:.0f} GFLOP/s per core ({peak_src}), times "
             f"the thread count. Measured single-core FMA loop (bench/fma_peak.c): {mp}.")
    L.append(f"- Load average at start {load_start[0]:.2f}, at end {load_end[0]:.2f}.")
    worst = max((r["res"]["others_cpu"] for r in rows), default=0)
    if worst > 0.05 or max(load_start[0], load_end[0]) > 1.5:
        L.append(f"- **Noisy machine**: other processes were running during the measurements "
                 f"(up to {worst:.0%} of all CPU time during a configuration, see the last column "
                 f"of the detail table). Treat small differences as noise, the 2-thread numbers "
                 f"especially.")
    L.append("")
    L.append("## Method")
    L.append("")
    L.append(f"Random inputs (floats in [-1, 1), integer ids in [0, 8)); dynamic batch dimension "
             f"set to the batch size. Per configuration, {rounds} round(s); each round measures "
             f"both engines one after the other (order alternating), each for about {duration:g} s "
             f"of timed runs (BERT at batch 8: 1 s, at least one run) after warm-up runs. tandem: "
             f"`tandem bench MODEL --batch B --threads N --duration S --json`, a new process per "
             f"round. ONNX Runtime: `InferenceSession` with intra_op_num_threads=N, "
             f"inter_op_num_threads=1, ORT_SEQUENTIAL, ORT_ENABLE_ALL, in the benchmark process. "
             + (f"**--fix-batch**: both engines were told the batch before planning (the "
                f"inputs' symbolic leading dimension fixed to it: ORT "
                f"add_free_dimension_override_by_name, tandem --free-dims), a session per batch. "
                if fix_batch else "") +
             f"The table shows the median over rounds of each round's p50 latency. GFLOP/s = "
             f"2 x (Conv + MatMul + Gemm multiply-accumulates, from the graph) x batch / p50.")
    L.append("")
    L.append("## Results")
    L.append("")
    L.append("| model | batch | threads | tandem p50 ms | ORT p50 ms | tandem/ORT | tandem GFLOP/s "
             "| tandem % peak | ORT GFLOP/s | ORT % peak |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        L.append(format_row(r, flops, peak))
    L.append("")
    L.append("FLOPs per item: " + ", ".join(f"{n} {flops[n] / 1e9:.3f} GFLOP" for n in flops) + ".")
    L.append("")
    if checks:
        L.append("Output check at batch 1 (same inputs through both engines): "
                 + "; ".join(f"{n}: {v}" for n, v in checks.items()) + ".")
        L.append("")
    L.append("### Detail")
    L.append("")
    L.append("Per-round p50s show the spread. The minimum latency (over all timed runs) is less "
             "sensitive to other processes than the p50; its ratio is given for comparison. "
             "\"Others' CPU share\" is the CPU time used by other processes (and the hypervisor's "
             "steal time) during the configuration, as a share of all CPUs.")
    L.append("")
    L.append("| model | batch | threads | tandem p50 per round (ms) | tandem runs | "
             "tandem session create ms | ORT p50 per round (ms) | ORT runs | tandem min ms | "
             "ORT min ms | tandem/ORT (min) | others' CPU share |")
    L.append("|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        t, o = r["res"]["tandem"], r["res"]["ort"]
        tl = ", ".join(fmt_ms(x["p50"]) for x in t) or f"error: {r['res']['error']}"
        load = fmt(float(np.median([x["load_ms"] for x in t])) if t else None, ".0f")
        ol = ", ".join(fmt_ms(x["p50"]) for x in o)
        tmin = min((x["min"] for x in t), default=None)
        omin = min((x["min"] for x in o), default=None)
        rmin = fmt(tmin / omin if tmin and omin else None, ".2f")
        L.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {tl} | "
                 f"{sum(x['runs'] for x in t)} | {load} | {ol} | {sum(x['runs'] for x in o)} | "
                 f"{fmt_ms(tmin)} | {fmt_ms(omin)} | {rmin} | {r['res']['others_cpu']:.0%} |")
    L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
