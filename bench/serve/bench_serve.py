#!/usr/bin/env python3
"""Benchmark of `tandem serve`: dynamic batching vs none on a ResNet-style model, and the
server's overhead per request on an Identity model. Writes bench/serve/results-<date>.md.

    bench/serve/bench_serve.py --tandem build/tandem [--duration 4] [--out FILE]

The repository is built in a temporary folder from tests/models/resnet_blocks (batch dimension
made dynamic) and an Identity model; the server listens on 127.0.0.1 on free ports. Needs
numpy and onnx (the repository's .venv has them).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import loadgen  # noqa: E402

RESNET_IN = ("input", "FP32", [1, 3, 64, 64])


def build_repo(repo, max_batch, instances=1, dynamic="max_queue_delay_microseconds: 0"):
    m = onnx.load(os.path.join(ROOT, "tests/models/resnet_blocks/model.onnx"))
    for v in list(m.graph.input) + list(m.graph.output):
        d = v.type.tensor_type.shape.dim[0]
        d.ClearField("dim_value")
        d.dim_param = "batch"
    group = f"instance_group [{{ count: {instances} kind: KIND_CPU }}]\n"
    configs = {
        "resnet_nobatch": f"max_batch_size: {max_batch}\n{group}",
        "resnet_dynamic": f"max_batch_size: {max_batch}\n{group}dynamic_batching {{ {dynamic} }}\n",
    }
    for name, cfg in configs.items():
        os.makedirs(os.path.join(repo, name, "1"))
        onnx.save(m, os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(cfg)
    g = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity",
                          [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["b", 16])],
                          [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["b", 16])])
    im = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    im.ir_version = 8
    os.makedirs(os.path.join(repo, "identity", "1"))
    onnx.save(im, os.path.join(repo, "identity", "1", "model.onnx"))
    with open(os.path.join(repo, "identity", "config.pbtxt"), "w") as f:
        f.write("max_batch_size: 8\ninstance_group [{ count: 1 kind: KIND_CPU }]\n")


def start(tandem, repo, omp_wait_policy, threads=0):
    env = dict(os.environ)
    if omp_wait_policy:
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    p = subprocess.Popen([tandem, "serve", "--model-repository", repo, "--http-port", "0",
                          "--metrics-port", "-1", "--threads", str(threads)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    threading.Thread(target=lambda: [lines.append(l) for l in p.stdout], daemon=True).start()
    deadline = time.time() + 60
    port = None
    while time.time() < deadline:
        for l in list(lines):
            m = re.search(r"HTTP on [^ ]+:(\d+)", l)
            if m:
                port = int(m.group(1))
        if port and any(l.rstrip().endswith("tandem serve: ready") for l in lines):
            return p, port
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise SystemExit("server did not start:\n" + "".join(lines))


def stats(port, model):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats") as r:
        return json.load(r)["model_stats"][0]


def avg_us(after, before, key):
    a, b = after["inference_stats"][key], before["inference_stats"][key]
    n = a["count"] - b["count"]
    return (a["ns"] - b["ns"]) / n / 1e3 if n else float("nan")


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[:3]
    except OSError:
        return ["?"] * 3


class Client:
    """Runs one load level with wrk (C, epoll; bench/serve/infer.lua) or loadgen.py."""

    def __init__(self, kind, url, tmp):
        self.kind, self.url, self.tmp = kind, url, tmp
        self.bodies = {}

    def _body(self, model, inputs):
        if model not in self.bodies:
            req = loadgen.build_request("127.0.0.1", model, inputs, [])
            head, body = req.split(b"\r\n\r\n", 1)
            hlen = [l for l in head.split(b"\r\n") if l.startswith(b"Inference-Header")][0].split(b": ")[1]
            path = os.path.join(self.tmp, f"{model}.body")
            with open(path, "wb") as f:
                f.write(body)
            self.bodies[model] = (path, hlen.decode())
        return self.bodies[model]

    def run(self, pid, model, inputs, c, duration, warmup):
        """Returns loadgen's result dict plus cpu_ms_per_req (server CPU / request)."""
        if self.kind == "python":
            cpu0 = cpu_seconds(pid)
            r = loadgen.measure(self.url, model, inputs, [], [c], duration, warmup)[c]
            cpu = cpu_seconds(pid) - cpu0
            r["cpu_ms_per_req"] = 1e3 * cpu / r["all_requests"] if r["all_requests"] else float("nan")
            return r
        path, hlen = self._body(model, inputs)

        def wrk(secs):
            cmd = ["wrk", f"-t{min(2, c)}", f"-c{c}", f"-d{max(1, round(secs))}s", "-s", os.path.join(HERE, "infer.lua"),
                   f"http://{self.url}/v2/models/{model}/infer", "--", path, hlen]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            return json.loads(out.strip().splitlines()[-1])

        if warmup:
            wrk(warmup)
        cpu0 = cpu_seconds(pid)
        r = wrk(duration)  # whole seconds
        cpu = cpu_seconds(pid) - cpu0
        r["cpu_ms_per_req"] = 1e3 * cpu / r["requests"] if r["requests"] else float("nan")
        return r


