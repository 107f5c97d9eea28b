#!/usr/bin/env python3
"""Write a tiny random-weight Llama model folder (for tests).

    tools/make_tiny_llama.py OUT_DIR [--form genai|optimum] [--seed S] [--layers 2] [--hidden 64]
                                     [--heads 4] [--kv-heads 2] [--ffn 128] [--vocab 384] [--max-length 256]

The weights are random GGUF blocks (Q4_1 for the layer matrices, Q8_0 for the tied embedding, F32
norms) that go through the same repacking and graph building as tools/gguf_to_onnx.py
(tools/llm_onnx_builder.py).

--form genai (default): ONNX Runtime GenAI folder: genai_config.json, model.onnx (GatherBlockQuantized,
  MatMulNBits 4/8 bits, GroupQueryAttention, (Skip)SimplifiedLayerNormalization), tokenizer.json,
  tokenizer_config.json.
--form optimum: Hugging Face optimum-style folder: model.onnx with standard ONNX ops only (opset 17;
  float weights = the dequantised values of the same blocks; inputs input_ids, attention_mask,
  position_ids, past_key_values.N.key/value; outputs logits, present.N.key/value), config.json,
  generation_config.json, tokenizer.json, tokenizer_config.json. With the same seed both forms compute
  the same function (up to float rounding).

The tokenizer is a byte-level BPE (GPT-2 byte alphabet, SmolLM pre-tokenizer) whose merges are learnt
here, deterministically, from a small built-in text; ids 0-2 are <|endoftext|>, <|im_start|>,
<|im_end|> (bos = <|im_start|>, eos = pad = <|im_end|>, as in SmolLM2-Instruct).
"""

import argparse
import collections
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_onnx_builder as lb  # noqa: E402

CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a tiny test model<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CORPUS = """The quick brown fox jumps over the lazy dog. What is the capital of France? The capital of
France is Paris. A language model predicts the next token from the previous ones; the tokens come from
a byte-level BPE tokenizer. def main(): return 0  # code, numbers 12345 and 2026, punctuation!
Once upon a time there was a little model that wanted to run on every computer, with or without a GPU.
It read its weights once per token and was happy when the memory was fast. Hello, world! Hello there.
the the the and and of of to to in in is is it it that that for for on on with with as as was was
I am a helpful assistant. You are a helpful assistant. user assistant system message content role
""" * 3

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def learn_bpe(vocab_size):
    """Deterministic byte-level BPE training on CORPUS: returns (tokens, merges)."""
    b2u = lb.byte_to_unicode()
    words = re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS)
    freq = collections.Counter("".join(b2u[b] for b in w.encode("utf-8")) for w in words)
    seqs = {w: list(w) for w in freq}
    tokens = list(SPECIALS) + [b2u[b] for b in range(256)]
    merges = []
    while len(tokens) < vocab_size:
        pairs = collections.Counter()
        for w, f in freq.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += f
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], [-ord(c) for c in kv[0][0] + "\0" + kv[0][1]]))[0]
        if pairs[best] < 2:
            break
        new = best[0] + best[1]
        merges.append(best[0] + " " + best[1])
        tokens.append(new)
        for w in seqs:
            s = seqs[w]
            out = []
            i = 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return tokens, merges


def random_q4_1(rng, n, k):
    nb = k // lb.QK
    blk = np.zeros((n, nb, 20), dtype=np.uint8)
    amp = 1.0 / np.sqrt(k)
    d = (rng.uniform(0.5, 1.5, (n, nb)) * amp / 7.5).astype(np.float16)
    m = (-8.0 * d.astype(np.float32) + rng.uniform(-0.2, 0.2, (n, nb)).astype(np.float32) * amp).astype(np.float16)
    blk[:, :, 0:2] = d.reshape(n, nb, 1).view(np.uint8)
    blk[:, :, 2:4] = m.reshape(n, nb, 1).view(np.uint8)
    blk[:, :, 4:20] = rng.integers(0, 256, (n, nb, 16), dtype=np.uint8)
    return blk.reshape(n, nb * 20)


