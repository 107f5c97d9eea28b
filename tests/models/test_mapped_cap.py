"""ctest mapped_cap (issue 21, mapped tier): a model whose external data is 4x a memory cap runs.

    test_mapped_cap.py --tandem build/tandem --out build/mapped_cap [--cap-mib 64]

The model: Gather of 16 rows from a [ROWS, 256] float32 table (4 x cap MiB of external data,
weights.bin) followed by MatMul with a 256x256 weight (external too), Relu. `tandem run
--residency mapped --device-memory cpu=CAP` must run and give NumPy's output (rtol 1e-5), and its
peak resident set (getrusage of the child: VmHWM, anonymous and file pages together) must stay
below the cap, while the data is 4x the cap. The same run without --residency mapped is measured
too (its peak is the table and more: the loader reads it into memory) and the budget then refuses
it (TDM_ERR_LIMIT), which shows the cap is binding.
No cgroup or ulimit cap is used: cgroup v1/v2 memory controllers are not writable in CI
containers, and `ulimit -v` counts the address space of the mapping itself (and the libraries'
reservations), so it would refuse any mmap of a file larger than the cap whatever is touched;
the peak RSS is the measurement (reported, not asserted, with --no-rss-check: ASan's shadow
memory adds tens of MiB). Exit 77 without numpy/onnx.
"""
import argparse
import os
import resource
import subprocess
import sys


def run_measured(cmd):
    """Runs cmd in a child (fork + exec) and returns (rc, stderr, peak RSS in KiB of that child)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execv(cmd[0], cmd)
    os.close(w)
    err = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        err += chunk
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), err.decode(errors="replace"), ru.ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cap-mib", type=int, default=64)
    ap.add_argument("--no-rss-check", action="store_true",
                    help="report the peak RSS without asserting it (sanitizer builds: shadow memory)")
    a = ap.parse_args()
    try:
        import numpy as np
        import onnx
        from onnx import TensorProto, helper
    except ImportError:
        print("SKIPPED: needs numpy and onnx")
        sys.exit(77)
    dim = 256
    data_bytes = 4 * a.cap_mib * 1048576
    rows = data_bytes // (dim * 4)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "model.onnx")
    binp = os.path.join(a.out, "weights.bin")
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((dim, dim)) * 0.1).astype(np.float32)
    if not os.path.exists(path) or os.path.getsize(binp) != data_bytes + w.nbytes:
        with open(binp, "wb") as f:
            chunk = 8192
            for r0 in range(0, rows, chunk):
                n = min(chunk, rows - r0)
                # row r holds r * 1e-6 + column * 1e-3: the reference needs no copy of the table
                f.write((np.arange(r0, r0 + n, dtype=np.float32)[:, None] * 1e-6 +
                         np.arange(dim, dtype=np.float32)[None, :] * 1e-3).astype(np.float32).tobytes())
            f.write(w.tobytes())

        def ext(name, dims, offset, length):
            t = TensorProto()
            t.name = name
            t.data_type = TensorProto.FLOAT
            t.dims.extend(dims)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(length))):
                e = t.external_data.add()
                e.key, e.value = k, v
            return t

        g = helper.make_graph(
            [helper.make_node("Gather", ["table", "ids"], ["rowsv"], axis=0),
             helper.make_node("MatMul", ["rowsv", "w"], ["mm"]),
             helper.make_node("Relu", ["mm"], ["y"])],
            "mapped_cap",
            [helper.make_tensor_value_info("ids", TensorProto.INT64, [16])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, dim])],
            [ext("table", [rows, dim], 0, data_bytes), ext("w", [dim, dim], data_bytes, w.nbytes)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, path)
    ids = rng.integers(0, rows, 16).astype(np.int64)
    ids[0], ids[1] = 0, rows - 1
    idp = os.path.join(a.out, "ids.npy")
    np.save(idp, ids)
    table_rows = ids[:, None].astype(np.float32) * np.float32(1e-6) + np.arange(dim, dtype=np.float32)[None, :] * np.float32(1e-3)
    ref = np.maximum(table_rows @ w, 0)
    cap = a.cap_mib * 1048576
    bad = 0
    print(f"external data {data_bytes / 1048576:.0f} MiB + {w.nbytes / 1024:.0f} KiB; cap {a.cap_mib} MiB")
    for mode in ("mapped", "read"):
        od = os.path.join(a.out, "out_" + mode)
        cmd = [a.tandem, "run", path, "--input", f"ids={idp}", "--output-dir", od, "--threads", "1"]
        if mode == "mapped":
            cmd += ["--residency", "mapped", "--device-memory", f"cpu={a.cap_mib}MiB"]
        rc, err, rss_kib = run_measured(cmd)
        print(f"{mode}: rc {rc}, peak RSS {rss_kib / 1024:.1f} MiB "
              f"({rss_kib * 1024 / data_bytes:.3f} of the data, {rss_kib * 1024 / cap:.3f} of the cap)")
        if rc:
            print(f"FAIL {mode}: {err[-500:]}")
            bad += 1
            continue
        y = np.load(os.path.join(od, "y.npy"))
        if not np.allclose(y, ref, rtol=1e-5, atol=1e-6):
            print(f"FAIL {mode}: output off by {np.max(np.abs(y - ref))}")
            bad += 1
        if mode == "mapped" and rss_kib * 1024 >= cap and not a.no_rss_check:
            print(f"FAIL mapped: peak RSS {rss_kib / 1024:.1f} MiB not below the cap {a.cap_mib} MiB")
            bad += 1
    rc, err, _ = run_measured([a.tandem, "run", path, "--input", f"ids={idp}", "--threads", "1",
                               "--device-memory", f"cpu={a.cap_mib}MiB"])
    print(f"read with the budget cpu={a.cap_mib}MiB: rc {rc}: {err.strip().splitlines()[-1][:200] if err.strip() else ''}")
    if rc == 0:
        print("FAIL: the read model ran within a budget 4x smaller than its data")
        bad += 1
    if bad:
        sys.exit(f"FAIL: {bad} check(s)")
    print("PASS")


if __name__ == "__main__":
    main()
