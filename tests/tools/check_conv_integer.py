#!/usr/bin/env python3
"""ConvInteger on oneDNN's int8 convolutions against ONNX Runtime (ctest conv_integer_tests*;
issue 20 item 3).

tandem maps ConvInteger onto the int8 convolution of k_dnnl_qconv.c (int32 Y, no scales):
W - w_zero_point folded into int8 weights when every value fits, 2-D convolutions in padded
mode (X padded with its zero point, constant or computed by DynamicQuantizeLinear, and
-x_zero_point * sum(w) as the run's bias), 1-D / 3-D ones with a constant zero point as
oneDNN's source zero point, int8 X as uint8 (x ^ 0x80) where the padded mode or a CPU without
VNNI needs it. What cannot be exact there runs tandem's loops: W - w_zero_point outside int8,
255 * (sum of a channel's positive or negative weights) > 2^24 (oneDNN's f32 step around the
bias), a computed zero point
of a 1-D / 3-D convolution.

Each case is a random model (onnx.helper): X bytes over their whole range, weights over
theirs, with groups / depthwise, strides, dilations, pads, auto_pad (SAME_UPPER, SAME_LOWER,
VALID), 1-D / 2-D / 3-D, batch 2, constant / absent / computed x zero points, w zero points
(0, 128, per channel). Y (int32) must equal ONNX Runtime's element for element (where ORT
refuses the model -- a per-channel w zero point -- an int64 numpy convolution, which
is checked against ORT where both run), at 1 and 2 threads. `tandem inspect --plan` names
the implementation: the mapped cases must run oneDNN (not "tandem"), the others the loops
("tandem loops (reason)"). The last check moves one element by one and must FAIL.

    .venv/bin/python tests/tools/check_conv_integer.py --tandem build/tandem
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
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def _cpu_avx512():
    """Whether this CPU has AVX-512 (Linux: /proc/cpuinfo's flags; elsewhere assumed)."""
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return True


CPU_AVX512 = _cpu_avx512()

ONNX_T = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def pads_of(x_sp, k, s, d, pads, auto_pad):
    """(begin, end) pads and the output size of each spatial dim, as ONNX defines them."""
    n = len(x_sp)
    out, pb, pe = [], [], []
    for i in range(n):
        ek = (k[i] - 1) * d[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-x_sp[i] // s[i])
            tot = max(0, (o - 1) * s[i] + ek - x_sp[i])
            b = tot // 2 if auto_pad == "SAME_UPPER" else tot - tot // 2
            pb.append(b)
            pe.append(tot - b)
        elif auto_pad == "VALID":
            pb.append(0)
            pe.append(0)
        else:
            pb.append(pads[i] if pads else 0)
            pe.append(pads[n + i] if pads else 0)
        out.append((x_sp[i] + pb[i] + pe[i] - ek) // s[i] + 1)
    return pb, pe, out


def conv_ref(x, w, xz, wz, group, s, d, pads, auto_pad):
    """int64 convolution of (x - xz) and (w - wz[m]) (pads read as xz: zero after the shift)."""
    sp = x.ndim - 2
    pb, pe, out = pads_of(x.shape[2:], w.shape[2:], s, d, pads, auto_pad)
    xp = np.pad(x.astype(np.int64) - xz, [(0, 0), (0, 0)] + [(pb[i], pe[i]) for i in range(sp)])
    wz = np.broadcast_to(np.asarray(wz, np.int64).reshape(-1), (w.shape[0],))
    wi = w.astype(np.int64) - wz.reshape((-1,) + (1,) * (sp + 1))
    M, cg = w.shape[0], w.shape[1]
    mg = M // group
    y = np.zeros((x.shape[0], M) + tuple(out), np.int64)
    for kidx in np.ndindex(*w.shape[2:]):
        sl = tuple(slice(kidx[i] * d[i], kidx[i] * d[i] + (out[i] - 1) * s[i] + 1, s[i])
                   for i in range(sp))
        for g in range(group):
            xs = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]
            ws = wi[(slice(g * mg, (g + 1) * mg), slice(None)) + kidx]
            y[:, g * mg:(g + 1) * mg] += np.einsum("nc...,mc->nm...", xs, ws)
    return y


def make_model(c, w, wz):
    """ConvInteger (x from an input, or DynamicQuantizeLinear of a float input)."""
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    nodes = []
    if c["dynamic"]:
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["xf"], ["x", "xs", "xz"]))
        ins.append("xz")
        x_in = helper.make_tensor_value_info("xf", TensorProto.FLOAT, list(c["x"]))
    else:
        x_in = helper.make_tensor_value_info("x", ONNX_T[c["xt"]], list(c["x"]))
        if c["xz"] is not None:
            inits.append(numpy_helper.from_array(np.array(c["xt"](c["xz"])), "xz"))
            ins.append("xz")
    if wz is not None:
        if not c["dynamic"] and c["xz"] is None:
            ins.append("")
        inits.append(numpy_helper.from_array(wz, "wz"))
        ins.append("wz")
    attrs = {k: c[k] for k in ("strides", "dilations", "pads", "auto_pad", "group") if c.get(k)}
    nodes.append(helper.make_node("ConvInteger", ins, ["y"], **attrs))
    outs = [helper.make_tensor_value_info("y", TensorProto.INT32, None)]
    if c["dynamic"]:
        outs += [helper.make_tensor_value_info("x", TensorProto.UINT8, None),
                 helper.make_tensor_value_info("xz", TensorProto.UINT8, [])]
    return helper.make_model(helper.make_graph(nodes, "ci", [x_in], outs, inits),
                             opset_imports=[helper.make_opsetid("", 13)])


