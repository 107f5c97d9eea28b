#!/usr/bin/env python3
"""A conversation's second turn through `tandem serve`, with the prefix cache and without it.

    .venv/bin/python bench/llm/serve/bench_turns.py --tandem build/tandem [--smol /work/smol]
        [--conversations 5] [--answer-tokens 300] [--threads 2] [--kv-cache-dtype auto] [--out FILE]

For each mode (the engine's prefix cache on, as served by default, and off: the config parameter
`no_prefix_cache: true`), one server on loopback (SmolLM2 from --smol, linked into a temporary
repository as bench_openai.py does) answers --conversations two-turn conversations, one after the
other: turn 1 is a prompt that starts unlike the others (its index first) answered greedily with
--answer-tokens tokens (ignore_eos); turn 2 is turn 1's prompt, its answer and a new user line, as
a chat client sends the history again, answered with one token. Reported per mode: turn 2's
prompt tokens, the tokens its usage says came from the prefix cache
(`prompt_tokens_details.cached_tokens`), and the time from sending turn 2 to its answer (median,
min-max): the time to first token of a follow-up question. The two servers run in turn on the
same machine; the ratio is the prefix cache's gain on a conversation.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_openai import Server, make_repo, post_completion as post, write_report  # noqa: E402


def run(server, n, answer_tokens, tag):
    rows = []
    for i in range(n):
        p1 = f"{tag} conversation {i}. User: Tell me a long story about a lighthouse keeper.\nAssistant:"
        d1, _ = post(server.port, {"model": "smol", "prompt": p1, "max_tokens": answer_tokens,
                                   "temperature": 0, "ignore_eos": True})
        p2 = p1 + d1["choices"][0]["text"] + "\nUser: And then what happened?\nAssistant:"
        d2, t2 = post(server.port, {"model": "smol", "prompt": p2, "max_tokens": 1, "temperature": 0})
        u = d2["usage"]
        rows.append((u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], t2 * 1e3))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--smol", default="/work/smol")
    ap.add_argument("--conversations", type=int, default=5)
    ap.add_argument("--answer-tokens", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-cache-dtype", default="auto")
    ap.add_argument("--out")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tandem-turns-bench-")
    results = {}
    try:
        for mode in ("on", "off"):
            repo = make_repo(tmp, "smol", args.smol, args.threads, True, 8, 512, args.kv_cache_dtype)
            if mode == "off":
                with open(os.path.join(repo, "smol", "config.pbtxt"), "a") as f:
                    f.write('parameters { key: "no_prefix_cache" value { string_value: "true" } }\n')
            srv = Server(args.tandem, repo)
            try:
                post(srv.port, {"model": "smol", "prompt": "Hello", "max_tokens": 2})  # warm-up
                results[mode] = run(srv, args.conversations, args.answer_tokens, f"{mode}-{time.time_ns()}")
            finally:
                srv.stop()
            shutil.rmtree(repo, ignore_errors=True)
            for p, c, t in results[mode]:
                print(f"prefix cache {mode:3}: turn 2 prompt {p} tokens, {c} cached, answer in {t:.1f} ms", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [f"Command: `bench/llm/serve/bench_turns.py --tandem {args.tandem} --smol {args.smol} "
             f"--conversations {args.conversations} --answer-tokens {args.answer_tokens} --threads {args.threads} "
             f"--kv-cache-dtype {args.kv_cache_dtype}`", "",
             "| prefix cache | turn 2 prompt tokens | cached tokens | turn 2 answer ms, median (min-max) |",
             "|---|---:|---:|---:|"]
    for mode, rows in results.items():
        ts = sorted(r[2] for r in rows)
        lines.append(f"| {mode} | {statistics.median(r[0] for r in rows):.0f} | "
                     f"{statistics.median(r[1] for r in rows):.0f} | {statistics.median(ts):.1f} ({ts[0]:.1f}-{ts[-1]:.1f}) |")
    on, off = (statistics.median(r[2] for r in results[m]) for m in ("on", "off"))
    lines += ["", f"off / on: {off / on:.1f}x"]
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
