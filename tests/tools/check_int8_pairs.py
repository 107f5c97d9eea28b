#!/usr/bin/env python3
"""int8 products whose 16-bit pair sums would saturate (ctest int8_pair_tests*; issue 20).

Without VNNI, oneDNN's u8 x s8 kernels sum the products of two adjacent input channels in a
saturating int16 (vpmaddubsw): x0 w0 + x1 w1 overflows when X's bytes pass 128 and a weight
pair of one sign passes 128 (full-range weights: 255 * 254 > 32767). tandem then runs such
nodes on exact halves of the weights (w = a + b, |a|, |b| <= 64, over X twice; k_dnnl.h,
dn_q8_halves) for the runs whose X has a byte above the weights' limit. This test builds
small QDQ models (8-bit X, uint8 Y, per-channel int8 weights, int32 bias) that tandem's QDQ pass
turns into QConv, QConvTranspose and QMatMul, runs them with `tandem run` at 1 and 2
threads, and compares Y with the exact integer result (int64 numpy): acc = sum (x - x_zp) w
+ bias, y = clip(rint(float32(acc) * float32(x_scale * w_scale[m] / y_scale) + y_zp)) in
float32, the requantisation oneDNN runs (k_dnnl_qconv.c). Every element must be bit-exact.

Cases, each for a Conv ([1, 8, 9, 9] x [32, 8, 3, 3], pads 1; channels 0-15 with weights near
+-127 in same-sign pairs, 16-31 with |w| <= 64; X zero point 0, and 250 (tandem's padded
mode, padding reads 250)), a ConvTranspose ([1, 8, 5, 5] x [8, 32, 3, 3], strides 2, pads 1;
X zero point 0 and 200) and a MatMul ([6, 16] x [16, 32], columns alike; zero point 0, 100):
  low    X in [0, 128]: no pair can saturate (128 * 254 <= 32767), the weights run as they are.
  full   X in [200, 255]: saturated pair sums (what oneDNN's AVX2 kernels give with the
         full-range weights) are tens of steps off: the check fails on a build without the
         halves on a CPU without VNNI (or under TANDEM_CPU_ISA=avx2 on one with it).
The same with int8 X (_s8: low [-128, 0], full [72, 127]; zero points 0, -128, 122 / -100),
which tandem runs as uint8 (x ^ 0x80, zero point + 128) without VNNI: oneDNN's own int8-X
path there (X + 128 with the weights halved) is 1-21 steps off. Grouped convolutions (groups
2, 4, 8: 4, 2, 1 input channels a group; group 2 saturates without per-group halves) and a
depthwise one (x [1, 32, 9, 9], group 32), batch 2. QLinearConv and QLinearMatMul with int8
X (the QOperator forms, same kernels), QLinearMatMul with b zero point 3 (large bytes: the
exact loops), MatMulInteger with a constant (100) and a computed (DynamicQuantizeLinear)
zero point (int32 Y compared as is), ConvInteger with zero point 250.

    .venv/bin/python tests/tools/check_int8_pairs.py --tandem build/tandem
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

XS, YS, YZP = 0.02, 90.0, 128  # x_scale, y_scale (Y spans tens of steps), y zero point


def weights(rng, rows, cols):
    """[rows, cols] int8: rows 0-15 near +-127 with same-sign neighbours (pairs of cols 2j,
    2j + 1 summing to 230-254), rows 16-31 within [-64, 64]."""
    w = np.empty((rows, cols), np.int64)
    for m in range(rows):
        if m < 16:
            sign = np.repeat(rng.choice([-1, 1], (cols + 1) // 2), 2)[:cols]
            w[m] = sign * rng.integers(115, 128, cols)
        else:
            w[m] = rng.integers(-64, 65, cols)
    return w.astype(np.int8)


def qdq_model(op, x_shape, y_shape, w, ws, waxis, bias=None, xz=0, xt=np.uint8, **attrs):
    """8-bit x (xt) -> DQ -> op(DQ(w int8, per channel on waxis) [, DQ(bias int32)]) -> Q ->
    uint8 y."""
    scal = {"xs": np.float32(XS), "xz": xt(xz), "ys": np.float32(YS), "yz": np.uint8(YZP)}
    inits = [numpy_helper.from_array(np.array(v), k) for k, v in scal.items()]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(ws, "ws"),
              numpy_helper.from_array(np.zeros(32, np.int8), "wz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=waxis)]
    args = ["xf", "wf"]
    if bias is not None:
        inits += [numpy_helper.from_array(bias, "b"), numpy_helper.from_array(ws * XS, "bs"),
                  numpy_helper.from_array(np.zeros(32, np.int32), "bz")]
        nodes.append(helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0))
        args.append("bf")
    nodes += [helper.make_node(op, args, ["yf"], **attrs),
              helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.INT8 if xt == np.int8 else TensorProto.UINT8,
                                      list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, list(y_shape))
    return helper.make_model(helper.make_graph(nodes, op, [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 13)])


def conv_acc(x, w, bias, xz, group=1):
    """int64 [N, 32, 9, 9]: 3x3 convolution of x [N, C, 9, 9], pads 1 (reading the zero point
    xz), w [32, C / group, 3, 3]."""
    xp = np.pad(x.astype(np.int64) - xz, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cg, mg = x.shape[1] // group, 32 // group
    w4 = w.astype(np.int64).reshape(32, cg, 3, 3)
    acc = np.zeros((x.shape[0], 32, 9, 9), np.int64)
    for g in range(group):
        for kh in range(3):
            for kw in range(3):
                acc[:, g * mg:(g + 1) * mg] += np.einsum(
                    "nchw,mc->nmhw", xp[:, g * cg:(g + 1) * cg, kh:kh + 9, kw:kw + 9],
                    w4[g * mg:(g + 1) * mg, :, kh, kw])
    return acc + bias.astype(np.int64)[None, :, None, None]


def deconv_acc(x, w, bias, xz):
    """int64 [1, M, 9, 9]: ConvTranspose of x [1, 8, 5, 5] with w [8, M, 3, 3], strides 2,
    pads 1 (y[ih * 2 + kh - 1] += x[ih] w[kh])."""
    xs = x.astype(np.int64)[0] - xz
    w64 = w.astype(np.int64)
    full = np.zeros((32, 11, 11), np.int64)
    for ih in range(5):
        for iw in range(5):
            full[:, ih * 2:ih * 2 + 3, iw * 2:iw * 2 + 3] += np.einsum("c,cmhw->mhw", xs[:, ih, iw], w64)
    return full[None, :, 1:10, 1:10] + bias.astype(np.int64)[None, :, None, None]


def requant(acc, ws, axis):
    shape = [1] * acc.ndim
    shape[axis] = -1
    oscale = (np.float32(XS) * ws / np.float32(YS)).astype(np.float32).reshape(shape)
    # oneDNN's order: the zero point added in float32 before rounding (half to even): a sum
    # such as 13.499996 + 128 rounds to 141.5 in float32, then to 142 (rint(13.499996) + 128
    # would be 141); both are float roundings of the one exact integer sum
    v = np.rint((acc.astype(np.float32) * oscale).astype(np.float32) + np.float32(YZP))
    return np.clip(v, 0, 255).astype(np.int64)


def tandem_run(tandem, model, x, threads, work, every=False):
    d = tempfile.mkdtemp(dir=work)
    mp, xp = os.path.join(d, "m.onnx"), os.path.join(d, "x.npy")
    onnx.save(model, mp)
    np.save(xp, x)
    cmd = [tandem, "run", mp, "--input", f"x={xp}", "--output-dir", os.path.join(d, "out"),
           "--threads", str(threads)]
    subprocess.run(cmd, check=True, capture_output=True)
    with open(os.path.join(d, "out", "names.json")) as f:
        names = json.load(f)
    outs = {names[k]: np.load(os.path.join(d, "out", k)).astype(np.int64) for k in names}
    shutil.rmtree(d)
    return outs if every else outs["y"]


def check(what, got, want, axis):
    """got equal to want; prints the largest differences per channel group (along `axis`)."""
    diff = np.abs(got - want)
    per = np.moveaxis(diff, axis, 0).reshape(diff.shape[axis], -1).max(axis=1)
    ok = bool((per == 0).all())
    print(f"{'ok  ' if ok else 'FAIL'} {what}: largest difference {per[:16].max()} steps in "
          f"channels 0-15 (full-range weights), {per[16:].max()} in 16-31 (|w| <= 64), "
          f"{int((diff > 0).sum())} of {diff.size} elements differ")
    return ok


def qlinear_matmul_model(b, bs, bz, xt=np.uint8, az=0):
    """QLinearMatMul(8-bit a [6, 16] (xt, zero point az), int8 b [16, 32] with zero point bz,
    b_scale per column)."""
    scal = {"as": np.float32(XS), "az": xt(az), "bs": bs, "bz": np.int8(bz),
            "ys": np.float32(YS), "yz": np.uint8(YZP), "b": b}
    inits = [numpy_helper.from_array(np.array(v), k) for k, v in scal.items()]
    node = helper.make_node("QLinearMatMul", ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.INT8 if xt == np.int8 else TensorProto.UINT8,
                                      [6, 16])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [6, 32])
    return helper.make_model(helper.make_graph([node], "qlmm", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 13)])


def qlinear_conv_model(w, ws, bias, xz, xt):
    """QLinearConv(8-bit x [1, 8, 9, 9] (xt, zero point xz), int8 w [32, 8, 3, 3] per channel,
    int32 bias; pads 1) -> uint8 y."""
    scal = {"xs": np.float32(XS), "xz": xt(xz), "w": w, "ws": ws, "wz": np.zeros(32, np.int8),
            "ys": np.float32(YS), "yz": np.uint8(YZP), "b": bias}
    inits = [numpy_helper.from_array(np.array(v), k) for k, v in scal.items()]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=[1, 1, 1, 1])
    x = helper.make_tensor_value_info("x", TensorProto.INT8 if xt == np.int8 else TensorProto.UINT8,
                                      [1, 8, 9, 9])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 32, 9, 9])
    return helper.make_model(helper.make_graph([node], "qlc", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 13)])


def matmul_integer_model(b, az=None, dynamic=False, bz=None):
    """MatMulInteger(uint8 a [6, 16], int8 b [16, 32], a_zero_point az[, b_zero_point bz]) ->
    int32 y; dynamic: float x -> DynamicQuantizeLinear -> (a, its computed zero point az), a
    and az outputs too."""
    inits = [numpy_helper.from_array(b, "b")]
    nodes = []
    if dynamic:
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["x"], ["a", "as", "az"]))
        ins = ["a", "b", "az"]
    else:
        inits.append(numpy_helper.from_array(np.array(np.uint8(az)), "az"))
        ins = ["x", "b", "az"]
    if bz is not None:
        inits.append(numpy_helper.from_array(np.array(np.int8(bz)), "bz"))
        ins.append("bz")
    nodes.append(helper.make_node("MatMulInteger", ins, ["y"]))
    xt = TensorProto.FLOAT if dynamic else TensorProto.UINT8
    x = helper.make_tensor_value_info("x", xt, [6, 16])
    outs = [helper.make_tensor_value_info("y", TensorProto.INT32, [6, 32])]
    if dynamic:
        outs += [helper.make_tensor_value_info("a", TensorProto.UINT8, [6, 16]),
                 helper.make_tensor_value_info("az", TensorProto.UINT8, [])]
    return helper.make_model(helper.make_graph(nodes, "mmi", [x], outs, inits),
                             opset_imports=[helper.make_opsetid("", 13)])


def matmul_integer_cases(a, rng, bq, work):
    """MatMulInteger, constant (zero point 100) and dynamic (DynamicQuantizeLinear: its bytes
    span [0, 255]) against int64 numpy; returns the failures."""
    failed = 0
    for dyn, bz, lo in ((False, None, 200), (True, None, 0), (False, 3, 200), (False, 3, 0)):
        model = matmul_integer_model(bq, 100, dyn, bz)
        x = (rng.uniform(-1, 3, (6, 16)).astype(np.float32) if dyn else
             rng.integers(lo, lo + 56 if lo else 129, (6, 16)).astype(np.uint8))
        for threads in (1, 2):
            outs = tandem_run(a.tandem, model, x, threads, work, every=True)
            av, az = (outs["a"], int(outs["az"])) if dyn else (x.astype(np.int64), 100)
            want = (av.astype(np.int64) - az) @ (bq.astype(np.int64) - (bz or 0))
            name = (f"matmulinteger{'_dynamic' if dyn else '_zp100'}{f'_bzp{bz}' if bz else ''} "
                    f"{'full' if dyn or lo else 'low'} threads {threads}")
            if not check(name, outs["y"], want, 1):
                failed += 1
    return failed


def conv_integer_cases(a, rng, wconv, work):
    """ConvInteger (x zero point 250, pads 1; oneDNN's int8 convolution in padded mode, with
    the halves without VNNI) against int64 numpy; returns the failures."""
    inits = [numpy_helper.from_array(wconv, "w"), numpy_helper.from_array(np.array(np.uint8(250)), "xz")]
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1])
    x_in = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 9, 9])
    y_out = helper.make_tensor_value_info("y", TensorProto.INT32, [1, 32, 9, 9])
    model = helper.make_model(helper.make_graph([node], "ci", [x_in], [y_out], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    x = rng.integers(200, 256, (1, 8, 9, 9)).astype(np.uint8)
    want = conv_acc(x, wconv, np.zeros(32, np.int64), 250)
    failed = 0
    for threads in (1, 2):
        if not check(f"convinteger_zp250 full threads {threads}",
                     tandem_run(a.tandem, model, x, threads, work), want, 1):
            failed += 1
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--only", help="run the cases whose name contains this")
    a = ap.parse_args()
    rng = np.random.default_rng(20)
    ws = rng.uniform(0.5, 1.0, 32).astype(np.float32)
    wc = weights(rng, 32, 72)  # [m, tap * 8 + c]: the pairs are input channels 2j, 2j + 1 of a tap
    wconv = wc.reshape(32, 9, 8).transpose(0, 2, 1).reshape(32, 8, 3, 3).copy()
    bias = rng.integers(-20000, 20000, 32).astype(np.int32)
    wmm = weights(rng, 32, 16)
    wd = weights(rng, 32, 72).reshape(32, 9, 8).transpose(2, 0, 1).reshape(8, 32, 3, 3).copy()
    u8 = {"low": (0, 128), "full": (200, 255)}
    s8 = {"low": (-128, 0), "full": (72, 127)}  # (as uint8 after the shift by 128: as u8's)
    conv_shape, deconv_shape = (1, 8, 9, 9), (1, 8, 5, 5)
    pads = [1, 1, 1, 1]
    cases = []  # (name, model, axis, x zero point, x type, x shape, accumulator, inputs)
    for xt, rngs, zps in ((np.uint8, u8, (0, 250)), (np.int8, s8, (0, -128, 122))):
        sfx = "" if xt == np.uint8 else "_s8"
        for xz in zps:
            zs = f"_zp{xz}" if xz else ""
            cases.append((f"conv{sfx}{zs}", qdq_model("Conv", conv_shape, (1, 32, 9, 9), wconv, ws,
                                                     0, bias, xz=xz, xt=xt, pads=pads),
                          1, xz, xt, conv_shape, lambda x, z: conv_acc(x, wconv, bias, z), rngs))
        for xz in zps[:2]:
            zs = f"_zp{xz}" if xz else ""
            cases.append((f"deconv{sfx}{zs}", qdq_model("ConvTranspose", deconv_shape,
                                                       (1, 32, 9, 9), wd, ws, 1, bias, xz=xz,
                                                       xt=xt, strides=[2, 2], pads=pads),
                          1, xz, xt, deconv_shape, lambda x, z: deconv_acc(x, wd, bias, z), rngs))
        for xz in (0, 100 if xt == np.uint8 else -100):
            zs = f"_zp{xz}" if xz else ""
            cases.append((f"matmul{sfx}{zs}", qdq_model("MatMul", (6, 16), (6, 32),
                                                       np.ascontiguousarray(wmm.T), ws, 1,
                                                       xz=xz, xt=xt),
                          1, xz, xt, (6, 16),
                          lambda x, z: (x.astype(np.int64) - z) @ wmm.astype(np.int64).T, rngs))
    # grouped convolutions (Cg input channels a group; 1: each output channel reads one)
    for group in (2, 4, 8):
        cg = 8 // group
        wg = weights(rng, 32, 9 * cg).reshape(32, 9, cg).transpose(0, 2, 1).reshape(32, cg, 3, 3)
        wg = wg.copy()
        for xt, rngs, xz in ((np.uint8, u8, 0), (np.uint8, u8, 250), (np.int8, s8, 0)):
            sfx = ("" if xt == np.uint8 else "_s8") + (f"_zp{xz}" if xz else "")
            cases.append((f"conv_g{group}{sfx}", qdq_model("Conv", conv_shape, (1, 32, 9, 9), wg,
                                                          ws, 0, bias, xz=xz, xt=xt, pads=pads,
                                                          group=group),
                          1, xz, xt, conv_shape,
                          (lambda w, g: lambda x, z: conv_acc(x, w, bias, z, g))(wg, group), rngs))
        # batch 2 (one primitive for both images at 1 thread, one image an item at 2)
        if group == 2:
            for xt, rngs, xz in ((np.uint8, u8, 250), (np.int8, s8, 0)):
                sfx = ("" if xt == np.uint8 else "_s8") + (f"_zp{xz}" if xz else "")
                b2 = (2, 8, 9, 9)
                cases.append((f"conv_g2_b2{sfx}", qdq_model("Conv", b2, (2, 32, 9, 9), wg, ws, 0,
                                                           bias, xz=xz, xt=xt, pads=pads,
                                                           group=group),
                              1, xz, xt, b2, (lambda w: lambda x, z: conv_acc(x, w, bias, z, 2))(wg),
                              rngs))
    for xt, rngs, xz in ((np.uint8, u8, 0), (np.int8, s8, -128)):
        sfx = ("" if xt == np.uint8 else "_s8") + (f"_zp{xz}" if xz else "")
        b2 = (2, 8, 9, 9)
        cases.append((f"conv_b2{sfx}", qdq_model("Conv", b2, (2, 32, 9, 9), wconv, ws, 0, bias,
                                                xz=xz, xt=xt, pads=pads),
                      1, xz, xt, b2, lambda x, z: conv_acc(x, wconv, bias, z), rngs))
    # depthwise: x [1, 32, 9, 9], one input and one output channel a group
    wdw = weights(rng, 32, 9).reshape(32, 1, 3, 3).copy()
    for xt, rngs, xz in ((np.uint8, u8, 0), (np.uint8, u8, 250), (np.int8, s8, 0)):
        sfx = ("" if xt == np.uint8 else "_s8") + (f"_zp{xz}" if xz else "")
        cases.append((f"conv_dw{sfx}", qdq_model("Conv", (1, 32, 9, 9), (1, 32, 9, 9), wdw, ws, 0,
                                                bias, xz=xz, xt=xt, pads=pads, group=32),
                      1, xz, xt, (1, 32, 9, 9), lambda x, z: conv_acc(x, wdw, bias, z, 32), rngs))
    # QLinearMatMul with a nonzero b zero point (B - 3 spans [-131, 124]; per-column b_scale)
    bq = np.ascontiguousarray(wmm.T)
    cases.append(("qlinearmatmul_bzp3", qlinear_matmul_model(bq, ws, 3), 1, 0, np.uint8, (6, 16),
                  lambda x, z: x.astype(np.int64) @ (bq.astype(np.int64) - 3), u8))
    # the QOperator forms with int8 X (the same kernels as the QDQ pass's QConv / QMatMul)
    cases.append(("qlinearconv_s8_zp-5", qlinear_conv_model(wconv, ws, bias, -5, np.int8), 1, -5,
                  np.int8, conv_shape, lambda x, z: conv_acc(x, wconv, bias, z), s8))
    cases.append(("qlinearmatmul_s8_zp7", qlinear_matmul_model(bq, ws, 0, np.int8, 7), 1, 7,
                  np.int8, (6, 16), lambda x, z: (x.astype(np.int64) - z) @ bq.astype(np.int64), s8))
    failed = 0
    work = tempfile.mkdtemp(prefix="tdm_pairs_")
    try:
        for mname, model, axis, xz, xt, shape, accf, rngs in cases:
            if a.only and a.only not in mname:
                continue
            for iname, (lo, hi) in rngs.items():
                if iname == "low" and (int(xz) + (128 if xt == np.int8 else 0)) > 128:
                    continue  # (a zero point above 128 is itself a large byte)
                x = rng.integers(lo, hi + 1, shape).astype(xt)
                x.flat[0], x.flat[-1] = lo, hi
                want = requant(accf(x, xz), ws, axis)
                for threads in (1, 2):
                    got = tandem_run(a.tandem, model, x, threads, work)
                    if got.shape != want.shape:
                        print(f"FAIL {mname} {iname}: shape {got.shape}, want {want.shape}")
                        failed += 1
                        continue
                    if not check(f"{mname} {iname} threads {threads}", got, want, axis):
                        failed += 1
        if not a.only or "matmulinteger" in a.only:
            failed += matmul_integer_cases(a, rng, bq, work)
        if not a.only or "convinteger" in a.only:
            failed += conv_integer_cases(a, rng, wconv, work)
        # the check can fail: a result one step off is rejected
        want = rng.integers(0, 256, (6, 32))
        moved = want.copy()
        moved.flat[0] += 1
        if check("(one step moved, must FAIL)", moved, want, 1):
            print("the check cannot fail")
            failed += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