def random_q8_0(rng, n, k, amp):
    nb = k // lb.QK
    blk = np.zeros((n, nb, 34), dtype=np.uint8)
    d = (rng.uniform(0.5, 1.5, (n, nb)) * amp / 127.0).astype(np.float16)
    blk[:, :, 0:2] = d.reshape(n, nb, 1).view(np.uint8)
    blk[:, :, 2:34] = rng.integers(-127, 128, (n, nb, 32)).astype(np.int8).view(np.uint8)
    return blk.reshape(n, nb * 34)


def make_weights(cfg, rng):
    H, hd = cfg.hidden, cfg.head_dim
    raw = {}
    layers = []
    for i in range(cfg.n_layers):
        shapes = {"q": (cfg.n_heads * hd, H), "k": (cfg.n_kv_heads * hd, H), "v": (cfg.n_kv_heads * hd, H),
                  "o": (H, cfg.n_heads * hd), "gate": (cfg.ffn, H), "up": (cfg.ffn, H), "down": (H, cfg.ffn)}
        mats = {}
        for name, (n, k) in shapes.items():
            r = random_q4_1(rng, n, k)
            raw[f"blk.{i}.{name}"] = ("Q4_1", r, n, k)
            mats[name] = lb.q4_1_to_nbits(r, n, k)
        an = rng.uniform(0.8, 1.2, H).astype(np.float32)
        fn = rng.uniform(0.8, 1.2, H).astype(np.float32)
        raw[f"blk.{i}.attn_norm"] = ("F32", an)
        raw[f"blk.{i}.ffn_norm"] = ("F32", fn)
        layers.append(lb.LayerWeights(attn_norm=an, ffn_norm=fn, **mats))
    emb = random_q8_0(rng, cfg.vocab, H, 1.0)
    raw["token_embd"] = ("Q8_0", emb, cfg.vocab, H)
    eq, es = lb.q8_0_split(emb, cfg.vocab, H)
    norm = rng.uniform(0.8, 1.2, H).astype(np.float32)
    raw["output_norm"] = ("F32", norm)
    w = lb.LlamaWeights(embed_q=eq, embed_scales=es, layers=layers, norm=norm,
                        lm_head=lb.q8_0_to_nbits(emb, cfg.vocab, H))
    return w, raw


GGUF_NAMES = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output", "gate": "ffn_gate",
              "up": "ffn_up", "down": "ffn_down", "attn_norm": "attn_norm", "ffn_norm": "ffn_norm",
              "token_embd": "token_embd", "output_norm": "output_norm"}


def float_tensors(raw):
    """GGUF-named float weights from the raw blocks, dequantised by the gguf package (not by our code)."""
    import gguf
    out = {}
    for key, val in raw.items():
        parts = key.split(".")
        name = ".".join(parts[:-1] + [GGUF_NAMES[parts[-1]]]) + ".weight"
        if val[0] == "F32":
            out[name] = val[1].astype(np.float64)
        else:
            qt = gguf.GGMLQuantizationType[val[0]]
            out[name] = gguf.quants.dequantize(val[1], qt).reshape(val[2], val[3]).astype(np.float64)
    return out


def check(out_dir, form, cfg, raw, kv_dtype="float32"):
    """Run the folder's model.onnx in ONNX Runtime (prefill 7 tokens, then 3 single-token steps, batch 1)
    and compare the logits with tools/llm_reference.py's float64 numpy forward pass of the raw blocks."""
    import onnxruntime as ort
    import llm_reference
    ref = llm_reference.NumpyLlama({"n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                                    "eps": cfg.eps, "rope_base": cfg.rope_base}, float_tensors(raw))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(out_dir, "model.onnx"), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(123)
    steps = [rng.integers(3, cfg.vocab, 7).tolist()] + [[int(x)] for x in rng.integers(3, cfg.vocab, 3)]
    past = [np.zeros((1, cfg.n_kv_heads, 0, cfg.head_dim), np.dtype(kv_dtype))] * (2 * cfg.n_layers)
    pos = 0
    worst = 0.0
    for ids in steps:
        feeds = {"input_ids": np.array([ids], np.int64),
                 "attention_mask": np.ones((1, pos + len(ids)), np.int64)}
        if form == "optimum":
            feeds["position_ids"] = np.arange(pos, pos + len(ids), dtype=np.int64)[None]
        for i in range(cfg.n_layers):
            feeds[f"past_key_values.{i}.key"] = past[2 * i]
            feeds[f"past_key_values.{i}.value"] = past[2 * i + 1]
        outs = sess.run(None, feeds)
        past = outs[1:]
        want = ref.forward(ids)[0]
        got = outs[0][0, -1].astype(np.float64)
        err = float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))
        worst = max(worst, err)
        if int(np.argmax(got)) != int(np.argmax(want)) and err > (1e-4 if kv_dtype == "float32" else 1e-2):
            raise SystemExit(f"check failed: argmax {np.argmax(got)} != numpy {np.argmax(want)} at position {pos}")
        pos += len(ids)
    tol = 1e-4 if kv_dtype == "float32" else 1e-2  # float16 cache: ~3 decimal digits per K/V value
    if worst > tol:
        raise SystemExit(f"check failed: logits differ from the numpy reference by {worst:.3g} of their range")
    print(f"check: ONNX Runtime logits match the numpy reference to {worst:.2g} of the largest logit "
          f"({len(steps)} steps, past lengths 0 to {pos - 1})")


