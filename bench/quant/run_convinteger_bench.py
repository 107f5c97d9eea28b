#!/usr/bin/env python3
"""ConvInteger A/B (issue 20 item 3): CPU ms per run of tandem (oneDNN's int8 convolution,
k_dnnl_qconv.c), a second tandem build (--tandem-base: one whose ConvInteger runs the direct
loops) and ONNX Runtime, on the same models, in alternation.

    .venv/bin/python bench/quant/run_convinteger_bench.py --tandem build/tandem \
        --tandem-base /path/to/old/tandem [--rounds 3] [--iterations 20] [--out FILE.md]

Models (onnx.helper, fixed seeds, written to a temporary folder):
  conv64       ConvInteger 1x64x56x56 (uint8, zero point 128) x 64x64x3x3 int8 weights
               (normal, std 30, clipped), pads 1: a ResNet stage-1 convolution;
  conv64_dyn   the same after DynamicQuantizeLinear of a float X (zero point per run);
  resnet50_dyn the CPU bench's ResNet-50 (bench/models.py, random weights) through ORT's
               quantize_dynamic (op_types Conv: DynamicQuantizeLinear + ConvInteger + Cast /
               Mul for every convolution), batch 1.
CPU time: tandem `bench --threads 1 --iterations N` in a child process, minus a 1-iteration
run (load and planning), over N (getrusage of the children; N at least --iterations and
enough runs for about 2 s of ORT's time; the base build N / 10, at least 2: its loops take
up to seconds a run); ORT in this process
(intra_op_num_threads 1, ORT_ENABLE_ALL), process CPU time over N runs after 2 warm-up runs.
Each round measures the three engines one after the other; the table shows the median of
the rounds. Outputs: tandem's Y against ORT's (int32 for the ConvInteger models: equal or not;
ResNet-50: largest difference relative to the largest |value|), and the implementation
`tandem inspect --plan` names for the ConvInteger nodes.
"""
import argparse
import collections
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def conv64(dynamic):
    rng = np.random.default_rng(64)
    w = np.clip(np.rint(rng.normal(0, 30, (64, 64, 3, 3))), -127, 127).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w")]
    nodes = []
    if dynamic:
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["xf"], ["x", "xs", "xz"]))
        x_in = helper.make_tensor_value_info("xf", TensorProto.FLOAT, [1, 64, 56, 56])
    else:
        inits.append(numpy_helper.from_array(np.array(np.uint8(128)), "xz"))
        x_in = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 64, 56, 56])
    nodes.append(helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1]))
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [1, 64, 56, 56])
    return helper.make_model(helper.make_graph(nodes, "c", [x_in], [y], inits),
                             opset_imports=[helper.make_opsetid("", 13)])


def resnet50_dyn(work):
    sys.path.insert(0, os.path.dirname(HERE))
    import models  # bench/models.py
    from onnxruntime.quantization import QuantType, quantize_dynamic
    fp = os.path.join(work, "resnet50.onnx")
    m = models.BUILDERS["resnet50"]()
    # a fixed batch of 1 (quantize_dynamic keeps the shapes)
    onnx.save(m, fp)
    out = os.path.join(work, "resnet50_dyn.onnx")
    quantize_dynamic(fp, out, op_types_to_quantize=["Conv"], weight_type=QuantType.QInt8)
    return out


def feeds(path, seed):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    f = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if i.type == "tensor(uint8)":
            f[i.name] = rng.integers(0, 256, shape).astype(np.uint8)
        else:
            f[i.name] = rng.uniform(-1, 1, shape).astype(np.float32)
    return f


