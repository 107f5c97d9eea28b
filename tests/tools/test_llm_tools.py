#!/usr/bin/env python3
"""Tests of the LLM model tools (ctest llm_tools): tools/make_tiny_llama.py, tools/gguf_to_onnx.py,
tools/llm_reference.py, with ONNX Runtime, onnxruntime-genai and HF tokenizers as the references.

  1. make_tiny_llama.py --check, GenAI form, optimum form, and a GenAI form with odd sizes and the
     DequantizeLinear embedding: ONNX Runtime's logits against a float64 numpy forward pass of the raw
     GGUF blocks (dequantised by the gguf package), past lengths 0 to 9.
  2. The same tiny weights written as a GGUF (--gguf) and converted by gguf_to_onnx.py: model.onnx,
     tokenizer.json, genai_config.json and tokenizer_config.json identical to make_tiny_llama's.
     --kv-dtype float16 (both tools): ONNX Runtime's logits against the numpy pass and the float32 cache's.
  3. llm_reference.py numpy: onnxruntime-genai's greedy ids on the converted folder equal the numpy
     reference's (12 prompts x 8 tokens); and, as a negative control, a GGUF with other weights (seed 1)
     must be reported as different (exit 1).
  4. llm_reference.py genai writes the JSON the generator comparison reads.
  5. The converter refuses what it cannot convert (a non-llama architecture) with a message.

Usage: test_llm_tools.py --repo REPO  (run with the repository's .venv python)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, expect=0):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != expect:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {r.returncode}, expected {expect}")
    return r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    py = sys.executable
    tools = os.path.join(a.repo, "tools")
    tiny = os.path.join(tools, "make_tiny_llama.py")
    conv = os.path.join(tools, "gguf_to_onnx.py")
    ref = os.path.join(tools, "llm_reference.py")
    with tempfile.TemporaryDirectory(prefix="llm_tools_") as tmp:
        g = os.path.join(tmp, "genai")
        out = run([py, tiny, g, "--check", "--gguf", os.path.join(tmp, "tiny.gguf")])
        assert "check: ONNX Runtime logits match" in out, out
        out = run([py, tiny, os.path.join(tmp, "optimum"), "--form", "optimum", "--check"])
        assert "check: ONNX Runtime logits match" in out, out
        out = run([py, tiny, os.path.join(tmp, "odd"), "--check", "--embed-op", "DequantizeLinear", "--seed", "5",
                   "--layers", "3", "--hidden", "96", "--heads", "6", "--kv-heads", "3", "--ffn", "160",
                   "--vocab", "300"])
        assert "check: ONNX Runtime logits match" in out, out
        print("1. make_tiny_llama --check: genai, optimum, odd sizes + DequantizeLinear: ok")

        c = os.path.join(tmp, "converted")
        out = run([py, conv, os.path.join(tmp, "tiny.gguf"), c, "--accuracy-level", "4"])
        assert "verified: Q8_0" in out and "tokenizer.json: loads" in out, out
        for name in ("model.onnx", "tokenizer.json", "genai_config.json", "tokenizer_config.json"):
            with open(os.path.join(g, name), "rb") as f1, open(os.path.join(c, name), "rb") as f2:
                if f1.read() != f2.read() and name != "tokenizer.json":
                    raise SystemExit(f"FAIL: converted {name} differs from make_tiny_llama's")
        with open(os.path.join(g, "tokenizer.json")) as f1, open(os.path.join(c, "tokenizer.json")) as f2:
            if json.load(f1) != json.load(f2):
                raise SystemExit("FAIL: converted tokenizer.json differs from make_tiny_llama's")
        off = os.path.join(tmp, "offset")
        run([py, conv, os.path.join(tmp, "tiny.gguf"), off, "--q4-1-form", "offset", "--accuracy-level", "0"])
        import numpy as np
        import onnxruntime as ort
        feeds = {"input_ids": np.array([[5, 9, 33, 100, 7, 250]], np.int64),
                 "attention_mask": np.ones((1, 6), np.int64)}
        for i in range(2):
            for kv in ("key", "value"):
                feeds[f"past_key_values.{i}.{kv}"] = np.zeros((1, 2, 0, 16), np.float32)
        x = ort.InferenceSession(os.path.join(off, "model.onnx")).run(["logits"], feeds)[0]
        y = ort.InferenceSession(os.path.join(c, "model.onnx")).run(["logits"], feeds)[0]
        if np.abs(x - y).max() > 1e-5 * np.abs(y).max():
            raise SystemExit(f"FAIL: --q4-1-form offset logits differ by {np.abs(x - y).max()}")
        print("2. GGUF -> gguf_to_onnx.py: identical folder; --q4-1-form offset: same logits: ok")

        # --kv-dtype float16: make_tiny_llama --check (numpy reference within 1e-2 of the largest logit),
        # gguf_to_onnx writes the same model, and ONNX Runtime's logits stay within 1e-2 of the float32 cache's
        h = os.path.join(tmp, "genai_f16")
        out = run([py, tiny, h, "--check", "--kv-dtype", "float16"])
        assert "check: ONNX Runtime logits match" in out, out
        hc = os.path.join(tmp, "converted_f16")
        run([py, conv, os.path.join(tmp, "tiny.gguf"), hc, "--accuracy-level", "4", "--kv-dtype", "float16"])
        with open(os.path.join(h, "model.onnx"), "rb") as f1, open(os.path.join(hc, "model.onnx"), "rb") as f2:
            if f1.read() != f2.read():
                raise SystemExit("FAIL: converted --kv-dtype float16 model.onnx differs from make_tiny_llama's")
        sess16 = ort.InferenceSession(os.path.join(hc, "model.onnx"))
        kinds = {i.name: i.type for i in sess16.get_inputs()}
        if kinds["past_key_values.0.key"] != "tensor(float16)":
            raise SystemExit(f"FAIL: --kv-dtype float16 past type {kinds['past_key_values.0.key']}")
        f16 = {k: (v.astype(np.float16) if k.startswith("past_") else v) for k, v in feeds.items()}
        z = sess16.run(["logits"], f16)[0]
        if np.abs(z - y).max() > 1e-2 * np.abs(y).max():
            raise SystemExit(f"FAIL: --kv-dtype float16 logits differ by {np.abs(z - y).max()}")
        print(f"2b. --kv-dtype float16: check ok, converter identical, logits within "
              f"{np.abs(z - y).max() / np.abs(y).max():.2g} of the float32 cache's: ok")

        prompts = os.path.join(tmp, "prompts.txt")
        with open(prompts, "w") as f:
            f.write("\n".join(["Hello world", "What is the capital of France?", "the quick brown fox",
                               "12345", "def main(): return 0", "Once upon a time", "a", "Hello, world! Hello there.",
                               "It read its weights once per token", "I am a helpful assistant.",
                               "numbers 2026 and punctuation!", "was was was"]) + "\n")
        out = run([py, ref, "numpy", os.path.join(tmp, "tiny.gguf"), c, "--raw", "--prompts", prompts,
                   "--max-new-tokens", "8"])
        assert "12/12 prompts identical" in out, out
        run([py, tiny, os.path.join(tmp, "other"), "--seed", "1", "--gguf", os.path.join(tmp, "other.gguf")])
        out = run([py, ref, "numpy", os.path.join(tmp, "other.gguf"), c, "--raw", "--prompts", prompts,
                   "--max-new-tokens", "8"], expect=1)
        print("3. llm_reference numpy vs onnxruntime-genai: 12/12 identical; other weights detected: ok")

        j = os.path.join(tmp, "ref.json")
        run([py, ref, "genai", c, "--prompts", prompts, "--max-new-tokens", "8", "--out", j])
        with open(j) as f:
            doc = json.load(f)
        assert len(doc["results"]) == 12 and doc["chat"] is True, doc
        for r in doc["results"]:
            assert r["input_ids"] and r["input_ids"][0] == 1, r  # <|im_start|> from the chat template
            assert 1 <= len(r["output_ids"]) <= 8, r
        print("4. llm_reference genai JSON: ok")

        bad = os.path.join(tmp, "bad.gguf")
        import gguf
        w = gguf.GGUFWriter(bad, "gpt2")
        w.add_block_count(1)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out = run([py, conv, bad, os.path.join(tmp, "bad")], expect=1)
        assert "only 'llama' is supported" in out, out
        print("5. converter refuses a non-llama GGUF: ok")

        import onnxruntime_genai as og
        from tokenizers import Tokenizer
        ot = og.Tokenizer(og.Model(c))
        ht = Tokenizer.from_file(os.path.join(c, "tokenizer.json"))
        texts = ["Hello, world!", "  leading spaces and   gaps", "3.14159 + 2026 = 12345678",
                 "na\u00efve caf\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001F600", "def f(x):\n\treturn x**2  # c\n",
                 "<|im_start|>user\nHi<|im_end|>\n", "don't won't I'm we've", "tab\tnewline\n\n\nend"]
        for t in texts:
            a_ids = list(ht.encode(t).ids)
            b_ids = [int(x) for x in ot.encode(t)]
            if a_ids != b_ids:
                raise SystemExit(f"FAIL: HF tokenizers {a_ids} and onnxruntime-genai {b_ids} differ on {t!r}")
            if ht.decode(a_ids, skip_special_tokens=False) != t:
                raise SystemExit(f"FAIL: tokenizer.json does not round-trip {t!r}")
        print(f"6. tokenizer.json: HF tokenizers and onnxruntime-genai agree on {len(texts)} strings, round trip: ok")
    print("PASS")


if __name__ == "__main__":
    main()
