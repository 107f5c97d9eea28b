"""Graph building shared by tools/gguf_to_onnx.py and tools/make_tiny_llama.py.

Two forms of a decoder-only Llama:
  * the ONNX Runtime GenAI form (com.microsoft contrib ops: GatherBlockQuantized, MatMulNBits,
    SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization, GroupQueryAttention), see
    /work/llm-contract.md for the names and attributes;
  * the Hugging Face optimum form (standard ONNX ops only, float weights, position_ids input,
    KV cache as Concat of past and new).

Weights come in GGUF's block formats (Q4_1, Q8_0, F32) and are repacked, never requantised:
  * Q4_1 block (20 bytes): f16 d, f16 m, 16 bytes qs; byte j holds element j (low nibble) and
    element j+16 (high nibble); value = q*d + m.
    -> MatMulNBits bits 4, block 32: B byte j holds element 2j (low) and 2j+1 (high), scale d,
    float zero point -m/d, so (q - zp)*d = q*d + m (exact in real arithmetic; in float32 the
    rounding of -m/d can move the result by about one ulp, see check_q4_1_exactness).
    A block with d == 0 holds m 32 times: it becomes q = 1, scale m, zero point 0 (exact).
  * Q8_0 block (34 bytes): f16 d, 32 int8 q; value = q*d.
    -> uint8 q+128, uint8 zero point 128, scale d (exact: (q+128-128)*d = q*d).
"""

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

QK = 32  # GGUF block size of Q4_0/Q4_1/Q8_0

# ----------------------------------------------------------------------------------------------
# GGUF block repacking


@dataclasses.dataclass
class NBitsWeight:
    """A MatMulNBits weight: logical W is [N, K] (output rows), y = x @ W^T."""
    bits: int
    n: int
    k: int
    block: int
    b: np.ndarray        # uint8 [N, K/block, block*bits/8]
    scales: np.ndarray   # float32 [N*K/block]
    zp: np.ndarray       # float32 [N*K/block] (float zero points) or uint8 packed
    mins: np.ndarray = None  # Q4_1 only: float32 [N*K/block] with value = q*scale + mins (GGUF's m)

    def dequant(self):
        """float32 [N, K] as MatMulNBits defines it: (q - zp) * scale, computed in float32."""
        nb = self.k // self.block
        if self.bits == 4:
            lo = self.b & 0x0F
            hi = self.b >> 4
            q = np.stack([lo, hi], axis=-1).reshape(self.n, nb, self.block)
        else:
            q = self.b.reshape(self.n, nb, self.block)
        q = q.astype(np.float32)
        s = self.scales.reshape(self.n, nb, 1)
        if self.zp.dtype == np.float32:
            z = self.zp.reshape(self.n, nb, 1)
        else:
            assert self.bits == 8
            z = self.zp.reshape(self.n, nb, 1).astype(np.float32)
        return ((q - z) * s).reshape(self.n, self.k).astype(np.float32)

    def nbytes(self):
        return self.b.nbytes + self.scales.nbytes + self.zp.nbytes


