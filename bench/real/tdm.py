"""A small ctypes binding of tandem's C API (include/tandem/tandem.h), and a worker that
times, profiles or streams a model through it in a process of its own.

`tandem bench` has only random inputs (issue 17), which real models cannot take (silero's
sample rate, magika's byte values, token ids), so the bench times tandem here, on the same
inputs ORT gets. The worker runs in a separate process so that ORT's threads (in the bench's
process) never share a process with tandem's.

    python tdm.py time    --lib LIB --model M --feeds F.npz [--threads N] [--opt-level L]
                          [--warmup N] [--duration S]            -> JSON on stdout
    python tdm.py profile --lib LIB --model M --feeds F.npz [--runs N] ...  -> profile text
    python tdm.py stream  --lib LIB --model M --feeds F.npz --chunks NAME --carry OUT=IN,...
                          --out OUT.npz                          (runs chunk after chunk)
"""
import argparse
import ctypes as C
import json
import sys
import time

import numpy as np

TDM_API_VERSION = 1
NP_TO_TDM = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
             np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
             np.dtype(np.float16): 10, np.dtype(np.float64): 11}
TDM_TO_NP = {v: k for k, v in NP_TO_TDM.items()}
EXPLAIN_PROFILE = 4


class SessionOptions(C.Structure):
    """The leading members of tdm_session_options; the struct is passed inside a larger zeroed
    buffer so that members appended later read as zero (their defaults)."""
    _fields_ = [("api_version", C.c_int), ("devices", C.c_char_p), ("threads", C.c_int),
                ("opt_level", C.c_int), ("no_fallback", C.c_bool), ("placement", C.c_char_p),
                ("affinity", C.c_char_p), ("profile", C.c_bool)]


class TandemError(RuntimeError):
    pass


class Lib:
    def __init__(self, path):
        L = C.CDLL(path)
        vp, st = C.c_void_p, C.c_void_p
        L.tdm_status_message.restype = C.c_char_p
        L.tdm_status_message.argtypes = [st]
        L.tdm_status_free.argtypes = [st]
        L.tdm_env_create.restype = st
        L.tdm_env_create.argtypes = [vp, C.POINTER(vp)]
        L.tdm_env_free.argtypes = [vp]
        L.tdm_session_create.restype = st
        L.tdm_session_create.argtypes = [vp, C.c_char_p, vp, C.POINTER(vp)]
        L.tdm_session_free.argtypes = [vp]
        L.tdm_tensor_wrap.restype = st
        L.tdm_tensor_wrap.argtypes = [vp, C.c_int, C.c_int, C.POINTER(C.c_int64), vp, C.c_size_t,
                                      C.POINTER(vp)]
        L.tdm_tensor_free.argtypes = [vp]
        L.tdm_tensor_dtype.restype = C.c_int
        L.tdm_tensor_dtype.argtypes = [vp]
        L.tdm_tensor_rank.restype = C.c_int
        L.tdm_tensor_rank.argtypes = [vp]
        L.tdm_tensor_dims.restype = C.POINTER(C.c_int64)
        L.tdm_tensor_dims.argtypes = [vp]
        L.tdm_tensor_byte_size.restype = C.c_size_t
        L.tdm_tensor_byte_size.argtypes = [vp]
        L.tdm_tensor_data_const.restype = vp
        L.tdm_tensor_data_const.argtypes = [vp]
        L.tdm_session_run.restype = st
        L.tdm_session_run.argtypes = [vp, C.c_size_t, C.POINTER(C.c_char_p), C.POINTER(vp),
                                      C.c_size_t, C.POINTER(C.c_char_p), C.POINTER(vp)]
        L.tdm_session_explain.restype = st
        L.tdm_session_explain.argtypes = [vp, C.c_int, C.POINTER(C.c_char_p)]
        L.tdm_string_free.argtypes = [C.c_char_p]
        L.tdm_session_reset_measurements.argtypes = [vp]
        L.tdm_version_string.restype = C.c_char_p
        self.L = L

    def check(self, status, what):
        if status:
            msg = self.L.tdm_status_message(status).decode(errors="replace")
            self.L.tdm_status_free(status)
            raise TandemError(f"{what}: {msg}")


