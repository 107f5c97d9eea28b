#!/usr/bin/env python3
"""LLM bench: tandem against onnxruntime-genai, side by side in one run, same model folder, same threads.

    .venv/bin/python bench/llm/run_llm_bench.py MODEL_DIR [--tandem build/tandem] [--threads 1,2]
        [--prompt-tokens 512] [--positions 10,1000] [--gen-tokens 64] [--reps 3] [--no-tandem]
        [--engines ort-genai,tandem] [--kv-type auto|f32|f16|int8|int4] [--out results.json] [--md results.md]

For each thread count and each engine (each in its own process, so that its peak RSS is its own):
  * prefill: a prompt of --prompt-tokens ids, timed from the call to the first token: prefill tokens/s
    and time to first token (ms);
  * decode at each of --positions (default 10 and 1000): a prompt of that many ids, then --gen-tokens
    greedy tokens (EOS suppressed); decode tokens/s over the tokens after the first.
Each case runs --reps times after one warm-up; the median and the min-max spread are reported.
Then tandem's depth ratio paired in time (--paired-reps repetitions, default 7, of `tandem bench --llm
--prompt-tokens 0 --depth P0,P1`: decode at the first and last positions in turn in each repetition, and
each repetition's ratio; median and min-max). Then, from bench/llm/membw.c (compiled here with cc -O3 -march=native) the machine's read bandwidth at
1 and 2 threads (read before and after the engines' runs; the higher reading of each is the one used)
and its ISA; from model.onnx the bytes of weights one decode step reads (every
MatMulNBits B + scales + zero points, the norms, one embedding row) and the KV cache bytes at a position;
and for each engine decode (bytes/token x tokens/s) as a fraction of the measured bandwidth, and of
the read rate of a buffer the size of the weights (membw.c at that size: where the last-level cache
holds the weights, a step reads them from it faster than DRAM gives). The
bytes are the engine's own count where it reports one (tandem's JSON "weight_bytes_per_token": the
weights as its session holds them, packed forms included, tables one row), else the model file's;
the table's "weights MB a token" column says which figure each row used.

The tandem side runs `tandem bench MODEL_DIR --llm --prompt-tokens P --gen-tokens G --threads T
--warmup 1 --repetitions R --json` and expects one JSON object (written by the generator work of
issue 19; this script reads it defensively, and records a failure instead of stopping):
  {"prompt_tokens": P, "gen_tokens": G, "threads": T,
   "prefill_tokens_per_s": X | {"median"|"mean": X, "min": .., "max": .., "stddev": ..},
   "decode_tokens_per_s":  X | {...},
   "ttft_ms": X | {...},
   "peak_rss_bytes": N (optional; the script measures the process's peak RSS itself),
   "weight_bytes_per_token": N (optional: the bytes of weights the engine reads a decode step)}
Also accepted: "pp_tokens_per_s"/"tg_tokens_per_s" or {"pp": {...}, "tg": {...}} (llama-bench's names).

--kv-type T is passed to tandem (`tandem bench --kv-type T`: its KV cache type; ORT GenAI always runs
the folder's own, float32 or float16); the table names the cache type each engine ran with, and the KV
bytes per position in "decode GB/s" are those of that type (int8: the codes plus one bfloat16 scale per
32; int4: 16 bytes of nibbles and a bfloat16 scale per 32; src/ops/kv_int8.h).

The ORT GenAI side is this script itself (--worker ort-genai): the same model folder, with
intra_op_num_threads = T overlaid on genai_config.json (onnxruntime_genai.Config.overlay).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# ------------------------------------------------------------------------------------------------
# the onnxruntime-genai worker


def prompt_ids(n, vocab, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    # ordinary tokens only (the first ids of GPT-2-style vocabularies are the specials)
    return rng.integers(min(100, vocab // 4), vocab, n).astype(np.int32)


def ort_case(og, model, vocab, p, g):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=p + g, min_length=p + g, do_sample=False)
    gen = og.Generator(model, params)
    ids = prompt_ids(p, vocab, p)
    t0 = time.perf_counter()
    gen.append_tokens(ids)
    t1 = time.perf_counter()
    gen.generate_next_token()
    gen.get_next_tokens()
    t2 = time.perf_counter()
    n = 0
    while n < g - 1 and not gen.is_done():
        gen.generate_next_token()
        gen.get_next_tokens()
        n += 1
    t3 = time.perf_counter()
    return {"prefill_tokens_per_s": p / (t1 - t0), "ttft_ms": 1e3 * (t2 - t0),
            "decode_tokens_per_s": n / (t3 - t2) if n else None, "decoded": n}


def ort_worker(a):
    import onnxruntime_genai as og
    cfg = og.Config(a.model_dir)
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": a.threads, "inter_op_num_threads": 1}}}}))
    t = time.perf_counter()
    model = og.Model(cfg)
    load_s = time.perf_counter() - t
    with open(os.path.join(a.model_dir, "genai_config.json")) as f:
        vocab = json.load(f)["model"]["vocab_size"]
    runs = []
    for _ in range(a.warmup + a.reps):
        runs.append(ort_case(og, model, vocab, a.prompt_tokens, a.gen_tokens))
    runs = runs[a.warmup:]
    out = {"engine": "onnxruntime-genai", "version": getattr(og, "__version__", "?"), "threads": a.threads,
           "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen_tokens, "load_s": load_s}
    for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms"):
        out[key] = summarise([r[key] for r in runs if r[key] is not None])
    print(json.dumps(out))


# ------------------------------------------------------------------------------------------------
# helpers


def summarise(vals):
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def figure(v):
    """A number from a value that may be a number or a {median|mean|avg|value} dict."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, dict):
        for k in ("median", "mean", "avg", "value", "tokens_per_s"):
            if k in v and isinstance(v[k], (int, float)):
                return float(v[k])
    return None


