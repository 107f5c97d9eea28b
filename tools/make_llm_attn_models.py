#!/usr/bin/env python3
"""LLM attention / rotary / RMS-norm operator tests: small one-node models with ONNX Runtime's
outputs as the reference, in the node-test layout
(tests/models_llm_attn/NAME/model.onnx + test_data_set_0/{input,output}_N.pb).

Ops: com.microsoft GroupQueryAttention, RotaryEmbedding, SkipSimplifiedLayerNormalization,
SimplifiedLayerNormalization (default domain, as ONNX Runtime registers it), and ONNX opset-23
Attention, RotaryEmbedding, RMSNormalization. Shapes are random-ish and odd where the op
allows it; GQA covers kv heads < heads, past length 0 and > 0, prefill and decode, batch 2
with different seqlens_k (right padding), the shared-buffer form (past of max length),
packed QKV, rotary (interleaved and not), softcap, local window, smooth softmax.

Float16 GroupQueryAttention cases (T = float16, the half-precision KV cache) go to OUT_DIR_f16
(tests/models_llm_attn_f16); LLM_ATTN_F16_ONLY=1 writes only those.

Deterministic (fixed seeds). Usage: tools/make_llm_attn_models.py [OUT_DIR]
(default tests/models_llm_attn)"""
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F32 = np.float32


