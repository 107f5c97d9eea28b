#!/usr/bin/env python3
"""`tandem serve` under hostile clients: QPS and p99 of well-behaved clients with and without
2,000 idle and 200 slow clients connected, and the server's peak RSS under 60 MiB uploads.

    .venv/bin/python bench/serve/hostile.py --tandem build/tandem [--rounds 3] [--duration 5]

Scenario (loopback only; every loop is bounded in count and time):
- well-behaved: C keep-alive clients (wrk with bench/serve/infer.lua when installed, else
  loadgen.py) send binary-tensor requests back to back to resnet_blocks (a few ms of compute)
  and to an Identity model (the server's own overhead);
- hostile (a separate process, `--swarm`): 2,000 connections that never send a byte, 100
  slowloris clients that send a header line every second and 100 clients that upload a
  1 MiB body at 1 KiB/s; a client the server closes comes back after a second; each client
  keeps its own phase in the second (--together: all in lockstep, a burst of the swarm's own
  CPU each second on the cores it shares with the server and the load generator);
- the two alternate, `--rounds` times; medians are reported, with the target (QPS with the
  hostile clients >= 80% of without, p99 <= 2x);
- budgets: the same with --max-connections 1000 (the 2,000 idle clients do not fit: the
  server closes the connections idle longest for new ones), then the 60 MiB-body attack: 20
  uploads declaring 60 MiB that stall at the last byte and 4 JSON bodies of 60 MiB, against
  --request-memory 256; the server's peak RSS (VmHWM) over its RSS before the attack.
"""
import argparse
import asyncio
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import shutil
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_serve  # noqa: E402  (build_repo, start, Client, cpu_seconds, median, loadavg)

HOST = "127.0.0.1"


# ---- the hostile swarm (its own process) ---------------------------------------------------------

def stop_reading(fut):
    """Cancels a pending read, or takes its exception (a reset) so that asyncio does not log it."""
    if not fut.done():
        fut.cancel()
    elif not fut.cancelled():
        fut.exception()


async def idle_client(port, stop_at, stats, together):
    """Connects, sends nothing, waits for the server to close (or the end), comes back after a
    second. A bare socket and a reader callback, not asyncio's streams, a task and a wait_for per
    connection: evicted clients come back ~1,000 times a second under --max-connections 1000,
    and what this process spends there is taken from the cores the server shares with it."""
    loop = asyncio.get_running_loop()
    if not together:
        await asyncio.sleep(random.random())  # independent clients: connects spread over a second
    while time.time() < stop_at:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            await loop.sock_connect(s, (HOST, port))
        except OSError:
            s.close()
            await asyncio.sleep(1)
            continue
        stats["connected"] += 1
        woken = loop.create_future()

        def wake(f=woken):
            if not f.done():
                f.set_result(None)
        loop.add_reader(s.fileno(), wake)
        timer = loop.call_later(max(0.1, stop_at - time.time()), wake)
        await woken
        loop.remove_reader(s.fileno())
        timer.cancel()
        try:
            s.recv(1)  # b"" (closed), an answer, or a reset: the server closed it
            stats["closed_by_server"] += 1
        except BlockingIOError:
            pass  # the end of the run
        except OSError:
            stats["closed_by_server"] += 1
        s.close()
        await asyncio.sleep(1 if together else 0.5 + random.random())


