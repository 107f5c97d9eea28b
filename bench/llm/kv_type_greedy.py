#!/usr/bin/env python3
"""Greedy generations with two KV cache types side by side: for each prompt of the ONNX Runtime
GenAI comparison test (tests/llm/test_generate_vs_genai.py's PROMPTS), `tandem generate DIR
--prompt P --no-chat --json --temperature 0 --max-tokens N --kv-type T` with T = auto (the
model's cache) and T = --kv-type (default int8). Prints per prompt whether the ids are identical,
else the first position where they differ (the tokens that match before it); then the totals.

With --other DIR the second run is DIR (another folder of the same model, e.g. converted with
--kv-dtype float16) with its own cache instead.

With --kv-type int8,int4 each type runs against the model's cache and the types against each
other (int4 against int8).

Usage: kv_type_greedy.py --tandem build/tandem --model /work/smol_off [--kv-type int8[,int4] | --other DIR]
                         [--tokens 64] [--threads 1]
Exit 0 always (a measurement, not a test)."""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "llm"))
from test_generate_vs_genai import PROMPTS  # noqa: E402


def generate(tandem, model, prompt, kv, tokens, threads):
    r = subprocess.run([tandem, "generate", model, "--prompt", prompt, "--no-chat", "--json",
                        "--temperature", "0", "--max-tokens", str(tokens), "--threads", str(threads),
                        "--kv-type", kv], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"tandem generate failed ({kv}): {r.stderr.strip()}")
    return json.loads(r.stdout)["tokens"]


def matched(a, b):
    """tokens equal before the first difference"""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--kv-type", default="int8",
                    help="a type, or several separated by commas (e.g. int8,int4): each is compared "
                         "with the model's cache, and each pair of them with each other")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--other", help="a second folder of the same model, run with its own cache")
    a = ap.parse_args()
    kinds = ["other"] if a.other else a.kv_type.split(",")
    names = ["auto"] + kinds
    pairs = [("auto", k) for k in kinds] + [(kinds[i], kinds[j]) for i in range(len(kinds))
                                            for j in range(i + 1, len(kinds))]
    same = {p: 0 for p in pairs}
    match = {p: 0 for p in pairs}
    total = 0
    for prompt in PROMPTS:
        ids = {"auto": generate(a.tandem, a.model, prompt, "auto", a.tokens, a.threads)}
        for k in kinds:
            ids[k] = generate(a.tandem, a.other or a.model, prompt, "auto" if a.other else k,
                              a.tokens, a.threads)
        total += len(ids["auto"])
        cols = []
        for x, y in pairs:
            n = matched(ids[x], ids[y])
            same[(x, y)] += ids[x] == ids[y]
            match[(x, y)] += n
            cols.append(f"{y} vs {x}: {'same' if ids[x] == ids[y] else f'differs at {n}'}")
        lens = " / ".join(str(len(ids[k])) for k in names)
        print(f"{'; '.join(cols)}  ({lens} tokens)  {prompt[:50]!r}")
    for x, y in pairs:
        print(f"{y} against {x}: {same[(x, y)]}/{len(PROMPTS)} prompts identical; "
              f"{match[(x, y)]}/{total} tokens before the first difference "
              f"({a.other or y} against {x}, {os.path.basename(a.model.rstrip('/'))}, "
              f"{a.tokens} tokens, {a.threads} thread(s))")


if __name__ == "__main__":
    main()