def cpu_seconds(pid):
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def measure_setting(a, tmp, instances, threads, conc, kind):
    """One server with `instances` CPU instances of `threads` intra-op threads each: both ResNet
    models (rounds, alternating) and the Identity overhead. Returns a dict of results."""
    repo = os.path.join(tmp, f"repo-{instances}x{threads}")
    build_repo(repo, a.max_batch, instances, a.dynamic)
    proc, port = start(a.tandem, repo, a.omp_wait_policy, threads)
    url = f"127.0.0.1:{port}"
    client = Client(kind, url, tmp)
    models = ("resnet_nobatch", "resnet_dynamic")
    runs = {m: {c: [] for c in conc} for m in models}
    out = {"threads": threads, "instances": instances, "runs": runs, "batch": {}, "sizes": {},
           "per_item": {}}
    try:
        first = {m: stats(port, m) for m in models}
        for rnd in range(a.rounds):
            for c in conc:
                for m in (models if rnd % 2 == 0 else models[::-1]):
                    r = client.run(proc.pid, m, [RESNET_IN], c, a.duration, a.warmup)
                    runs[m][c].append(r)
                    print(f"{instances}x{threads} round {rnd} {m} c={c}: {r['qps']:.0f} qps p50 "
                          f"{r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} cpu {r['cpu_ms_per_req']:.2f} ms/req",
                          flush=True)
        for m in models:
            after = stats(port, m)
            n_runs = after["execution_count"] - first[m]["execution_count"]
            items = after["inference_count"] - first[m]["inference_count"]
            out["batch"][m] = items / n_runs if n_runs else float("nan")
            out["sizes"][m] = {b["batch_size"]: b["compute_infer"]["count"] for b in after["batch_stats"]}
            # model run time per item by batch size, over the measured rounds only
            b0 = {b["batch_size"]: b["compute_infer"] for b in first[m]["batch_stats"]}
            per = {}
            for b in after["batch_stats"]:
                k, ci = b["batch_size"], b["compute_infer"]
                n = ci["count"] - b0.get(k, {"count": 0})["count"]
                ns = ci["ns"] - b0.get(k, {"ns": 0})["ns"]
                if n >= 20:
                    per[k] = ns / n / k / 1e6
            out["per_item"][m] = per
        before = stats(port, "identity")
        out["ident"] = client.run(proc.pid, "identity", [("INPUT0", "FP32", [1, 16])], 1, a.duration,
                                  a.warmup)
        after = stats(port, "identity")
        out["ident_us"] = {k: avg_us(after, before, k) for k in
                           ("success", "queue", "compute_input", "compute_infer", "compute_output")}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    out["med"] = {m: {c: {k: median([r[k] for r in runs[m][c]]) for k in
                          ("qps", "p50_ms", "p99_ms", "cpu_ms_per_req")} for c in conc} for m in models}
    return out


