#!/usr/bin/env python3
"""What a batch saves in the runtime itself, without the server: `tandem bench` of the
ResNet-style model (tests/models/resnet_blocks, batch dimension made dynamic) at several batch
sizes and intra-op thread counts, interleaved over rounds. Reports, per batch size, the CPU
time per item (user + system of the bench process, from getrusage; steadier than wall time on
a shared machine) and the wall-clock items/s.

    bench/serve/batch_cost.py --tandem build/tandem [--batches 1,4,16] [--threads 1,2] [--rounds 3]

Dynamic batching can raise a CPU server's throughput only by as much as the CPU time per item
falls with the batch size (plus the per-request costs that a batch shares); this measures the
first part. Needs onnx (the repository's .venv has it).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def dynamic_model(path):
    import onnx
    m = onnx.load(os.path.join(ROOT, "tests/models/resnet_blocks/model.onnx"))
    for v in list(m.graph.input) + list(m.graph.output):
        d = v.type.tensor_type.shape.dim[0]
        d.ClearField("dim_value")
        d.dim_param = "batch"
    onnx.save(m, path)


def run(tandem, model, batch, threads, items, env):
    iters = max(20, items // batch)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([tandem, "bench", model, "--batch", str(batch), "--threads", str(threads),
                          "--warmup", "3", "--iterations", str(iters), "--json"],
                         capture_output=True, text=True, env=env, check=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    d = json.loads(out)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    # the CPU time includes loading the model and the warm-up runs: count their items too
    return 1e3 * cpu / ((d["iterations"] + 3) * batch), d["throughput_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build/tandem"))
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--items", type=int, default=400, help="items per measurement")
    a = ap.parse_args()
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "resnet_dynamic.onnx")
        dynamic_model(model)
        res = {}
        for rnd in range(a.rounds):
            for t in (int(x) for x in a.threads.split(",")):
                for b in (int(x) for x in a.batches.split(",")):
                    cpu, ips = run(a.tandem, model, b, t, a.items, env)
                    res.setdefault((t, b), []).append((cpu, ips))
                    print(f"round {rnd} threads {t} batch {b}: {cpu:.3f} CPU ms/item, {ips:.0f} items/s",
                          flush=True)
    print("\n| intra-op threads | batch | CPU ms/item (median) | items/s (median) |")
    print("|---:|---:|---:|---:|")
    for (t, b), v in sorted(res.items()):
        cpus = sorted(x[0] for x in v)
        ips = sorted(x[1] for x in v)
        print(f"| {t} | {b} | {cpus[len(cpus) // 2]:.3f} | {ips[len(ips) // 2]:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
