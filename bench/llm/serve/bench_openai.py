#!/usr/bin/env python3
"""Benchmark of `tandem serve`'s OpenAI API with concurrent streaming clients (loopback).

    bench/llm/serve/bench_openai.py --tandem build/tandem [--models tiny,smol] [--smol /work/smol]
        [--streams 1,4,8,16] [--requests 2] [--max-tokens 64] [--threads 2]
        [--temperature 0 --top-p 1 --top-k 0] [--rounds 1] [--unique-prompts] [--client loop|threads]
        [--out FILE]

For each model (the tiny random Llama written by tools/make_tiny_llama.py, and SmolLM2 from the
--smol folder, linked into a temporary repository as a `tandem_llm` model) and each mode
(continuous batching on; off = the engine's no_batching option: one request at a time, as a
llama.cpp-style server without batching), one server is started and, for each number of
concurrent streams S, S clients each send --requests streaming completions in a row
(fixed prompt, or with --unique-prompts a number unique to the request before it, so that the
prefix cache holds none of it; ignore_eos so that every request generates --max-tokens tokens; `logprobs: 0`
so that every token comes as its own chunk; greedy unless --temperature > 0, then sampled with
--top-p / --top-k and a seed per request, as chat clients ask). Reported per S:

  - aggregate tokens/s: generated tokens of all streams / wall time of the level (prefill in)
  - aggregate decode tokens/s: the tokens after each request's first / the time some request
    was decoding (the union of the spans first token -> last token), prefill out: the definition
    of `tandem bench --llm --streams` and of llama-bench's tg
  - time to first token p50 / p99 (request sent -> first token's chunk), ms
  - inter-token latency p50 / p99 (between consecutive token chunks of a request), ms
  - tokens per CPU second of the server process (its user + system time over the level, from
    /proc): the server's cost a token, which the clients' own CPU on the same cores does not move;
    the server's and the clients' CPU time over the level's wall time (cores busy)
  - prefill / decode tokens: the prompt tokens the level computed (the server's prompt tokens less
    its prefix cache hits, from its metrics) per token decoded after a request's first: with
    S > 1 streams that prefill runs inside the other streams' decode spans, at one stream between
    them (a prefill token costs about what a decode token costs in a batch of 8 here)

With --rounds R > 1 the levels run R times in turn on the same server (1, 4, 8, 16, 1, 4, ...),
each figure is the median of its R levels, and the ratio to one stream is also given paired:
round r's S-stream decode rate over round r's one-stream rate, median (min-max) of the R rounds.
The host's speed drifts from minute to minute (one stream and 8 streams measured a minute apart
moved 233-276 and 852-983 tokens/s independently in session 43): a level's neighbour in the same
round shares its minute, a level of another sitting does not.

Then, with batching on and unless --no-engine, the same load without the server: `tandem bench
MODEL --llm --streams S --prompt-tokens P --gen-tokens --max-tokens --threads T` at S = 8 (or the
largest level), P = the server's prompt tokens (as its usage counts them), and the server's
tokens per CPU second at S against the engine's batched way: their ratio is what HTTP, streaming,
tokenizing and the log-probabilities cost, with the workload the same. (The two decode rates are
not comparable: each stream here sends --requests in a row, so later requests' prefills run
inside the earlier ones' decode spans, while the engine bench prefills every prompt first.)

The clients share the server's cores, so their CPU is a measurement cost that grows with the
streams: by default (--client loop) one thread reads every stream's socket through a selector,
woken once for the chunks a step sends (0.03 cores at 8 streams on the 2-core Zen 4 guest of
session 46); --client threads gives each stream a blocking http.client thread, woken once per
token's chunk (0.07-0.10 cores at 8 streams there, against 0.03-0.04 at one stream). The
machine's other load makes the figures noisy. Writes a markdown table to --out (default: stdout only).
"""
import argparse
import datetime
import http.client
import itertools
import json
import os
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "serve"))
from bench_serve import cpu_seconds  # noqa: E402  (a process's /proc CPU time, as hostile.py uses it)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PROMPT = ("Once upon a time there was a little model that wanted to run on every computer, with or "
          "without a GPU. It read its weights once per token and")


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[k]


