#!/usr/bin/env python3
"""Small models of ONNX Runtime's block-quantized contrib ops (com.microsoft MatMulNBits and
GatherBlockQuantized) with ONNX Runtime's outputs as the reference, in the node-test layout
(tests/models_llm/NAME/model.onnx + test_data_set_0/{input,output}_N.pb).

Folder names: nbits_*_acc0 (float activations: compare tightly), nbits_*_acc4 (accuracy_level 4:
ONNX Runtime quantizes A to int8 per block, and tandem does too on the decode path but not on
the prefill path: compare within the int8 rounding of A, see ACC4_TOL), nbits_gbq_* (exact
up to float rounding).

Also writes malformed nodes (nbits_bad_*) into tests/bad_models for test_bad_models.

Deterministic: fixed seeds. Usage: tools/make_llm_op_models.py [OUT_DIR [BAD_DIR]]
(default tests/models_llm, tests/bad_models). Only the nbits_* folders there are replaced."""
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
# accuracy_level 4: A quantized to int8 per block (scale amax / 127, round to nearest) moves
# each product by |error| <= ACC4_TOL * (1 + |y|) on these models (A ~ N(0, 1), K up to 576;
# the script checks that a numpy model of that rounding stays within 3/4 of it). The ctest's
# --rtol and --atol for the nbits_*_acc4 folders are this value.
ACC4_TOL = 1e-1


