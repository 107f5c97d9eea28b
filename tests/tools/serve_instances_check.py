#!/usr/bin/env python3
"""`tandem serve` with a CPU and a GPU instance of one model (scripts/gpu-check.sh step 12):
the server's GPU instances on a real device, with nothing but the standard library and numpy
on the client side (the GPU machine has no tritonclient).

A temporary repository holds tests/models/mlp_dynamic_batch as "hetero" with dynamic batching
and `instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU } ]` (tandem_gpu_backend BACKEND:
cuda on the GPU machine, opencl for a check of this script through PoCL), and "gpu_only" with
one KIND_GPU instance. The server starts on free ports; REQUESTS KServe v2 JSON requests of
random batches (1..4 rows) go from CLIENTS threads at once. Each answer is compared with the
same rows run through `tandem run --devices cpu` (|got - want| <= 1e-4 + 1e-3 |want|);
then /metrics must show busy time on the CPU and on the GPU device (both instances took
batches), and gpu_only must answer with its one instance. Prints one summary line (requests,
wall time, requests/s, per device busy seconds) and exits 1 on any failure.

    tests/tools/serve_instances_check.py --tandem build/tandem --backend opencl
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests", "models", "mlp_dynamic_batch", "model.onnx")


def post(port, path, body, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, json.loads(r.read())


def get(port, path, timeout=30):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


def reference(tandem, x, work):
    """logits of x through `tandem run` on the CPU (its .npy in and out)."""
    xin, out = os.path.join(work, "x.npy"), os.path.join(work, "ref")
    np.save(xin, x)
    os.makedirs(out, exist_ok=True)
    r = subprocess.run([tandem, "run", MODEL, "--devices", "cpu", "--input", f"input={xin}",
                        "--output-dir", out], capture_output=True, text=True,
                       env=dict(os.environ, TANDEM_CUDA_DISABLE="1"))
    if r.returncode != 0:
        raise RuntimeError(f"tandem run: {r.stderr.strip()}")
    return np.load(os.path.join(out, "logits.npy"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, default=8)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tandem-serve-gpu-")
    repo = os.path.join(work, "repo")
    gpu_param = f'parameters {{ key: "tandem_gpu_backend" value {{ string_value: "{a.backend}" }} }}\n'
    for name, cfg in (("hetero", "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 2000 }\n"
                                 "instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU } ]\n" + gpu_param),
                      ("gpu_only", "max_batch_size: 8\ninstance_group [ { kind: KIND_GPU } ]\n" + gpu_param)):
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(MODEL, os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(cfg)
    lines = []
    proc = subprocess.Popen([a.tandem, "serve", "--model-repository", repo, "--http-port", "0",
                             "--metrics-port", "0", "--exit-on-error", "false"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=lambda: [lines.append(l) for l in proc.stdout], daemon=True).start()
    failures = []
    try:
        port = mport = None
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None:
            for l in list(lines):
                m = re.search(r"HTTP on [^ ]+:(\d+), metrics on [^ ]+:(\d+)", l)
                if m:
                    port, mport = int(m.group(1)), int(m.group(2))
            if port and any(l.rstrip().endswith("tandem serve: ready") for l in lines):
                break
            time.sleep(0.05)
        if not port:
            raise RuntimeError("the server did not start:\n" + "".join(lines[-20:]))
        index = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/repository/index", data=b"{}", method="POST")).read())
        states = {e["name"]: (e.get("state"), e.get("reason", "")) for e in index}
        for name in ("hetero", "gpu_only"):
            if states.get(name, ("?",))[0] != "READY":
                raise RuntimeError(f"{name} is not ready: {states.get(name)}")
        rng = np.random.default_rng(7)
        xs = [rng.standard_normal((int(rng.integers(1, 5)), 4, 8)).astype(np.float32)
              for _ in range(a.requests)]
        want = reference(a.tandem, np.concatenate(xs), work)
        offs = np.cumsum([0] + [x.shape[0] for x in xs])
        got = [None] * len(xs)

        def client(k0):
            for k in range(k0, len(xs), a.clients):
                x = xs[k]
                body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                    "data": x.reshape(-1).tolist()}],
                        "outputs": [{"name": "logits"}]}
                try:
                    status, r = post(port, "/v2/models/hetero/infer", body)
                    out = [o for o in r["outputs"] if o["name"] == "logits"][0]
                    got[k] = np.array(out["data"], np.float32).reshape(out["shape"])
                except Exception as e:  # noqa: BLE001 (reported below)
                    got[k] = e

        t0 = time.time()
        ts = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        for k, g in enumerate(got):
            w = want[offs[k]:offs[k + 1]]
            if not isinstance(g, np.ndarray):
                failures.append(f"request {k}: {g}")
            elif g.shape != w.shape or not np.all(np.abs(g - w) <= 1e-4 + 1e-3 * np.abs(w)):
                failures.append(f"request {k}: logits differ from the CPU's (max "
                                f"{float(np.max(np.abs(g - w))) if g.shape == w.shape else 'shape'})")
        x1 = xs[0]
        status, r = post(port, "/v2/models/gpu_only/infer",
                         {"inputs": [{"name": "input", "shape": list(x1.shape), "datatype": "FP32",
                                      "data": x1.reshape(-1).tolist()}]})
        g1 = np.array([o for o in r["outputs"] if o["name"] == "logits"][0]["data"], np.float32)
        if not np.all(np.abs(g1 - want[:x1.shape[0]].reshape(-1)) <= 1e-4 + 1e-3 * np.abs(want[:x1.shape[0]].reshape(-1))):
            failures.append("gpu_only: logits differ from the CPU's")
        text = get(mport, "/metrics")
        busy = dict(re.findall(r'tandem_device_busy_seconds\{device="([^"]+)"\} ([0-9.eE+-]+)', text))
        gpu = [d for d in busy if d.startswith(a.backend + ":")]
        if float(busy.get("cpu", 0)) <= 0:
            failures.append(f"the CPU instance took no batch: {busy}")
        if not gpu or float(busy[gpu[0]]) <= 0:
            failures.append(f"the {a.backend} instance took no batch: {busy}")
        print(f"serve instances ({a.backend}): {len(xs)} requests ({int(offs[-1])} rows) from "
              f"{a.clients} clients in {wall:.2f} s, {len(xs) / wall:.1f} requests/s; busy s: "
              + ", ".join(f"{d} {float(v):.3f}" for d, v in sorted(busy.items())))
    except Exception as e:  # noqa: BLE001
        failures.append(str(e))
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    for f in failures[:10]:
        print("FAIL", f)
    print("serve instances check:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