class Session:
    """One environment and one session on the CPU; run() takes and returns numpy arrays."""

    def __init__(self, lib, model, threads=0, opt_level=1, profile=False):
        self.lib, L = lib, lib.L
        self.env = C.c_void_p()
        lib.check(L.tdm_env_create(None, C.byref(self.env)), "environment")
        self._opts_buf = C.create_string_buffer(512)  # zeroed: later members keep defaults
        o = SessionOptions.from_buffer(self._opts_buf)
        o.api_version, o.devices, o.threads = TDM_API_VERSION, b"cpu", threads
        o.opt_level, o.profile = opt_level, profile
        self.s = C.c_void_p()
        t0 = time.perf_counter()
        try:
            lib.check(L.tdm_session_create(self.env, model.encode(), C.addressof(o),
                                           C.byref(self.s)), "session")
        except TandemError:
            L.tdm_env_free(self.env)
            raise
        self.create_ms = (time.perf_counter() - t0) * 1e3

    def prepare(self, feeds, n_outputs):
        """Wraps the feeds (kept alive by the returned object) for repeated runs."""
        L = self.lib.L
        arrays = {k: np.require(v, requirements="C") for k, v in feeds.items()}
        tensors = []
        for k, a in arrays.items():
            dims = (C.c_int64 * max(1, a.ndim))(*a.shape)
            t = C.c_void_p()
            self.lib.check(L.tdm_tensor_wrap(self.env, NP_TO_TDM[a.dtype], a.ndim, dims,
                                             a.ctypes.data_as(C.c_void_p), a.nbytes, C.byref(t)),
                           f"input {k}")
            tensors.append(t)
        names = (C.c_char_p * len(arrays))(*[k.encode() for k in arrays])
        ins = (C.c_void_p * len(tensors))(*[t.value for t in tensors])
        return {"arrays": arrays, "tensors": tensors, "names": names, "ins": ins,
                "n_out": n_outputs, "outs": (C.c_void_p * n_outputs)()}

    def release(self, prep):
        for t in prep["tensors"]:
            self.lib.L.tdm_tensor_free(t)
        prep["tensors"] = []

    def run_prepared(self, prep, fetch=False):
        L, n, outs = self.lib.L, prep["n_out"], prep["outs"]
        self.lib.check(L.tdm_session_run(self.s, len(prep["tensors"]), prep["names"], prep["ins"],
                                         n, None, outs), "run")
        result = []
        for i in range(n):
            if fetch:
                result.append(self._to_numpy(outs[i]))
            L.tdm_tensor_free(outs[i])
        return result

    def _to_numpy(self, t):
        L = self.lib.L
        dt = TDM_TO_NP[L.tdm_tensor_dtype(t)]
        rank = L.tdm_tensor_rank(t)
        dims = L.tdm_tensor_dims(t)
        shape = tuple(dims[i] for i in range(rank))
        nbytes = L.tdm_tensor_byte_size(t)
        buf = C.string_at(L.tdm_tensor_data_const(t), nbytes)
        return np.frombuffer(buf, dtype=dt).reshape(shape).copy()

    def explain(self, fmt=EXPLAIN_PROFILE):
        out = C.c_char_p()
        self.lib.check(self.lib.L.tdm_session_explain(self.s, fmt, C.byref(out)), "explain")
        text = out.value.decode(errors="replace")
        self.lib.L.tdm_string_free(out)
        return text

    def close(self):
        if self.s:
            self.lib.L.tdm_session_free(self.s)
            self.s = None
        if self.env:
            self.lib.L.tdm_env_free(self.env)
            self.env = None


def load_feeds(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def output_count(model_path):
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    return len(m.graph.output)


def cmd_time(a, lib):
    feeds = load_feeds(a.feeds)
    s = Session(lib, a.model, a.threads, a.opt_level)
    prep = s.prepare(feeds, output_count(a.model))
    for _ in range(a.warmup):
        s.run_prepared(prep)
    lat, cpu = [], []
    start = time.perf_counter()
    while not lat or time.perf_counter() - start < a.duration:
        c0, t0 = time.process_time(), time.perf_counter()
        s.run_prepared(prep)
        lat.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    s.release(prep)
    s.close()
    print(json.dumps({"p50": float(np.percentile(lat, 50)), "mean": float(np.mean(lat)),
                      "min": min(lat), "runs": len(lat), "create_ms": s.create_ms,
                      "cpu_p50": float(np.percentile(cpu, 50))}))


def cmd_profile(a, lib):
    feeds = load_feeds(a.feeds)
    s = Session(lib, a.model, a.threads, a.opt_level, profile=True)
    prep = s.prepare(feeds, output_count(a.model))
    for _ in range(a.warmup):
        s.run_prepared(prep)
    lib.L.tdm_session_reset_measurements(s.s)  # first runs pay for one-time set-up
    for _ in range(a.runs):
        s.run_prepared(prep)
    text = s.explain()
    s.release(prep)
    s.close()
    sys.stdout.write(text)


def cmd_stream(a, lib):
    """Runs the model once per row of the feed named --chunks, carrying outputs into inputs
    (--carry OUT=IN) from run to run; saves every output of every run, stacked."""
    feeds = load_feeds(a.feeds)
    chunks = feeds.pop(a.chunks)
    carry = dict(kv.split("=", 1) for kv in a.carry.split(",") if kv)
    import onnx
    m = onnx.load(a.model, load_external_data=False)
    out_names = [o.name for o in m.graph.output]
    s = Session(lib, a.model, a.threads, a.opt_level)
    got = {n: [] for n in out_names}
    for chunk in chunks:
        prep = s.prepare({a.chunks: chunk, **feeds}, len(out_names))
        outs = s.run_prepared(prep, fetch=True)
        s.release(prep)
        for n, v in zip(out_names, outs):
            got[n].append(v)
            if n in carry:
                feeds[carry[n]] = v
    s.close()
    np.savez(a.out, **{n: np.stack(v) for n, v in got.items()})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["time", "profile", "stream"])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--feeds", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--opt-level", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--chunks")
    ap.add_argument("--carry", default="")
    ap.add_argument("--out")
    a = ap.parse_args()
    lib = Lib(a.lib)
    try:
        {"time": cmd_time, "profile": cmd_profile, "stream": cmd_stream}[a.cmd](a, lib)
    except TandemError as e:
        print(f"tandem: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