def pack(codes, bits):
    """codes [..., n] (values < 2^bits) -> uint8 [..., ceil(n * bits / 8)], low bits first."""
    per = 8 // bits
    n = codes.shape[-1]
    padded = np.zeros(codes.shape[:-1] + ((n + per - 1) // per * per,), np.uint8)
    padded[..., :n] = codes
    g = padded.reshape(codes.shape[:-1] + (-1, per)).astype(np.uint32)
    out = np.zeros(g.shape[:-1], np.uint32)
    for i in range(per):
        out |= g[..., i] << (i * bits)
    return out.astype(np.uint8)


def save(out_dir, name, model, feeds):

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, inp in enumerate(model.graph.input):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[inp.name], inp.name).SerializeToString())
    for i, (o, v) in enumerate(zip(model.graph.output, outs)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    return outs


def matmul_nbits(out_dir, name, seed, *, bits, bs, K, N, a_shape, zp=None, bias=False,
                 acc=0, weights_as_inputs=False, offsets=None):
    """zp: None (default), 'u8' (packed uint8) or 'f32'. offsets: None, or ONNX Runtime's fast form
    of an asymmetric layer (tools/llm_onnx_builder.py q4_form 'offset'): Y = MatMulNBits(A) (no zero
    points) + MatMul(ReduceSum(Reshape(A, [0.., nb, bs]), -1), C) with C [nb, N] 'f16' (float16
    values, as GGUF's 8 d + m) or 'f32' (any float32); tandem folds it into the packed weights."""
    assert name.endswith(f"_acc{acc}")
    rng = np.random.default_rng(seed)
    nb = (K + bs - 1) // bs
    codes = rng.integers(0, 1 << bits, size=(N, nb * bs), dtype=np.uint8)
    B = pack(codes, bits).reshape(N, nb, bs * bits // 8)
    scales = rng.uniform(0.02, 0.08, size=(N, nb)).astype(np.float32) / (1 << (bits - 4)) \
        if bits >= 4 else rng.uniform(0.05, 0.2, size=(N, nb)).astype(np.float32)
    zdef = float(1 << (bits - 1))
    # zero points near the middle of the codes, as quantizers make them
    lo, hi = (1 << bits) * 3 // 8, (1 << bits) * 5 // 8
    if zp == "u8":
        zcodes = rng.integers(lo, hi + 1, size=(N, nb), dtype=np.uint8)
        zpt = pack(zcodes, bits)
        zf = zcodes.astype(np.float32)
    elif zp == "f32":
        zf = rng.uniform(lo, hi, size=(N, nb)).astype(np.float32)
        zpt = zf
    else:
        zf = np.full((N, nb), zdef, np.float32)
        zpt = None
    bvec = rng.standard_normal(N).astype(np.float32) if bias else None
    A = rng.standard_normal(a_shape).astype(np.float32)
    deq = (codes.astype(np.float32) - np.repeat(zf, bs, axis=1)) * np.repeat(scales, bs, axis=1)
    exact = A @ deq[:, :K].T + (bvec if bias else 0)
    C = None
    if offsets:
        assert zpt is None and not bias and K == nb * bs
        C = rng.uniform(-0.5, 0.5, size=(nb, N)).astype(np.float32)
        if offsets == "f16":
            C = C.astype(np.float16).astype(np.float32)
        exact = exact + A.reshape(a_shape[:-1] + (nb, bs)).sum(axis=-1) @ C

    names = ["A", "B", "scales", "zero_points" if zpt is not None else "", "",
             "bias" if bias else ""]
    while names and names[-1] == "":
        names.pop()
    consts = {"B": B, "scales": scales.reshape(-1)}
    if zpt is not None:
        consts["zero_points"] = zpt.reshape(-1) if zp == "f32" else zpt
    if bias:
        consts["bias"] = bvec
    feeds = {"A": A}
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M"] * (len(a_shape) - 1) + [K])]
    inits = []
    for k, v in consts.items():
        if weights_as_inputs:
            feeds[k] = v
            inputs.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                        list(v.shape)))
        else:
            inits.append(numpy_helper.from_array(v, k))
    node = helper.make_node("MatMulNBits", names, ["Y0" if offsets else "Y"], domain="com.microsoft",
                            K=K, N=N, bits=bits, block_size=bs, accuracy_level=acc)
    nodes = [node]
    if offsets:
        inits += [numpy_helper.from_array(np.array([0] * (len(a_shape) - 1) + [nb, bs], np.int64), "shape"),
                  numpy_helper.from_array(np.array([-1], np.int64), "axis"),
                  numpy_helper.from_array(C, "C")]
        nodes += [helper.make_node("Reshape", ["A", "shape"], ["Ab"]),
                  helper.make_node("ReduceSum", ["Ab", "axis"], ["As"], keepdims=0),
                  helper.make_node("MatMul", ["As", "C"], ["Y1"]),
                  helper.make_node("Add", ["Y0", "Y1"], ["Y"])]
    graph = helper.make_graph(nodes, name, inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=OPSETS, ir_version=10)
    (y,) = save(out_dir, name, model, feeds)
    err = np.abs(y - exact).max()
    if acc == 4:  # what int8 activations per block (scale amax / 127, round to nearest) give
        Ap = np.zeros(a_shape[:-1] + (nb * bs,), np.float32)
        Ap[..., :K] = A
        blk = Ap.reshape(a_shape[:-1] + (nb, bs))
        sa = np.abs(blk).max(axis=-1, keepdims=True) / 127
        qa = np.round(blk / np.where(sa > 0, sa, 1)) * sa
        y8 = qa.reshape(Ap.shape)[..., :K] @ deq[:, :K].T + (bvec if bias else 0)
        if offsets:
            y8 = y8 + A.reshape(a_shape[:-1] + (nb, bs)).sum(axis=-1) @ C
        e8 = np.abs(y8 - exact) / (1 + np.abs(exact))
        assert e8.max() <= ACC4_TOL * 0.75, f"{name}: int8 rounding error {e8.max()} too large"
        print(f"{name}: int8 activations - float: max |d| / (1 + |y|) {e8.max():.2e}")
    tol = 1e-4 + 1e-4 * np.abs(exact).max() if acc != 4 else ACC4_TOL * (1 + np.abs(exact).max())
    assert err <= tol, f"{name}: ORT differs from the float product by {err}"
    print(f"{name}: |y| max {np.abs(exact).max():.3f}, ORT - float {err:.2e}")


