#!/usr/bin/env python3
"""Convert a Llama-architecture GGUF (Q4_1 / Q8_0 / F32 tensors) into an ONNX Runtime GenAI model folder,
without changing any weight.

    tools/gguf_to_onnx.py GGUF_FILE OUT_DIR [--max-length N] [--external-data]
                          [--embed-op GatherBlockQuantized|DequantizeLinear] [--q4-1-form zp|offset]
                          [--accuracy-level 0|4] [--lm-head-accuracy-level 0] [--no-verify]

OUT_DIR receives genai_config.json, model.onnx (+ model.onnx.data with --external-data), tokenizer.json and
tokenizer_config.json (see /work/llm-contract.md for the graph).

Weights (tools/llm_onnx_builder.py):
  * Q4_1 matrices -> com.microsoft MatMulNBits bits 4, block 32, scale d, float32 zero point -m/d, the nibbles
    repacked from GGUF's order (byte j = elements j and j+16) to MatMulNBits' (byte j = elements 2j, 2j+1).
  * Q8_0 token embedding -> GatherBlockQuantized bits 8 (uint8 q+128, zero point 128, scale d), and, when the
    GGUF has no output.weight (tied embeddings), the same bytes again as the lm head MatMulNBits bits 8.
  * F32 norms as float32.
  * GGUF stores llama's Q/K rows permuted for adjacent-pair RoPE: GroupQueryAttention gets
    rotary_interleaved=1 and the rows stay as they are.

--q4-1-form offset: the same weights as MatMulNBits without zero points (ORT's default 8) plus a float
MatMul of the activations' 32-element block sums by (8d + m): ONNX Runtime 1.32 runs float zero points on
a slow path (~70x slower per matrix), so bench/llm gives ORT GenAI this form too.
--lm-head-accuracy-level defaults to 0: with uint8 zero points and level 4 ORT quantises the activations
of the 8-bit lm head to int8, which would make the reference greedy ids depend on that approximation.
GatherBlockQuantized with bits 8 is accepted by ONNX Runtime 1.32 (checked by tests/tools/test_llm_tools.py);
--embed-op DequantizeLinear is the opset-21 fallback (DequantizeLinear block_size 32 + Gather).

--max-length (default: min(llama.context_length, 2048)): the length of the cos/sin caches and the
context_length / search.max_length in genai_config.json. ORT GenAI allocates the KV cache for max_length
when past_present_share_buffer is on (SmolLM2-135M: 30 layers x 2 x 3 heads x 64 x 4 bytes = 46 KiB a
token: 94 MiB at 2048, 377 MiB at 8192), hence the cap; pass --max-length 8192 for the full context.

Verification (unless --no-verify): every repacked matrix is dequantised both ways with numpy and compared:
  * Q8_0: (q+128-128)*d against GGUF's q*d: must be bit-exact;
  * Q4_1: (q - (-m/d))*d in float32 against GGUF's q*d + m in float32: the float32 rounding of -m/d makes
    these differ slightly; the script reports the bit-exact fraction and the largest difference in float32
    ulps of the block's magnitude |m| + 15 d (a value near 0 after cancellation can be many ulps of itself
    off), and fails beyond 1 such ulp;
  * the raw GGUF dequantisation used above is itself checked against gguf.quants.dequantize (bit-exact).
The tokenizer.json is loaded with HF `tokenizers` (if installed) and round-trips a few strings.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_onnx_builder as lb  # noqa: E402

try:
    import gguf
except ImportError:  # pragma: no cover
    sys.exit("gguf_to_onnx.py needs the 'gguf' package (pip install -r tools/requirements.txt)")

DEFAULT_MAX_LENGTH_CAP = 2048


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class Converter:
    def __init__(self, path, verify=True):
        self.r = gguf.GGUFReader(path)
        self.verify = verify
        self.tensors = {t.name: t for t in self.r.tensors}
        self.stats = {"q4_1_blocks": 0, "q4_1_bitexact": 0, "q4_1_max_err_units": 0.0, "q4_1_elems": 0, "q4_1_elems_exact": 0, "q4_1_max_ulp": 0,
                      "q4_1_zero_d_blocks": 0, "q8_0_rows_checked": 0}

    def check_raw_dequant(self, t, mine):
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(mine.shape).astype(np.float32)
        if not np.array_equal(ref.view(np.uint32), mine.view(np.uint32)):
            raise SystemExit(f"{t.name}: numpy GGUF dequantisation differs from gguf.quants.dequantize")

    def matrix(self, name):
        t = self.tensors[name]
        k, n = int(t.shape[0]), int(t.shape[1])
        raw = np.asarray(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_1:
            w = lb.q4_1_to_nbits(raw, n, k)
            if self.verify:
                ref = lb.dequant_q4_1_gguf(raw, n, k)
                self.check_raw_dequant(t, ref)
                got = w.dequant()
                nb = k // lb.QK
                blk = raw.reshape(n, nb, 20)
                d = np.abs(blk[:, :, 0:2].copy().view(np.float16).astype(np.float64)).reshape(n, nb)
                m = np.abs(blk[:, :, 2:4].copy().view(np.float16).astype(np.float64)).reshape(n, nb)
                # one float32 ulp (2^-23 relative) of the block's largest magnitude |m| + 15 d
                unit = np.repeat((m + 15.0 * d) * 2.0 ** -23, lb.QK, axis=1)
                err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
                scaled = np.where(unit > 0, err / np.where(unit > 0, unit, 1), np.where(err > 0, np.inf, 0))
                blocks_exact = (err.reshape(n, nb, lb.QK) == 0).all(axis=2)
                self.stats["q4_1_blocks"] += int(n * nb)
                self.stats["q4_1_bitexact"] += int(blocks_exact.sum())
                self.stats["q4_1_zero_d_blocks"] += int((d == 0).sum())
                self.stats["q4_1_max_err_units"] = max(self.stats["q4_1_max_err_units"], float(scaled.max()))
                self.stats["q4_1_max_ulp"] = max(self.stats["q4_1_max_ulp"], int(lb.ulp_distance(got, ref).max()))
                self.stats["q4_1_elems"] += int(err.size)
                self.stats["q4_1_elems_exact"] += int((err == 0).sum())
                if scaled.max() > 1.0:
                    raise SystemExit(f"{name}: Q4_1 repacking error {scaled.max():.3g} ulp of the block exceeds 1")
            return w
        if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            w = lb.q8_0_to_nbits(raw, n, k)
            if self.verify:
                ref = lb.dequant_q8_0_gguf(raw, n, k)
                self.check_raw_dequant(t, ref)
                if not np.array_equal(w.dequant().view(np.uint32), ref.view(np.uint32)):
                    raise SystemExit(f"{name}: Q8_0 repacking is not bit-exact")
                self.stats["q8_0_rows_checked"] += n
            return w
        raise SystemExit(f"{name}: tensor type {t.tensor_type.name} is not supported (Q4_1, Q8_0 only)")

    def vector(self, name):
        t = self.tensors[name]
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            raise SystemExit(f"{name}: expected F32, got {t.tensor_type.name}")
        return np.asarray(t.data, dtype=np.float32).reshape(-1).copy()

    def config(self, max_length):
        r = self.r
        arch = field(r, "general.architecture")
        if arch != "llama":
            raise SystemExit(f"general.architecture is {arch!r}; only 'llama' is supported")
        hidden = int(field(r, "llama.embedding_length"))
        heads = int(field(r, "llama.attention.head_count"))
        kvh = int(field(r, "llama.attention.head_count_kv", heads))
        hd = hidden // heads
        rot = int(field(r, "llama.rope.dimension_count", hd))
        if rot != hd:
            raise SystemExit(f"partial rotary (rope.dimension_count {rot} != head_dim {hd}) is not supported")
        if field(r, "llama.rope.scaling.type") not in (None, "none"):
            raise SystemExit("RoPE scaling is not supported")
        ctx = int(field(r, "llama.context_length", 2048))
        vocab = int(field(r, "llama.vocab_size", len(field(r, "tokenizer.ggml.tokens"))))
        cfg = lb.LlamaConfig(
            n_layers=int(field(r, "llama.block_count")), hidden=hidden, n_heads=heads, n_kv_heads=kvh, head_dim=hd,
            ffn=int(field(r, "llama.feed_forward_length")), vocab=vocab,
            rope_base=float(field(r, "llama.rope.freq_base", 10000.0)),
            eps=float(np.float32(field(r, "llama.attention.layer_norm_rms_epsilon", 1e-5))),
            max_length=max_length or min(ctx, DEFAULT_MAX_LENGTH_CAP))
        return cfg, ctx

    def weights(self, cfg):
        t = self.tensors["token_embd.weight"]
        if t.tensor_type != gguf.GGMLQuantizationType.Q8_0:
            raise SystemExit(f"token_embd.weight is {t.tensor_type.name}; only Q8_0 is supported")
        raw = np.asarray(t.data)
        eq, es = lb.q8_0_split(raw, cfg.vocab, cfg.hidden)
        if self.verify:
            ref = lb.dequant_q8_0_gguf(raw, cfg.vocab, cfg.hidden)
            self.check_raw_dequant(t, ref)
            got = (eq.astype(np.float32).reshape(cfg.vocab, -1, lb.QK) - 128.0) * es.reshape(cfg.vocab, -1, 1)
            if not np.array_equal(got.reshape(ref.shape).astype(np.float32).view(np.uint32), ref.view(np.uint32)):
                raise SystemExit("token_embd.weight: Q8_0 embedding repacking is not bit-exact")
        lm_head = self.matrix("output.weight" if "output.weight" in self.tensors else "token_embd.weight")
        layers = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            layers.append(lb.LayerWeights(
                attn_norm=self.vector(p + "attn_norm.weight"), ffn_norm=self.vector(p + "ffn_norm.weight"),
                q=self.matrix(p + "attn_q.weight"), k=self.matrix(p + "attn_k.weight"),
                v=self.matrix(p + "attn_v.weight"), o=self.matrix(p + "attn_output.weight"),
                gate=self.matrix(p + "ffn_gate.weight"), up=self.matrix(p + "ffn_up.weight"),
                down=self.matrix(p + "ffn_down.weight")))
        return lb.LlamaWeights(embed_q=eq, embed_scales=es, layers=layers,
                               norm=self.vector("output_norm.weight"), lm_head=lm_head)

    def tokenizer(self):
        r = self.r
        model = field(r, "tokenizer.ggml.model")
        if model != "gpt2":
            raise SystemExit(f"tokenizer.ggml.model {model!r}: only byte-level BPE ('gpt2') is supported")
        tokens = list(field(r, "tokenizer.ggml.tokens"))
        merges = list(field(r, "tokenizer.ggml.merges"))
        types = list(field(r, "tokenizer.ggml.token_type"))
        special = [i for i, ty in enumerate(types) if ty in (3, 4)]  # CONTROL, USER_DEFINED
        pre = field(r, "tokenizer.ggml.pre", "default")
        tj = lb.byte_level_bpe_json(tokens, merges, special, pre=pre)
        for a in tj["added_tokens"]:
            a["special"] = types[a["id"]] == 3
        bos = int(field(r, "tokenizer.ggml.bos_token_id", 1))
        eos = int(field(r, "tokenizer.ggml.eos_token_id", 2))
        pad = field(r, "tokenizer.ggml.padding_token_id")
        pad = int(pad) if pad is not None else eos
        unk = field(r, "tokenizer.ggml.unknown_token_id")
        unk = int(unk) if unk is not None else None
        if field(r, "tokenizer.ggml.add_bos_token", False):
            print("warning: the GGUF asks for a BOS token; tokenizer_config.json says add_bos_token false "
                  "(the chat template adds what SmolLM needs)", file=sys.stderr)
        template = field(r, "tokenizer.chat_template")
        return tokens, special, tj, bos, eos, pad, unk, template


def check_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("tokenizer check skipped (no HF tokenizers)")
        return
    tok = Tokenizer.from_file(path)
    samples = ["Hello, world!", "What is the capital of France?", "3.14159 and 2026 years",
               "<|im_start|>user\nNaïve café — 日本語 😀<|im_end|>\n", "def f(x):\n    return x  # code"]
    for s in samples:
        enc = tok.encode(s)
        back = tok.decode(enc.ids, skip_special_tokens=False)
        if back != s:
            raise SystemExit(f"tokenizer.json does not round-trip {s!r}: {back!r}")
    enc = tok.encode("What is 123?")
    print(f"tokenizer.json: loads in HF tokenizers, round-trips {len(samples)} samples; "
          f"'What is 123?' -> {enc.tokens}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf_file")
    ap.add_argument("out_dir")
    ap.add_argument("--max-length", type=int, default=None,
                    help=f"cos/sin cache and context length (default min(context_length, {DEFAULT_MAX_LENGTH_CAP}))")
    ap.add_argument("--external-data", action="store_true", help="weights in model.onnx.data")
    ap.add_argument("--embed-op", choices=["GatherBlockQuantized", "DequantizeLinear"], default="GatherBlockQuantized",
                    help="GatherBlockQuantized bits 8 (ORT 1.32 accepts it) or opset-21 DequantizeLinear + Gather")
    ap.add_argument("--accuracy-level", type=int, default=None,
                    help="MatMulNBits accuracy_level of the 4-bit layers (default 0 for --q4-1-form zp, 4 for "
                         "offset: with float zero points ONNX Runtime computes in float32 whatever the level, and "
                         "level 0 asks other runtimes (tandem) for the same, so greedy outputs agree; offset is "
                         "ORT's int8 fast path)")
    ap.add_argument("--lm-head-accuracy-level", type=int, default=0,
                    help="accuracy_level of the 8-bit lm head (0: ORT computes it in float32; 4: ORT quantises "
                         "the activations to int8)")
    ap.add_argument("--q4-1-form", choices=["zp", "offset"], default="zp",
                    help="zp (default): MatMulNBits with float zero points -m/d; offset: MatMulNBits without "
                         "zero points + ReduceSum/MatMul of the block constants 8d+m (for ONNX Runtime, which "
                         "runs float zero points on a slow path)")
    ap.add_argument("--kv-dtype", choices=["float32", "float16"], default="float32",
                    help="type of the KV cache (past/present tensors); float16 halves the cache that a decode step "
                         "reads (GroupQueryAttention then runs in float16 between Cast nodes)")
    ap.add_argument("--no-verify", action="store_true")
    a = ap.parse_args()
    if a.accuracy_level is None:
        a.accuracy_level = 4 if a.q4_1_form == "offset" else 0

    conv = Converter(a.gguf_file, verify=not a.no_verify)
    cfg, ctx = conv.config(a.max_length)
    if cfg.max_length > ctx:
        print(f"warning: --max-length {cfg.max_length} exceeds the model's context_length {ctx}", file=sys.stderr)
    w = conv.weights(cfg)
    tokens, special, tj, bos, eos, pad, unk, template = conv.tokenizer()
    if len(tokens) != cfg.vocab:
        raise SystemExit(f"vocab_size {cfg.vocab} != {len(tokens)} tokens")

    model = lb.build_genai(cfg, w, embed_op=a.embed_op, accuracy_level=a.accuracy_level,
                           lm_head_accuracy_level=a.lm_head_accuracy_level, q4_form=a.q4_1_form,
                           kv_dtype=a.kv_dtype)
    os.makedirs(a.out_dir, exist_ok=True)
    for stale in ("model.onnx", "model.onnx.data"):
        p = os.path.join(a.out_dir, stale)
        if os.path.exists(p):
            os.remove(p)
    lb.save_model(model, os.path.join(a.out_dir, "model.onnx"), external_data=a.external_data)
    with open(os.path.join(a.out_dir, "genai_config.json"), "w") as f:
        json.dump(lb.genai_config(cfg, bos, eos, pad), f, indent=4)
    tpath = os.path.join(a.out_dir, "tokenizer.json")
    with open(tpath, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(lb.tokenizer_config_json(tokens, special, bos, eos, pad, unk, template, cfg.max_length), f,
                  ensure_ascii=False, indent=2)

    s = conv.stats
    print(f"wrote {a.out_dir}: llama {cfg.n_layers} layers, hidden {cfg.hidden}, {cfg.n_heads}/{cfg.n_kv_heads} "
          f"heads, ffn {cfg.ffn}, vocab {cfg.vocab}, max_length {cfg.max_length} (GGUF context {ctx}), "
          f"embedding {a.embed_op}")
    print(f"weights read per decoded token: {lb.weight_bytes_per_token(w)} bytes")
    if not a.no_verify:
        print(f"verified: Q8_0 {s['q8_0_rows_checked']} rows bit-exact; Q4_1 {s['q4_1_blocks']} blocks, "
              f"{s['q4_1_bitexact']} entirely bit-exact, {100.0 * s['q4_1_elems_exact'] / max(1, s['q4_1_elems']):.2f}% "
              f"of the values bit-exact, largest difference {s['q4_1_max_err_units']:.3g} float32 ulp of the block's "
              f"|m| + 15 d ({s['q4_1_max_ulp']} ulp of the value itself), "
              f"{s['q4_1_zero_d_blocks']} blocks with d = 0 (mapped exactly)")
        check_tokenizer(tpath)


if __name__ == "__main__":
    main()
