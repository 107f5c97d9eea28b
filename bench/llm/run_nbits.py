#!/usr/bin/env python3
"""MatMulNBits decode (M = 1) side by side: tandem's product (bench_nbits.c, the kernel alone)
and ONNX Runtime's MatMulNBits (a one-node model through InferenceSession.run, minus the time
of the same call on a one-node Identity model: ORT's per-run overhead), same shapes, same
threads. Shapes: SmolLM2-135M's decode products (4-bit, block 32, float zero points,
accuracy_level 4) and its 8-bit LM head (49152 x 576, uint8 zero points).

1 thread: CPU time of the process (others' load on a shared machine excluded as far as it can
be); 2 threads: wall time. Each figure is the median of several rounds; the two sides are run
alternately. GB/s counts the packed weights B only.

Usage: bench/llm/run_nbits.py [BUILD_DIR]   (default build; needs build/libtandem.a)"""
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (N, K, bits, zero points): uint8 zero points are ORT's fast path; float ones (the Q4_1 map of
# tools/gguf_to_onnx.py) take a much slower one in ORT 1.32
SHAPES = [(1536, 576, 4, "u8"), (576, 1536, 4, "u8"), (1536, 576, 4, "f32"), (49152, 576, 8, "u8")]
BLOCK = 32


def build_bench(build):
    exe = os.path.join(build, "bench", "bench_nbits")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "src"),
                    "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(build, "gen"),
                    os.path.join(ROOT, "bench", "llm", "bench_nbits.c"),
                    os.path.join(build, "libtandem.a"), "-ldnnl", "-lprotobuf-c", "-fopenmp",
                    "-lpthread", "-ldl", "-lm", "-o", exe], check=True)
    return exe


def model(N, K, bits, zkind):
    rng = np.random.default_rng(0)
    nb = (K + BLOCK - 1) // BLOCK
    B = rng.integers(0, 256, size=(N, nb, BLOCK * bits // 8), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.02, size=N * nb).astype(np.float32)
    if zkind == "f32":
        zp = rng.uniform(6, 9, size=N * nb).astype(np.float32)
    elif bits == 4:
        zp = np.full((N, (nb + 1) // 2), 0x88, np.uint8)
    else:
        zp = np.full((N, nb), 128, np.uint8)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"],
                            domain="com.microsoft", K=K, N=N, bits=bits, block_size=BLOCK,
                            accuracy_level=4)
    g = helper.make_graph([node], "mm", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, N])],
                          [numpy_helper.from_array(B, "B"), numpy_helper.from_array(scales, "scales"),
                           numpy_helper.from_array(zp, "zp")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21),
                                               helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def identity(K):
    g = helper.make_graph([helper.make_node("Identity", ["A"], ["Y"])], "id",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, K])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def ort_time(m, K, threads, clock):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    a = {"A": np.random.default_rng(1).standard_normal((1, K)).astype(np.float32)}
    for _ in range(20):
        s.run(None, a)
    t0, n = clock(), 0
    while clock() - t0 < 0.05:
        s.run(None, a)
        n += 1
    n = n * 4 + 1
    r = []
    for _ in range(7):
        t = clock()
        for _ in range(n):
            s.run(None, a)
        r.append((clock() - t) / n)
    return float(np.median(r))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    exe = build_bench(build)
    flags = open("/proc/cpuinfo").read().split("\nflags")[1].split("\n")[0]
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni") if f" {f}" in flags]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"ISA flags {' '.join(isa)}; onnxruntime {ort.__version__}")
    print("| N x K, bits, zero points | threads | tandem us | tandem GB/s | ORT us (net) | ORT GB/s | ORT / tandem time |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for N, K, bits, zk in SHAPES:
        m = model(N, K, bits, zk)
        for threads in (1, 2):
            clock = time.process_time if threads == 1 else time.perf_counter
            env = dict(os.environ)
            if threads > 1:
                env["BENCH_WALL"] = "1"
            tt, to = [], []
            for _ in range(3):  # alternate the two sides
                out = subprocess.run([exe, str(N), str(K), str(bits), str(BLOCK), str(threads), "1",
                                      "1", "1"], capture_output=True, text=True, env=env, check=True)
                tt.append(json.loads(out.stdout)["us"])
                to.append((ort_time(m, K, threads, clock) - ort_time(identity(K), K, threads, clock))
                          * 1e6)
            t, o = float(np.median(tt)), float(np.median(to))
            gb = N * ((K + BLOCK - 1) // BLOCK) * BLOCK * bits / 8 / 1e9
            rows.append(dict(N=N, K=K, bits=bits, zp=zk, threads=threads, tandem_us=t, ort_us=o))
            print(f"| {N} x {K}, {bits}, {zk} | {threads} | {t:.1f} | {gb / t * 1e6:.1f} | {o:.1f} | "
                  f"{gb / o * 1e6:.1f} | {o / t:.2f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