def tandem_cpu_ms(tandem, path, inputs, n):
    def cpu(it):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([tandem, "bench", path, "--threads", "1", "--warmup", "1",
                        "--iterations", str(it)] + inputs, check=True, capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    one = cpu(1)
    return (cpu(n + 1) - one) / n * 1000


def ort_cpu_ms(sess, f, n):
    for _ in range(2):
        sess.run(None, f)
    t0 = time.process_time()
    for _ in range(n):
        sess.run(None, f)
    return (time.process_time() - t0) / n * 1000


def tandem_out(tandem, path, inputs, work):
    od = tempfile.mkdtemp(dir=work)
    subprocess.run([tandem, "run", path, "--output-dir", od, "--threads", "1"] + inputs,
                   check=True, capture_output=True)
    with open(os.path.join(od, "names.json")) as fh:
        names = json.load(fh)
    return {names[k]: np.load(os.path.join(od, k)) for k in names}


def impls(tandem, path):
    out = subprocess.run([tandem, "inspect", path, "--plan"], check=True, capture_output=True,
                         text=True).stdout
    c = collections.Counter()
    for line in out.splitlines():
        f = line.split(None, 4)
        if len(f) == 5 and f[2] == "ConvInteger":
            c[f[4].strip()] += 1
    return ", ".join(f"{v}x {k}" for k, v in c.most_common())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--tandem-base", required=True, help="a tandem whose ConvInteger runs loops")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--models", default="conv64,conv64_dyn,resnet50_dyn")
    ap.add_argument("--out")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tdm_ci_bench_")
    lines = []
    sys.stdout.reconfigure(line_buffering=True)
    try:
        paths = {}
        for name in a.models.split(","):
            if name == "resnet50_dyn":
                paths[name] = resnet50_dyn(work)
            else:
                paths[name] = os.path.join(work, name + ".onnx")
                onnx.save(conv64(name.endswith("_dyn")), paths[name])
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        load0 = os.getloadavg()
        rows = []
        for name, path in paths.items():
            f = feeds(path, 7)
            inputs = []
            for k, v in f.items():
                p = os.path.join(work, f"{name}_{k}.npy")
                np.save(p, v)
                inputs += ["--input", f"{k}={p}"]
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            res = {"tandem": [], "base": [], "ort": []}
            for _ in range(a.rounds):
                res["ort"].append(ort_cpu_ms(sess, f, a.iterations))
                # tandem: enough runs for ~2 s of ORT's time (a process start and plan is tens
                # of ms: with 20 runs of a fast model the difference is noise)
                n = max(a.iterations, int(2000 / max(res["ort"][-1], 0.01)))
                res["tandem"].append(tandem_cpu_ms(a.tandem, path, inputs, n))
                res["base"].append(tandem_cpu_ms(a.tandem_base, path, inputs,
                                                 max(2, a.iterations // 10)))
            want = sess.run(None, f)[0]
            got = tandem_out(a.tandem, path, inputs, work)
            got = got.get(sess.get_outputs()[0].name)
            if want.dtype == np.int32:
                agree = "int32 equal" if np.array_equal(got, want) else \
                    f"DIFFER (largest {np.abs(got.astype(np.int64) - want).max()})"
            else:
                agree = (f"max |diff| / max |y| "
                         f"{np.abs(got - want).max() / max(np.abs(want).max(), 1e-30):.1e}")
            med = {k: statistics.median(v) for k, v in res.items()}
            rows.append((name, med, res, agree, impls(a.tandem, path)))
            print(name, {k: f"{v:.2f}" for k, v in med.items()}, agree, flush=True)
        load1 = os.getloadavg()
        lines.append("| model | tandem oneDNN (ms) | tandem loops (ms) | ORT (ms) | oneDNN / "
                     "loops | tandem / ORT | output vs ORT |")
        lines.append("|---|---|---|---|---|---|---|")
        for name, med, res, agree, _ in rows:
            lines.append(f"| {name} | {med['tandem']:.2f} | {med['base']:.2f} | {med['ort']:.2f} "
                         f"| {med['tandem'] / med['base']:.3f}x | "
                         f"{med['tandem'] / med['ort']:.2f}x | {agree} |")
        lines.append("")
        lines.append("Rounds (CPU ms per run):")
        lines.append("")
        for name, _, res, _, imp in rows:
            lines.append(f"- {name}: " + "; ".join(
                f"{k} {' '.join(f'{x:.2f}' for x in v)}" for k, v in res.items()) +
                f". ConvInteger: {imp}")
        lines.append("")
        lines.append(f"Load (1/5/15 min) {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f} before, "
                     f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} after; "
                     f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; ORT {ort.__version__}.")
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            with open(a.out, "a") as fh:
                fh.write(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