def nbits_weights(rng, *, bits, bs, K, N, zp=None, f16_scales=False):
    """Random MatMulNBits constants: (B, scales, zero points or None, dequantized W [N, K])."""
    nb = (K + bs - 1) // bs
    codes = rng.integers(0, 1 << bits, size=(N, nb * bs), dtype=np.uint8)
    B = pack(codes, bits).reshape(N, nb, bs * bits // 8)
    scales = rng.uniform(0.02, 0.08, size=(N, nb)).astype(np.float32) / (1 << (bits - 4))
    if f16_scales:
        scales = scales.astype(np.float16).astype(np.float32)
    zf = np.full((N, nb), float(1 << (bits - 1)), np.float32)
    zpt = None
    if zp == "f32":
        zf = rng.uniform((1 << bits) * 3 // 8, (1 << bits) * 5 // 8, size=(N, nb)).astype(np.float32)
        zpt = zf.reshape(-1)
    deq = (codes.astype(np.float32) - np.repeat(zf, bs, axis=1)) * np.repeat(scales, bs, axis=1)
    return B, scales.reshape(-1), zpt, deq[:, :K]


def fused_block(out_dir, name, seed, *, bits, bs, K, B, S, P, H, KVH, D, I):
    """The shapes of a decoder layer whose MatMulNBits nodes tandem joins (graph/fuse_nbits.c):
    q, k and v of A read by a GroupQueryAttention alone (one node, packed QKV), and a SwiGLU
    MLP Mul(Mul(G, Sigmoid(G)), U) (one node, glu). The parts differ in their constants' forms
    (zero points or not, float16-exact scales or not), so the joined weights take the union form.
    Outputs: the attention's output and present key / value, the MLP's output."""
    acc = int(name[-1])
    assert name.endswith(f"_acc{acc}")
    rng = np.random.default_rng(seed)
    zf = "f32" if bits == 4 else None  # (ONNX Runtime: no float zero points for 8 bits)
    specs = {"q": (H * D, None, True), "k": (KVH * D, zf, False), "v": (KVH * D, None, False),
             "gate": (I, zf, True), "up": (I, None, bits == 8)}
    inits, nodes = [], []
    for nm, (N, zp, f16s) in specs.items():
        Bq, sc, zpt, _ = nbits_weights(rng, bits=bits, bs=bs, K=K, N=N, zp=zp, f16_scales=f16s)
        inits += [numpy_helper.from_array(Bq, nm + "_B"), numpy_helper.from_array(sc, nm + "_s")]
        ins = ["A", nm + "_B", nm + "_s"]
        if zpt is not None:
            inits.append(numpy_helper.from_array(zpt, nm + "_zp"))
            ins.append(nm + "_zp")
        nodes.append(helper.make_node("MatMulNBits", ins, [nm + "_y"], domain="com.microsoft", K=K,
                                      N=N, bits=bits, block_size=bs, accuracy_level=acc))
    half = D // 2
    inv = 1.0 / 10000.0 ** (np.arange(half, dtype=np.float64) / half)
    ang = np.outer(np.arange(P + S + 4, dtype=np.float64), inv)
    feeds = {"A": rng.standard_normal((B, S, K)).astype(np.float32),
             "past_key": rng.standard_normal((B, KVH, P, D)).astype(np.float32),
             "past_value": rng.standard_normal((B, KVH, P, D)).astype(np.float32)}
    inits += [numpy_helper.from_array(np.full(B, P + S - 1, np.int32), "seqlens_k"),
              numpy_helper.from_array(np.array(P + S, np.int32), "total_sequence_length"),
              numpy_helper.from_array(np.cos(ang).astype(np.float32), "cos_cache"),
              numpy_helper.from_array(np.sin(ang).astype(np.float32), "sin_cache")]
    nodes += [helper.make_node("GroupQueryAttention",
                               ["q_y", "k_y", "v_y", "past_key", "past_value", "seqlens_k",
                                "total_sequence_length", "cos_cache", "sin_cache"],
                               ["attn", "present_key", "present_value"], domain="com.microsoft",
                               num_heads=H, kv_num_heads=KVH, do_rotary=1, rotary_interleaved=0),
              helper.make_node("Sigmoid", ["gate_y"], ["sig"]),
              helper.make_node("Mul", ["gate_y", "sig"], ["silu"]),
              helper.make_node("Mul", ["silu", "up_y"], ["mlp"])]
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, [B, S, K]),
              helper.make_tensor_value_info("past_key", TensorProto.FLOAT, [B, KVH, P, D]),
              helper.make_tensor_value_info("past_value", TensorProto.FLOAT, [B, KVH, P, D])]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
               for o in ("attn", "present_key", "present_value", "mlp")]
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=OPSETS, ir_version=10)
    outs = save(out_dir, name, model, feeds)
    print(f"{name}: |attn| max {np.abs(outs[0]).max():.3f}, |mlp| max {np.abs(outs[3]).max():.3f}")


