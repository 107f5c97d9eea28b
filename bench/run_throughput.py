#!/usr/bin/env python3
"""Throughput modes against the best single device, and a user pipeline against sequential code.

Three measurements, each alternating its configurations round by round in the same run (the
machine may be shared: alternation spreads other load over all of them):

1. Split/replicas: `tandem bench MODEL --batch B` on each device alone (latency mode) and on
   `--devices cpu,opencl:0 --mode throughput`; items/s, median over rounds.
2. Pipeline mode: examples/classify_folder (decode on CPU threads -> model stage with two
   requests in flight -> top-k) over a folder of generated images, with the model session on
   each device alone and in `--mode pipeline --devices cpu,opencl:0`; images/s.
3. User pipeline vs sequential: classify_folder with its pipeline (decode+resize+normalize on
   CPU worker threads next to the model) against `--sequential` (decode, run, top-k one image
   after the other on one thread), both on the CPU; images/s. Both print identical results.

--only pipeline runs the pipeline-mode rows alone: those of 2. and the same devices under
`tandem bench --mode pipeline` (the rebalanced cut; with --fixed-cuts also the cut held fixed,
as user cut points are never moved: the behaviour before the rebalancer; with
--pipeline-warmup N also after N warm-up runs, the rebalancer's steady state), and writes
bench/results/throughput-<date>-pipeline.md. --baseline-build DIR adds the pipeline rows of
another build (e.g. before a change), alternated with this one's in the same rounds.

Writes bench/results/throughput-<date>.md (unless --no-write). Uses tandem through its command
line and the example program only.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def bench_model(name):
    """A bench model from bench/.models (built by run_cpu_bench.py's get_model)."""
    import run_cpu_bench  # needs onnx/numpy only when the model is missing

    return run_cpu_bench.get_model(name)[0]


def tandem_bench(tandem, model, devices, mode, batch, duration, threads, extra=()):
    cmd = [tandem, "bench", model, "--devices", devices, "--batch", str(batch), "--warmup", "3",
           "--duration", str(duration), "--json"] + list(extra)
    if threads:
        cmd += ["--threads", str(threads)]
    if mode:
        cmd += ["--mode", mode]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["throughput_per_s"]


def classify(example, folder, model, extra):
    cmd = [example, folder, "--model", model] + extra
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    m = re.search(r"([0-9.]+) images/s", r.stderr)
    if not m:
        raise RuntimeError(f"no images/s in: {r.stderr}")
    return float(m.group(1)), r.stdout


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def rounds_of(configs, rounds, measure):
    """Alternates the configurations `rounds` times; returns {name: [values]}."""
    got = {name: [] for name, _ in configs}
    for r in range(rounds):
        for name, args in configs:
            v = measure(args)
            got[name].append(v)
            log(f"  round {r + 1}: {name}: {v:.1f}")
    return got


def shown_args():
    """The command line without the --note texts (they are printed under Notes)."""
    out, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
        elif x == "--note":
            out.append("--note ...")
            skip = True
        else:
            out.append(x)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build folder (tandem, examples/)")
    ap.add_argument("--model", default="mobilenetv2", help="bench model name (bench/models.py) or .onnx path")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--image-size", default="640x480")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per tandem bench measurement")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = all cores)")
    ap.add_argument("--second", default="opencl:0", help="the device next to the cpu")
    ap.add_argument("--workers", type=int, default=2, help="decode workers of the user pipeline")
    ap.add_argument("--only", default="split,pipeline,user",
                    help="comma list of the measurements to run: split, pipeline, user")
    ap.add_argument("--fixed-cuts", default=None,
                    help="--only pipeline: also bench the pipeline with these cut points held fixed")
    ap.add_argument("--pipeline-warmup", type=int, default=0,
                    help="--only pipeline: also bench the rebalanced pipeline after this many warm-up runs "
                         "(its steady state, without the rebalancer's first measurements)")
    ap.add_argument("--baseline-build", default=None,
                    help="--only pipeline: also run the pipeline rows with this build's tandem and example "
                         "(before/after in the same run)")
    ap.add_argument("--note", action="append", default=[], help="a line for the results' notes (repeatable)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    base = a.baseline_build

    tandem = os.path.join(a.build, "tandem")
    example = os.path.join(a.build, "examples", "classify_folder")
    model = a.model if a.model.endswith(".onnx") else bench_model(a.model)
    devs = subprocess.run([tandem, "devices"], capture_output=True, text=True).stdout
    have_second = any(line.startswith(a.second + " ") for line in devs.splitlines())
    load0 = loadavg()
    rows = []
    only = set(a.only.split(","))

    # 1. split / replicas
    singles = [("cpu", ("cpu", None))] + ([(a.second, (a.second, None))] if have_second else [])
    configs = singles + ([(f"cpu,{a.second} throughput", (f"cpu,{a.second}", "throughput"))] if have_second else [])
    if "split" in only:
        log(f"split/replicas: {os.path.basename(model)} batch {a.batch}")
        got = rounds_of(configs, a.rounds,
                        lambda x: tandem_bench(tandem, model, x[0], x[1], a.batch, a.duration, a.threads))
        med = {k: statistics.median(v) for k, v in got.items()}
        best_single = max(med[n] for n, _ in singles)
        for name, _ in configs:
            rows.append(("split/replicas", name, f"batch {a.batch}", med[name], med[name] / best_single, got[name]))

    # 1b. pipeline mode under tandem bench: rebalanced, and (--fixed-cuts) the cut held fixed
    if "pipeline" in only and have_second:
        both = f"cpu,{a.second}"
        bconfigs = singles + [(f"{both} pipeline", (both, "pipeline", ()))]
        if a.pipeline_warmup:
            bconfigs.append((f"{both} pipeline, after {a.pipeline_warmup} warm-up runs",
                             (both, "pipeline", ("--warmup", str(a.pipeline_warmup)))))
        if base:
            bin0 = os.path.join(base, "tandem")
            bconfigs.append((f"{both} pipeline (baseline)", (both, "pipeline", (), bin0)))
            if a.pipeline_warmup:
                bconfigs.append((f"{both} pipeline, after {a.pipeline_warmup} warm-up runs (baseline)",
                                 (both, "pipeline", ("--warmup", str(a.pipeline_warmup)), bin0)))
        if a.fixed_cuts:
            bconfigs.append((f"{both} pipeline, cut {a.fixed_cuts} fixed", (both, "pipeline", ("--cuts", a.fixed_cuts))))
        log(f"pipeline mode (tandem bench): {os.path.basename(model)} batch {a.batch}")
        got = rounds_of(bconfigs, a.rounds,
                        lambda x: tandem_bench(x[3] if len(x) > 3 else tandem, model, x[0], x[1], a.batch,
                                               a.duration, a.threads, x[2] if len(x) > 2 else ()))
        med = {k: statistics.median(v) for k, v in got.items()}
        best_single = max(med[n] for n, _ in singles)
        for name, _ in bconfigs:
            rows.append(("pipeline mode (bench)", name, f"batch {a.batch}, {a.duration:g} s", med[name],
                         med[name] / best_single, got[name]))

    # 2 + 3: the example over generated images
    w, h = a.image_size.split("x")
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([example, "--make-images", folder, str(a.images), w, h], check=True)
        pconfigs = [("cpu", ["--devices", "cpu"])]
        if have_second:
            pconfigs += [(a.second, ["--devices", a.second]),
                         (f"cpu,{a.second} pipeline", ["--devices", f"cpu,{a.second}", "--mode", "pipeline"])]
            if base:
                pconfigs.append((f"cpu,{a.second} pipeline (baseline)",
                                 ["--devices", f"cpu,{a.second}", "--mode", "pipeline", "--baseline"]))
        outs = {}

        def run_p(x):
            ex = example
            if "--baseline" in x:
                ex, x = os.path.join(base, "examples", "classify_folder"), [y for y in x if y != "--baseline"]
            v, out = classify(ex, folder, model, x + ["--workers", str(a.workers)])
            outs[" ".join(x)] = out
            return v

        if "pipeline" in only:
            log("pipeline mode (classify_folder, model stage with 2 requests in flight)")
            got = rounds_of(pconfigs, a.rounds, run_p)
            # devices round differently in the last digits of the scores: compare the classes
            tops = {k: re.sub(r" score=[0-9.eE+-]+", "", v) for k, v in outs.items()}
            if len(set(tops.values())) != 1:
                log("WARNING: the configurations' top-k classes differ")
            med = {k: statistics.median(v) for k, v in got.items()}
            best_single = max(med[n] for n in med if "pipeline" not in n)
            for name, _ in pconfigs:
                rows.append(("pipeline mode", name, f"{a.images} images", med[name], med[name] / best_single, got[name]))

        if "user" in only:
            log("user pipeline vs sequential (cpu)")
        uconfigs = [("sequential", ["--sequential"]), (f"pipeline, {a.workers} decode workers", ["--workers", str(a.workers)])]
        if "user" not in only:
            uconfigs = []
        uouts = {}

        def run_u(x):
            v, out = classify(example, folder, model, ["--devices", "cpu"] + x)
            uouts[x[0]] = out
            return v

        got = rounds_of(uconfigs, a.rounds, run_u)
        if len(set(uouts.values())) > 1:
            log("WARNING: the pipeline's and the sequential loop's results differ")
        med = {k: statistics.median(v) for k, v in got.items()}
        for name, _ in uconfigs:
            rows.append(("user pipeline", name, f"{a.images} images {a.image_size}", med[name],
                         med[name] / med["sequential"], got[name]))
    load1 = loadavg()

    lines = [f"# Throughput modes — {datetime.date.today().isoformat()}", "",
             "`bench/run_throughput.py " + " ".join(shown_args()) + "`", "",
             f"Model: `{os.path.basename(model)}`. Machine: {os.cpu_count()} logical cores; load average "
             f"{load0:.1f} before and {load1:.1f} after (the machine was shared with other work: "
             "figures are indicative, ratios come from alternated rounds in the same run).",
             f"Devices: {'cpu and ' + a.second if have_second else 'cpu only (' + a.second + ' missing)'}.", "",
             "| measurement | configuration | work | median /s | vs best single (or sequential) | rounds |",
             "|---|---|---|---:|---:|---|"]
    for kind, name, work, v, ratio, vals in rows:
        lines.append(f"| {kind} | {name} | {work} | {v:.1f} | {ratio:.2f}x | {', '.join(f'{x:.1f}' for x in vals)} |")
    kinds = {r[0] for r in rows}
    what = {
        "split/replicas": "- split/replicas: `tandem bench --batch B` on one device (latency mode) and with "
        "`--devices cpu,SECOND --mode throughput` (split by measured speed; the split falls back "
        "to the fastest device when the other would only add time).",
        "pipeline mode (bench)": "- pipeline mode (bench): `tandem bench --batch B --duration D` on one device, and with "
        "`--devices cpu,SECOND --mode pipeline` (the rebalancer moves the auto cut or collapses to one "
        "device from measurements; with `--cuts` the cut is held fixed, as before the rebalancer).",
        "pipeline mode": "- pipeline mode: `examples/classify_folder` with its model stage on one device, and on "
        "`--devices cpu,SECOND --mode pipeline` (auto cut from the cost model, then the rebalancer; "
        "the example keeps two requests in flight on the model stage; every run of the example is "
        "a new session, so its first runs are the rebalancer's measuring).",
        "user pipeline": "- user pipeline: `classify_folder --sequential` (decode, resize, normalize, run, top-k, "
        "one image after the other) against its pipeline (decode workers next to the model stage),"
        " both on the CPU; the printed classes are identical.",
    }
    lines += ["", "What the rows are:", ""] + [v for k, v in what.items() if k in kinds]
    if a.note:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in a.note]
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.no_write:
        suffix = "-pipeline" if only == {"pipeline"} else ""
        out = a.out or os.path.join(HERE, "results", f"throughput-{datetime.date.today().isoformat()}{suffix}.md")
        with open(out, "w") as f:
            f.write(text)
        log(f"wrote {out}")


if __name__ == "__main__":
    main()
