"""Attention with fewer (batch, head) pairs than threads: tandem against ONNX Runtime.

The fused Attention ran its pairs one after another on one thread when there were fewer pairs
than threads (BERT-base at batch 1 has 12 pairs; on a 16-core host tandem took 1.61x ONNX
Runtime's time). This builds Q.K^T / c -> Softmax -> .V with B x H pairs of S x D (tandem fuses
it into one Attention node), runs `tandem bench` and an ORT session on the same model with the
same thread count, and prints the p50 of each and the ratio.

    .venv/bin/python bench/attn_threads.py [--tandem build/tandem] [--threads 2]
        [--pairs 1,2] [--seq 512] [--head 64] [--duration 2]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def model(batch, heads, seq, head):
    dims = [batch, heads, seq, head]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("q", "k", "v")]
    out = helper.make_tensor_value_info("z", TensorProto.FLOAT, dims)
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [float(np.sqrt(head))])
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "c"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["z"])]
    g = helper.make_graph(nodes, "attention", ins, [out], [c])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def ort_p50(path, dims, threads, duration):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feed = {n: rng.standard_normal(dims, dtype=np.float32) for n in ("q", "k", "v")}
    for _ in range(20):
        s.run(None, feed)
    times, end = [], time.perf_counter() + duration
    while time.perf_counter() < end:
        t = time.perf_counter()
        s.run(None, feed)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--pairs", default="1,2", help="batch x heads counts to try (heads = pairs, batch 1)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--head", type=int, default=64)
    ap.add_argument("--duration", type=float, default=2.0)
    a = ap.parse_args()
    devs = json.loads(subprocess.run([a.tandem, "devices", "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    cpu = [d for d in devs if d.get("name") == "cpu"]
    print("threads %d, cpu isa %s (%s)" % (a.threads, cpu[0].get("isa", "?") if cpu else "?",
                                           cpu[0].get("description", "") if cpu else ""))
    print("| pairs | S x D | tandem p50 ms | ORT p50 ms | tandem / ORT |")
    print("|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for pairs in [int(p) for p in a.pairs.split(",")]:
            dims = [1, pairs, a.seq, a.head]
            path = os.path.join(tmp, "attn%d.onnx" % pairs)
            onnx.save(model(1, pairs, a.seq, a.head), path)
            r = subprocess.run([a.tandem, "bench", path, "--threads", str(a.threads), "--duration",
                                str(a.duration), "--json"], capture_output=True, text=True, check=True)
            t = json.loads(r.stdout)["latency_ms"]["p50"]
            o = ort_p50(path, dims, a.threads, a.duration)
            print("| %d | %d x %d | %.3f | %.3f | %.2f |" % (pairs, a.seq, a.head, t, o, t / o))


if __name__ == "__main__":
    main()