GGUF_NAMES = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output", "gate": "ffn_gate",
              "up": "ffn_up", "down": "ffn_down", "attn_norm": "attn_norm", "ffn_norm": "ffn_norm",
              "token_embd": "token_embd", "output_norm": "output_norm"}


def float_tensors(raw):
    """GGUF-named float weights from the raw blocks, dequantised by the gguf package (not by our code)."""
    import gguf
    out = {}
    for key, val in raw.items():
        parts = key.split(".")
        name = ".".join(parts[:-1] + [GGUF_NAMES[parts[-1]]]) + ".weight"
        if val[0] == "F32":
            out[name] = val[1].astype(np.float64)
        else:
            qt = gguf.GGMLQuantizationType[val[0]]
            out[name] = gguf.quants.dequantize(val[1], qt).reshape(val[2], val[3]).astype(np.float64)
    return out


def check(out_dir, form, cfg, raw, kv_dtype="float32"):
    """Run the folder's model.onnx in ONNX Runtime (prefill 7 tokens, then 3 single-token steps, batch 1)
    and compare the logits with tools/llm_reference.py's float64 numpy forward pass of the raw blocks."""
    import onnxruntime as ort
    import llm_reference
    ref = llm_reference.NumpyLlama({"n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                                    "eps": cfg.eps, "rope_base": cfg.rope_base}, float_tensors(raw))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(out_dir, "model.onnx"), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(123)
    steps = [rng.integers(3, cfg.vocab, 7).tolist()] + [[int(x)] for x in rng.integers(3, cfg.vocab, 3)]
    past = [np.zeros((1, cfg.n_kv_heads, 0, cfg.head_dim), np.dtype(kv_dtype))] * (2 * cfg.n_layers)
    pos = 0
    worst = 0.0
    for ids in steps:
        feeds = {"input_ids": np.array([ids], np.int64),
                 "attention_mask": np.ones((1, pos + len(ids)), np.int64)}
        if form == "optimum":
            feeds["position_ids"] = np.arange(pos, pos + len(ids), dtype=np.int64)[None]
        for i in range(cfg.n_layers):
            feeds[f"past_key_values.{i}.key"] = past[2 * i]
            feeds[f"past_key_values.{i}.value"] = past[2 * i + 1]
        outs = sess.run(None, feeds)
        past = outs[1:]
        want = ref.forward(ids)[0]
        got = outs[0][0, -1].astype(np.float64)
        err = float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))
        worst = max(worst, err)
        if int(np.argmax(got)) != int(np.argmax(want)) and err > (1e-4 if kv_dtype == "float32" else 1e-2):
            raise SystemExit(f"check failed: argmax {np.argmax(got)} != numpy {np.argmax(want)} at position {pos}")
        pos += len(ids)
    tol = 1e-4 if kv_dtype == "float32" else 1e-2  # float16 cache: ~3 decimal digits per K/V value
    if worst > tol:
        raise SystemExit(f"check failed: logits differ from the numpy reference by {worst:.3g} of their range")
    print(f"check: ONNX Runtime logits match the numpy reference to {worst:.2g} of the largest logit "
          f"({len(steps)} steps, past lengths 0 to {pos - 1})")