def spread(v):
    if isinstance(v, dict):
        if "min" in v and "max" in v:
            return f"{v['min']:.1f}-{v['max']:.1f}"
        for k in ("stddev", "std"):
            if k in v:
                return f"±{v[k]:.1f}"
    return ""


def lookup(doc, names):
    for n in names:
        cur = doc
        ok = True
        for part in n.split("."):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                ok = False
                break
        if ok:
            return cur
    return None


def run_measured(cmd, timeout):
    """Run cmd; return (rc, stdout, stderr, peak RSS bytes of that process)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        deadline = time.time() + timeout
        rusage = None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                rusage = ru
                break
            if time.time() > deadline:
                p.kill()
                _, status, rusage = os.wait4(p.pid, 0)
                rc = 124
                break
            time.sleep(0.05)
        p.returncode = rc
        out.seek(0)
        err.seek(0)
        return rc, out.read().decode(errors="replace"), err.read().decode(errors="replace"), rusage.ru_maxrss * 1024


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                pass
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def run_engine(engine, a, threads, p, g):
    if engine == "ort-genai":
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "ort-genai", a.model_dir,
               "--threads", str(threads), "--prompt-tokens", str(p), "--gen-tokens", str(g),
               "--reps", str(a.reps), "--warmup", "1"]
    else:
        # pp P = a P-token prefill; tg G @ dP = G decode steps after a P-token context (the same
        # position as the ort-genai worker's decode case)
        cmd = [a.tandem, "bench", a.model_dir, "--llm", "--prompt-tokens", str(p), "--gen-tokens", str(g),
               "--depth", str(p), "--threads", str(threads), "--warmup", "1", "--repetitions", str(a.reps),
               "--json"]
        if a.kv_type:
            cmd[-1:-1] = ["--kv-type", a.kv_type]
    rc, out, err, rss = run_measured(cmd, a.timeout)
    doc = last_json(out) if rc == 0 else None
    res = {"engine": engine, "threads": threads, "prompt_tokens": p, "gen_tokens": g, "peak_rss_bytes": rss,
           "cmd": " ".join(cmd)}
    if doc is None:
        res["error"] = f"rc {rc}: " + (err.strip().splitlines() or ["no JSON on stdout"])[-1][:300]
        return res
    res["raw"] = doc
    res["prefill_tokens_per_s"] = lookup(doc, ["prefill_tokens_per_s", "pp_tokens_per_s", "pp.tokens_per_s", "pp"])
    res["decode_tokens_per_s"] = lookup(doc, ["decode_tokens_per_s", "tg_depth.tokens_per_s", "tg_tokens_per_s",
                                              "tg.tokens_per_s", "tg"])
    res["ttft_ms"] = lookup(doc, ["ttft_ms", "time_to_first_token_ms", "pp.ttft_ms"])
    pf = figure(res["prefill_tokens_per_s"])
    if res["ttft_ms"] is None and isinstance(pf, (int, float)) and pf > 0:
        res["ttft_ms"] = 1000.0 * p / pf  # tandem bench --llm: the prefill of P tokens (the first token's run)
    return res


def model_bytes(model_dir):
    """Bytes of weights a decode step reads, and the KV cache bytes per position."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=True)
    inits = {t.name: t for t in m.graph.initializer}

    def nbytes(name):
        t = inits.get(name)
        if t is None:
            return 0
        return numpy_helper.to_array(t).nbytes

    def arr(name):
        return numpy_helper.to_array(inits[name])

    total = 0
    warned = False
    detail = {"matmulnbits": 0, "embedding_row": 0, "norms": 0, "float_matmul": 0}
    for n in m.graph.node:
        if n.op_type == "MatMulNBits":
            b = sum(nbytes(x) for x in n.input[1:4] if x)
            detail["matmulnbits"] += b
            at = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            if at.get("bits") == 8 and at.get("accuracy_level", 0) < 4 and not warned:
                # gguf_to_onnx.py's default lm head (level 0, float32 activations): tandem runs it
                # in float32, and ONNX Runtime 1.32 on an AMX Xeon guest dequantised the whole head
                # in a scalar loop every step (3.3 decode tok/s at 1 thread against 51.8 at level 4,
                # 2026-12-06); the bench folder is made with --lm-head-accuracy-level 4 (README)
                print(f"warning: {n.name or n.output[0]} is an 8-bit MatMulNBits at accuracy_level "
                      f"{at.get('accuracy_level', 0)}: not the bench folder (bench/llm/README.md: "
                      "--q4-1-form offset --lm-head-accuracy-level 4)", file=sys.stderr)
                warned = True
        elif n.op_type == "MatMul" and n.input[1] in inits:
            detail["float_matmul"] += nbytes(n.input[1])  # e.g. gguf_to_onnx --q4-1-form offset
        elif n.op_type == "GatherBlockQuantized":
            rows = arr(n.input[0]).shape[0]
            detail["embedding_row"] += sum(nbytes(x) for x in (n.input[0], n.input[2],
                                                                 n.input[3] if len(n.input) > 3 else "") if x) // rows
        elif n.op_type == "Gather" and n.input[0] in inits:
            a = arr(n.input[0])
            detail["embedding_row"] += a.nbytes // a.shape[0]
        elif n.op_type in ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"):
            detail["norms"] += nbytes(n.input[2] if n.op_type.startswith("Skip") else n.input[1])
    total = sum(detail.values())
    with open(os.path.join(model_dir, "genai_config.json")) as f:
        dec = json.load(f)["model"]["decoder"]
    # the cache's element size from the past inputs' type (gguf_to_onnx.py --kv-dtype float16: 2 bytes)
    past = [i for i in m.graph.input if i.name.startswith("past_key_values")]
    f16 = bool(past) and past[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    rows = dec["num_hidden_layers"] * 2 * dec["num_key_value_heads"]
    d = dec["head_size"]
    # bytes per position of each cache type: tandem's int8 row = d codes + a bfloat16 scale per 32
    kv_per_pos = {"model": rows * d * (2 if f16 else 4), "model_type": "f16" if f16 else "f32",
                  "f32": rows * d * 4, "f16": rows * d * 2, "int8": rows * (d + 2 * ((d + 31) // 32)),
                  "int4": rows * 18 * ((d + 31) // 32)}
    del np
    return total, detail, kv_per_pos


def kv_type_of(e, a, kv):
    """The KV cache type engine e ran with (tandem reports its own in the JSON)."""
    if e == "tandem" and a.kv_type and a.kv_type != "auto":
        return a.kv_type
    return kv["model_type"]


_membw_built = []  # the compiled membw, once per run of this script (it reads twice)


def higher_reading(readings):
    """{threads: GB/s} with each thread count's higher value over membw readings (None skipped)."""
    best = {}
    for rg in readings:
        for k, v in (rg or {}).items():
            if v and v > best.get(k, 0):
                best[k] = v
    return best


def membw(a, mib=None):
    exe = os.path.join(tempfile.gettempdir(), f"tandem_membw_{os.getuid()}")
    if not _membw_built:
        src = os.path.join(HERE, "membw.c")
        cc = os.environ.get("CC", "cc")
        r = subprocess.run([cc, "-O3", "-march=native", "-pthread", "-std=c11", src, "-o", exe],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": "cannot compile membw.c: " + r.stderr[-300:]}
        _membw_built.append(exe)
    r = subprocess.run([exe, str(mib or a.membw_mib), str(max(a.thread_list)), "5"], capture_output=True, text=True)
    doc = last_json(r.stdout)
    return doc or {"error": r.stderr[-300:]}


# ------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--worker", choices=["ort-genai"], help=argparse.SUPPRESS)
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build", "tandem"))
    ap.add_argument("--engines", default="ort-genai,tandem")
    ap.add_argument("--no-tandem", action="store_true")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--positions", default="10,1000")
    ap.add_argument("--paired-reps", type=int, default=7,
                    help="repetitions of tandem's paired depth ratio (at least --reps)")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--membw-mib", type=int, default=1024)
    ap.add_argument("--kv-type", choices=["auto", "f32", "f16", "int8", "int4"],
                    help="tandem's KV cache type (tandem bench --kv-type); default: the model's")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--md", help="markdown table")
    a = ap.parse_args()
    if a.worker:
        a.threads = int(a.threads)
        return ort_worker(a)

    a.thread_list = [int(x) for x in a.threads.split(",")]
    positions = [int(x) for x in a.positions.split(",") if x]
    engines = [e for e in a.engines.split(",") if e]
    if a.no_tandem and "tandem" in engines:
        engines.remove("tandem")
    if "tandem" in engines and not os.access(a.tandem, os.X_OK):
        print(f"tandem binary {a.tandem} not found: tandem side skipped", file=sys.stderr)
        engines.remove("tandem")

    bw = membw(a)
    wbytes, wdetail, kv_per_pos = model_bytes(a.model_dir)
    # the read rate of a buffer the size of the weights a step reads (the file's count, MiB rounded
    # up; tandem's packed weights are ~14% fewer bytes): where the last-level cache
    # is larger than the weights (an AMX Xeon guest's 480 MiB L3), a decode step streams them from
    # L3 and outruns the DRAM reading (tandem 142-163% of it, 2026-12-06); this one says how near
    # the rate that the hierarchy gives such a stream it comes
    ws_mib = max(1, -(-wbytes // 2**20))
    bw_ws = membw(a, ws_mib)
    print(f"machine: ISA {bw.get('isa')}, read bandwidth {bw.get('read_gbps')} GB/s; "
          f"weights read per decoded token {wbytes / 1e6:.1f} MB {wdetail}; KV cache {kv_per_pos} B/position",
          file=sys.stderr)

    # cases: (kind, prompt tokens, gen tokens)
    cases = [("prefill", a.prompt_tokens, 16)] + [("decode", p, a.gen_tokens) for p in positions]
    results = []
    for t in a.thread_list:
        for kind, p, g in cases:
            for e in engines:
                r = run_engine(e, a, t, p, g)
                r["case"] = kind
                results.append(r)
                print(f"  {e:18s} threads {t} {kind:7s} P={p:5d} G={g:3d}: prefill "
                      f"{figure(r.get('prefill_tokens_per_s'))} tok/s, decode {figure(r.get('decode_tokens_per_s'))}"
                      f" tok/s, ttft {figure(r.get('ttft_ms'))} ms, peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB"
                      + (f"  ERROR {r['error']}" if "error" in r else ""), file=sys.stderr)

    # the bandwidth once more after the runs, and the higher reading of each thread count used: a
    # reading taken while another guest on the host loads the memory bus is low, and a fraction
    # against it overstates the engines (2026-12-05, Zen 3 guest: 2 threads read 23.1 GB/s in one
    # run and 44.1 in the run before it, the same decode rates giving 111% and 56%)
    bw_end = membw(a)
    bw_ws_end = membw(a, ws_mib)
    ws_best = higher_reading([bw_ws.get("read_gbps"), bw_ws_end.get("read_gbps")])
    bw_runs = [bw.get("read_gbps"), bw_end.get("read_gbps")]
    best = higher_reading(bw_runs)
    bw = dict(bw, read_gbps=best or bw.get("read_gbps"), read_gbps_runs=bw_runs)
    print(f"machine: read bandwidth before / after the runs {bw_runs[0]} / {bw_runs[1]} GB/s", file=sys.stderr)

    def get(e, t, kind, p, key):
        for r in results:
            if r["engine"] == e and r["threads"] == t and r["case"] == kind and r["prompt_tokens"] == p:
                return r.get(key)
        return None

    lines = ["| threads | engine | KV cache | prefill tok/s (P=%d) | TTFT ms | decode tok/s @%s | decode@%d / decode@%d | "
             "weights MB a token | decode GB/s (weights + KV) | %% of measured bandwidth | %% of a weights-sized buffer's rate | peak RSS MiB |"
             % (a.prompt_tokens, " / @".join(str(p) for p in positions), positions[-1], positions[0]),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = []
    for t in a.thread_list:
        bwt = (bw.get("read_gbps") or {}).get(str(t))
        bws = ws_best.get(str(t))
        for e in engines:
            pf = get(e, t, "prefill", a.prompt_tokens, "prefill_tokens_per_s")
            tt = get(e, t, "prefill", a.prompt_tokens, "ttft_ms")
            decs = [get(e, t, "decode", p, "decode_tokens_per_s") for p in positions]
            rss = max((r["peak_rss_bytes"] for r in results if r["engine"] == e and r["threads"] == t), default=0)
            d0 = figure(decs[0])
            dl = figure(decs[-1])
            kvt = kv_type_of(e, a, kv_per_pos)
            # tandem says which cache it ran with, and counts the weights a step reads (its
            # packed forms as held); else the folder's cache and the model file's bytes
            ewb = wbytes
            for r in results:
                if r["engine"] == e and r["threads"] == t and isinstance(r.get("raw"), dict):
                    kvt = {"float32": "f32", "float16": "f16"}.get(r["raw"].get("kv_type"), r["raw"].get("kv_type", kvt))
                    if (r["raw"].get("weight_bytes_per_token") or 0) > 0:
                        ewb = r["raw"]["weight_bytes_per_token"]
            kvb = kv_per_pos.get(kvt, kv_per_pos["model"])
            gbps = ""
            frac = ""
            frac_ws = ""
            if d0:
                by = ewb + kvb * positions[0]
                gbps = f"{by * d0 / 1e9:.2f}"
                if bwt:
                    frac = f"{100.0 * by * d0 / 1e9 / bwt:.0f}%"
                if bws:
                    frac_ws = f"{100.0 * by * d0 / 1e9 / bws:.0f}%"
            dec_txt = " / ".join(f"{figure(d):.1f} ({spread(d)})" if figure(d) else "-" for d in decs)
            ratio = f"{dl / d0:.2f}" if d0 and dl else "-"
            lines.append(f"| {t} | {e} | {kvt} | {figure(pf) or 0:.1f} ({spread(pf)}) | {figure(tt) or 0:.0f} | {dec_txt} | "
                         f"{ratio} | {ewb / 1e6:.1f} | {gbps} | {frac} | {frac_ws} | {rss / 2**20:.0f} |")
            summary.append({"engine": e, "threads": t, "kv_type": kvt, "prefill_tokens_per_s": figure(pf), "ttft_ms": figure(tt),
                            "decode_tokens_per_s": {str(p): figure(d) for p, d in zip(positions, decs)},
                            "peak_rss_bytes": rss, "weight_bytes_per_token": ewb, "bandwidth_fraction_at_first_position":
                            (ewb + kvb * positions[0]) * d0 / 1e9 / bwt if d0 and bwt else None,
                            "weights_sized_buffer_fraction_at_first_position":
                            (ewb + kvb * positions[0]) * d0 / 1e9 / bws if d0 and bws else None})
    if "tandem" in engines and "ort-genai" in engines:
        lines.append("")
        lines.append("| threads | tandem/ORT-GenAI prefill | tandem/ORT-GenAI decode @" + " / @".join(map(str, positions))
                     + " |")
        lines.append("|---|---|---|")
        for t in a.thread_list:
            def ratio(kind, p, key):
                x = figure(get("tandem", t, kind, p, key))
                y = figure(get("ort-genai", t, kind, p, key))
                return f"{x / y:.2f}" if x and y else "-"
            lines.append(f"| {t} | {ratio('prefill', a.prompt_tokens, 'prefill_tokens_per_s')} | "
                         + " / ".join(ratio("decode", p, "decode_tokens_per_s") for p in positions) + " |")
    # tandem's depth ratio paired in time: `tandem bench --depth P0,P1` decodes at both positions in
    # turn in each repetition and reports each repetition's ratio (a VM whose speed drifts over
    # minutes moves both sides of a pair alike, where the table's ratio takes two processes' medians)
    paired = []
    if "tandem" in engines and len(positions) >= 2:
        lines.append("")
        lines.append(f"| threads | tandem decode@{positions[-1]} / decode@{positions[0]}, paired in each repetition "
                     f"(`--depth {positions[0]},{positions[-1]}`): median (min-max) | bound by the bytes read "
                     f"(weights + KV rows) | repetitions |")
        lines.append("|---|---|---|---|")
        reps = max(a.reps, a.paired_reps)
        for t in a.thread_list:
            cmd = [a.tandem, "bench", a.model_dir, "--llm", "--prompt-tokens", "0", "--gen-tokens", str(a.gen_tokens),
                   "--depth", f"{positions[0]},{positions[-1]}", "--threads", str(t), "--warmup", "1",
                   "--repetitions", str(reps), "--json"]
            if a.kv_type:
                cmd[-1:-1] = ["--kv-type", a.kv_type]
            rc, out, err, _ = run_measured(cmd, a.timeout)
            doc = last_json(out) if rc == 0 else None
            q = (doc or {}).get("tg_depth_ratio")
            bound = (doc or {}).get("tg_depth_bytes_bound")
            paired.append({"threads": t, "cmd": " ".join(cmd), "tg_depth_ratio": q, "tg_depth_bytes_bound": bound,
                           "error": None if q else f"rc {rc}: " + (err.strip().splitlines() or ["no ratio"])[-1][:300]})
            txt = f"{q['median']:.2f} ({q['min']:.2f}-{q['max']:.2f})" if q else "-"
            lines.append(f"| {t} | {txt} | {bound:.3f} | {reps} |" if bound else f"| {t} | {txt} | - | {reps} |")
            print(f"  tandem threads {t} paired depth ratio: {txt}", file=sys.stderr)
    header = (f"model {os.path.abspath(a.model_dir)}; ISA {bw.get('isa')}; measured read bandwidth "
              f"{bw.get('read_gbps')} GB/s (bench/llm/membw.c, the higher of its readings before and after the runs: "
              f"{bw['read_gbps_runs'][0]} / {bw['read_gbps_runs'][1]}); a {ws_mib} MiB buffer (the weights' size) read "
              f"{ws_best or '-'} GB/s (the higher of before / after); weights read per decoded token "
              f"{wbytes / 1e6:.2f} MB (MatMulNBits {wdetail['matmulnbits'] / 1e6:.2f} MB, embedding row "
              f"{wdetail['embedding_row']} B, norms {wdetail['norms']} B, float MatMul {wdetail['float_matmul'] / 1e6:.2f} MB); KV cache B per position {kv_per_pos['model']} ({kv_per_pos['model_type']}, the folder's), "
              f"{kv_per_pos['int8']} (tandem int8), {kv_per_pos['int4']} (tandem int4); tandem --kv-type {a.kv_type or 'auto'}; "
              f"reps {a.reps} after 1 warm-up, median (min-max)")
    md = header + "\n\n" + "\n".join(lines) + "\n"
    print(md)
    doc = {"model_dir": os.path.abspath(a.model_dir), "membw": bw,
           "membw_weights_sized": {"mib": ws_mib, "read_gbps": ws_best or None,
                                   "runs": [bw_ws.get("read_gbps"), bw_ws_end.get("read_gbps")]}, "weight_bytes_per_token": wbytes,
           "weight_bytes_detail": wdetail, "kv_bytes_per_position": kv_per_pos, "kv_type": a.kv_type, "prompt_tokens": a.prompt_tokens,
           "positions": positions, "gen_tokens": a.gen_tokens, "reps": a.reps,
           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "load_average": os.getloadavg(), "summary": summary, "results": results, "paired_depth_ratio": paired}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