def render(res, conc, L):
    nb, dy = res["med"]["resnet_nobatch"], res["med"]["resnet_dynamic"]
    runs = res["runs"]
    L.append("| concurrency | no batching: QPS | p50 ms | p99 ms | CPU ms/req | dynamic batching: QPS | "
             "p50 ms | p99 ms | CPU ms/req | QPS ratio |")
    L.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in conc:
        n, d = nb[c], dy[c]
        r = d["qps"] / n["qps"] if n["qps"] else float("nan")
        L.append(f"| {c} | {n['qps']:.0f} | {n['p50_ms']:.2f} | {n['p99_ms']:.2f} | "
                 f"{n['cpu_ms_per_req']:.2f} | {d['qps']:.0f} | {d['p50_ms']:.2f} | "
                 f"{d['p99_ms']:.2f} | {d['cpu_ms_per_req']:.2f} | {r:.2f}x |")
    errs = sum(r["errors"] for m in runs for c in conc for r in runs[m][c])
    L.append(f"\nMean batch size: no batching {res['batch']['resnet_nobatch']:.2f}, dynamic "
             f"{res['batch']['resnet_dynamic']:.2f} (executions per batch size: "
             f"{res['sizes']['resnet_dynamic']}). Failed requests: {errs}. QPS and p99 of each "
             f"round:\n")
    def fmt(d):
        return ", ".join(f"{k}: {v:.3f}" for k, v in sorted(d.items())) or "-"
    L.append("Model run time (tdm_session_run, wall) per item in ms by batch size (sizes run at "
             f"least 20 times): no batching {fmt(res['per_item']['resnet_nobatch'])}; dynamic "
             f"batching {fmt(res['per_item']['resnet_dynamic'])}.\n")
    L.append("| model | concurrency | QPS per round | p99 ms per round |")
    L.append("|---|---:|---|---|")
    for m in runs:
        for c in conc:
            qps = ", ".join("%.0f" % r["qps"] for r in runs[m][c])
            p99s = ", ".join("%.1f" % r["p99_ms"] for r in runs[m][c])
            L.append(f"| {m} | {c} | {qps} | {p99s} |")
    top = conc[-1]
    ratio = dy[top]["qps"] / nb[top]["qps"] if nb[top]["qps"] else float("nan")
    cpu_ratio = nb[top]["cpu_ms_per_req"] / dy[top]["cpu_ms_per_req"]
    single = nb[conc[0]]["p50_ms"]
    p99 = dy[top]["p99_ms"]
    L.append(f"\nAgainst the target: QPS with dynamic batching at concurrency {top} is {ratio:.2f}x "
             f"the QPS without (target >= 2x: **{'met' if ratio >= 2 else 'not met'}**); server CPU "
             f"per request {nb[top]['cpu_ms_per_req']:.2f} ms without, {dy[top]['cpu_ms_per_req']:.2f} "
             f"ms with ({cpu_ratio:.2f}x less). p99 with batching at concurrency {top}: {p99:.2f} ms "
             f"vs single-request latency (p50, concurrency {conc[0]}, no batching) {single:.2f} ms = "
             f"{p99 / single:.1f}x (target <= 2x: **{'met' if p99 <= 2 * single else 'not met'}**); "
             f"without batching the p99 at concurrency {top} is {nb[top]['p99_ms']:.2f} ms.\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build/tandem"))
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds per level")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds; the two models alternate within a round; medians are reported")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--setups", default="1x0,2x1",
                    help="comma-separated INSTANCESxTHREADS, one server each: CPU instances per "
                         "model and intra-op threads per instance (0 = cores / instances)")
    ap.add_argument("--threads", default=None,
                    help="old form: intra-op threads per instance with one instance (= --setups 1xT,...)")
    ap.add_argument("--dynamic", default="max_queue_delay_microseconds: 0",
                    help="body of resnet_dynamic's dynamic_batching { } block")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--out", default=None)
    ap.add_argument("--client", choices=("auto", "wrk", "python"), default="auto",
                    help="load generator: wrk (Debian package) with infer.lua, or loadgen.py; "
                         "auto = wrk when installed")
    ap.add_argument("--omp-wait-policy", default="passive",
                    help="OMP_WAIT_POLICY for the server (oneDNN's OpenMP threads); '' = unset")
    a = ap.parse_args()
    conc = [int(c) for c in a.concurrency.split(",")]
    if a.threads is not None:
        a.setups = ",".join(f"1x{t}" for t in a.threads.split(","))
    setups = [tuple(int(x) for x in st.split("x")) for st in a.setups.split(",")]
    tmp = tempfile.mkdtemp(prefix="tandem-serve-bench-")
    kind = a.client if a.client != "auto" else ("wrk" if shutil.which("wrk") else "python")
    load_before = loadavg()
    try:
        results = [measure_setting(a, tmp, i, t, conc, kind) for i, t in setups]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = loadavg()

    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(HERE, f"results-{date}.md")
    cpu = "?"
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"):
                cpu = l.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gen = ("wrk 4.1 with bench/serve/infer.lua (C, epoll; 2 threads)" if kind == "wrk" else
           "bench/serve/loadgen.py (Python asyncio)")
    L = [f"# tandem serve benchmark, {date}\n"]
    L.append(f"Machine: {os.cpu_count()} logical cores ({cpu}), {platform.system()} "
             f"{platform.release()}. Load average before/after: {' '.join(load_before)} / "
             f"{' '.join(load_after)}: the machine is shared and other jobs ran at the same time, "
             f"so wall-clock figures are noisy (see the per-round columns); the server's CPU time "
             f"per request (from /proc) is the steadier measure of what batching saves.\n")
    L.append(f"Command: `bench/serve/bench_serve.py --tandem {a.tandem} --duration {a.duration:g} "
             f"--rounds {a.rounds} --setups {a.setups} --dynamic '{a.dynamic}' --client {kind}`. Load generator: {gen}: one "
             f"keep-alive HTTP/1.1 connection per client, closed loop, the same binary-tensor request "
             f"each time, on the same machine as the server. Each cell is the median of {a.rounds} "
             f"rounds of {a.warmup:g} s warm-up + {a.duration:g} s measured; the two models "
             f"alternate within each round. Server environment: "
             f"OMP_WAIT_POLICY={a.omp_wait_policy or '(unset)'}.\n")
    L.append(f"Model: tests/models/resnet_blocks with a dynamic batch dimension; one request = one "
             f"1x3x64x64 image; max_batch_size {a.max_batch}; the instance count of each section "
             f"for both models. `resnet_dynamic` adds `dynamic_batching {{ {a.dynamic} }}`.\n")
    for res in results:
        t, i = res["threads"], res["instances"]
        tt = f"cores / instances = {max(1, (os.cpu_count() or 1) // i)}" if t == 0 else t
        L.append(f"## {i} CPU instance(s) per model, intra-op threads per instance: {tt} "
                 f"(setup `{i}x{t}`)\n")
        render(res, conc, L)
    L.append("In a closed loop, Little's law ties latency to throughput (latency = concurrency / "
             "QPS): 16 clients can see a p99 <= 2x the single-request latency only if QPS reaches "
             "8x the single-client QPS, so that part of the target cannot be met by batching one "
             "instance; what batching does improve is the p99 against the same load unbatched.\n")
    res = results[0]
    ident, us = res["ident"], res["ident_us"]
    L.append(f"## Server overhead per request (Identity, 1x16 FP32, concurrency 1, "
             f"setup `{res['instances']}x{res['threads']}`)\n")
    L.append("| measure | microseconds |")
    L.append("|---|---:|")
    L.append(f"| client round trip p50 ({kind}) | {ident['p50_ms'] * 1e3:.0f} |")
    L.append(f"| client round trip mean | {ident['mean_ms'] * 1e3:.0f} |")
    L.append(f"| server request duration (headers received to answer ready), mean | {us['success']:.0f} |")
    L.append(f"| of which queue (hand-off to the instance thread) | {us['queue']:.0f} |")
    L.append(f"| of which compute input (tensor creation) | {us['compute_input']:.0f} |")
    L.append(f"| of which compute infer (tdm_session_run) | {us['compute_infer']:.0f} |")
    L.append(f"| of which compute output (answer JSON + binary) | {us['compute_output']:.0f} |")
    L.append(f"| server overhead = request duration - compute infer | "
             f"{us['success'] - us['compute_infer']:.0f} |")
    L.append(f"\nQPS at concurrency 1 on Identity: {ident['qps']:.0f}. The rest of the round trip "
             f"(HTTP parsing in libmicrohttpd, resuming the connection, the socket and the client) "
             f"is the client round trip minus the server request duration.\n")
    with open(out, "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