def q4_1_to_nbits(raw, n, k):
    """raw: uint8 [N, K/32*20] (GGUF Q4_1 rows) -> NBitsWeight bits 4 with float zero points."""
    nb = k // QK
    blk = np.ascontiguousarray(raw).reshape(n, nb, 20)
    d = blk[:, :, 0:2].copy().view(np.float16).reshape(n, nb).astype(np.float32)
    m = blk[:, :, 2:4].copy().view(np.float16).reshape(n, nb).astype(np.float32)
    qs = blk[:, :, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # [n, nb, 32] element order 0..31
    zero_d = d == 0
    if zero_d.any():
        # every element of the block is m: q = 1, scale m, zero point 0
        q = q.copy()
        q[zero_d] = 1
    packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
    with np.errstate(divide="ignore", invalid="ignore"):
        zp = np.where(zero_d, np.float32(0), -m / np.where(zero_d, np.float32(1), d)).astype(np.float32)
    scales = np.where(zero_d, m, d).astype(np.float32)
    mins = np.where(zero_d, np.float32(0), m).astype(np.float32)
    return NBitsWeight(4, n, k, QK, np.ascontiguousarray(packed), scales.reshape(-1),
                       zp.reshape(-1).astype(np.float32), mins.reshape(-1))


def q8_0_split(raw, n, k):
    """raw: uint8 [N, K/32*34] (GGUF Q8_0 rows) -> (uint8 q+128 [N, K], float32 d [N, K/32])."""
    nb = k // QK
    blk = np.ascontiguousarray(raw).reshape(n, nb, 34)
    d = blk[:, :, 0:2].copy().view(np.float16).reshape(n, nb).astype(np.float32)
    q = blk[:, :, 2:34].copy().view(np.int8).astype(np.int16) + 128
    return q.astype(np.uint8).reshape(n, k), d


def q8_0_to_nbits(raw, n, k):
    data, d = q8_0_split(raw, n, k)
    nb = k // QK
    return NBitsWeight(8, n, k, QK, data.reshape(n, nb, QK), d.reshape(-1),
                       np.full(n * nb, 128, dtype=np.uint8))


def dequant_q4_1_gguf(raw, n, k):
    """Reference GGUF Q4_1 dequantisation (q*d + m in float32), independent of the repacking."""
    nb = k // QK
    blk = np.ascontiguousarray(raw).reshape(n, nb, 20)
    d = blk[:, :, 0:2].copy().view(np.float16).astype(np.float32)
    m = blk[:, :, 2:4].copy().view(np.float16).astype(np.float32)
    qs = blk[:, :, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
    return (q * d + m).reshape(n, k).astype(np.float32)


def dequant_q8_0_gguf(raw, n, k):
    nb = k // QK
    blk = np.ascontiguousarray(raw).reshape(n, nb, 34)
    d = blk[:, :, 0:2].copy().view(np.float16).astype(np.float32)
    q = blk[:, :, 2:34].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(n, k).astype(np.float32)


def ulp_distance(a, b):
    """Per-element distance in float32 ulps (0 where bit-identical)."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


# ----------------------------------------------------------------------------------------------
# Model description


@dataclasses.dataclass
class LlamaConfig:
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_base: float
    eps: float
    max_length: int


@dataclasses.dataclass
class LayerWeights:
    attn_norm: np.ndarray  # float32 [H]
    ffn_norm: np.ndarray
    q: NBitsWeight         # [n_heads*hd, H], rows in GGUF (adjacent-pair RoPE) order
    k: NBitsWeight
    v: NBitsWeight
    o: NBitsWeight
    gate: NBitsWeight
    up: NBitsWeight
    down: NBitsWeight


@dataclasses.dataclass
class LlamaWeights:
    embed_q: np.ndarray     # uint8 [V, H] = q8 + 128
    embed_scales: np.ndarray  # float32 [V, H/32]
    layers: list
    norm: np.ndarray        # float32 [H]
    lm_head: NBitsWeight    # bits 8 (tied: the embedding's bytes) or 4

    def embed_float(self):
        v, h = self.embed_q.shape
        q = self.embed_q.astype(np.float32).reshape(v, h // QK, QK) - 128.0
        return (q * self.embed_scales.reshape(v, h // QK, 1)).reshape(v, h).astype(np.float32)


def rope_cache(cfg):
    half = cfg.head_dim // 2
    inv = 1.0 / (cfg.rope_base ** (np.arange(half, dtype=np.float64) * 2.0 / cfg.head_dim))
    t = np.arange(cfg.max_length, dtype=np.float64)
    ang = np.outer(t, inv)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def weight_bytes_per_token(w):
    """Bytes of weights a decode step reads: all MatMulNBits B+scales+zp, norms, one embedding row."""
    total = w.lm_head.nbytes() + w.norm.nbytes
    for lw in w.layers:
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            total += getattr(lw, name).nbytes()
        total += lw.attn_norm.nbytes + lw.ffn_norm.nbytes
    h = w.embed_q.shape[1]
    total += h + (h // QK) * 4 + (h // QK)  # data row, scales, zero points
    return int(total)


# ----------------------------------------------------------------------------------------------
# GenAI form


class _G:
    def __init__(self):
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(self, op, inputs, outputs=None, name=None, domain="", **attrs):
        name = name or self.name(op)
        if outputs is None:
            outputs = [name + "/out"]
        elif isinstance(outputs, int):
            outputs = [f"{name}/out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain or None, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs


def _mnb(g, x, w, prefix, accuracy_level=4, q4_form="zp"):
    """q4_form 'zp': MatMulNBits with float zero points -m/d (the contract's form).
    'offset' (Q4_1 weights only): MatMulNBits without zero points (ORT's default 8) plus the per-block
    constant as a float MatMul of the activations' block sums: x.W^T = MatMulNBits(x) +
    blocksum(x) @ (8 d + m); the same weights, only the float association differs. ONNX Runtime 1.32 runs
    float zero points on a slow path (~70x slower than uint8 or none), hence this form for benchmarks."""
    b = g.init(prefix + ".qweight", w.b)
    s = g.init(prefix + ".scales", w.scales)
    if q4_form == "offset" and w.mins is not None:
        y0 = g.node("MatMulNBits", [x, b, s], name=prefix + "/MatMulNBits", domain="com.microsoft",
                    K=w.k, N=w.n, bits=w.bits, block_size=w.block, accuracy_level=accuracy_level)
        nb = w.k // w.block
        off = (8.0 * w.scales.astype(np.float32) + w.mins).astype(np.float32).reshape(w.n, nb).T
        xs = g.node("Reshape", [x, g.init(prefix + ".block_shape", np.array([0, 0, nb, w.block], np.int64))],
                    name=prefix + "/BlockReshape")
        bsum = g.node("ReduceSum", [xs, g.init(prefix + ".block_axis", np.array([-1], np.int64))],
                      name=prefix + "/BlockSum", keepdims=0)
        y1 = g.node("MatMul", [bsum, g.init(prefix + ".block_offsets", np.ascontiguousarray(off))],
                    name=prefix + "/BlockOffsets")
        return g.node("Add", [y0, y1], name=prefix + "/Add")
    z = g.init(prefix + ".qzeros", w.zp)
    return g.node("MatMulNBits", [x, b, s, z], name=prefix + "/MatMulNBits", domain="com.microsoft",
                  K=w.k, N=w.n, bits=w.bits, block_size=w.block, accuracy_level=accuracy_level)


def build_genai(cfg, w, embed_op="GatherBlockQuantized", accuracy_level=4, lm_head_accuracy_level=0,
                q4_form="zp", kv_dtype="float32"):
    """ONNX Runtime GenAI form. embed_op: 'GatherBlockQuantized' or 'DequantizeLinear' (block_size + Gather).

    accuracy_level of the 4-bit layer MatMulNBits: 4 (as ORT GenAI's builder writes); with float zero points
    ORT 1.32 still computes them in float32 (checked: same logits as level 0 to 1e-5).
    lm_head_accuracy_level: 0 by default, because with uint8 zero points and level 4 ORT quantises the
    activations to int8 (the tiny model's logits move by ~0.2%), which would make ORT's greedy ids depend on
    that approximation; 0 keeps ORT's reference exact float32 math.
    kv_dtype: 'float32', or 'float16' for a half-precision KV cache (as llama.cpp keeps it): the past/present
    tensors are float16, GroupQueryAttention runs in float16 (its query/key/value are Cast to float16, the
    cos/sin caches are float16, its output is Cast back to float32: ORT's CPU kernel wants one type T for all
    of them); everything else stays float32."""
    if kv_dtype not in ("float32", "float16"):
        raise ValueError(f"kv_dtype {kv_dtype!r}: float32 or float16")
    half = kv_dtype == "float16"
    kv_type = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    g = _G()
    H = cfg.hidden
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", cfg.vocab])]
    for i in range(cfg.n_layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", kv_type,
                ["batch_size", cfg.n_kv_heads, "past_sequence_length", cfg.head_dim]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", kv_type,
                ["batch_size", cfg.n_kv_heads, "total_sequence_length", cfg.head_dim]))

    # embedding
    v = cfg.vocab
    if embed_op == "GatherBlockQuantized":
        data = g.init("model.embed_tokens.weight", w.embed_q)
        sc = g.init("model.embed_tokens.scales", w.embed_scales)
        zp = g.init("model.embed_tokens.zero_points", np.full(w.embed_scales.shape, 128, dtype=np.uint8))
        x = g.node("GatherBlockQuantized", [data, "input_ids", sc, zp], name="/model/embed_tokens/GatherBlockQuantized",
                   domain="com.microsoft", bits=8, block_size=QK, gather_axis=0, quantize_axis=1)
    else:
        data = g.init("model.embed_tokens.weight", w.embed_q)
        sc = g.init("model.embed_tokens.scales", w.embed_scales)
        zp = g.init("model.embed_tokens.zero_points", np.full(w.embed_scales.shape, 128, dtype=np.uint8))
        table = g.node("DequantizeLinear", [data, sc, zp], name="/model/embed_tokens/DequantizeLinear",
                       axis=1, block_size=QK)
        x = g.node("Gather", [table, "input_ids"], name="/model/embed_tokens/Gather", axis=0)

    # attention metadata
    red = g.node("ReduceSum", ["attention_mask", g.init("/model/attn_mask_reformat/one_axis", np.array([1], np.int64))],
                 name="/model/attn_mask_reformat/ReduceSum", keepdims=0)
    sub = g.node("Sub", [red, g.init("/model/attn_mask_reformat/one", np.array(1, np.int64))],
                 name="/model/attn_mask_reformat/Sub")
    seqlens_k = g.node("Cast", [sub], name="/model/attn_mask_reformat/seqlens_k", to=TensorProto.INT32)
    shape = g.node("Shape", ["attention_mask"], name="/model/attn_mask_reformat/Shape")
    tot = g.node("Gather", [shape, g.init("/model/attn_mask_reformat/idx1", np.array(1, np.int64))],
                 name="/model/attn_mask_reformat/Gather", axis=0)
    total_len = g.node("Cast", [tot], name="/model/attn_mask_reformat/total_seq_len", to=TensorProto.INT32)
    cos, sin = rope_cache(cfg)
    if half:
        cos, sin = cos.astype(np.float16), sin.astype(np.float16)
    cos_n = g.init("cos_cache", cos)
    sin_n = g.init("sin_cache", sin)

    residual = x
    hidden_out = None
    for i, lw in enumerate(w.layers):
        p = f"/model/layers.{i}"
        ln = g.init(f"model.layers.{i}.input_layernorm.weight", lw.attn_norm)
        if i == 0:
            h = g.node("SimplifiedLayerNormalization", [residual, ln], name=p + "/input_layernorm/LayerNorm",
                       axis=-1, epsilon=cfg.eps, stash_type=1)
        else:
            outs = [p + "/input_layernorm/output_0", "", "", p + "/input_layernorm/output_3"]
            g.node("SkipSimplifiedLayerNormalization", [hidden_out, residual, ln], outs,
                   name=p + "/input_layernorm/SkipLayerNorm", domain="com.microsoft", epsilon=cfg.eps)
            h, residual = outs[0], outs[3]
        q = _mnb(g, h, lw.q, f"model.layers.{i}.attn.q_proj", accuracy_level, q4_form)
        k = _mnb(g, h, lw.k, f"model.layers.{i}.attn.k_proj", accuracy_level, q4_form)
        vv = _mnb(g, h, lw.v, f"model.layers.{i}.attn.v_proj", accuracy_level, q4_form)
        gqa_out = [p + "/attn/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"]
        if half:
            q, k, vv = (g.node("Cast", [t], name=f"{p}/attn/{n}_proj/Cast", to=TensorProto.FLOAT16)
                        for t, n in ((q, "q"), (k, "k"), (vv, "v")))
            gqa_out[0] = p + "/attn/GroupQueryAttention/output_0_f16"
        g.node("GroupQueryAttention",
               [q, k, vv, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens_k, total_len,
                cos_n, sin_n], gqa_out, name=p + "/attn/GroupQueryAttention", domain="com.microsoft",
               num_heads=cfg.n_heads, kv_num_heads=cfg.n_kv_heads, do_rotary=1, rotary_interleaved=1,
               scale=float(1.0 / np.sqrt(cfg.head_dim)), local_window_size=-1)
        attn = gqa_out[0]
        if half:
            attn = g.node("Cast", [attn], [p + "/attn/GroupQueryAttention/output_0"],
                          name=p + "/attn/GroupQueryAttention/Cast", to=TensorProto.FLOAT)
        o = _mnb(g, attn, lw.o, f"model.layers.{i}.attn.o_proj", accuracy_level, q4_form)
        pln = g.init(f"model.layers.{i}.post_attention_layernorm.weight", lw.ffn_norm)
        outs = [p + "/post_attention_layernorm/output_0", "", "", p + "/post_attention_layernorm/output_3"]
        g.node("SkipSimplifiedLayerNormalization", [o, residual, pln], outs,
               name=p + "/post_attention_layernorm/SkipLayerNorm", domain="com.microsoft", epsilon=cfg.eps)
        h, residual = outs[0], outs[3]
        gate = _mnb(g, h, lw.gate, f"model.layers.{i}.mlp.gate_proj", accuracy_level, q4_form)
        up = _mnb(g, h, lw.up, f"model.layers.{i}.mlp.up_proj", accuracy_level, q4_form)
        sig = g.node("Sigmoid", [gate], name=p + "/mlp/act_fn/Sigmoid")
        silu = g.node("Mul", [gate, sig], name=p + "/mlp/act_fn/Mul")
        prod = g.node("Mul", [silu, up], name=p + "/mlp/Mul")
        hidden_out = _mnb(g, prod, lw.down, f"model.layers.{i}.mlp.down_proj", accuracy_level, q4_form)

    fn = g.init("model.norm.weight", w.norm)
    outs = ["/model/norm/output_0", "", "", ""]
    g.node("SkipSimplifiedLayerNormalization", [hidden_out, residual, fn], outs[:1],
           name="/model/norm/SkipLayerNorm", domain="com.microsoft", epsilon=cfg.eps)
    lm = w.lm_head
    b = g.init("lm_head.qweight", lm.b)
    s = g.init("lm_head.scales", lm.scales)
    z = g.init("lm_head.qzeros", lm.zp)
    g.node("MatMulNBits", [outs[0], b, s, z], ["logits"], name="/lm_head/MatMulNBits", domain="com.microsoft",
           K=lm.k, N=lm.n, bits=lm.bits, block_size=lm.block, accuracy_level=lm_head_accuracy_level)

    graph = helper.make_graph(g.nodes, "main_graph", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                     helper.make_opsetid("com.microsoft", 1)],
                              producer_name="tandem tools/llm_onnx_builder.py")
    model.ir_version = 10
    return model


def genai_config(cfg, bos, eos, pad, context_length=None):
    ctx = context_length or cfg.max_length
    return {
        "model": {
            "bos_token_id": bos,
            "context_length": ctx,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": cfg.head_dim,
                "hidden_size": cfg.hidden,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": cfg.n_heads,
                "num_hidden_layers": cfg.n_layers,
                "num_key_value_heads": cfg.n_kv_heads,
            },
            "eos_token_id": eos,
            "pad_token_id": pad,
            "type": "llama",
            "vocab_size": cfg.vocab,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": ctx,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": True,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }


# ----------------------------------------------------------------------------------------------
# optimum form (standard ops only)


def interleaved_to_half_rows(wf, n_heads, head_dim):
    """Rows of a Q/K weight [n_heads*hd, K] from adjacent-pair RoPE order to HF's rotate_half order."""
    k = wf.shape[1]
    return wf.reshape(n_heads, head_dim // 2, 2, k).transpose(0, 2, 1, 3).reshape(n_heads * head_dim, k)


def build_optimum(cfg, w, opset=17):
    """HF optimum-style export: float weights (the dequantised values of w), rotate_half RoPE with Q/K rows
    put back in HF order (same function as the GenAI form), Concat KV cache, additive causal mask."""
    g = _G()
    H, nh, kvh, hd = cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    rep = nh // kvh
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "total_sequence_length"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", cfg.vocab])]
    for i in range(cfg.n_layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", TensorProto.FLOAT,
                ["batch_size", kvh, "past_sequence_length", hd]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", TensorProto.FLOAT,
                ["batch_size", kvh, "past_sequence_length + sequence_length", hd]))

    def c64(name, vals):
        return g.init(name, np.array(vals, dtype=np.int64))

    def rmsnorm(x, wname, wval):
        wn = g.init(wname, wval)
        sq = g.node("Mul", [x, x])
        mean = g.node("ReduceMean", [sq], axes=[-1], keepdims=1)
        eps = g.init(g.name("eps"), np.array(cfg.eps, np.float32))
        den = g.node("Sqrt", [g.node("Add", [mean, eps])])
        return g.node("Mul", [g.node("Div", [x, den]), wn])

    def linear(x, wname, wf):
        return g.node("MatMul", [x, g.init(wname, np.ascontiguousarray(wf.T))])

    emb = g.init("model.embed_tokens.weight", w.embed_float())
    x = g.node("Gather", [emb, "input_ids"], axis=0)

    # rotary tables: [B, 1, S, hd/2]
    cos, sin = rope_cache(cfg)
    cos_t = g.node("Gather", [g.init("cos_cached", cos), "position_ids"], axis=0)
    sin_t = g.node("Gather", [g.init("sin_cached", sin), "position_ids"], axis=0)
    ax1 = c64("axis1", [1])
    cos_t = g.node("Unsqueeze", [cos_t, ax1])
    sin_t = g.node("Unsqueeze", [sin_t, ax1])

    # additive mask [B, 1, S, T]: key t visible to query j iff t <= past + j and attention_mask[b, t] == 1
    ids_shape = g.node("Shape", ["input_ids"])
    seq = g.node("Gather", [ids_shape, c64("idx1s", 1)], axis=0)
    am_shape = g.node("Shape", ["attention_mask"])
    tot = g.node("Gather", [am_shape, c64("idx1t", 1)], axis=0)
    past = g.node("Sub", [tot, seq])
    zero = c64("zero", 0)
    one = c64("one", 1)
    kpos = g.node("Range", [zero, tot, one])                 # [T]
    qpos = g.node("Range", [past, tot, one])                 # [S]
    qpos2 = g.node("Unsqueeze", [qpos, ax1])                 # [S, 1]
    causal = g.node("LessOrEqual", [kpos, qpos2])            # [S, T]
    am_b = g.node("Cast", ["attention_mask"], to=TensorProto.BOOL)  # [B, T]
    am_b = g.node("Unsqueeze", [am_b, c64("axes12", [1, 2])])      # [B, 1, 1, T]
    allowed = g.node("And", [causal, am_b])                 # [B, 1, S, T]
    mask = g.node("Where", [allowed, g.init("mask_zero", np.array(0.0, np.float32)),
                            g.init("mask_min", np.array(np.finfo(np.float32).min, np.float32))])

    half = hd // 2
    split_sizes = c64("rope_split", [half, half])

    def rope(t):  # t [B, h, S, hd]
        a, b = g.node("Split", [t, split_sizes], 2, axis=-1)
        ra = g.node("Sub", [g.node("Mul", [a, cos_t]), g.node("Mul", [b, sin_t])])
        rb = g.node("Add", [g.node("Mul", [b, cos_t]), g.node("Mul", [a, sin_t])])
        return g.node("Concat", [ra, rb], axis=-1)

    def heads(t, n):  # [B, S, n*hd] -> [B, n, S, hd]
        r = g.node("Reshape", [t, c64(g.name("shape"), [0, 0, n, hd])])
        return g.node("Transpose", [r], perm=[0, 2, 1, 3])

    def repeat_kv(t):  # [B, kvh, T, hd] -> [B, nh, T, hd]
        if rep == 1:
            return t
        u = g.node("Unsqueeze", [t, c64(g.name("ax2"), [2])])
        sh = g.node("Shape", [u])
        tgt = g.node("Concat", [g.node("Slice", [sh, c64(g.name("s"), [0]), c64(g.name("e"), [2])]),
                                c64(g.name("rep"), [rep]),
                                g.node("Slice", [sh, c64(g.name("s"), [3]), c64(g.name("e"), [5])])], axis=0)
        e = g.node("Expand", [u, tgt])
        return g.node("Reshape", [e, c64(g.name("shape"), [0, nh, -1, hd])])

    scale = g.init("attn_scale", np.array(1.0 / np.sqrt(hd), np.float32))
    for i, lw in enumerate(w.layers):
        p = f"model.layers.{i}"
        h = rmsnorm(x, p + ".input_layernorm.weight", lw.attn_norm)
        qf = interleaved_to_half_rows(lw.q.dequant(), nh, hd)
        kf = interleaved_to_half_rows(lw.k.dequant(), kvh, hd)
        q = rope(heads(linear(h, p + ".self_attn.q_proj.weight", qf), nh))
        k = rope(heads(linear(h, p + ".self_attn.k_proj.weight", kf), kvh))
        v = heads(linear(h, p + ".self_attn.v_proj.weight", lw.v.dequant()), kvh)
        g.node("Concat", [f"past_key_values.{i}.key", k], [f"present.{i}.key"], axis=2)
        g.node("Concat", [f"past_key_values.{i}.value", v], [f"present.{i}.value"], axis=2)
        kr = repeat_kv(f"present.{i}.key")
        vr = repeat_kv(f"present.{i}.value")
        kt = g.node("Transpose", [kr], perm=[0, 1, 3, 2])
        sc = g.node("Add", [g.node("Mul", [g.node("MatMul", [q, kt]), scale]), mask])
        pr = g.node("Softmax", [sc], axis=-1)
        att = g.node("MatMul", [pr, vr])                                     # [B, nh, S, hd]
        att = g.node("Transpose", [att], perm=[0, 2, 1, 3])
        att = g.node("Reshape", [att, c64(g.name("shape"), [0, 0, nh * hd])])
        x = g.node("Add", [x, linear(att, p + ".self_attn.o_proj.weight", lw.o.dequant())])
        h = rmsnorm(x, p + ".post_attention_layernorm.weight", lw.ffn_norm)
        gate = linear(h, p + ".mlp.gate_proj.weight", lw.gate.dequant())
        up = linear(h, p + ".mlp.up_proj.weight", lw.up.dequant())
        act = g.node("Mul", [gate, g.node("Sigmoid", [gate])])
        x = g.node("Add", [x, linear(g.node("Mul", [act, up]), p + ".mlp.down_proj.weight", lw.down.dequant())])
    h = rmsnorm(x, "model.norm.weight", w.norm)
    g.node("MatMul", [h, g.init("lm_head.weight", np.ascontiguousarray(w.lm_head.dequant().T))], ["logits"])
    graph = helper.make_graph(g.nodes, "main_graph", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tandem tools/llm_onnx_builder.py (optimum form)")
    model.ir_version = 8
    return model


def save_model(model, path, external_data=False):
    if external_data:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=1024)
    else:
        onnx.save_model(model, path)


# ----------------------------------------------------------------------------------------------
# tokenizer.json / tokenizer_config.json (byte-level BPE)

SMOLLM_CHAT_TEMPLATE = None  # the converter takes the template from the GGUF


def byte_to_unicode():
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes map to themselves, the others to
    U+0100 upwards in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def byte_level_bpe_json(tokens, merges, special_ids, pre="smollm"):
    """tokenizer.json (HF tokenizers format) for a GPT-2 style byte-level BPE.

    tokens: list of str (id order); merges: list of 'a b' strings (rank order);
    special_ids: ids of control tokens (added as special added_tokens);
    pre: GGUF tokenizer.ggml.pre; 'smollm' = individual digits then the GPT-2 byte-level regex.
    """
    if pre in ("smollm",):
        pre_tok = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    elif pre in ("gpt2", "default", None):
        pre_tok = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    else:
        raise ValueError(f"tokenizer.ggml.pre {pre!r} is not supported by this converter")
    added = [{"id": int(i), "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in sorted(special_ids)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tok,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }


def tokenizer_config_json(tokens, special_ids, bos, eos, pad, unk, chat_template, max_length):
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i): {"content": tokens[i], "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}
                                 for i in sorted(special_ids)},
        "additional_special_tokens": [tokens[i] for i in sorted(special_ids) if i not in (bos, eos, pad, unk)],
        "bos_token": tokens[bos],
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": tokens[eos],
        "model_max_length": max_length,
        "pad_token": tokens[pad] if pad is not None else None,
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": tokens[unk] if unk is not None else None,
        "vocab_size": len(tokens),
    }