def save(out_dir, name, node, feeds, opset=23, out_names=None):
    """One-node model over `feeds` (ordered dict name -> array; None = omitted input)."""
    inputs = []
    for k, a in feeds.items():
        if a is None:
            continue
        et = {np.float32: T.FLOAT, np.float16: T.FLOAT16, np.int32: T.INT32, np.int64: T.INT64, np.bool_: T.BOOL}[a.dtype.type]
        inputs.append(helper.make_tensor_value_info(k, et, list(a.shape)))
    outs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    g = helper.make_graph([node], name, inputs, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            helper.make_opsetid("com.microsoft", 1)],
                          producer_name="tandem-tools")
    m.ir_version = 10
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    fed = {k: a for k, a in feeds.items() if a is not None}
    res = sess.run(None, fed)
    # the model declares the outputs with ONNX Runtime's types and shapes
    del m.graph.output[:]
    for o, a in zip(sess.get_outputs(), res):
        a = np.asarray(a)
        m.graph.output.append(helper.make_tensor_value_info(
            o.name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, inp in enumerate(sess.get_inputs()):
        t = numpy_helper.from_array(fed[inp.name], inp.name)
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for i, (o, a) in enumerate(zip(sess.get_outputs(), res)):
        a = np.asarray(a)
        assert np.isfinite(a).all() if a.dtype == F32 else True, name
        t = numpy_helper.from_array(a, o.name)
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    print(f"{name}: " + ", ".join(f"{o.name}{list(np.asarray(a).shape)}"
                                  for o, a in zip(sess.get_outputs(), res)))


def rnd(rng, *shape):
    return rng.standard_normal(shape).astype(F32)


def rope_cache(max_len, half, base=10000.0):
    inv = 1.0 / base ** (np.arange(half, dtype=np.float64) / half)
    ang = np.outer(np.arange(max_len, dtype=np.float64), inv)
    return np.cos(ang).astype(F32), np.sin(ang).astype(F32)


# ---- GroupQueryAttention ----

def gqa(out_dir, rng, name, B, S, H, KVH, D, P, seqlens, total, rotary=False, interleaved=0,
        packed=False, max_len=None, extra_inputs=None, f16=False, **attrs):
    feeds = {}
    if packed:
        feeds["query"] = rnd(rng, B, S, (H + 2 * KVH) * D)
        feeds["key"] = feeds["value"] = None
    else:
        feeds["query"] = rnd(rng, B, S, H * D)
        feeds["key"] = rnd(rng, B, S, KVH * D)
        feeds["value"] = rnd(rng, B, S, KVH * D)
    feeds["past_key"] = rnd(rng, B, KVH, P, D)
    feeds["past_value"] = rnd(rng, B, KVH, P, D)
    feeds["seqlens_k"] = np.array(seqlens, np.int32)
    feeds["total_sequence_length"] = np.array(total, np.int32)
    if rotary:
        half = attrs.pop("rot_half", D // 2)
        c, s = rope_cache(max_len or 64, half)
        feeds["cos_cache"], feeds["sin_cache"] = c, s
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    for k, a in (extra_inputs or {}).items():
        if "cos_cache" not in feeds:
            feeds["cos_cache"] = feeds["sin_cache"] = None
        feeds.setdefault("position_ids", None)
        feeds.setdefault("attention_bias", None)
        feeds[k] = a
    if f16:  # T = float16: every float input (the KV cache of gguf_to_onnx.py --kv-dtype float16)
        feeds = {k: a.astype(np.float16) if a is not None and a.dtype == F32 else a for k, a in feeds.items()}
    names = [k if a is not None else "" for k, a in feeds.items()]
    node = helper.make_node("GroupQueryAttention", names, ["output", "present_key", "present_value"],
                            domain="com.microsoft", num_heads=H, kv_num_heads=KVH, **attrs)
    save(out_dir, name, node, feeds)


def gqa_cases(out_dir):
    rng = np.random.default_rng(19)
    # first prompts (past length 0)
    gqa(out_dir, rng, "gqa_prompt", 1, 5, 4, 2, 8, 0, [4], 5)
    gqa(out_dir, rng, "gqa_prompt_pad_b2", 2, 6, 6, 2, 24, 0, [5, 2], 6)
    gqa(out_dir, rng, "gqa_prompt_mqa", 1, 9, 5, 1, 8, 0, [8], 9)
    # decode (S = 1) with past, batch 2 with different lengths
    gqa(out_dir, rng, "gqa_decode_b2", 2, 1, 6, 2, 8, 7, [7, 4], 8)
    gqa(out_dir, rng, "gqa_decode_mha", 1, 1, 3, 3, 40, 33, [33], 34)
    # chunk of new tokens after a past (S > 1, past > 0)
    gqa(out_dir, rng, "gqa_chunk", 1, 3, 4, 1, 24, 6, [8], 9)
    # shared buffer: past and present of max length
    gqa(out_dir, rng, "gqa_share_decode_b2", 2, 1, 9, 3, 64, 20, [12, 9], 13)
    gqa(out_dir, rng, "gqa_share_prompt_pad_b2", 2, 5, 4, 2, 16, 11, [4, 2], 5)
    gqa(out_dir, rng, "gqa_share_long_decode", 1, 1, 3, 1, 64, 200, [173], 174)
    # rotary inside GQA (new Q and K only)
    gqa(out_dir, rng, "gqa_rotary_prompt_interleaved", 1, 7, 9, 3, 32, 0, [6], 7, rotary=True,
        interleaved=1)
    gqa(out_dir, rng, "gqa_rotary_decode_b2_half", 2, 1, 4, 2, 16, 9, [9, 6], 10, rotary=True,
        interleaved=0)
    gqa(out_dir, rng, "gqa_rotary_share_decode", 1, 1, 9, 3, 64, 48, [37], 38, rotary=True,
        interleaved=1, max_len=48)
    gqa(out_dir, rng, "gqa_rotary_share_prompt_pad_b2", 2, 6, 6, 3, 32, 16, [5, 3], 6, rotary=True,
        interleaved=1, max_len=16)
    gqa(out_dir, rng, "gqa_rotary_partial", 1, 3, 4, 2, 32, 4, [6], 7, rotary=True, interleaved=1,
        rot_half=8)
    gqa(out_dir, rng, "gqa_rotary_chunk", 1, 4, 4, 2, 48, 5, [8], 9, rotary=True, interleaved=0)
    # attributes
    gqa(out_dir, rng, "gqa_softcap", 1, 4, 4, 2, 8, 5, [8], 9, softcap=1.5)
    gqa(out_dir, rng, "gqa_local_window", 1, 5, 4, 2, 8, 6, [10], 11, local_window_size=4)
    gqa(out_dir, rng, "gqa_local_window_decode_b2", 2, 1, 4, 2, 16, 12, [12, 7], 13,
        local_window_size=5)
    gqa(out_dir, rng, "gqa_smooth_softmax", 1, 4, 4, 2, 8, 3, [6], 7, smooth_softmax=1)
    gqa(out_dir, rng, "gqa_scale", 2, 3, 6, 3, 8, 0, [2, 1], 3, scale=0.21)
    gqa(out_dir, rng, "gqa_packed_qkv", 1, 3, 4, 2, 16, 4, [6], 7, packed=True)
    gqa(out_dir, rng, "gqa_packed_rotary_decode", 2, 1, 6, 2, 32, 8, [8, 5], 9, packed=True,
        rotary=True, interleaved=1)
    gqa(out_dir, rng, "gqa_bidirectional_prompt", 1, 4, 4, 2, 8, 0, [3], 4, causal=0)
    gqa(out_dir, rng, "gqa_bidirectional_chunk", 1, 3, 6, 2, 16, 5, [7], 8, causal=0)
    gqa(out_dir, rng, "gqa_head_sink", 1, 3, 4, 2, 8, 4, [6], 7,
        extra_inputs={"head_sink": rnd(rng, 4)})
    gqa(out_dir, rng, "gqa_attention_bias", 1, 3, 4, 2, 8, 4, [6], 7, softcap=2.0,
        extra_inputs={"attention_bias": rnd(rng, 1, 4, 3, 7)})
    gqa(out_dir, rng, "gqa_attention_bias_b2_window", 2, 1, 4, 2, 16, 6, [6, 3], 7,
        local_window_size=3, extra_inputs={"attention_bias": rnd(rng, 2, 1, 1, 7)})


# ---- RotaryEmbedding ----

def gqa_f16_cases(out_dir):
    """GroupQueryAttention with T = float16 (own folder: the ctest's tolerance is float16's).
    Head sizes 64, 32 and 16 (AVX-512 row routines), 8 and 24 (AVX2's; the portable ones run under
    TANDEM_CPU_ISA=portable). ONNX Runtime's float16 kernel wants head sizes that are multiples of 8, and
    of 16 with rotary."""
    rng = np.random.default_rng(1916)
    gqa(out_dir, rng, "gqa16_prompt", 1, 5, 4, 2, 8, 0, [4], 5, f16=True)
    gqa(out_dir, rng, "gqa16_rotary_prompt_pad_b2", 2, 6, 6, 2, 64, 0, [5, 2], 6, rotary=True,
        interleaved=1, f16=True)
    gqa(out_dir, rng, "gqa16_rotary_decode_b2", 2, 1, 9, 3, 64, 9, [9, 6], 10, rotary=True,
        interleaved=1, f16=True)
    gqa(out_dir, rng, "gqa16_rotary_share_decode_b2", 2, 1, 9, 3, 64, 20, [12, 9], 13, rotary=True,
        interleaved=1, f16=True)
    gqa(out_dir, rng, "gqa16_rotary_share_long_decode", 1, 1, 9, 3, 64, 200, [173], 174, rotary=True,
        interleaved=1, max_len=256, f16=True)
    gqa(out_dir, rng, "gqa16_rotary_share_prompt_pad_b2", 2, 6, 6, 3, 32, 16, [5, 3], 6, rotary=True,
        interleaved=0, f16=True)
    gqa(out_dir, rng, "gqa16_chunk_d24", 1, 3, 4, 2, 24, 6, [8], 9,
        f16=True)
    gqa(out_dir, rng, "gqa16_packed_rotary_decode", 2, 1, 6, 2, 32, 8, [8, 5], 9, packed=True,
        rotary=True, interleaved=1, f16=True)
    gqa(out_dir, rng, "gqa16_softcap_window", 1, 5, 4, 2, 16, 6, [10], 11, softcap=1.5,
        local_window_size=4, f16=True)
    gqa(out_dir, rng, "gqa16_smooth_softmax", 1, 4, 4, 2, 8, 3, [6], 7, smooth_softmax=1, f16=True)


def rotary_cases(out_dir):
    rng = np.random.default_rng(23)
    # com.microsoft: (input, position_ids, cos, sin)
    def ms(name, x, pid, half, max_len=40, **attrs):
        c, s = rope_cache(max_len, half)
        node = helper.make_node("RotaryEmbedding", ["input", "position_ids", "cos_cache", "sin_cache"],
                                ["output"], domain="com.microsoft", **attrs)
        save(out_dir, name, node, {"input": x, "position_ids": pid, "cos_cache": c, "sin_cache": s})
    pid = np.array([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]], np.int64)
    ms("ms_rotary_3d_interleaved", rnd(rng, 2, 5, 3 * 16), pid, 8, interleaved=1)
    ms("ms_rotary_3d_half", rnd(rng, 2, 5, 2 * 24), pid, 12, num_heads=2)
    ms("ms_rotary_4d_offset", rnd(rng, 1, 3, 6, 16), np.array([9], np.int64), 8)
    ms("ms_rotary_partial", rnd(rng, 2, 5, 4 * 32), pid, 8, num_heads=4, rotary_embedding_dim=16,
       interleaved=1)
    # ONNX 23: (X, cos, sin, position_ids)
    def onnx23(name, x, pid, half, max_len=40, cache3d=None, **attrs):
        if pid is not None:
            c, s = rope_cache(max_len, half)
            feeds = {"X": x, "cos_cache": c, "sin_cache": s, "position_ids": pid}
        else:
            feeds = {"X": x, "cos_cache": cache3d[0], "sin_cache": cache3d[1]}
        node = helper.make_node("RotaryEmbedding", list(feeds), ["Y"], **attrs)
        save(out_dir, name, node, feeds)
    onnx23("rotary23_4d", rnd(rng, 2, 3, 5, 16), pid, 8)
    onnx23("rotary23_3d_interleaved", rnd(rng, 2, 5, 3 * 12), pid, 6, num_heads=3, interleaved=1)
    onnx23("rotary23_partial", rnd(rng, 2, 2, 5, 20), pid, 4, rotary_embedding_dim=8)
    ang = rng.uniform(0, 6, (2, 5, 5)).astype(F32)
    onnx23("rotary23_no_position_ids", rnd(rng, 2, 5, 2 * 10), None, 5, num_heads=2,
           cache3d=(np.cos(ang), np.sin(ang)))


# ---- RMS normalisations ----

def norm_cases(out_dir):
    rng = np.random.default_rng(5)
    def simp(name, shape, axis=-1, inv=True, **attrs):
        x = rnd(rng, *shape)
        sc = rnd(rng, *shape[axis:]) if axis != -1 else rnd(rng, shape[-1])
        node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"],
                                ["Y", "inv_std_var"] if inv else ["Y"], axis=axis, **attrs)
        save(out_dir, name, node, {"X": x, "scale": sc}, opset=21)
    simp("simplified_ln", [2, 7, 37], epsilon=1e-5)
    simp("simplified_ln_2d_y_only", [5, 576], inv=False, epsilon=1e-6)
    simp("simplified_ln_axis1", [3, 4, 9], axis=1)

    def skip(name, shape, skip_shape=None, bias=False, outs=("output",), **attrs):
        feeds = {"input": rnd(rng, *shape), "skip": rnd(rng, *(skip_shape or shape)),
                 "gamma": rnd(rng, shape[-1])}
        if bias:
            feeds["bias"] = rnd(rng, shape[-1])
        node = helper.make_node("SkipSimplifiedLayerNormalization", list(feeds), list(outs),
                                domain="com.microsoft", **attrs)
        save(out_dir, name, node, feeds, opset=21)
    skip("skip_simplified_ln", [2, 5, 24], epsilon=1e-5)
    skip("skip_simplified_ln_bias_sum", [1, 3, 576], bias=True, epsilon=1e-5,
         outs=("output", "", "", "input_skip_bias_sum"))
    skip("skip_simplified_ln_2d_all", [6, 33], outs=("output", "", "inv_std_var", "input_skip_bias_sum"))

    def rms(name, shape, axis=-1, scale_shape=None, **attrs):
        x = rnd(rng, *shape)
        sc = rnd(rng, *(scale_shape or shape[axis:]))
        node = helper.make_node("RMSNormalization", ["X", "scale"], ["Y"], axis=axis, **attrs)
        save(out_dir, name, node, {"X": x, "scale": sc})
    rms("rms_norm23", [2, 3, 19])
    rms("rms_norm23_axis_m2", [4, 5, 6], axis=-2, epsilon=1e-3)


# ---- Attention (ONNX 23) ----

def attention_cases(out_dir):
    rng = np.random.default_rng(7)
    def att(name, q, k, v, mask=None, pk=None, pv=None, present=False, **attrs):
        feeds = {"Q": q, "K": k, "V": v, "attn_mask": mask, "past_key": pk, "past_value": pv}
        while feeds and list(feeds.values())[-1] is None:
            feeds.popitem()
        names = [n if a is not None else "" for n, a in feeds.items()]
        outs = ["Y", "present_key", "present_value"] if present else ["Y"]
        node = helper.make_node("Attention", names, outs, **attrs)
        save(out_dir, name, node, feeds)
    att("attention23_4d", rnd(rng, 2, 3, 5, 8), rnd(rng, 2, 3, 6, 8), rnd(rng, 2, 3, 6, 12))
    att("attention23_4d_gqa_causal", rnd(rng, 1, 6, 7, 16), rnd(rng, 1, 2, 7, 16),
        rnd(rng, 1, 2, 7, 16), is_causal=1)
    att("attention23_3d_heads", rnd(rng, 2, 4, 4 * 10), rnd(rng, 2, 6, 2 * 10),
        rnd(rng, 2, 6, 2 * 7), q_num_heads=4, kv_num_heads=2)
    att("attention23_bool_mask", rnd(rng, 2, 2, 3, 8), rnd(rng, 2, 2, 5, 8), rnd(rng, 2, 2, 5, 8),
        mask=np.array([[True, True, False, True, False]] * 3, np.bool_))
    att("attention23_float_mask_softcap", rnd(rng, 1, 2, 4, 8), rnd(rng, 1, 2, 4, 8),
        rnd(rng, 1, 2, 4, 8), mask=rnd(rng, 1, 1, 4, 4), softcap=2.0, scale=0.3)
    att("attention23_masked_row", rnd(rng, 1, 2, 3, 8), rnd(rng, 1, 2, 4, 8), rnd(rng, 1, 2, 4, 8),
        mask=np.array([[True, False, True, True], [False] * 4, [False, False, False, True]], np.bool_))
    att("attention23_past_causal", rnd(rng, 1, 4, 3, 16), rnd(rng, 1, 2, 3, 16),
        rnd(rng, 1, 2, 3, 16), pk=rnd(rng, 1, 2, 5, 16), pv=rnd(rng, 1, 2, 5, 16), present=True,
        is_causal=1)
    att("attention23_3d_past_decode", rnd(rng, 2, 1, 6 * 8), rnd(rng, 2, 1, 3 * 8),
        rnd(rng, 2, 1, 3 * 8), pk=rnd(rng, 2, 3, 9, 8), pv=rnd(rng, 2, 3, 9, 8), present=True,
        q_num_heads=6, kv_num_heads=3)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "models_llm_attn")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(out_dir + "_f16", exist_ok=True)
    gqa_f16_cases(out_dir + "_f16")
    if os.environ.get("LLM_ATTN_F16_ONLY"):
        return
    gqa_cases(out_dir)
    rotary_cases(out_dir)
    norm_cases(out_dir)
    attention_cases(out_dir)


if __name__ == "__main__":
    main()