class Server:
    def __init__(self, tandem, repo):
        self.lines = []
        self.metrics_port = None
        self.proc = subprocess.Popen([tandem, "serve", "--model-repository", repo, "--http-port", "0",
                                      "--metrics-port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + 300
        while time.time() < deadline:
            for line in list(self.lines):
                m = re.search(r"HTTP on [^ ]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                m = re.search(r"metrics on [^ ]+:(\d+)", line)
                if m:
                    self.metrics_port = int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + "".join(self.lines))
            if any(l.rstrip().endswith("tandem serve: ready") for l in self.lines):
                return
            time.sleep(0.05)
        raise RuntimeError("server not ready:\n" + "".join(self.lines))

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


SAMPLING = {"temperature": 0}  # main() adds --temperature / --top-p / --top-k


UNIQUE = {"on": False, "next": itertools.count(1)}
CLIENT = {"loop": True}  # --client: one selector thread for all streams (loop) or a thread each  # --unique-prompts: a number before each prompt


def sse_tokens(line):
    """The tokens one line of a completion's event stream carries (0 for chunk sizes, blank lines
    and chunks without tokens), or None at `data: [DONE]`; an error event raises."""
    line = line.strip()
    if not line.startswith(b"data: "):
        return 0
    data = line[6:]
    if data == b"[DONE]":
        return None
    ev = json.loads(data)
    if "error" in ev:
        raise RuntimeError(str(ev["error"]))
    ch = ev["choices"][0] if ev.get("choices") else None
    return len(ch["logprobs"]["tokens"]) if ch and ch.get("logprobs") and ch["logprobs"]["tokens"] else 0


def one_request(port, model, max_tokens, seed=0):
    """One streaming completion: (ttft_s, [inter-token gaps], tokens, (first, last) token times)."""
    prompt = f"{next(UNIQUE['next'])}: {PROMPT}" if UNIQUE["on"] else PROMPT
    body = json.dumps(dict(SAMPLING, model=model, prompt=prompt, max_tokens=max_tokens, stream=True,
                           ignore_eos=True, logprobs=0, seed=seed)).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]}")
    times = []
    tokens = 0
    while True:
        line = r.fp.readline()
        if not line:
            break
        n = sse_tokens(line)
        if n is None:
            break
        if n:
            times.extend([time.perf_counter()] * n)
            tokens += n
    c.close()
    if not times:
        raise RuntimeError("no tokens")
    gaps = [b - a for a, b in zip(times, times[1:])]
    return times[0] - t0, gaps, tokens, (times[0], times[-1])


class _Stream:
    """One client of `streams_loop`: its requests in a row, each a streaming completion on a
    connection of its own, read without blocking."""

    def __init__(self, c, requests):
        self.c, self.left, self.sock, self.results = c, requests, None, []

    def start(self, port, model, max_tokens, sel, k):
        prompt = f"{next(UNIQUE['next'])}: {PROMPT}" if UNIQUE["on"] else PROMPT
        body = json.dumps(dict(SAMPLING, model=model, prompt=prompt, max_tokens=max_tokens, stream=True,
                               ignore_eos=True, logprobs=0, seed=1000 * self.c + k)).encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf, self.head, self.times, self.done = b"", None, [], False
        self.t0 = time.perf_counter()
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                          b"\r\n\r\n" + body)
        self.sock.setblocking(False)
        sel.register(self.sock, selectors.EVENT_READ, self)

    def feed(self, data):
        """Bytes received: the tokens of the complete lines among them, each stamped when it is
        parsed (as the threads client does: lines of one read a few microseconds apart)."""
        self.buf += data
        if self.head is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head, self.buf = self.buf[:end], self.buf[end + 4:]
            status = self.head.split(b"\r\n", 1)[0].split(b" ")
            if len(status) < 2 or status[1] != b"200":
                raise RuntimeError(f"HTTP {self.head[:200]!r}: {self.buf[:300]!r}")
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            n = sse_tokens(line)
            if n is None:
                self.done = True
                return
            if n:
                self.times.extend([time.perf_counter()] * n)


