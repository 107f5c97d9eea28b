"""Per-node and control-flow overhead: tandem against ONNX Runtime on tiny models.

    .venv/bin/python bench/run_control_flow.py [--tandem build/tandem] [--nodes 100]
                                              [--trips 20] [--rounds 3] [--duration 1.5]

Three models on [1, 16] floats, built here (opset 17):
  chain     NODES small element-wise nodes (Add, Relu, Mul, Sigmoid) in a row;
  if_chain  the same chain inside an If's branches (the body reads X from outside);
  loop      a Loop of TRIPS iterations, each MatMul(x, W) with W a Constant of the body, Relu.
Each runs single-threaded, tandem through `tandem bench --json` (files as inputs), ORT
through its Python API (which adds its own per-call cost); rounds alternate the two. Prints
p50 and min per engine and tandem/ORT of both (min is less sensitive to a busy machine).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F16 = [1, 16]


def chain_nodes(n):
    nodes, prev = [], "X"
    for i in range(n):
        op = ["Add", "Relu", "Mul", "Sigmoid"][i % 4]
        ins = [prev, "c"] if op in ("Add", "Mul") else [prev]
        nodes.append(helper.make_node(op, ins, [f"t{i}"]))
        prev = f"t{i}"
    return nodes, prev


def save(g, path):
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def build(d, n, trips):
    c = numpy_helper.from_array(np.full(F16, 0.01, np.float32), "c")
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, F16)
    nodes, last = chain_nodes(n)
    y = helper.make_tensor_value_info(last, TensorProto.FLOAT, F16)
    save(helper.make_graph(nodes, "chain", [x], [y], [c]), os.path.join(d, "chain.onnx"))
    body = helper.make_graph(nodes, "body", [], [y], [c])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    yo = helper.make_tensor_value_info("Y", TensorProto.FLOAT, F16)
    node = helper.make_node("If", ["cond"], ["Y"], then_branch=body, else_branch=body)
    save(helper.make_graph([node], "if_chain", [cond, x], [yo]), os.path.join(d, "if_chain.onnx"))
    w = numpy_helper.from_array((np.eye(16) * 0.9).astype(np.float32), "Wv")
    lb = helper.make_graph(
        [helper.make_node("Constant", [], ["W"], value=w),
         helper.make_node("MatMul", ["x_in", "W"], ["m"]),
         helper.make_node("Relu", ["m"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, F16)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, F16)])
    loop = helper.make_node("Loop", ["M", "C", "X"], ["Y"], body=lb)
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"),
             numpy_helper.from_array(np.array(True), "C")]
    save(helper.make_graph([loop], "loop", [x], [yo], inits), os.path.join(d, "loop.onnx"))
    feeds = {"X": np.random.default_rng(0).standard_normal(F16).astype(np.float32),
             "cond": np.array(True)}
    for k, v in feeds.items():
        np.save(os.path.join(d, k + ".npy"), v)
    return feeds


def run_tandem(tandem, model, d, names, duration):
    args = [tandem, "bench", model, "--threads", "1", "--duration", str(duration), "--json"]
    for k in names:
        args += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    lat = json.loads(out)["latency_ms"]
    return lat["p50"], lat["min"]


def run_ort(model, feeds, duration):
    o = ort.SessionOptions()
    o.intra_op_num_threads = o.inter_op_num_threads = 1
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    f = {k: feeds[k] for k in names}
    for _ in range(20):
        s.run(None, f)
    t, end = [], time.perf_counter() + duration
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        s.run(None, f)
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    return t[len(t) // 2], t[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--trips", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=1.5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        feeds = build(d, a.nodes, a.trips)
        rows = [("chain", ["X"]), ("if_chain", ["cond", "X"]), ("loop", ["X"])]
        print(f"| model | tandem p50 ms | ORT p50 ms | tandem min ms | ORT min ms | "
              f"tandem/ORT p50 | tandem/ORT min |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, ins in rows:
            model = os.path.join(d, name + ".onnx")
            tp, tm, op, om = [], [], [], []
            for _ in range(a.rounds):
                p, m = run_tandem(a.tandem, model, d, ins, a.duration)
                tp.append(p), tm.append(m)
                p, m = run_ort(model, feeds, a.duration)
                op.append(p), om.append(m)
            tp, tm, op, om = np.median(tp), min(tm), np.median(op), min(om)
            print(f"| {name} | {tp:.4f} | {op:.4f} | {tm:.4f} | {om:.4f} | {tp / op:.2f} | "
                  f"{tm / om:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