async def slowloris_client(port, stop_at, stats, together):
    if not together:
        await asyncio.sleep(random.random())  # its own phase in the second
    while time.time() < stop_at:
        eof = None
        try:
            r, w = await asyncio.open_connection(HOST, port)
            w.write(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n")
            stats["connected"] += 1
            eof = asyncio.ensure_future(r.read(1))
            while time.time() < stop_at and not eof.done():
                await asyncio.sleep(1)
                w.write(b"X-Slow: 1\r\n")
                await w.drain()
        except OSError:
            pass
        if eof is not None:
            stop_reading(eof)  # also after a reset in drain(): its read would end unretrieved
        stats["closed_by_server"] += time.time() < stop_at
        try:
            w.close()
        except Exception:  # noqa: BLE001
            pass
        await asyncio.sleep(1 if together else 0.5 + random.random())


async def slow_body_client(port, stop_at, stats, together):
    if not together:
        await asyncio.sleep(random.random())  # its own phase in the second
    while time.time() < stop_at:
        eof = None
        try:
            r, w = await asyncio.open_connection(HOST, port)
            w.write(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                    b"Inference-Header-Content-Length: 2\r\nContent-Length: 1048576\r\n\r\n{}")
            stats["connected"] += 1
            eof = asyncio.ensure_future(r.read(1))
            while time.time() < stop_at and not eof.done():
                await asyncio.sleep(1)
                w.write(b"\0" * 1024)
                await w.drain()
        except OSError:
            pass
        if eof is not None:
            stop_reading(eof)  # also after a reset in drain(): its read would end unretrieved
        stats["closed_by_server"] += time.time() < stop_at
        try:
            w.close()
        except Exception:  # noqa: BLE001
            pass
        await asyncio.sleep(1 if together else 0.5 + random.random())


async def swarm(port, seconds, n_idle, n_slow, together):
    stop_at = time.time() + seconds
    st = {"connected": 0, "closed_by_server": 0}
    tasks = [idle_client(port, stop_at, st, together) for _ in range(n_idle)]
    tasks += [slowloris_client(port, stop_at, st, together) for _ in range(n_slow // 2)]
    tasks += [slow_body_client(port, stop_at, st, together) for _ in range(n_slow - n_slow // 2)]
    await asyncio.gather(*tasks)
    st["cpu_s"] = round(time.process_time(), 2)
    print(json.dumps(st), flush=True)


def start_swarm(port, seconds, n_idle, n_slow, together=False):
    p = subprocess.Popen([sys.executable, __file__, "--swarm", str(port), str(seconds), str(n_idle),
                          str(n_slow), "1" if together else "0"], stdout=subprocess.PIPE, text=True)
    return p


# ---- measurements ---------------------------------------------------------------------------

RESNET = ("resnet_nobatch", [("input", "FP32", [1, 3, 64, 64])])
IDENTITY = ("identity", [("INPUT0", "FP32", [1, 16])])


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def hostile_rounds(a, tmp, repo, extra, label):
    p, port = start_with(a.tandem, repo, extra)
    client = bench_serve.Client("wrk" if shutil.which("wrk") and a.client != "python" else "python",
                                f"{HOST}:{port}", tmp)
    rows = {}
    try:
        for model, inputs in (RESNET, IDENTITY):
            res = {"quiet": [], "hostile": []}
            for _ in range(a.rounds):
                res["quiet"].append(client.run(p.pid, model, inputs, a.concurrency, a.duration, 0.5))
                sw = start_swarm(port, a.duration + 6, a.idle, a.slow, a.together)
                time.sleep(4)  # the swarm connects and the slow clients settle
                res["hostile"].append(client.run(p.pid, model, inputs, a.concurrency, a.duration, 0.5))
                out, _ = sw.communicate(timeout=a.duration + 60)
                res.setdefault("swarm", []).append(json.loads(out.strip().splitlines()[-1]))
            rows[model] = res
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)
    return label, rows


def start_with(tandem, repo, extra=None):
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    p = subprocess.Popen([tandem, "serve", "--model-repository", repo, "--http-port", "0",
                          "--metrics-port", "-1", *(extra or [])],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    import re
    import threading
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


def memory_attack(a, repo, budget_mib=256):
    p, port = start_with(a.tandem, repo, ["--request-memory", str(budget_mib), "--min-upload-kbps", "0"])
    size = 60 << 20
    socks = []
    try:
        time.sleep(0.5)
        base = rss_kib(p.pid, "VmRSS")
        admitted = refused = 0
        head = b'{"inputs":[]}'
        for _ in range(20):
            c = socket.create_connection((HOST, port), timeout=30)
            c.sendall(f"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n"
                      f"Inference-Header-Content-Length: {len(head)}\r\n\r\n".encode())
            socks.append(c)
        chunk = b"\0" * (1 << 20)
        for c in socks:
            c.settimeout(0.5)
            try:
                got = c.recv(4096)
            except socket.timeout:
                got = b""
            if got.startswith(b"HTTP/1.1 503"):
                refused += 1
                continue
            admitted += 1
            c.settimeout(60)
            c.sendall(head)
            left = size - len(head) - 1
            while left:
                k = min(left, len(chunk))
                c.sendall(chunk[:k])
                left -= k
        json_codes = []
        for _ in range(4):
            c = socket.create_connection((HOST, port), timeout=30)
            c.sendall(f"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
            socks.append(c)
            json_codes.append(c.recv(4096)[9:12].decode())
        time.sleep(0.5)
        peak = rss_kib(p.pid, "VmHWM")
    finally:
        for c in socks:
            c.close()
        p.send_signal(signal.SIGTERM)
        p.wait(60)
    return {"budget_mib": budget_mib, "base_mib": base / 1024, "peak_mib": peak / 1024,
            "growth_mib": (peak - base) / 1024, "admitted": admitted, "refused": refused,
            "json_codes": json_codes}


def render(a, results, mem):
    L = []
    L.append("# tandem serve under hostile clients\n")
    L.append(f"Machine: {os.cpu_count()} cores, load average before: {' '.join(bench_serve.loadavg())}; "
             f"{a.rounds} rounds of {a.duration:.0f} s, concurrency {a.concurrency}, medians. "
             f"Hostile: {a.idle} idle + {a.slow} slow clients (half slowloris headers, half 1 KiB/s "
             f"bodies), reconnecting after each close; "
             f"{'in lockstep (--together)' if a.together else 'each at its own phase in the second'}.\n")
    L.append("| server | model | QPS quiet | QPS hostile | ratio | p99 quiet ms | p99 hostile ms | ratio | "
             "server CPU ms/req quiet | hostile | target met |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for label, rows in results:
        for model, res in rows.items():
            qq = bench_serve.median([r["qps"] for r in res["quiet"]])
            qh = bench_serve.median([r["qps"] for r in res["hostile"]])
            pq = bench_serve.median([r["p99_ms"] for r in res["quiet"]])
            ph = bench_serve.median([r["p99_ms"] for r in res["hostile"]])
            cq = bench_serve.median([r["cpu_ms_per_req"] for r in res["quiet"]])
            ch = bench_serve.median([r["cpu_ms_per_req"] for r in res["hostile"]])
            ok = qh >= 0.8 * qq and ph <= 2 * pq
            L.append(f"| {label} | {model} | {qq:.0f} | {qh:.0f} | {qh / qq:.2f} | {pq:.2f} | {ph:.2f} | "
                     f"{ph / pq:.2f} | {cq:.3f} | {ch:.3f} | {'yes' if ok else 'no'} |")
    L.append("")
    for label, rows in results:
        sw = [s for res in rows.values() for s in res.get("swarm", [])]
        errs = [r["errors"] for res in rows.values() for r in res["hostile"]]
        L.append(f"- {label}: hostile connections made per round {[s['connected'] for s in sw]}, "
                 f"closed by the server {[s['closed_by_server'] for s in sw]}; CPU seconds of the "
                 f"hostile clients' process per round {[s['cpu_s'] for s in sw]}; errors seen by "
                 f"the well-behaved clients {errs}")
    L.append("")
    L.append("Per round (hostile / quiet of the same round), QPS ratio; p99 ratio:")
    for label, rows in results:
        for model, res in rows.items():
            qr = [h["qps"] / q["qps"] for q, h in zip(res["quiet"], res["hostile"]) if q["qps"]]
            pr = [h["p99_ms"] / q["p99_ms"] for q, h in zip(res["quiet"], res["hostile"]) if q["p99_ms"]]
            L.append(f"- {label}, {model}: {[round(x, 2) for x in qr]}; {[round(x, 2) for x in pr]}")
    L.append("")
    if mem is None:
        return "\n".join(L)
    L.append(f"60 MiB-body attack (20 uploads declaring 60 MiB, stalled at the last byte, then 4 JSON "
             f"bodies of 60 MiB) against --request-memory {mem['budget_mib']}: {mem['admitted']} "
             f"uploads admitted, {mem['refused']} refused with 503, JSON bodies answered "
             f"{', '.join(mem['json_codes'])}; RSS {mem['base_mib']:.0f} MiB before, peak "
             f"{mem['peak_mib']:.0f} MiB: +{mem['growth_mib']:.0f} MiB against a budget of "
             f"{mem['budget_mib']} MiB.\n")
    return "\n".join(L)


def probe(port, seconds):
    """One well-behaved client, sequential keep-alive JSON requests to the Identity model for
    `seconds`: latencies in ms, sorted."""
    import http.client
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                   "data": [float(i) for i in range(16)]}]})
    c = http.client.HTTPConnection(HOST, port, timeout=10)
    lat = []
    stop_at = time.time() + seconds
    try:
        while time.time() < stop_at:
            t0 = time.perf_counter()
            c.request("POST", "/v2/models/identity/infer", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            lat.append((time.perf_counter() - t0) * 1000)
            if r.status != 200:
                raise SystemExit(f"probe: HTTP {r.status}")
    finally:
        c.close()
    return sorted(lat)


def thread_cpu(pid):
    """CPU seconds so far of the server's threads by kind (their names without the number:
    tdm-accept, tdm-http, tdm-instance, tdm-batcher, tandem for the rest)."""
    by = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                kind = f.read().strip().rstrip("0123456789")
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        by[kind] = by.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return by


def ctx_switches(pid):
    """Voluntary context switches (a thread blocked: a hand-off to another thread or a wait for
    the network) of all the process's threads so far; the involuntary ones follow the load."""
    n = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        n += int(line.split()[1])
        except OSError:
            pass  # the thread ended
    return n


def background_cost(a):
    """What each kind of hostile client costs the server by itself: with none, only the idle
    ones, only the slow ones, and both connected, the server's CPU time per second, its voluntary
    context switches per second (and per request of the client) and the latency (p50, p99) of
    one sequential well-behaved client (Identity, JSON, keep-alive); the settings alternate,
    `--rounds` times."""
    tmp = tempfile.mkdtemp(prefix="tandem-background-")
    settings = [("none", 0, 0), (f"{a.idle} idle", a.idle, 0), (f"{a.slow} slow", 0, a.slow),
                (f"{a.idle} idle + {a.slow} slow", a.idle, a.slow)]
    res = {name: [] for name, _, _ in settings}
    try:
        repo = os.path.join(tmp, "repo")
        bench_serve.build_repo(repo, 8)
        p, port = start_with(a.tandem, repo, a.serve_arg)
        try:
            probe(port, 1.0)  # warm-up
            for _ in range(a.rounds):
                for name, n_idle, n_slow in settings:
                    sw = start_swarm(port, a.duration + 6, n_idle, n_slow, a.together) if n_idle + n_slow else None
                    time.sleep(4 if sw else 0.5)
                    c0, x0, t0 = bench_serve.cpu_seconds(p.pid), ctx_switches(p.pid), time.time()
                    k0 = thread_cpu(p.pid)
                    s0 = bench_serve.cpu_seconds(sw.pid) if sw else 0.0
                    lat = probe(port, a.duration)
                    c1, x1, t1 = bench_serve.cpu_seconds(p.pid), ctx_switches(p.pid), time.time()
                    k1 = thread_cpu(p.pid)
                    s1 = bench_serve.cpu_seconds(sw.pid) if sw else 0.0
                    if sw:
                        sw.communicate(timeout=a.duration + 60)
                    res[name].append({"cpu_ms_s": (c1 - c0) * 1000 / (t1 - t0),
                                      "accept_ms_s": (k1.get("tdm-accept", 0) - k0.get("tdm-accept", 0))
                                      * 1000 / (t1 - t0),
                                      "http_ms_s": (k1.get("tdm-http", 0) - k0.get("tdm-http", 0))
                                      * 1000 / (t1 - t0),
                                      "swarm_ms_s": (s1 - s0) * 1000 / (t1 - t0),
                                      "cs_s": (x1 - x0) / (t1 - t0), "n": len(lat),
                                      "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)]})
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    L = ["# tandem serve: what the hostile clients cost by themselves\n",
         f"Machine: {os.cpu_count()} cores, load average before: {' '.join(bench_serve.loadavg())}; "
         f"{a.rounds} rounds of {a.duration:.0f} s per setting, alternating; medians (per round in "
         f"brackets). One sequential client (Identity, JSON, keep-alive). Server options: "
         f"{' '.join(a.serve_arg) or 'defaults'}. Server CPU ms/s in all, then of the accept thread "
         f"and of the HTTP threads (which also serve the client); the hostile clients' own process "
         f"shares the machine's cores.\n",
         "| hostile clients | requests/s | p50 ms | p99 ms | p99 per round | server CPU ms/s | "
         "accept thread | HTTP threads | hostile clients' own CPU ms/s | "
         "voluntary context switches/s | per request |",
         "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for name, rs in res.items():
        med = lambda k: bench_serve.median([r[k] for r in rs])  # noqa: E731
        L.append(f"| {name} | {med('n') / a.duration:.0f} | {med('p50'):.2f} | {med('p99'):.2f} | "
                 f"{[round(r['p99'], 2) for r in rs]} | {med('cpu_ms_s'):.0f} | {med('accept_ms_s'):.0f} | "
                 f"{med('http_ms_s'):.0f} | {med('swarm_ms_s'):.0f} | {med('cs_s'):.0f} | "
                 f"{bench_serve.median([r['cs_s'] * a.duration / r['n'] for r in rs]):.1f} |")
    return "\n".join(L) + "\n"


def keep_alive_cost(a):
    """QPS and p99 of the well-behaved clients with the default keep-alive (every later request
    head checked by the accept thread: --check-heads 1), with keep-alive and only first heads
    checked (--check-heads 0, the default before) and with --keep-alive 0 (a connection per
    request), alternating, no hostile clients."""
    tmp = tempfile.mkdtemp(prefix="tandem-keepalive-")
    res = {}
    try:
        repo = os.path.join(tmp, "repo")
        bench_serve.build_repo(repo, 8)
        servers = {}
        for label, extra in (("keep-alive, --check-heads 1 (default)", None),
                             ("keep-alive, --check-heads 0", ["--check-heads", "0"]),
                             ("--keep-alive 0", ["--keep-alive", "0"])):
            servers[label] = start_with(a.tandem, repo, extra)
        load = bench_serve.loadavg()
        try:
            for model, inputs in (RESNET, IDENTITY):
                for _ in range(a.rounds):
                    for label, (p, port) in servers.items():
                        client = bench_serve.Client("wrk" if shutil.which("wrk") and a.client != "python"
                                                    else "python", f"{HOST}:{port}", tmp)
                        r = client.run(p.pid, model, inputs, a.concurrency, a.duration, 0.5)
                        res.setdefault((model, label), []).append(r)
        finally:
            for p, _ in servers.values():
                p.send_signal(signal.SIGTERM)
                p.wait(60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    L = [f"Machine: {os.cpu_count()} cores, load average before: {' '.join(load)}; {a.rounds} rounds "
         f"of {a.duration:.0f} s, concurrency {a.concurrency}, medians.\n",
         "| model | server | QPS | p99 ms | server CPU ms/req | errors |", "|---|---|---:|---:|---:|---|"]
    for (model, label), rs in res.items():
        L.append(f"| {model} | {label} | {bench_serve.median([r['qps'] for r in rs]):.0f} | "
                 f"{bench_serve.median([r['p99_ms'] for r in rs]):.2f} | "
                 f"{bench_serve.median([r['cpu_ms_per_req'] for r in rs]):.3f} | "
                 f"{[r.get('errors') for r in rs]} |")
    return "\n".join(L) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--swarm":
        port, secs, n_idle, n_slow = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        together = len(sys.argv) > 6 and sys.argv[6] == "1"
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
        asyncio.run(swarm(port, secs, n_idle, n_slow, together))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", default=os.path.join(bench_serve.ROOT, "build/tandem"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--client", choices=("auto", "python"), default="auto")
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep-alive-cost", action="store_true",
                    help="only compare --check-heads 1 (default), --check-heads 0 and --keep-alive 0 "
                         "(no hostile clients)")
    ap.add_argument("--background-cost", action="store_true",
                    help="only what the idle and the slow clients cost by themselves: server CPU and "
                         "the latency of one sequential client, with none, each kind and both")
    ap.add_argument("--together", action="store_true",
                    help="the hostile clients in lockstep (as before 2026-12-04): all slow clients "
                         "write in the same instant each second and the closed ones come back "
                         "together, a burst of the swarm's own CPU on the machine it shares")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="with --background-cost: an option for the server (repeat; e.g. "
                         "--serve-arg=--max-connections --serve-arg=1000)")
    ap.add_argument("--defaults-only", action="store_true",
                    help="only the default budget: no --max-connections 1000 pass, no 60 MiB-body attack")
    a = ap.parse_args()
    if a.background_cost:
        print(background_cost(a))
        return 0
    if a.keep_alive_cost:
        print(keep_alive_cost(a))
        return 0
    tmp = tempfile.mkdtemp(prefix="tandem-hostile-")
    try:
        repo = os.path.join(tmp, "repo")
        bench_serve.build_repo(repo, 8)
        results = [hostile_rounds(a, tmp, repo, None, "defaults")]
        mem = None
        if not a.defaults_only:
            results.append(hostile_rounds(a, tmp, repo, ["--max-connections", "1000"],
                                          "--max-connections 1000"))
            mem = memory_attack(a, repo)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = render(a, results, mem)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