def gather_bq(out_dir, name, seed, *, bits, bs, rows, cols, idx, zp, idx_type=np.int64, qaxis=1):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 1 << bits, size=(rows, cols), dtype=np.uint8)
    data = pack(codes, bits) if bits < 8 else codes
    sshape = (rows, (cols + bs - 1) // bs) if qaxis == 1 else ((rows + bs - 1) // bs, cols)
    scales = rng.uniform(0.01, 0.1, size=sshape).astype(np.float32)
    inits = [numpy_helper.from_array(data, "data"), numpy_helper.from_array(scales, "scales")]
    names = ["data", "indices", "scales"]
    if zp:
        zc = rng.integers(0, 1 << bits, size=sshape, dtype=np.uint8)
        inits.append(numpy_helper.from_array(pack(zc, bits) if bits < 8 else zc, "zero_points"))
        names.append("zero_points")
    indices = np.array(idx, dtype=idx_type)
    node = helper.make_node("GatherBlockQuantized", names, ["Y"], domain="com.microsoft",
                            bits=bits, block_size=bs, gather_axis=0, quantize_axis=qaxis)
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("indices", helper.np_dtype_to_tensor_dtype(indices.dtype),
                                       list(indices.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=OPSETS, ir_version=10)
    save(out_dir, name, model, {"indices": indices})
    print(f"{name}: ok")


def bad_models(bad_dir):
    """Malformed nodes for tests/bad_models (test_bad_models): each must be refused at load
    with TDM_ERR_INVALID_MODEL and the message given."""
    def mm(name, expect, *, K=64, N=8, bits=4, bs=32, b_shape=None):
        nb = (K + bs - 1) // bs if bs > 0 else 1
        blob = max(bs * bits // 8, 1)
        B = np.zeros(b_shape or (N, nb, blob), np.uint8)
        node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                                K=K, N=N, bits=bits, block_size=bs)
        g = helper.make_graph([node], name, [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, N])],
                              [numpy_helper.from_array(B, "B"),
                               numpy_helper.from_array(np.ones(N * nb, np.float32), "scales")])
        write_bad(bad_dir, name, helper.make_model(g, opset_imports=OPSETS, ir_version=10), expect)

    mm("nbits_bad_block_size", "block_size 24 must be a power of 2", bs=24)
    mm("nbits_bad_bits", "bits 3 is not supported", bits=3)
    mm("nbits_bad_b_shape", "B has shape [8, 3, 16], expected [8, 2, 16]", b_shape=(8, 3, 16))
    node = helper.make_node("GatherBlockQuantized", ["data", "indices", "scales"], ["Y"],
                            domain="com.microsoft", bits=4, block_size=16, gather_axis=1,
                            quantize_axis=0)
    g = helper.make_graph([node], "gbq", [helper.make_tensor_value_info("indices", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.zeros((32, 8), np.uint8), "data"),
                           numpy_helper.from_array(np.ones((2, 16), np.float32), "scales")])
    write_bad(bad_dir, "nbits_bad_gather_axis", helper.make_model(g, opset_imports=OPSETS, ir_version=10),
              "gather_axis must be 0 for uint8 data")


