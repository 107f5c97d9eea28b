#!/usr/bin/env python3
"""int8 benchmark (issue 20): tandem against ONNX Runtime on the same QDQ int8 models, and
against the float models, side by side in one run.

    .venv/bin/python bench/quant/run_int8_bench.py [--tandem build/tandem]
        [--models resnet50,mobilenetv2] [--batches 1,8] [--threads 1,2] [--duration S]
        [--rounds N] [--out FILE.md]

Models: the CPU bench's ResNet-50 and MobileNetV2 (bench/models.py: random weights, fixed
seeds, cached in bench/.models/), quantized here with ONNX Runtime's quantize_static (QDQ,
per-channel int8 weights, uint8 activations, MinMax calibration on 16 inputs of the bench's
distribution: uniform [-1, 1)), cached next to them. Real-weight models (--models
ppocr4_det,nudenet; the pinned PyPI packages of bench/real/packages.txt, installed into
bench/real/.site by bench/real/packages.py): the PP-OCRv4 text detector of
rapidocr-onnxruntime on rendered text pages (1x3x480x640) and nudenet's YOLOv8n-style
detector (320n.onnx) on drawn scenes (1x3x320x320), calibrated with the same settings on 16
inputs (seeds 100-115) and timed and checked on 8 others (seeds 200-207; batch 8 = those 8);
their Constant nodes become initializers and opset < 13 is converted to 13 (per-channel
DequantizeLinear) before quantize_static (see get_real_int8). For every (model, batch, threads)
the four engines (tandem int8, ORT int8, tandem fp32, ORT fp32) are measured in alternation
for --rounds rounds: tandem with `tandem bench --json` in a fresh process, ORT in this
process (intra_op_num_threads = N, sequential, ORT_ENABLE_ALL); the table shows the median
of the rounds' p50 latencies. The bench models: both engines run ORT's QDQ file. The real
models: each engine runs its own quantization of the same 16 calibration inputs: ORT its
quantize_static model, tandem the model `tandem quantize` writes (TANDEM_QUANT below).

Accuracy, bench models: on 8 held-out inputs (not the calibration ones) at batch 1: cosine
similarity of tandem int8 with tandem fp32, top-1 agreement (random weights: the classes mean
nothing, the agreement still measures the int8 error), and tandem int8 against ORT int8 in
quantization steps of the output (elements that differ, largest difference). Real detectors:
on N_HELD_OUT held-out inputs, each engine's int8 against its own fp32: cosine, YOLO
class-score cosine, and box agreement (box_agreement: the boxes a user gets, matched by class
and IoU >= 0.5, over the larger count).
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
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import run_cpu_bench as cb  # noqa: E402

QUANT_VERSION = 1  # bump when the quantization settings change (cache key)
TDM_QUANT_VERSION = 2  # ... when what `tandem quantize` writes changes (2: ConvTranspose folds)
# --reduce-range: 7-bit weights in both engines' models (ORT's reduce_range, tandem quantize
# --reduce-range), for CPUs without VNNI; the cache names say so
REDUCE_RANGE = False


def rr_tag():
    return "-rr" if REDUCE_RANGE else ""


class Reader(CalibrationDataReader):
    def __init__(self, name, shape, seed, n=16):
        rng = np.random.default_rng(seed)
        self.data = [{name: rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(n)]
        self.i = 0

    def get_next(self):
        if self.i >= len(self.data):
            return None
        self.i += 1
        return self.data[self.i - 1]


def get_int8(name):
    fpath, flops = cb.get_model(name)
    qpath = fpath[:-5] + f"-int8-q{QUANT_VERSION}{rr_tag()}.onnx"
    if not os.path.exists(qpath):
        cb.log(f"quantizing {name} ...")
        inp = onnx.load(fpath, load_external_data=False).graph.input[0].name
        tmp = qpath + ".tmp.onnx"
        quantize_static(fpath, tmp, Reader(inp, [1, 3, 224, 224], 1234),
                        quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=True, reduce_range=REDUCE_RANGE)
        os.replace(tmp, qpath)
    return fpath, qpath, flops


# ---- real-weight models (bench/real) ----

REAL_DIR = os.path.join(BENCH, "real")
REAL = {  # name: (package, path inside it, input name)
    "ppocr4_det": ("rapidocr-onnxruntime",
                   ("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_det_infer.onnx"), "x"),
    "nudenet": ("nudenet", ("nudenet", "320n.onnx"), "images"),
}
# How tandem quantizes each real model itself (`tandem quantize`, the same 16 calibration
# inputs): nudenet with the defaults; PP-OCRv4's PP-LCNetV3 stem and first blocks (nodes
# 234-300, 240x320 maps whose hard-swish chains have heavy-tailed activations: mean |x| ~ 2,
# max ~ 100) stay in float, the rest percentile-calibrated (cosine 0.976 -> 0.992).
TANDEM_QUANT = {
    "ppocr4_det": ["--method", "percentile", "--exclude", "#234-300"],
    "nudenet": ["--method", "minmax"],
}
N_HELD_OUT = 16  # accuracy inputs (seeds 200-215); timing uses the first 8
WORDS = ("Tandem runs ONNX models on CPUs and GPUs together Invoice 2026-12-01 417.50 EUR "
         "quarterly report total amount due shipping address order number 8841 delivery "
         "Berlin Paris receipt VAT 19% page 3 of 7 signature date customer").split()
_real_mods = None


def real_modules():
    global _real_mods
    if _real_mods is None:
        sys.path.insert(0, REAL_DIR)
        import packages
        dirs = packages.ensure(packages.DEFAULT_SITE, sorted({v[0] for v in REAL.values()} |
                                                             {"pillow"}), log=cb.log)
        sys.path.insert(0, dirs["pillow"])
        import inputs
        import realmodels
        _real_mods = (packages, inputs, realmodels)
    return _real_mods


def real_input(name, seed):
    """One input [1, ...] of real model `name`, made from `seed` (varied: text, flips, shifts)."""
    _, inputs, _ = real_modules()
    rng = np.random.default_rng(seed)
    if name == "ppocr4_det":
        lines = [" ".join(rng.choice(WORDS, int(rng.integers(3, 7)))) for _ in range(3)]
        img = inputs.text_page(lines=lines, seed=seed)
        if seed % 2:
            img = np.roll(img, int(rng.integers(-60, 60)), axis=0)
        return inputs.ppocr_det_input(img).astype(np.float32)
    x = inputs.scene(320, seed=seed)
    if seed % 2:
        x = x[..., ::-1]
    return np.roll(x, int(rng.integers(-40, 40)), axis=3).astype(np.float32).copy()


class RealReader(CalibrationDataReader):
    def __init__(self, name):
        self.data = [{REAL[name][2]: real_input(name, 100 + i)} for i in range(16)]
        self.i = 0

    def get_next(self):
        if self.i >= len(self.data):
            return None
        self.i += 1
        return self.data[self.i - 1]


def get_real_int8(name):
    packages, _, _ = real_modules()
    pkg, rel, _ = REAL[name]
    fpath = os.path.join(packages.package_dir(packages.DEFAULT_SITE, pkg), *rel)
    qpath = os.path.join(cb.CACHE, f"{name}-{packages.pinned()[pkg]}-int8-q{QUANT_VERSION}r3{rr_tag()}.onnx")
    if not os.path.exists(qpath):
        cb.log(f"quantizing {name} ...")
        os.makedirs(cb.CACHE, exist_ok=True)
        # Constant nodes -> initializers first (the same float model): ORT's quantizer treats
        # a weight given by a Constant node (paddle2onnx writes them so) as an activation,
        # uint8 with a zero point, quantized at run time; as initializers they become int8
        # per-channel weights, as ORT's own pre-processing (quant_pre_process) arranges.
        m = onnx.load(fpath)
        keep = []
        for n in m.graph.node:
            if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
                t = onnx.TensorProto()
                t.CopyFrom(n.attribute[0].t)
                t.name = n.output[0]
                m.graph.initializer.append(t)
            else:
                keep.append(n)
        del m.graph.node[:]
        m.graph.node.extend(keep)
        # per-channel weights need DequantizeLinear's axis (opset 13): older models converted
        if next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:
            from onnx import version_converter
            m = version_converter.convert_version(m, 13)
        pre = qpath + ".pre.onnx"
        onnx.save(m, pre)
        tmp = qpath + ".tmp.onnx"
        quantize_static(pre, tmp, RealReader(name), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=True, reduce_range=REDUCE_RANGE)
        os.replace(tmp, qpath)
        os.remove(pre)
    return fpath, qpath


def get_tandem_int8(tandem, name, fpath):
    """The model `tandem quantize` writes from the same calibration inputs (cached)."""
    args = TANDEM_QUANT[name] + (["--reduce-range"] if REDUCE_RANGE else [])
    packages, _, _ = real_modules()
    key = "-".join(a.strip("#-/").replace("/", "_") for a in args)
    tpath = os.path.join(cb.CACHE, f"{name}-{packages.pinned()[REAL[name][0]]}-tdm-int8-"
                         f"q{QUANT_VERSION}t{TDM_QUANT_VERSION}-{key}.onnx")
    if not os.path.exists(tpath):
        cb.log(f"tandem quantize {name} {' '.join(args)} ...")
        with tempfile.TemporaryDirectory() as d:
            for i in range(16):
                os.makedirs(os.path.join(d, f"{i:02d}"))
                np.save(os.path.join(d, f"{i:02d}", f"{REAL[name][2]}.npy"),
                        real_input(name, 100 + i))
            tmp = tpath + ".tmp.onnx"
            r = subprocess.run([tandem, "quantize", fpath, "--output", tmp, "--calibration", d]
                               + args, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(r.stderr.strip() or f"exit {r.returncode}")
            os.replace(tmp, tpath)
    return tpath


def held_out(name, batch):
    return {REAL[name][2]: np.concatenate([real_input(name, 200 + i) for i in range(batch)])}


def det_boxes(out):
    p = out[0, 0]
    h, w = p.shape[0] // 4 * 4, p.shape[1] // 4 * 4
    m = p[:h, :w].reshape(h // 4, 4, w // 4, 4).max(axis=(1, 3)) > 0.3
    _, _, realmodels = real_modules()
    return [("text", 1.0, b) for b in realmodels._components(m)]


def yolo_boxes(out):
    _, _, realmodels = real_modules()
    n = out.shape[1] - 4
    return realmodels.yolo_detections(out, [str(i) for i in range(n)], conf=0.25, top=100)


def box_agreement(a, b):
    """Box agreement of detections `a` (int8) with the reference `b` (fp32), both the boxes a
    user gets (score >= the threshold, after NMS): the reference's boxes, best score first,
    each take the unused box of `a` with the same label and the highest IoU, if that IoU is
    >= 0.5; agreement = matched pairs / the larger of the two counts (1 when both are empty).
    Returns (agreement, matched, the larger count)."""
    _, _, realmodels = real_modules()
    if not a and not b:
        return 1.0, 0, 0
    used, pairs = set(), 0
    for y in sorted(b, key=lambda d: -d[1]):
        best, bj = 0.5, -1
        for j, x in enumerate(a):
            if j not in used and x[0] == y[0]:
                v = realmodels.iou(x[2], y[2])
                if v >= best:
                    best, bj = v, j
        if bj >= 0:
            used.add(bj)
            pairs += 1
    n = max(len(a), len(b))
    return pairs / n, pairs, n


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def real_accuracy(tandem, name, fpath, tpath, ort_q, ort_f):
    """tandem int8 (its own quantized model) against tandem fp32, and ORT int8 (ORT's
    quantize_static model) against ORT fp32, on N_HELD_OUT inputs never calibrated on."""
    boxes = det_boxes if name == "ppocr4_det" else yolo_boxes
    r = {"cos": [], "score_cos": [], "pairs": 0, "boxes": 0, "ort_cos": [], "ort_score_cos": [],
         "ort_pairs": 0, "ort_boxes": 0}
    for i in range(N_HELD_OUT):
        feeds = {REAL[name][2]: real_input(name, 200 + i)}
        yq = tandem_outputs(tandem, tpath, feeds)
        yf = tandem_outputs(tandem, fpath, feeds)
        oq, of = ort_q.run(None, feeds)[0], ort_f.run(None, feeds)[0]
        for pre, q, f in (("", yq, yf), ("ort_", oq, of)):
            r[pre + "cos"].append(cosine(q, f))
            if name != "ppocr4_det":  # YOLO: [1, 4 + classes, anchors]; the class scores
                r[pre + "score_cos"].append(cosine(q[:, 4:], f[:, 4:]))
            _, p, n = box_agreement(boxes(q), boxes(f))
            r[pre + "pairs"] += p
            r[pre + "boxes"] += n
    return {"cos_min": min(r["cos"]), "cos_mean": float(np.mean(r["cos"])),
            "score_cos_min": min(r["score_cos"]) if r["score_cos"] else None,
            "agree": r["pairs"] / max(r["boxes"], 1), "pairs": r["pairs"], "boxes": r["boxes"],
            "ort_cos_min": min(r["ort_cos"]),
            "ort_score_cos_min": min(r["ort_score_cos"]) if r["ort_score_cos"] else None,
            "ort_agree": r["ort_pairs"] / max(r["ort_boxes"], 1), "ort_pairs": r["ort_pairs"],
            "ort_boxes": r["ort_boxes"]}


def measure_tandem_feeds(tandem, path, feeds, threads, warmup, duration):
    with tempfile.TemporaryDirectory() as d:
        cmd = [tandem, "bench", path, "--threads", str(threads), "--warmup", str(warmup),
               "--duration", str(duration), "--json"]
        for k, v in feeds.items():
            np.save(os.path.join(d, f"{k}.npy"), v)
            cmd += ["--input", f"{k}={os.path.join(d, f'{k}.npy')}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip() or f"exit {r.returncode}")
        j = json.loads(r.stdout)
        return {"p50": j["latency_ms"]["p50"], "mean": j["latency_ms"]["mean"],
                "min": j["latency_ms"]["min"], "runs": j["iterations"]}


def tandem_outputs(tandem, path, feeds, threads=1):
    with tempfile.TemporaryDirectory() as d:
        cmd = [tandem, "run", path, "--threads", str(threads), "--output-dir", d]
        for k, v in feeds.items():
            np.save(os.path.join(d, f"in_{k}.npy"), v)
            cmd += ["--input", f"{k}={os.path.join(d, f'in_{k}.npy')}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip())
        outs = sorted(f for f in os.listdir(d) if f.endswith(".npy") and not f.startswith("in_"))
        return np.load(os.path.join(d, "output.npy" if "output.npy" in outs else outs[0]))


def output_step(qpath):
    m = onnx.load(qpath)
    inits = {i.name: i for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == m.graph.output[0].name:
            return float(onnx.numpy_helper.to_array(inits[n.input[1]]).reshape(()))
    return None


def accuracy(tandem, fpath, qpath, ort_q):
    step = output_step(qpath)
    inp = ort_q.get_inputs()[0].name
    rng = np.random.default_rng(98765)  # held out: not the calibration seed
    cos, top1, nd, mx, tot = [], 0, 0, 0.0, 0
    for _ in range(8):
        feeds = {inp: rng.uniform(-1, 1, [1, 3, 224, 224]).astype(np.float32)}
        yq = tandem_outputs(tandem, qpath, feeds).astype(np.float64).ravel()
        yf = tandem_outputs(tandem, fpath, feeds).astype(np.float64).ravel()
        yo = ort_q.run(None, feeds)[0].astype(np.float64).ravel()
        cos.append(float(yq @ yf / (np.linalg.norm(yq) * np.linalg.norm(yf) + 1e-30)))
        top1 += int(np.argmax(yq) == np.argmax(yf))
        units = np.abs(yq - yo) / step
        nd += int((units > 0.5).sum())
        mx = max(mx, float(units.max()))
        tot += yq.size
    return {"cos_min": min(cos), "cos_mean": float(np.mean(cos)), "top1": top1 / 8,
            "ort_diff": nd, "ort_total": tot, "ort_max_steps": mx}


def measure(tandem, path, sess, batch, threads, rounds, duration, feeds=None):
    real = feeds is not None
    feeds = feeds if real else cb.make_feeds(sess, batch)
    sess.run(None, feeds)
    out = {"tandem": [], "ort": [], "error": None}
    for r in range(rounds):
        for eng in (("tandem", "ort") if r % 2 == 0 else ("ort", "tandem")):
            if eng == "ort":
                out["ort"].append(cb.measure_ort(sess, feeds, 2, duration))
            elif out["error"] is None:
                try:
                    out["tandem"].append(
                        measure_tandem_feeds(tandem, path, feeds, threads, 2, duration) if real
                        else cb.measure_tandem(tandem, path, batch, threads, 2, duration))
                except (RuntimeError, ValueError, KeyError) as e:
                    out["error"] = str(e)
    return cb.median_p50(out["tandem"]), cb.median_p50(out["ort"]), out["error"]


def devices_isa(tandem):
    """The CPU's ISA level from `tandem devices` (its cpu line ends with it)."""
    out = subprocess.run([tandem, "devices"], capture_output=True, text=True).stdout
    return next((ln.split()[-1] for ln in out.splitlines() if ln.startswith("cpu ")), "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", default=os.path.join(REPO, "build", "tandem"))
    ap.add_argument("--models", default="resnet50,mobilenetv2")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--reduce-range", action="store_true",
                    help="7-bit weights in both engines' int8 models (for CPUs without VNNI)")
    a = ap.parse_args()
    global REDUCE_RANGE
    REDUCE_RANGE = a.reduce_range
    tandem = os.path.abspath(a.tandem)
    started = datetime.datetime.now(datetime.timezone.utc)
    mach = cb.machine_info(tandem)
    rows, accs, isa = [], {}, "?"
    load0 = os.getloadavg()[0]
    for name in a.models.split(","):
        real = name in REAL
        fpath, qpath = get_real_int8(name) if real else get_int8(name)[:2]
        # tandem runs tpath, ORT runs qpath: the same file for the bench models, each
        # engine's own quantization for the real ones
        tpath = get_tandem_int8(tandem, name, fpath) if real else qpath
        isa = cb.tandem_isa(tandem, tpath) if isa == "?" else isa
        isa = devices_isa(tandem) if isa == "?" else isa  # (random 1x1 images fail: nudenet)
        for threads in [int(t) for t in a.threads.split(",")]:
            sq, sf = cb.ort_session(qpath, threads), cb.ort_session(fpath, threads)
            if name not in accs:
                accs[name] = (real_accuracy(tandem, name, fpath, tpath, sq, sf) if real
                              else accuracy(tandem, fpath, qpath, sq))
                cb.log(f"{name}: {accs[name]}")
            for batch in [int(b) for b in a.batches.split(",")]:
                feeds = held_out(name, batch) if real else None
                tq, oq, eq = measure(tandem, tpath, sq, batch, threads, a.rounds, a.duration,
                                     feeds)
                tf, of, ef = measure(tandem, fpath, sf, batch, threads, a.rounds, a.duration,
                                     feeds)
                row = dict(model=name, batch=batch, threads=threads, tq=tq, oq=oq, tf=tf, of=of,
                           err=eq or ef, isa=isa)
                cb.log(str(row))
                rows.append(row)
    load1 = os.getloadavg()[0]
    report = render(rows, accs, mach, started, load0, load1, a)
    print(report)
    out = a.out or os.path.join(BENCH, "results", f"int8-{started:%Y-%m-%d}.md")
    with open(out, "w") as f:
        f.write(report)
    cb.log(f"wrote {out}")