def tandem_run(tandem, mp, x, threads, d):
    xp = os.path.join(d, "x.npy")
    np.save(xp, x)
    od = os.path.join(d, f"out{threads}")
    name = "xf" if x.dtype == np.float32 else "x"
    subprocess.run([tandem, "run", mp, "--input", f"{name}={xp}", "--output-dir", od,
                    "--threads", str(threads)], check=True, capture_output=True)
    with open(os.path.join(od, "names.json")) as f:
        names = json.load(f)
    return {names[k]: np.load(os.path.join(od, k)) for k in names}


def implementation(tandem, mp):
    out = subprocess.run([tandem, "inspect", mp, "--plan"], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        f = line.split(None, 4)
        if len(f) == 5 and f[2] == "ConvInteger":
            return f[4].strip()
    return "?"


def ort_run(mp, x):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(mp, so, providers=["CPUExecutionProvider"])
        return sess.run(["y"], {sess.get_inputs()[0].name: x})[0]
    except Exception:  # (ORT's ConvInteger refuses a per-channel w zero point)
        return None


def cases():
    """(name, spec, mapped): mapped says whether oneDNN must run it (else the loops)."""
    base = dict(x=(1, 16, 12, 12), m=24, k=(3, 3), xt=np.uint8, wt=np.int8, xz=131, wz=None,
                dynamic=False, group=1, strides=None, dilations=None, pads=[1, 1, 1, 1],
                auto_pad=None, wrange=None)
    out = []

    def add(name, mapped, **kw):
        c = dict(base)
        c.update(kw)
        out.append((name, c, mapped))

    add("2d_u8_zp131_pads1", True)
    add("2d_u8_nozp", True, xz=None)
    add("2d_u8_zp0_b2_stride2", True, x=(2, 16, 13, 11), xz=0, strides=[2, 2])
    add("2d_dil2_asym_pads", True, dilations=[2, 2], pads=[0, 2, 1, 0])
    add("2d_same_upper_s2", True, pads=None, auto_pad="SAME_UPPER", strides=[2, 2], k=(4, 3))
    add("2d_same_lower_s2", True, pads=None, auto_pad="SAME_LOWER", strides=[2, 2], k=(4, 3))
    add("2d_valid", True, pads=None, auto_pad="VALID", k=(5, 3))
    add("2d_group4", True, group=4, m=8)
    add("2d_depthwise", True, x=(1, 24, 12, 12), group=24, m=24)
    add("2d_s8x_zp_m7", True, xt=np.int8, xz=-7)
    add("2d_s8x_nozp", True, xt=np.int8, xz=None)
    add("2d_u8w_zp128", True, wt=np.uint8, wz=np.uint8(128), wrange=(28, 228))
    add("2d_u8w_zp_per_channel", True, wt=np.uint8, wz="per_m", wrange=(0, 255))
    add("2d_s8w_zp3", True, wz=np.int8(3), wrange=(-120, 127))
    add("2d_dynamic", True, dynamic=True)
    add("2d_dynamic_group2_b2", True, dynamic=True, group=2, x=(2, 16, 10, 10))
    # a negative end pad (stride 2 past the last row / column: ResNet's 1x1 projections)
    add("2d_dynamic_1x1_s2", True, dynamic=True, x=(1, 16, 12, 12), k=(1, 1), pads=None,
        strides=[2, 2])
    add("2d_zp9_3x3_s2_pad0", True, x=(1, 16, 12, 11), strides=[2, 2], pads=[0, 1, 0, 0],
        xz=9)
    add("1d_u8_zp200_s2", True, x=(2, 16, 40), k=(5,), pads=[2, 1], strides=[2], xz=200)
    add("1d_s8x_zp5_dil3", True, x=(1, 16, 40), k=(3,), pads=[3, 3], dilations=[3], xt=np.int8,
        xz=5)
    add("3d_u8_zp77", True, x=(1, 8, 6, 7, 5), k=(3, 3, 3), pads=[1] * 6, xz=77, m=16)
    add("3d_group2_same_upper", True, x=(1, 8, 6, 7, 5), k=(3, 3, 3), pads=None,
        auto_pad="SAME_UPPER", group=2, m=16, xz=10)
    # the loops: W - w_zero_point outside int8, sums past 2^24 / 255, computed zp in 1-D
    add("loops_u8w_nozp", False, wt=np.uint8, wz=None, wrange=(0, 255))
    add("loops_large_sum", False, x=(1, 160, 8, 8), m=8, wrange=(120, 127))
    add("loops_1d_dynamic", False, dynamic=True, x=(1, 16, 40), k=(5,), pads=[2, 2])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--only", help="run the cases whose name contains this")
    a = ap.parse_args()
    rng = np.random.default_rng(2026)
    work = tempfile.mkdtemp(prefix="tdm_convint_")
    isa = os.environ.get("TANDEM_CPU_ISA", "best")
    failed = 0
    last = None
    try:
        for name, c, mapped in cases():
            if a.only and a.only not in name:
                continue
            cg = c["x"][1] // c["group"]
            wshape = (c["m"], cg) + tuple(c["k"])
            lo, hi = c["wrange"] or ((-128, 127) if c["wt"] == np.int8 else (0, 255))
            sign = rng.choice([-1, 1], wshape) if c["wrange"] and lo > 0 and c["wt"] == np.int8 \
                else 1
            w = (sign * rng.integers(lo, hi + 1, wshape)).astype(c["wt"])
            wz = c["wz"]
            if isinstance(wz, str):  # per channel: each channel's values around its own
                wz = rng.integers(60, 196, c["m"]).astype(np.uint8)
                w = np.clip(wz.reshape((-1,) + (1,) * (len(wshape) - 1)).astype(np.int64) +
                            rng.integers(-128, 128, wshape), 0, 255).astype(np.uint8)
            if c["dynamic"]:
                x = rng.uniform(-2.0, 5.0, c["x"]).astype(np.float32)
            else:
                info = np.iinfo(c["xt"])
                x = rng.integers(info.min, info.max + 1, c["x"]).astype(c["xt"])
            model = make_model(c, w, wz)
            d = tempfile.mkdtemp(dir=work)
            mp = os.path.join(d, "m.onnx")
            onnx.save(model, mp)
            ref = ort_run(mp, x)
            for threads in (1, 2):
                outs = tandem_run(a.tandem, mp, x, threads, d)
                if c["dynamic"]:
                    xq, xz = outs["x"], int(outs["xz"])
                else:
                    xq, xz = x, (c["xz"] or 0)
                sp = len(c["k"])
                want = conv_ref(xq, w, xz, 0 if wz is None else wz, c["group"],
                                c["strides"] or [1] * sp, c["dilations"] or [1] * sp,
                                c["pads"], c["auto_pad"])
                who = "numpy (ORT refuses)" if ref is None else "ORT"
                if ref is not None and not np.array_equal(ref.astype(np.int64), want):
                    print(f"FAIL {name}: the numpy reference differs from ORT")
                    failed += 1
                got = outs["y"]
                diff = int(np.abs(got.astype(np.int64) - want).max()) if got.shape == want.shape \
                    else -1
                ok = got.dtype == np.int32 and diff == 0
                print(f"{'ok  ' if ok else 'FAIL'} {name} threads {threads} ({isa}): vs {who}, "
                      f"largest difference {diff}, shape {list(got.shape)}")
                failed += not ok
                last = (got, want)
            impl = implementation(a.tandem, mp)
            # (on AVX2, a cap or a CPU without AVX-512, oneDNN may offer only its reference
            # kernel for a shape -- groups of 4 channels: then tandem's loops, as for QLinearConv)
            ref_only = ("TANDEM_CPU_ISA" in os.environ or not CPU_AVX512) and "oneDNN offers only ref" in impl
            good = (not impl.startswith("tandem") and impl != "-" or ref_only) if mapped else \
                impl.startswith("tandem loops (")
            print(f"{'ok  ' if good else 'FAIL'} {name}: implementation {impl} "
                  f"({'oneDNN expected' if mapped else 'the loops expected'})")
            failed += not good
            shutil.rmtree(d)
        if last is not None:  # the check must be able to fail
            got, want = last
            moved = got.astype(np.int64).copy()
            moved.flat[0] += 1
            caught = not np.array_equal(moved, want)
            print(f"{'FAIL' if caught else 'ok??'} (one element moved by one, must FAIL)")
            failed += not caught
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