def write_gguf(path, cfg, raw, tokens, merges, special):
    """The same weights and tokenizer as a llama GGUF file (for tests of tools/gguf_to_onnx.py)."""
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama-test")
    w.add_block_count(cfg.n_layers)
    w.add_context_length(cfg.max_length)
    w.add_embedding_length(cfg.hidden)
    w.add_feed_forward_length(cfg.ffn)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_layer_norm_rms_eps(cfg.eps)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_vocab_size(cfg.vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for key, val in raw.items():
        parts = key.split(".")
        name = ".".join(parts[:-1] + [GGUF_NAMES[parts[-1]]]) + ".weight"
        if val[0] == "F32":
            w.add_tensor(name, val[1].astype(np.float32))
        else:
            w.add_tensor(name, val[1], raw_dtype=gguf.GGMLQuantizationType[val[0]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--form", choices=["genai", "optimum"], default="genai")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=384)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--gguf", metavar="PATH", help="also write the weights and tokenizer as a llama GGUF file")
    ap.add_argument("--check", action="store_true",
                    help="run the model in ONNX Runtime and compare its logits with a numpy forward pass")
    ap.add_argument("--embed-op", choices=["GatherBlockQuantized", "DequantizeLinear"],
                    default="GatherBlockQuantized")
    ap.add_argument("--kv-dtype", choices=["float32", "float16"], default="float32",
                    help="type of the KV cache (genai form only)")
    ap.add_argument("--q4-1-form", choices=["zp", "offset"], default="zp",
                    help="4-bit layers (genai form): float zero points, or ONNX Runtime's fast form "
                         "(no zero points plus a float MatMul of block sums, as gguf_to_onnx.py)")
    a = ap.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads or a.hidden % 32 or a.ffn % 32:
        sys.exit("hidden must be a multiple of heads and of 32, heads of kv-heads, ffn of 32")
    tokens, merges = learn_bpe(a.vocab)
    if len(tokens) != a.vocab:
        sys.exit(f"the built-in text yields only {len(tokens)} tokens; use --vocab {len(tokens)} or less")
    cfg = lb.LlamaConfig(n_layers=a.layers, hidden=a.hidden, n_heads=a.heads, n_kv_heads=a.kv_heads,
                         head_dim=a.hidden // a.heads, ffn=a.ffn, vocab=a.vocab, rope_base=10000.0, eps=1e-5,
                         max_length=a.max_length)
    rng = np.random.default_rng(a.seed)
    w, raw = make_weights(cfg, rng)
    os.makedirs(a.out_dir, exist_ok=True)
    bos, eos, pad, unk = 1, 2, 2, 0
    special = [0, 1, 2]
    if a.form == "genai":
        model = lb.build_genai(cfg, w, embed_op=a.embed_op, kv_dtype=a.kv_dtype, q4_form=a.q4_1_form)
        with open(os.path.join(a.out_dir, "genai_config.json"), "w") as f:
            json.dump(lb.genai_config(cfg, bos, eos, pad), f, indent=4)
    else:
        model = lb.build_optimum(cfg, w)
        hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.hidden,
              "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.n_layers,
              "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
              "head_dim": cfg.head_dim, "vocab_size": cfg.vocab, "rms_norm_eps": cfg.eps,
              "rope_theta": cfg.rope_base, "max_position_embeddings": cfg.max_length,
              "tie_word_embeddings": True, "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad,
              "hidden_act": "silu", "torch_dtype": "float32", "use_cache": True}
        with open(os.path.join(a.out_dir, "config.json"), "w") as f:
            json.dump(hf, f, indent=2)
        with open(os.path.join(a.out_dir, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}, f, indent=2)
    lb.save_model(model, os.path.join(a.out_dir, "model.onnx"))
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(lb.byte_level_bpe_json(tokens, merges, special, pre="smollm"), f, ensure_ascii=False, indent=1)
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(lb.tokenizer_config_json(tokens, special, bos, eos, pad, unk, CHAT_TEMPLATE, cfg.max_length),
                  f, ensure_ascii=False, indent=2)
    if a.gguf:
        write_gguf(a.gguf, cfg, raw, tokens, merges, special)
    if a.check:
        check(a.out_dir, a.form, cfg, raw, a.kv_dtype if a.form == "genai" else "float32")
    print(f"wrote {a.out_dir} ({a.form}: {cfg.n_layers} layers, hidden {cfg.hidden}, {cfg.n_heads}/"
          f"{cfg.n_kv_heads} heads, vocab {cfg.vocab}, {len(merges)} merges)")


if __name__ == "__main__":
    main()
