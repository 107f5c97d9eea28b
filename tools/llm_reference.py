#!/usr/bin/env python3
"""Reference greedy generations for an LLM model folder.

    tools/llm_reference.py genai MODEL_DIR [--prompts FILE] [--max-new-tokens 64] [--raw] [--ignore-eos]
                                 [--out FILE.json]
        Greedy token ids from onnxruntime-genai (the reference tandem's generator is compared with).
        Prompts: FILE (one per line; JSON lines {"prompt": ...} also accepted) or the 12 built-in ones.
        Each prompt goes through the model's chat template (tokenizer_config.json, rendered by
        onnxruntime-genai's apply_chat_template) unless --raw. The JSON written:
          {"model_dir": ..., "engine": "onnxruntime-genai 0.18.0", "max_new_tokens": 64, "chat": true,
           "ignore_eos": false, "results": [{"prompt": "...", "input_text": "...", "input_ids": [...], "output_ids": [...],
                        "text": "..."}]}
        output_ids stop early only at an EOS token (the EOS id is then the last id), or never with
        --ignore-eos (EOS suppressed as min_length does: its logit is set to -inf); input_ids are what
        onnxruntime-genai's tokenizer produced, so a comparison can feed the same ids and test the
        generator apart from the tokenizer.

    tools/llm_reference.py numpy GGUF_FILE MODEL_DIR [--prompts FILE] [--max-new-tokens 16] [--raw]
        A pure-numpy float64 forward pass of the GGUF weights (dequantised with gguf.quants, adjacent-pair
        RoPE as llama.cpp applies it to GGUF llama weights), greedy, compared with onnxruntime-genai on the
        converted folder token by token: validates tools/gguf_to_onnx.py independently of ONNX Runtime.
        Where they part, the numpy top-2 logit gap is printed (a near tie can legitimately flip).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a CPU cache is in two sentences.",
    "List three fruits that are red.",
    "What is 12 times 7?",
    "Translate 'good morning' into Spanish.",
    "Write a Python function that returns the square of a number.",
    "Who wrote Romeo and Juliet?",
    "Give me a short tip for staying focused while studying.",
    "What is the boiling point of water in Celsius?",
    "Describe a cat in one sentence.",
    "Why is the sky blue?",
]


def load_prompts(path):
    if not path:
        return list(PROMPTS)
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                out.append(json.loads(line)["prompt"])
            else:
                out.append(line)
    return out


def genai_prompt_ids(og, tok, prompt, raw):
    text = prompt if raw else tok.apply_chat_template(
        json.dumps([{"role": "user", "content": prompt}]), add_generation_prompt=True)
    return text, [int(t) for t in tok.encode(text)]


def genai_greedy(og, model, ids, max_new, ignore_eos=False):
    params = og.GeneratorParams(model)
    if ignore_eos:
        params.set_search_options(max_length=len(ids) + max_new, min_length=len(ids) + max_new, do_sample=False)
    else:
        params.set_search_options(max_length=len(ids) + max_new, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(ids, dtype=np.int32))
    out = []
    while not gen.is_done() and len(out) < max_new:
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return out


def cmd_genai(a):
    import onnxruntime_genai as og
    model = og.Model(a.model_dir)
    tok = og.Tokenizer(model)
    results = []
    t0 = time.time()
    for p in load_prompts(a.prompts):
        text, ids = genai_prompt_ids(og, tok, p, a.raw)
        out = genai_greedy(og, model, ids, a.max_new_tokens, a.ignore_eos)
        results.append({"prompt": p, "input_text": text, "input_ids": ids, "output_ids": out,
                        "text": tok.decode(np.array(out, dtype=np.int32))})
        print(f"[{len(ids)} + {len(out)}] {p!r} -> {results[-1]['text']!r}", file=sys.stderr)
    doc = {"model_dir": os.path.abspath(a.model_dir), "engine": f"onnxruntime-genai {og.__version__}"
           if hasattr(og, "__version__") else "onnxruntime-genai", "max_new_tokens": a.max_new_tokens,
           "chat": not a.raw, "ignore_eos": a.ignore_eos, "seconds": round(time.time() - t0, 2), "results": results}
    s = json.dumps(doc, ensure_ascii=False, indent=1)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(s + "\n")
    else:
        print(s)


class NumpyLlama:
    """float64 forward pass of a Llama from float weights (GGUF names, GGUF row order)."""

    def __init__(self, hp, tensors):
        """hp: dict n_layers, n_heads, n_kv_heads, eps, rope_base; tensors: GGUF name -> float array."""
        self.L = hp["n_layers"]
        self.nh = hp["n_heads"]
        self.kvh = hp["n_kv_heads"]
        self.eps = hp["eps"]
        self.base = hp["rope_base"]
        self.emb = np.asarray(tensors["token_embd.weight"], np.float64)
        self.H = self.emb.shape[1]
        self.hd = self.H // self.nh
        self.out = np.asarray(tensors.get("output.weight", self.emb), np.float64)
        self.norm = np.asarray(tensors["output_norm.weight"], np.float64).reshape(-1)
        self.layers = []
        for i in range(self.L):
            p = f"blk.{i}."
            self.layers.append({n: np.asarray(tensors[p + n + ".weight"], np.float64) for n in
                                ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                 "ffn_gate", "ffn_up", "ffn_down")})
        half = self.hd // 2
        self.inv = 1.0 / (self.base ** (np.arange(half) * 2.0 / self.hd))
        self.reset()

    @classmethod
    def from_gguf(cls, path):
        import gguf
        r = gguf.GGUFReader(path)
        f = lambda k, d=None: r.fields[k].contents() if k in r.fields else d  # noqa: E731
        heads = int(f("llama.attention.head_count"))
        hp = {"n_layers": int(f("llama.block_count")), "n_heads": heads,
              "n_kv_heads": int(f("llama.attention.head_count_kv", heads)),
              "eps": float(f("llama.attention.layer_norm_rms_epsilon", 1e-5)),
              "rope_base": float(f("llama.rope.freq_base", 10000.0))}
        tensors = {}
        for x in r.tensors:
            w = gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float64)
            tensors[x.name] = w.reshape(-1) if len(x.shape) == 1 else w.reshape(int(x.shape[1]), int(x.shape[0]))
        return cls(hp, tensors)

    def reset(self):
        self.k = [np.zeros((self.kvh, 0, self.hd)) for _ in range(self.L)]
        self.v = [np.zeros((self.kvh, 0, self.hd)) for _ in range(self.L)]
        self.pos = 0

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w.reshape(-1)

    def rope(self, x, pos):  # x [h, S, hd], adjacent pairs (2i, 2i+1) rotate by pos * inv[i]
        ang = pos[:, None] * self.inv[None, :]
        c, s = np.cos(ang), np.sin(ang)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def forward(self, ids):
        S = len(ids)
        x = self.emb[np.array(ids)]
        pos = np.arange(self.pos, self.pos + S, dtype=np.float64)
        rep = self.nh // self.kvh
        for i, w in enumerate(self.layers):
            h = self.rms(x, w["attn_norm"])
            q = (h @ w["attn_q"].T).reshape(S, self.nh, self.hd).transpose(1, 0, 2)
            k = (h @ w["attn_k"].T).reshape(S, self.kvh, self.hd).transpose(1, 0, 2)
            v = (h @ w["attn_v"].T).reshape(S, self.kvh, self.hd).transpose(1, 0, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            self.k[i] = np.concatenate([self.k[i], k], axis=1)
            self.v[i] = np.concatenate([self.v[i], v], axis=1)
            K = np.repeat(self.k[i], rep, axis=0)
            V = np.repeat(self.v[i], rep, axis=0)
            T = K.shape[1]
            sc = q @ K.transpose(0, 2, 1) / np.sqrt(self.hd)
            mask = np.arange(T)[None, :] > (self.pos + np.arange(S))[:, None]
            sc = np.where(mask[None], -np.inf, sc)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            att = (sc @ V).transpose(1, 0, 2).reshape(S, self.H)
            x = x + att @ w["attn_output"].T
            h = self.rms(x, w["ffn_norm"])
            g = h @ w["ffn_gate"].T
            u = h @ w["ffn_up"].T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ w["ffn_down"].T
        self.pos += S
        return self.rms(x[-1:], self.norm) @ self.out.T


def cmd_numpy(a):
    import onnxruntime_genai as og
    ref = NumpyLlama.from_gguf(a.gguf_file)
    model = og.Model(a.model_dir)
    tok = og.Tokenizer(model)
    with open(os.path.join(a.model_dir, "genai_config.json")) as f:
        eos = json.load(f)["model"]["eos_token_id"]
    eos = set(eos if isinstance(eos, list) else [eos])
    total = agree = 0
    full = 0
    prompts = load_prompts(a.prompts)
    for p in prompts:
        text, ids = genai_prompt_ids(og, tok, p, a.raw)
        ort_ids = genai_greedy(og, model, ids, a.max_new_tokens)
        ref.reset()
        logits = ref.forward(ids)[0]
        np_ids = []
        first_diff = None
        for step in range(len(ort_ids)):
            top = np.argsort(logits)[::-1][:2]
            nxt = int(top[0])
            np_ids.append(nxt)
            if nxt != ort_ids[step] and first_diff is None:
                first_diff = (step, float(logits[top[0]] - logits[top[1]]),
                              float(logits[top[0]] - logits[ort_ids[step]]))
                break
            if nxt in eos:
                break
            logits = ref.forward([nxt])[0]
        n_same = first_diff[0] if first_diff else len(np_ids)
        total += len(ort_ids)
        agree += n_same
        full += first_diff is None
        msg = "identical" if first_diff is None else (
            f"part at token {first_diff[0]} (numpy top-2 gap {first_diff[1]:.4g}, "
            f"numpy logit of ORT's pick is {first_diff[2]:.4g} below)")
        print(f"{p!r}: {len(ort_ids)} ORT tokens, numpy {msg}; ORT text {tok.decode(np.array(ort_ids, np.int32))!r}")
    print(f"numpy reference vs onnxruntime-genai: {full}/{len(prompts)} prompts identical, "
          f"{agree}/{total} tokens before the first difference")
    if full < len(prompts) and not a.allow_diff:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("genai")
    g.add_argument("model_dir")
    g.add_argument("--prompts")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--raw", action="store_true", help="no chat template")
    g.add_argument("--ignore-eos", action="store_true",
                   help="suppress EOS (search min_length) so that every prompt yields --max-new-tokens ids")
    g.add_argument("--out")
    n = sub.add_parser("numpy")
    n.add_argument("gguf_file")
    n.add_argument("model_dir")
    n.add_argument("--prompts")
    n.add_argument("--max-new-tokens", type=int, default=16)
    n.add_argument("--raw", action="store_true")
    n.add_argument("--allow-diff", action="store_true", help="exit 0 even when a prompt parts")
    a = ap.parse_args()
    {"genai": cmd_genai, "numpy": cmd_numpy}[a.cmd](a)


if __name__ == "__main__":
    main()
