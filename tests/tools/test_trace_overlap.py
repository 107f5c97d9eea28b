#!/usr/bin/env python3
"""Tests of tools/trace_overlap.py (copy time overlapping kernel execution in a Chrome trace).

1. A hand-made trace with a known answer: the per-device and overall copy time, overlapped time
   (same device, other devices, any) and fractions must come out exactly (to 1e-9 ms).
2. Edge cases: a trace as a bare event list, a trace without copies (fraction null, "no copies"
   in the text), and unreadable input (exit status 2, a message).
3. A real trace: `tandem bench --trace` of tests/models/resnet_blocks split between the CPU and an
   accelerator by an affinity rule (opencl:0 when `tandem devices` lists it, else the test
   device test:0 of TANDEM_TEST_DEVICES=1), so tensors cross both ways: copies counted > 0 with
   bytes, 0 <= fraction <= 1, overlapped <= copy time <= plain sum of copy durations, kernels on
   both devices, and the `all` row the sum of the device rows.

    tests/tools/test_trace_overlap.py --tandem build/tandem [--repo .]

Exit status 0 when every check passed, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def close(a, b, tol=1e-9):
    return a is not None and b is not None and abs(a - b) <= tol


def tool(repo, args):
    r = subprocess.run([sys.executable, os.path.join(repo, "tools", "trace_overlap.py")] + args,
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def kernel(tid, dev, name, ts, dur):
    return {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur, "name": name, "cat": "Conv",
            "args": {"op": "Conv", "node": 0, "device": dev}}


def copy(tid, name, ts, dur, nbytes, src, dst, extra=None):
    args = {"bytes": nbytes}
    if src:
        args.update({"from": src, "to": dst})
    args.update(extra or {})
    return {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur, "name": name, "cat": "copy", "args": args}


def hand_made():
    """Times in µs. gpu:0 copies [50,150] [250,450] [260,280] (inside the second); kernels gpu:0
    [0,100] [200,300], cpu [350,400]; ocl:0 copy [500,520] with no device in its args."""
    names = ["gpu:0 copies", "gpu:0", "cpu", "runs", "host waits", "ocl:0 copies"]
    ev = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "tandem"}}]
    for i, n in enumerate(names):
        ev.append({"ph": "M", "pid": 1, "tid": i + 1, "name": "thread_name", "args": {"name": n}})
    ev += [
        kernel(2, "gpu:0", "k1", 0, 100),
        kernel(2, "gpu:0", "k2", 200, 100),
        kernel(3, "cpu", "k3", 350, 50),
        copy(1, "upload x", 50, 100, 1000, "host", "gpu:0"),
        {"ph": "s", "pid": 1, "tid": 1, "ts": 150, "id": 1, "name": "data", "cat": "flow"},
        {"ph": "f", "bp": "e", "pid": 1, "tid": 2, "ts": 200, "id": 1, "name": "data", "cat": "flow"},
        copy(1, "download y", 250, 200, 2000, "gpu:0", "host", {"async": True}),
        copy(1, "download z", 260, 20, 500, "gpu:0", "host"),
        copy(6, "upload w", 500, 20, 10, None, None),
        {"ph": "X", "pid": 1, "tid": 4, "ts": 0, "dur": 600, "name": "run", "cat": "run", "args": {"ok": True}},
        {"ph": "X", "pid": 1, "tid": 5, "ts": 300, "dur": 40, "name": "wait y", "cat": "wait", "args": {}},
    ]
    return {"displayTimeUnit": "ms", "otherData": {"producer": "tandem"}, "traceEvents": ev}


def test_hand_made(repo, tmp):
    path = os.path.join(tmp, "hand.json")
    with open(path, "w") as f:
        json.dump(hand_made(), f)
    rc, out, err = tool(repo, [path, "--json"])
    check(rc == 0, f"hand-made trace: exit 0 (got {rc}: {err.strip()})")
    if rc:
        return
    d = json.loads(out)
    rows = {r["device"]: r for r in d["devices"]}
    check(sorted(rows) == ["gpu:0", "ocl:0"], f"devices with copies are gpu:0 and ocl:0 (got {sorted(rows)})")
    check(d["kernels"] == 3 and close(d["kernel_ms"], 0.25), f"3 kernels, 0.25 ms (got {d['kernels']}, {d['kernel_ms']})")
    g = rows.get("gpu:0", {})
    check(g.get("copies") == 3 and g.get("bytes") == 3500, f"gpu:0: 3 copies, 3500 bytes (got {g.get('copies')}, {g.get('bytes')})")
    check(close(g.get("copy_ms"), 0.3), f"gpu:0 copy time is the union, 0.3 ms (got {g.get('copy_ms')})")
    check(close(g.get("copy_sum_ms"), 0.32), f"gpu:0 plain sum 0.32 ms (got {g.get('copy_sum_ms')})")
    check(close(g.get("overlap_ms"), 0.15), f"gpu:0 overlapped 0.15 ms (got {g.get('overlap_ms')})")
    check(close(g.get("overlap_same_device_ms"), 0.1), f"gpu:0 overlapped by gpu:0 kernels 0.1 ms (got {g.get('overlap_same_device_ms')})")
    check(close(g.get("overlap_other_devices_ms"), 0.05), f"gpu:0 overlapped by cpu kernels 0.05 ms (got {g.get('overlap_other_devices_ms')})")
    check(close(g.get("fraction"), 0.5), f"gpu:0 fraction 0.5 (got {g.get('fraction')})")
    o = rows.get("ocl:0", {})
    check(o.get("copies") == 1 and close(o.get("copy_ms"), 0.02) and close(o.get("fraction"), 0.0),
          f"ocl:0 (device from its track name): 1 copy, 0.02 ms, fraction 0 (got {o})")
    a = d["all"]
    check(a["copies"] == 4 and a["bytes"] == 3510, f"all: 4 copies, 3510 bytes (got {a['copies']}, {a['bytes']})")
    check(close(a["copy_ms"], 0.32) and close(a["overlap_ms"], 0.15) and close(a["fraction"], 0.46875),
          f"all: 0.32 ms copies, 0.15 ms overlapped, fraction 0.46875 (got {a['copy_ms']}, {a['overlap_ms']}, {a['fraction']})")
    rc, out, _ = tool(repo, [path])
    check(rc == 0 and "gpu:0" in out and "0.500" in out and "0.469" in out, "text output has the rows and fractions")


def test_edges(repo, tmp):
    ev = hand_made()["traceEvents"]
    path = os.path.join(tmp, "list.json")
    with open(path, "w") as f:
        json.dump(ev, f)
    rc, out, _ = tool(repo, [path, "--json"])
    check(rc == 0 and close(json.loads(out)["all"]["fraction"], 0.46875), "a bare event list reads the same")
    path = os.path.join(tmp, "nocopies.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": [e for e in ev if e.get("cat") != "copy"]}, f)
    rc, out, _ = tool(repo, [path, "--json"])
    d = json.loads(out) if rc == 0 else {}
    check(rc == 0 and d["devices"] == [] and d["all"]["fraction"] is None and d["all"]["copies"] == 0,
          "no copies: no device rows, fraction null")
    rc, out, _ = tool(repo, [path])
    check(rc == 0 and "no copies" in out, "no copies: the text says so")
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"traceEvents": [')
    rc, _, err = tool(repo, [bad])
    check(rc == 2 and "cannot read" in err, f"truncated JSON: exit 2 with a message (got {rc}: {err.strip()})")
    rc, _, err = tool(repo, [os.path.join(tmp, "missing.json")])
    check(rc == 2 and err.strip() != "", "a missing file: exit 2 with a message")
    with open(bad, "w") as f:
        json.dump({"traceEvents": [{"ph": "X", "ts": "soon", "cat": "copy"}]}, f)
    rc, _, err = tool(repo, [bad])
    check(rc == 2 and "ts" in err, "an event without a numeric ts: exit 2 with a message")


def test_real(repo, tandem, tmp):
    env = dict(os.environ)
    devs = subprocess.run([tandem, "devices"], capture_output=True, text=True, env=env, timeout=300).stdout
    if any(line.startswith("opencl:0 ") for line in devs.splitlines()):
        accel = "opencl:0"
    else:
        accel = "test:0"
        env["TANDEM_TEST_DEVICES"] = "1"
    trace = os.path.join(tmp, "real.json")
    model = os.path.join(repo, "tests", "models", "resnet_blocks", "model.onnx")
    cmd = [tandem, "bench", model, "--devices", f"{accel},cpu", "--placement", accel, "--affinity",
           "MaxPool=cpu", "--warmup", "1", "--iterations", "3", "--threads", "1", "--trace", trace]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    check(r.returncode == 0 and os.path.exists(trace), f"tandem bench --trace on {accel},cpu (exit {r.returncode}: {r.stderr.strip()[-300:]})")
    if r.returncode:
        return
    rc, out, err = tool(repo, [trace, "--json"])
    check(rc == 0, f"real trace: exit 0 ({err.strip()})")
    if rc:
        return
    d = json.loads(out)
    rows = {x["device"]: x for x in d["devices"]}
    a = d["all"]
    print(f"     {accel} + cpu trace: " + json.dumps(a))
    check(accel in rows, f"copies are counted on {accel} (got {sorted(rows)})")
    check(a["copies"] > 0 and a["bytes"] > 0, f"copies counted > 0 with bytes (got {a['copies']}, {a['bytes']})")
    check(a["fraction"] is not None and 0.0 <= a["fraction"] <= 1.0, f"0 <= fraction <= 1 (got {a['fraction']})")
    check(0.0 <= a["overlap_ms"] <= a["copy_ms"] + 1e-9 and a["copy_ms"] <= a["copy_sum_ms"] + 1e-9,
          "overlapped <= copy time <= sum of copy durations")
    check(set(d["kernel_devices"]) == {accel, "cpu"}, f"kernels on {accel} and cpu (got {d['kernel_devices']})")
    check(a["copies"] == sum(x["copies"] for x in rows.values()) and a["bytes"] == sum(x["bytes"] for x in rows.values()),
          "the all row adds up the device rows")
    for x in rows.values():
        check(x["fraction"] is not None and 0.0 <= x["fraction"] <= 1.0 and
              x["overlap_same_device_ms"] <= x["overlap_ms"] + 1e-9 and
              x["overlap_other_devices_ms"] <= x["overlap_ms"] + 1e-9,
              f"{x['device']}: fraction in [0, 1], same/other parts within the overlap")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", required=True, help="the tandem command")
    ap.add_argument("--repo", default=REPO)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        test_hand_made(a.repo, tmp)
        test_edges(a.repo, tmp)
        test_real(a.repo, os.path.abspath(a.tandem), tmp)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
