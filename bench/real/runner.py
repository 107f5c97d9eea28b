"""Runs a real model's case through ONNX Runtime and through tandem, and checks them:
tandem's command line (`tandem run --input ... --output-dir`) for single runs, the C API
(tdm.py, in a process of its own) for streams of runs."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import realmodels  # noqa: E402

TDM_WORKER = os.path.join(HERE, "tdm.py")


def ort_session(path, threads, optimize=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_stream(sess, stream):
    feeds, chunk_name, carry = stream
    feeds = dict(feeds)
    chunks = feeds.pop(chunk_name)
    names = [o.name for o in sess.get_outputs()]
    got = {n: [] for n in names}
    for c in chunks:
        outs = sess.run(None, {chunk_name: c, **feeds})
        for n, v in zip(names, outs):
            got[n].append(v)
            if n in carry:
                feeds[carry[n]] = v
    return {n: np.stack(v) for n, v in got.items()}


def _safe(name):
    return "".join("_" if c in "/\\:" else c for c in name)


def tandem_run(tandem, path, feeds, out_names, threads=1, opt_level=1, env=None):
    """Runs the model once with `tandem run`; returns (outputs in out_names order, None) or
    (None, error text)."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [tandem, "run", path, "--threads", str(threads), "--opt-level", str(opt_level),
               "--output-dir", os.path.join(d, "out")]
        for k, v in feeds.items():
            f = os.path.join(d, f"in_{_safe(k)}.npy")
            np.save(f, v)
            cmd += ["--input", f"{k}={f}"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return None, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1], r.stderr
        mapping = {}
        names_json = os.path.join(d, "out", "names.json")
        if os.path.exists(names_json):  # file -> tensor name, when the CLI writes one
            with open(names_json) as f:
                mapping = {v: k for k, v in json.load(f).items()}
        outs = []
        for n in out_names:
            f = os.path.join(d, "out", mapping.get(n, _safe(n) + ".npy"))
            if not os.path.exists(f):
                return None, f"output {n} was not written", r.stderr
            outs.append(np.load(f))
        return outs, None, r.stderr


def worker(cmd, lib, path, feeds, extra, env=None, timeout=900):
    """Runs tdm.py CMD in a new process with the feeds saved to a .npz; returns its stdout."""
    with tempfile.TemporaryDirectory() as d:
        fz = os.path.join(d, "feeds.npz")
        np.savez(fz, **feeds)
        args = [sys.executable, TDM_WORKER, cmd, "--lib", lib, "--model", path, "--feeds", fz]
        args += [str(x) for x in extra]
        out_path = None
        if cmd == "stream":
            out_path = os.path.join(d, "out.npz")
            args += ["--out", out_path]
        r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])
        if out_path:
            with np.load(out_path) as z:
                return {k: z[k] for k in z.files}
        return r.stdout


def check(model, case, tandem, lib, threads=1, opt_level=1, env=None):
    """Compares tandem with ORT on the case: returns {"ok", "numeric", "task", "error"}.
    `env`: tandem's process environment (e.g. an ISA cap)."""
    sess = ort_session(case.path, threads)
    names = [o.name for o in sess.get_outputs()]
    want = sess.run(None, case.feeds)
    got, err, _ = tandem_run(tandem, case.path, case.feeds, names, threads, opt_level, env)
    if got is None:
        return {"ok": False, "numeric": "", "task": "", "error": err}
    rtol, atol = model.tol
    res = [realmodels.compare(g, w, rtol, atol) for g, w in zip(got, want)]
    num_ok = all(r[0] for r in res)
    numeric = "; ".join(f"{n}: {m}" for n, (_, m) in zip(names, res))
    task_ok, task = model.task(case.info, got, want)
    out = {"ok": num_ok and task_ok, "numeric": numeric, "task": task, "error": None,
           "numeric_ok": num_ok, "task_ok": task_ok, "got": got, "want": want}
    if case.stream is not None:
        feeds, chunk_name, carry = case.stream
        try:
            sg = worker("stream", lib, case.path, feeds,
                        ["--chunks", chunk_name, "--carry",
                         ",".join(f"{k}={v}" for k, v in carry.items()),
                         "--threads", threads, "--opt-level", opt_level], env=env)
        except RuntimeError as e:
            out.update(ok=False, error=f"stream: {e}")
            return out
        sw = ort_stream(sess, case.stream)
        sres = [realmodels.compare(sg[n], sw[n], rtol, atol) for n in names]
        s_ok, s_msg = realmodels.task_vad_stream(case.info, sg, sw)
        out["stream"] = f"{len(sw[names[0]])} chunks: " + "; ".join(
            f"{n}: {m}" for n, (_, m) in zip(names, sres)) + f"; {s_msg}"
        out["ok"] = out["ok"] and all(r[0] for r in sres) and s_ok
    return out