def ms(v):
    return f"{v:.2f}" if v is not None else "-"


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def int8_kind():
    """How this CPU sums u8 x s8 products (from /proc/cpuinfo): VNNI, or vpmaddubsw, whose
    16-bit pair sums saturate (oneDNN's and ORT's kernels alike)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return "?"
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        return "VNNI"
    return "vpmaddubsw, no VNNI: pairs of products saturate at 16 bits" if "avx2" in flags else "?"


def render(rows, accs, mach, started, load0, load1, a):
    isa = rows[0]["isa"] if rows else "?"
    lines = [f"# int8 CPU benchmark ({started:%Y-%m-%d %H:%M} UTC)", "",
             f"Machine: {mach['cpu']}, {mach['cores']}, hypervisor {mach['hypervisor']}; "
             f"tandem's CPU ISA: **{isa}** (int8 sums: {int8_kind()}). {mach['commit']}; "
             f"ONNX Runtime {mach['ort']}.",
             f"Load average {load0:.1f} at the start, {load1:.1f} at the end: the machine is "
             "shared (2 cores, other people building), so the figures are noisy; engines "
             "alternate within each row to share the noise.", "",
             "Models: bench/models.py ResNet-50 and MobileNetV2 (random weights), quantized by "
             "ONNX Runtime's quantize_static (QDQ, per-channel int8 weights, uint8 activations, "
             "MinMax on 16 calibration inputs). Both engines run the same QDQ file; fp32 is the "
             "float model. Latency: median over rounds of p50, ms."
             + (" Real-weight models (nudenet's 320n.onnx, rapidocr-onnxruntime's PP-OCRv4 "
                "detector; pinned in bench/real/packages.txt): each engine runs its own int8 "
                "model made from the same 16 real calibration inputs (drawn scenes, rendered "
                "text pages): ORT the quantize_static model (Constant nodes made initializers "
                "and opset 13 first), tandem the `tandem quantize` model (settings below); "
                "timed on 8 other inputs."
                if any(r["model"] in REAL for r in rows) else ""), "",
             f"Command: `.venv/bin/python bench/quant/run_int8_bench.py --models {a.models} "
             f"--batches {a.batches} --threads {a.threads} --rounds {a.rounds} "
             f"--duration {a.duration}{' --reduce-range' if REDUCE_RANGE else ''}`", "",
             "| model | batch | threads | tandem int8 | ORT int8 | tandem fp32 | ORT fp32 | "
             "int8/fp32 (tandem) | tandem/ORT (int8) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {ms(r['tq'])} | "
                     f"{ms(r['oq'])} | {ms(r['tf'])} | {ms(r['of'])} | {ratio(r['tq'], r['tf'])} | "
                     f"{ratio(r['tq'], r['oq'])} |" + (f" error: {r['err']}" if r['err'] else ""))
    bench = {k: v for k, v in accs.items() if "boxes" not in v}
    lines += ["", "Accuracy on 8 held-out inputs (batch 1; tandem int8 against tandem fp32, and "
              "against ORT int8 in output quantization steps):", "",
              "| model | cosine min | cosine mean | top-1 agreement | int8 elements differing "
              "from ORT | max steps |", "|---|---|---|---|---|---|"] if bench else []
    for k, v in bench.items():
        lines.append(f"| {k} | {v['cos_min']:.4f} | {v['cos_mean']:.4f} | {v['top1']:.0%} | "
                     f"{v['ort_diff']} of {v['ort_total']} | {v['ort_max_steps']:.0f} |")
    real = {k: v for k, v in accs.items() if "boxes" in v}
    if real:
        def sc(v):
            return f"{v:.4f}" if v is not None else "-"
        lines += ["", f"Real-weight detectors, {N_HELD_OUT} held-out inputs (seeds 200-"
                  f"{199 + N_HELD_OUT}, batch 1): tandem int8 (`tandem quantize` "
                  + "; ".join(f"{k}: `{' '.join(v) or 'defaults'}`" for k, v in TANDEM_QUANT.items()
                              if k in real)
                  + ") against tandem fp32, ORT int8 (its quantize_static model) against ORT "
                  "fp32. Box agreement: the boxes a user gets (YOLO: class score >= 0.25 after "
                  "per-class NMS at IoU 0.45; DB text detector: connected regions of the "
                  "probability map > 0.3, pooled 4x4), fp32's boxes best first each matched to "
                  "the unused int8 box of the same class with the highest IoU >= 0.5; matched "
                  "pairs over the larger box count, summed over the inputs. Score cosine: the "
                  "YOLO class-score rows alone (the whole output's cosine is dominated by the "
                  "box coordinates, 0-320).", "",
                  "| model | cosine min | cosine mean | score cosine min | box agreement | "
                  "ORT int8: cosine min | score cosine min | box agreement |",
                  "|---|---|---|---|---|---|---|---|"]
        for k, v in real.items():
            lines.append(f"| {k} | {v['cos_min']:.4f} | {v['cos_mean']:.4f} | "
                         f"{sc(v['score_cos_min'])} | {v['agree']:.1%} ({v['pairs']}/{v['boxes']}) | "
                         f"{v['ort_cos_min']:.4f} | {sc(v['ort_score_cos_min'])} | "
                         f"{v['ort_agree']:.1%} ({v['ort_pairs']}/{v['ort_boxes']}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