def streams_loop(port, model, streams, requests, max_tokens):
    """`streams` clients, each sending `requests` streaming completions in a row, all read by
    this one thread through a selector: one wake-up per step's chunks instead of one thread
    per client woken for each chunk (the clients share the server's cores). A list per client
    of one_request's tuples."""
    sel = selectors.DefaultSelector()
    clients = [_Stream(c, requests) for c in range(streams)]
    try:
        return _streams_run(port, model, requests, max_tokens, sel, clients)
    finally:
        for cl in clients:
            if cl.sock is not None and cl.sock.fileno() >= 0:
                cl.sock.close()
        sel.close()


def _streams_run(port, model, requests, max_tokens, sel, clients):
    for cl in clients:
        cl.start(port, model, max_tokens, sel, 0)
    active = len(clients)
    while active:
        events = sel.select(timeout=600)
        if not events:
            raise RuntimeError("no chunk from any stream in 600 s")
        for key, _ in events:
            cl = key.data
            try:
                data = cl.sock.recv(65536)
            except BlockingIOError:
                continue
            if data:
                cl.feed(data)
            if cl.done or not data:
                sel.unregister(cl.sock)
                cl.sock.close()
                if not cl.done:
                    raise RuntimeError(f"client {cl.c}: the connection closed before data: [DONE]")
                if not cl.times:
                    raise RuntimeError(f"client {cl.c}: no tokens")
                t = cl.times
                cl.results.append((t[0] - cl.t0, [b - a for a, b in zip(t, t[1:])], len(t), (t[0], t[-1])))
                cl.left -= 1
                if cl.left > 0:
                    cl.start(port, model, max_tokens, sel, requests - cl.left)
                else:
                    active -= 1
    return [cl.results for cl in clients]


