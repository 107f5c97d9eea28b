#!/usr/bin/env python3
"""Write a large random-weight Llama model folder quickly (issue 21's GPU check: a model bigger than
the accelerator's budget), in the optimum form of tools/make_tiny_llama.py (standard ONNX ops, float32
weights, fed-back KV cache) with the weights in external data (model.onnx.data).

    tools/make_big_llama.py OUT_DIR [--gb 8] [--hidden 4096] [--heads 32] [--kv-heads 8] [--ffn 11008]
                                    [--layers N] [--max-length 512] [--seed 1]

--gb sets the number of layers (unless --layers is given) so that the weights come to about that
many GB (10^9 bytes); hidden 4096 / ffn 11008 is a Llama-2-7B layer (709 MB in float32), so 8 GB is
11 layers. The weights are not meant to say anything: each matrix is a window of one pool of
random float32 values scaled by 1/sqrt(fan-in) (written at disk speed, not drawn one by one), so
activations stay bounded and greedy decoding is deterministic. The tokenizer is make_tiny_llama's
byte-level BPE (vocabulary 384). Needs numpy and onnx; no network.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_onnx_builder as lb  # noqa: E402
import make_tiny_llama as tiny  # noqa: E402

POOL = 1 << 24  # floats in the random pool (64 MiB)
ROW_STEP = 1021  # pool offset between rows of a matrix (a prime: rows differ)


class Pool:
    def __init__(self, seed):
        self.base = np.random.default_rng(seed).standard_normal(POOL, dtype=np.float32)
        self.scaled = {}
        self.next = 0

    def matrix(self, n, k):
        """A read-only [n, k] float32 view of the pool scaled by 1/sqrt(k) (rows overlap)."""
        if k not in self.scaled:
            self.scaled[k] = (self.base / np.float32(np.sqrt(k))).astype(np.float32)
        p = self.scaled[k]
        need = (n - 1) * ROW_STEP + k
        if need > POOL:
            raise SystemExit(f"a [{n}, {k}] matrix does not fit the pool; make ROW_STEP smaller")
        off = (self.next * 7919) % (POOL - need + 1)
        self.next += 1
        return np.lib.stride_tricks.as_strided(p[off:], shape=(n, k), strides=(4 * ROW_STEP, 4), writeable=False)


class FakeNBits:
    """Stands in for lb.NBitsWeight: build_optimum only asks for dequant()."""

    def __init__(self, pool, n, k):
        self.pool, self.n, self.k = pool, n, k

    def dequant(self):
        return self.pool.matrix(self.n, self.k)


class FakeWeights:
    def __init__(self, pool, cfg):
        H = cfg.hidden
        hd = cfg.head_dim
        self.layers = []
        for _ in range(cfg.n_layers):
            def m(n, k):
                return FakeNBits(pool, n, k)
            self.layers.append(lb.LayerWeights(
                attn_norm=np.ones(H, np.float32), ffn_norm=np.ones(H, np.float32),
                q=m(cfg.n_heads * hd, H), k=m(cfg.n_kv_heads * hd, H), v=m(cfg.n_kv_heads * hd, H),
                o=m(H, cfg.n_heads * hd), gate=m(cfg.ffn, H), up=m(cfg.ffn, H), down=m(H, cfg.ffn)))
        self.norm = np.ones(H, np.float32)
        self.lm_head = FakeNBits(pool, cfg.vocab, H)
        self._embed = pool.matrix(cfg.vocab, H) * np.float32(np.sqrt(H))

    def embed_float(self):
        return self._embed


class ExternalG(lb._G):
    """lb._G whose initializers above 4 KiB go straight into the external data file (aligned to 4 KiB
    for mapping), so the model never holds its weights in a protobuf."""

    data_file = None
    data_name = "model.onnx.data"

    def init(self, name, arr):
        arr = np.asarray(arr)
        if arr.nbytes <= 4096:
            return super().init(name, arr)
        f = ExternalG.data_file
        off = f.tell()
        pad = (-off) % 4096
        if pad:
            f.write(b"\0" * pad)
            off += pad
        np.ascontiguousarray(arr).tofile(f)
        t = TensorProto()
        t.name = name
        t.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
        t.dims.extend(arr.shape)
        t.data_location = TensorProto.EXTERNAL
        for key, val in (("location", ExternalG.data_name), ("offset", str(off)), ("length", str(arr.nbytes))):
            e = t.external_data.add()
            e.key, e.value = key, val
        self.inits.append(t)
        return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--gb", type=float, default=8.0)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    t0 = time.time()
    H, hd = a.hidden, a.hidden // a.heads
    per_layer = 4 * (2 * H * a.heads * hd + 2 * H * a.kv_heads * hd + 3 * H * a.ffn + 2 * H)
    layers = a.layers or max(1, round(a.gb * 1e9 / per_layer))
    tokens, merges = tiny.learn_bpe(384)
    cfg = lb.LlamaConfig(n_layers=layers, hidden=H, n_heads=a.heads, n_kv_heads=a.kv_heads, head_dim=hd,
                         ffn=a.ffn, vocab=len(tokens), rope_base=10000.0, eps=1e-5, max_length=a.max_length)
    os.makedirs(a.out_dir, exist_ok=True)
    pool = Pool(a.seed)
    w = FakeWeights(pool, cfg)
    saved = lb._G
    with open(os.path.join(a.out_dir, ExternalG.data_name), "wb") as f:
        ExternalG.data_file = f
        lb._G = ExternalG
        try:
            model = lb.build_optimum(cfg, w)
        finally:
            lb._G = saved
            ExternalG.data_file = None
    with open(os.path.join(a.out_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    bos, eos, pad, unk = 1, 2, 2, 0
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
          "intermediate_size": a.ffn, "num_hidden_layers": layers, "num_attention_heads": a.heads,
          "num_key_value_heads": a.kv_heads, "head_dim": hd, "vocab_size": cfg.vocab, "rms_norm_eps": cfg.eps,
          "rope_theta": cfg.rope_base, "max_position_embeddings": cfg.max_length, "tie_word_embeddings": False,
          "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad, "hidden_act": "silu",
          "torch_dtype": "float32", "use_cache": True}
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(hf, f, indent=2)
    with open(os.path.join(a.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}, f, indent=2)
    special = [0, 1, 2]
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(lb.byte_level_bpe_json(tokens, merges, special, pre="smollm"), f, ensure_ascii=False, indent=1)
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(lb.tokenizer_config_json(tokens, special, bos, eos, pad, unk, tiny.CHAT_TEMPLATE, cfg.max_length),
                  f, ensure_ascii=False, indent=2)
    size = os.path.getsize(os.path.join(a.out_dir, ExternalG.data_name))
    print(f"wrote {a.out_dir}: {layers} layers, hidden {H}, ffn {a.ffn}, {a.heads}/{a.kv_heads} heads, "
          f"{size / 1e9:.2f} GB of weights in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
