#!/usr/bin/env python3
"""Greedy generations with two KV cache types side by side: for each prompt of the ONNX Runtime
GenAI comparison test (tests/llm/test_generate_vs_genai.py's PROMPTS), `tandem generate DIR
--prompt P --no-chat --json --temperature 0 --max-tokens N --kv-type T` with T = auto (the
model's cache) and T = --kv-type (default int8). Prints per prompt whether the ids are identical,
else the first position where they differ; then the totals.

With --other DIR the second run is DIR (another folder of the same model, e.g. converted with
--kv-dtype float16) with its own cache instead.

Usage: kv_type_greedy.py --tandem build/tandem --model /work/smol_off [--kv-type int8 | --other DIR]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--kv-type", default="int8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--other", help="a second folder of the same model, run with its own cache")
    a = ap.parse_args()
    same = 0
    total_match = 0
    total = 0
    for p in PROMPTS:
        ref = generate(a.tandem, a.model, p, "auto", a.tokens, a.threads)
        got = generate(a.tandem, a.other or a.model, p, "auto" if a.other else a.kv_type, a.tokens,
                       a.threads)
        n = 0
        while n < min(len(ref), len(got)) and ref[n] == got[n]:
            n += 1
        ok = ref == got
        same += ok
        total_match += n
        total += len(ref)
        print(f"{'same' if ok else f'differs at {n}':>14}  ({len(ref)} / {len(got)} tokens)  {p[:50]!r}")
    print(f"{same}/{len(PROMPTS)} prompts identical; {total_match}/{total} tokens before the first "
          f"difference ({a.other or a.kv_type} against the model's cache, "
          f"{os.path.basename(a.model.rstrip('/'))})")


if __name__ == "__main__":
    main()