def write_bad(bad_dir, name, model, message):
    d = os.path.join(bad_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    onnx.save(model, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "expect.txt"), "w") as f:
        f.write(f"invalid model\n{message}\n")
    print(f"{name}: refused with '{message}'")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/models_llm"
    bad_models(sys.argv[2] if len(sys.argv) > 2 else "tests/bad_models")
    os.makedirs(out, exist_ok=True)
    for d in os.listdir(out):
        if d.startswith("nbits_"):
            shutil.rmtree(os.path.join(out, d))
    def mm(out, name, seed, **kw):
        matmul_nbits(out, name, seed, acc=int(name[-1]), **kw)
    # float activations (accuracy_level 0)
    mm(out, "nbits_q4_zpu8_m1_acc0", 1, bits=4, bs=32, K=64, N=48, a_shape=(1, 64), zp="u8")
    mm(out, "nbits_q4_bs16_bias_m3_acc0", 2, bits=4, bs=16, K=80, N=33, a_shape=(3, 80), bias=True)
    mm(out, "nbits_q4_zpf_kpad_b23_acc0", 3, bits=4, bs=32, K=100, N=37, a_shape=(2, 3, 100),
       zp="f32", bias=True)
    mm(out, "nbits_q4_bs64_m70_acc0", 4, bits=4, bs=64, K=200, N=29, a_shape=(70, 200), zp="u8")
    mm(out, "nbits_q8_bs16_bias_m3_acc0", 5, bits=8, bs=16, K=72, N=21, a_shape=(3, 72), bias=True)
    mm(out, "nbits_q8_zpu8_m1_acc0", 6, bits=8, bs=32, K=160, N=50, a_shape=(1, 1, 160), zp="u8")
    mm(out, "nbits_q8_m70_acc0", 7, bits=8, bs=32, K=96, N=31, a_shape=(70, 96), bias=True)
    mm(out, "nbits_q4_inputs_m2_acc0", 8, bits=4, bs=32, K=96, N=24, a_shape=(2, 96), zp="u8",
       bias=True, weights_as_inputs=True)
    # int8 activations (accuracy_level 4)
    # ONNX Runtime's fast form (block-sum offsets): folded into the packed weights by tandem
    mm(out, "nbits_q4_off_m1_acc0", 31, bits=4, bs=32, K=128, N=40, a_shape=(1, 1, 128), offsets="f16")
    mm(out, "nbits_q4_off_b23_acc0", 32, bits=4, bs=16, K=96, N=37, a_shape=(2, 3, 96), offsets="f32")
    mm(out, "nbits_q8_off_m3_acc0", 33, bits=8, bs=32, K=64, N=21, a_shape=(1, 3, 64), offsets="f32")
    mm(out, "nbits_q4_off_m1_acc4", 34, bits=4, bs=32, K=128, N=67, a_shape=(1, 1, 128), offsets="f16")
    mm(out, "nbits_q4_zpf_m1_acc4", 11, bits=4, bs=32, K=576, N=67, a_shape=(1, 1, 576), zp="f32")
    mm(out, "nbits_q4_zpu8_kpad_m3_acc4", 12, bits=4, bs=32, K=100, N=37, a_shape=(3, 100),
       zp="u8", bias=True)
    mm(out, "nbits_q4_bs16_zpf_b23_acc4", 13, bits=4, bs=16, K=88, N=19, a_shape=(2, 3, 88),
       zp="f32")
    mm(out, "nbits_q4_bs128_m5_acc4", 14, bits=4, bs=128, K=300, N=23, a_shape=(5, 300), zp="u8")
    mm(out, "nbits_q4_m70_acc4", 15, bits=4, bs=32, K=96, N=40, a_shape=(70, 96), zp="f32",
       bias=True)
    mm(out, "nbits_q8_zpu8_m1_acc4", 16, bits=8, bs=32, K=576, N=53, a_shape=(1, 576), zp="u8")
    mm(out, "nbits_q8_bs16_kpad_m3_acc4", 17, bits=8, bs=16, K=72, N=21, a_shape=(3, 72),
       bias=True)
    mm(out, "nbits_q8_bs64_m8_acc4", 18, bits=8, bs=64, K=200, N=27, a_shape=(8, 200))
    mm(out, "nbits_q8_m70_acc4", 19, bits=8, bs=32, K=128, N=24, a_shape=(70, 128), zp="u8")
    # q / k / v and gate / up joined (decode rows, several decode rows, a prefill's many rows)
    fb = dict(K=64, H=4, KVH=2, D=16, I=48)
    fused_block(out, "nbits_join_q4_m1_acc0", 41, bits=4, bs=32, B=1, S=1, P=6, **fb)
    fused_block(out, "nbits_join_q4_m1_acc4", 42, bits=4, bs=32, B=1, S=1, P=6, **fb)
    fused_block(out, "nbits_join_q8_b2_acc4", 43, bits=8, bs=32, B=2, S=1, P=3, **fb)
    fused_block(out, "nbits_join_q4_bs16_m3_acc0", 44, bits=4, bs=16, B=1, S=3, P=2, **fb)
    fused_block(out, "nbits_join_q4_m20_acc0", 45, bits=4, bs=32, B=1, S=20, P=0, **fb)
    fused_block(out, "nbits_join_q8_m20_acc4", 46, bits=8, bs=32, B=1, S=20, P=0, **fb)
    # GatherBlockQuantized
    gather_bq(out, "nbits_gbq_q4_zp", 21, bits=4, bs=32, rows=50, cols=96, idx=[[3, 0, 49], [-1, 7, 3]],
              zp=True)
    gather_bq(out, "nbits_gbq_q4", 22, bits=4, bs=16, rows=20, cols=48, idx=[5, 19, 0], zp=False,
              idx_type=np.int32)
    gather_bq(out, "nbits_gbq_q8_zp", 23, bits=8, bs=32, rows=40, cols=64, idx=[[1], [39], [-40]],
              zp=True)
    gather_bq(out, "nbits_gbq_q8", 24, bits=8, bs=32, rows=30, cols=80, idx=[2, 2, 29, 0], zp=False)


if __name__ == "__main__":
    main()