def prompt_work(srv):
    """(prompt tokens, of them from the prefix cache) so far, from the server's metrics; None
    without a metrics port."""
    if srv is None or srv.metrics_port is None:
        return None
    c = http.client.HTTPConnection("127.0.0.1", srv.metrics_port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    total = {"tandem_llm_prompt_tokens_total": 0, "tandem_llm_prefix_cache_hit_tokens_total": 0}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in total:
            total[name] += float(line.rsplit(" ", 1)[1])
    return total["tandem_llm_prompt_tokens_total"], total["tandem_llm_prefix_cache_hit_tokens_total"]


def span_union(spans):
    """Length of the union of (start, end) spans."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def post_completion(port, body):
    """A completion that is not streamed: (the answer's JSON, seconds from sending to the answer)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = c.getresponse()
    doc = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {doc}")
    return doc, time.perf_counter() - t0


def prompt_tokens(port, model):
    """The prompt's token count as the server's usage reports it."""
    doc, _ = post_completion(port, {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0})
    return int(doc["usage"]["prompt_tokens"])


def write_report(text, out):
    """Prints the report and writes it to `out` (a path; None: nowhere else)."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def engine_batched(tandem, folder, streams, prompt, max_tokens, threads, kv_type="auto"):
    """tandem bench --llm --streams at the server's load: its batched way's JSON figures."""
    cmd = [tandem, "bench", folder, "--llm", "--streams", str(streams), "--prompt-tokens", str(prompt),
           "--gen-tokens", str(max_tokens), "--threads", str(threads), "--repetitions", "2", "--json",
           "--kv-type", kv_type]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {r.returncode}: {r.stderr[-300:]}")
    doc = json.loads(r.stdout[r.stdout.index("{"):])
    way = next(w for w in doc["ways"] if w["name"] == "batched")
    return {"cmd": " ".join(cmd), "tok_s": way["tokens_per_s"], "tok_cpu_s": way["tokens_per_cpu_s"]}


def level(port, model, streams, requests, max_tokens, pid=None, srv=None):
    ttft, gaps, toks, errors, spans, after_first = [], [], [0], [], [], [0]
    lock = threading.Lock()

    def add(t, g, n, sp):
        """One request's figures (one_request's tuple) into the level's."""
        with lock:
            ttft.append(t)
            gaps.extend(g)
            toks[0] += n
            after_first[0] += n - 1
            spans.append(sp)

    def client(c):
        for k in range(requests):
            try:
                add(*one_request(port, model, max_tokens, seed=1000 * c + k))
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))
                return

    w0 = prompt_work(srv)
    c0 = cpu_seconds(pid) if pid else None
    k0 = time.process_time()
    t0 = time.perf_counter()
    if CLIENT["loop"]:
        try:
            for res in streams_loop(port, model, streams, requests, max_tokens):
                for r in res:
                    add(*r)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    else:
        threads = [threading.Thread(target=client, args=(c,)) for c in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    wall = time.perf_counter() - t0
    k1 = time.process_time()
    c1 = cpu_seconds(pid) if pid else None
    w1 = prompt_work(srv)
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed: {errors[0]}")
    dec = span_union(spans)
    return {"streams": streams, "tok_s": toks[0] / wall,
            "decode_tok_s": after_first[0] / dec if dec > 0 else float("nan"), "ttft_p50": pct(ttft, 0.5) * 1e3,
            "ttft_p99": pct(ttft, 0.99) * 1e3, "itl_p50": pct(gaps, 0.5) * 1e3,
            "itl_p99": pct(gaps, 0.99) * 1e3, "tokens": toks[0], "wall": wall,
            "tok_cpu_s": toks[0] / (c1 - c0) if c0 is not None and c1 is not None and c1 > c0 else float("nan"),
            "server_cores": (c1 - c0) / wall if c0 is not None and c1 is not None else float("nan"),
            "client_cores": (k1 - k0) / wall,
            # prompt tokens the level computed (not from the prefix cache) per token decoded after
            # a request's first: prefill that runs inside other streams' decode spans when S > 1
            "prefill_per_decode": ((w1[0] - w0[0]) - (w1[1] - w0[1])) / after_first[0]
            if w0 is not None and w1 is not None and after_first[0] else float("nan")}


def make_repo(tmp, name, folder, threads, batching, max_batch, kv_mb, kv_dtype="auto"):
    repo = os.path.join(tmp, f"repo-{name}-{'on' if batching else 'off'}")
    os.makedirs(os.path.join(repo, name, "1"))
    # the files are linked, not the folder: a folder link that leads out of the repository is
    # refused by the server
    for f in os.listdir(folder):
        os.symlink(os.path.join(os.path.abspath(folder), f), os.path.join(repo, name, "1", f))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write('backend: "tandem_llm"\n')
        for k, v in (("threads", threads), ("max_batch", max_batch), ("kv_memory_mb", kv_mb),
                     ("no_batching", "false" if batching else "true"), ("kv_cache_dtype", kv_dtype)):
            f.write(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n')
    return repo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--models", default="tiny,smol")
    ap.add_argument("--smol", default="/work/smol")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--requests", type=int, default=2, help="requests per stream and level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-memory-mb", type=int, default=512, help="the KV pool (engine option kv_bytes)")
    ap.add_argument("--kv-cache-dtype", default="auto",
                    help="the pool's element type (config kv_cache_dtype; the engine bench's --kv-type): "
                         "auto, f32, f16, int8, int4")
    ap.add_argument("--no-engine", action="store_true",
                    help="skip the engine bench at the server's load (batching on)")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0: greedy; above: sampled (a seed per request)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the levels this many times in turn; medians, and paired ratios to one stream")
    ap.add_argument("--unique-prompts", action="store_true",
                    help="a number unique to each request before the prompt: no prompt shares its first "
                         "token with another's, so the prefix cache holds nothing (every prompt token "
                         "computed, as for many users' different prompts)")
    ap.add_argument("--client", choices=("loop", "threads"), default="loop",
                    help="loop (default): one thread reads every stream through a selector; threads: a "
                         "blocking client thread per stream (each woken for each token's chunk: more of "
                         "the shared cores' time at many streams)")
    ap.add_argument("--out")
    args = ap.parse_args()
    CLIENT["loop"] = args.client == "loop"
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    UNIQUE["on"] = args.unique_prompts
    SAMPLING["temperature"] = args.temperature
    if args.temperature > 0:
        SAMPLING.update(top_p=args.top_p, top_k=args.top_k)
    sampling = (f"sampled at temperature {args.temperature}, top_p {args.top_p}, top_k {args.top_k}"
                if args.temperature > 0 else "greedy")
    levels = [int(x) for x in args.streams.split(",")]
    tmp = tempfile.mkdtemp(prefix="tandem-llm-serve-bench-")
    rows = []
    engines = []  # the engine bench at the server's load, per model
    try:
        folders = {}
        for name in args.models.split(","):
            if name == "tiny":
                folders[name] = os.path.join(tmp, "tiny")
                subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_tiny_llama.py"),
                                folders[name]], check=True, stdout=subprocess.DEVNULL)
            elif name == "smol":
                folders[name] = args.smol
            else:
                folders[name] = name
                name = os.path.basename(os.path.normpath(name))
        for name, folder in folders.items():
            for batching in (True, False):
                repo = make_repo(tmp, os.path.basename(os.path.normpath(name)), folder, args.threads, batching,
                                 max(levels), args.kv_memory_mb, args.kv_cache_dtype)
                srv = Server(args.tandem, repo)
                p = None
                try:
                    model = os.path.basename(os.path.normpath(name))
                    one_request(srv.port, model, 4)  # warm-up
                    runs = {s: [] for s in levels}
                    for rnd in range(args.rounds):
                        for s in levels:
                            r = level(srv.port, model, s, args.requests, args.max_tokens, srv.proc.pid, srv)
                            runs[s].append(r)
                            print(f"{model:5} batching {'on' if batching else 'off':3} round {rnd + 1} streams {s:2}: "
                                  f"{r['tok_s']:8.1f} tok/s  decode {r['decode_tok_s']:8.1f} tok/s  "
                                  f"TTFT p50 {r['ttft_p50']:8.1f} p99 {r['ttft_p99']:8.1f} ms  "
                                  f"ITL p50 {r['itl_p50']:7.2f} p99 {r['itl_p99']:7.2f} ms  "
                                  f"server {r['tok_cpu_s']:.1f} tok/cpu-s, {r['server_cores']:.2f} cores busy, "
                                  f"clients {r['client_cores']:.2f} cores, "
                                  f"prefill {r['prefill_per_decode']:.3f} a decoded token", flush=True)
                    for s in levels:
                        r = {k: statistics.median(x[k] for x in runs[s]) for k in runs[s][0]}
                        r.update(model=model, batching="on" if batching else "off", streams=s,
                                 paired=[x["decode_tok_s"] / b["decode_tok_s"]
                                         for x, b in zip(runs[s], runs[levels[0]])])
                        rows.append(r)
                    p = prompt_tokens(srv.port, model) if batching and not args.no_engine else None
                finally:
                    srv.stop()
                if p is not None:  # the engine alone, with the server gone
                    s = 8 if 8 in levels else max(levels)
                    e = engine_batched(args.tandem, folder, s, p, args.max_tokens, args.threads,
                                       args.kv_cache_dtype)
                    engines.append(dict(e, model=model, streams=s, prompt_tokens=p))
                    print(f"{model:5} engine bench, {s} streams, prompt {p}: {e['tok_s']:8.1f} tok/s  "
                          f"{e['tok_cpu_s']:.1f} tok/cpu-s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [f"# tandem serve, OpenAI API, streaming clients ({datetime.date.today()})", "",
             f"Command: `bench/llm/serve/bench_openai.py --tandem {args.tandem} --models {args.models} "
             + (f"--smol {args.smol} " if "smol" in args.models.split(",") else "")
             + f"--streams {args.streams} --requests {args.requests} --max-tokens {args.max_tokens} "
             f"--threads {args.threads} --kv-memory-mb {args.kv_memory_mb} --kv-cache-dtype {args.kv_cache_dtype} "
             f"--temperature {args.temperature} --top-p {args.top_p} --top-k {args.top_k} --rounds {args.rounds}"
             + (" --unique-prompts" if args.unique_prompts else "") + "`; "
             f"prompt of {len(PROMPT)} characters"
             + (" after a number unique to the request" if args.unique_prompts else " (the same for every request)")
             + f", {sampling}, ignore_eos. "
             "Shared 2-core machine: noisy.", "",
             (f"Each figure: the median of {args.rounds} rounds of the levels in turn on one server; "
              "decode x 1 stream paired: each round's ratio to its own one-stream level, median (min-max)."
              if args.rounds > 1 else "One round of the levels."), "",
             "| model | batching | streams | tok/s (end to end) | x 1 stream | on / off | decode tok/s | "
             "x 1 stream | x 1 stream paired | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | server tok/cpu-s | "
             "server / client cores | prefill / decode tokens |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        base = next(x for x in rows if x["model"] == r["model"] and x["batching"] == r["batching"])
        off = [x for x in rows if x["model"] == r["model"] and x["batching"] == "off"
               and x["streams"] == r["streams"]]
        ratio = f"{r['tok_s'] / off[0]['tok_s']:.2f}" if r["batching"] == "on" and off else ""
        pr = sorted(r["paired"])
        paired = (f"{statistics.median(pr):.2f} ({pr[0]:.2f}-{pr[-1]:.2f})" if len(pr) > 1 else f"{pr[0]:.2f}")
        lines.append(f"| {r['model']} | {r['batching']} | {r['streams']} | {r['tok_s']:.1f} | "
                     f"{r['tok_s'] / base['tok_s']:.2f} | {ratio} | {r['decode_tok_s']:.1f} | "
                     f"{r['decode_tok_s'] / base['decode_tok_s']:.2f} | {paired} | {r['ttft_p50']:.1f} | "
                     f"{r['ttft_p99']:.1f} | {r['itl_p50']:.2f} | {r['itl_p99']:.2f} | {r['tok_cpu_s']:.1f} | "
                     f"{r['server_cores']:.2f} / {r['client_cores']:.2f} | {r['prefill_per_decode']:.3f} |")
    if engines:
        lines += ["", "The same load without the server (`tandem bench --llm --streams S`, the batched way, at the "
                  "server's prompt length), against the server's level S with batching on:", "",
                  "| model | streams | prompt tokens | engine tok/s | engine tok/cpu-s | server tok/cpu-s | server / engine (CPU a token) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for e in engines:
            srv_row = next((x for x in rows if x["model"] == e["model"] and x["batching"] == "on"
                            and x["streams"] == e["streams"]), None)
            sc = srv_row["tok_cpu_s"] if srv_row else float("nan")
            lines.append(f"| {e['model']} | {e['streams']} | {e['prompt_tokens']} | {e['tok_s']:.1f} | "
                         f"{e['tok_cpu_s']:.1f} | {sc:.1f} | {sc / e['tok_cpu_s']:.2f} |")
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
