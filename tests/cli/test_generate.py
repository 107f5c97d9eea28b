#!/usr/bin/env python3
"""tandem generate and tandem bench --llm on tiny random Llama folders (tools/make_tiny_llama.py).

- greedy ids of `tandem generate --prompt-ids ... --json --temperature 0` equal a greedy loop in
  ONNX Runtime that recomputes the whole sequence each step (no KV cache), for several prompts;
- with a tokenizer in the build: `--prompt TEXT --no-chat` tokenizes as HF `tokenizers` does and
  the text is the decode of the generated ids; `--chat` renders the folder's chat template as
  jinja2 does (user message, add_generation_prompt) before tokenizing (skipped, with a note,
  when the build has no tokenizer / chat templates yet);
- sampling with a seed is repeatable; --max-tokens, --stop-id end the generation;
- `tandem bench --llm --json` reports pp/tg/tg_depth with mean and stddev and peak RSS, and the
  bytes of weights a decode step reads (against the model file's own count);
- bad arguments fail with a message.
Usage: test_generate.py --tandem TANDEM --repo REPO   (exit 77 = skipped)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:  # the venv of tools/requirements.txt
    print(f"SKIPPED: {e}")
    sys.exit(77)

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def check_run(cond, what, r):
    """check, and on failure the run's output tails."""
    check(cond, what)
    if not cond:
        print(r.stdout[-1500:], r.stderr[-800:])


def op_rows(text):
    """The rows of a profile's op type table (tdm_session_explain), each split in fields."""
    lines = text.splitlines()
    at = next((i for i, l in enumerate(lines) if l.startswith("op type")), len(lines))
    rows = []
    for l in lines[at + 1:]:
        if not l.strip():
            break
        rows.append(l.split())
    return rows


def run(args, timeout=300):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def ort_greedy(model, prompt, n, n_layers, kv_heads, head_dim):
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = {i.name for i in s.get_inputs()}
    ids = list(prompt)
    out = []
    for _ in range(n):
        T = len(ids)
        feed = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, T), np.int64)}
        if "position_ids" in names:
            feed["position_ids"] = np.arange(T, dtype=np.int64)[None]
        for layer in range(n_layers):
            for kv in ("key", "value"):
                feed[f"past_key_values.{layer}.{kv}"] = np.zeros((1, kv_heads, 0, head_dim), np.float32)
        logits = s.run(["logits"], feed)[0]
        t = int(np.argmax(logits[0, -1]))
        out.append(t)
        ids.append(t)
    return out


# inputs that a decode step reads one row of (per token): the embedding and rotary tables
ROW_TABLES = {("", "Gather"): {0}, ("com.microsoft", "GatherBlockQuantized"): {0, 2, 3},
              ("com.microsoft", "GroupQueryAttention"): {7, 8}, ("com.microsoft", "RotaryEmbedding"): {2, 3},
              ("", "RotaryEmbedding"): {1, 2}}


def decode_weight_bytes(model):
    """Bytes of initializers one decode step reads by the model file (each once, at the most any
    reader takes), and the 4-bit / 8-bit codes of its MatMulNBits alone."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(model)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    read, codes = {}, 0
    for n in m.graph.node:
        for k, x in enumerate(n.input):
            if x in inits:
                a = inits[x]
                rows = k in ROW_TABLES.get((n.domain, n.op_type), ()) and a.ndim > 0
                read[x] = max(read.get(x, 0), a.nbytes // a.shape[0] if rows else a.nbytes)
        if n.op_type == "MatMulNBits":
            codes += inits[n.input[1]].nbytes
    return sum(read.values()), codes


def generate_json(tandem, folder, *args):
    r = run([tandem, "generate", folder, "--json", "--threads", "1", *args])
    if r.returncode != 0:
        return None, r
    line = [l for l in r.stdout.splitlines() if l.startswith("{")]
    return (json.loads(line[-1]) if line else None), r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    T = a.tandem
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "optimum")
        r = run([sys.executable, os.path.join(a.repo, "tools", "make_tiny_llama.py"), folder, "--form", "optimum",
                 "--seed", "7"])
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            print("FAIL make_tiny_llama.py")
            return 1
        cfg = json.load(open(os.path.join(folder, "config.json")))
        L, kvh = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
        hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        V = cfg["vocab_size"]
        model = os.path.join(folder, "model.onnx")

        # greedy ids against ONNX Runtime (no cache), several prompts
        rng = np.random.default_rng(3)
        for p in range(4):
            prompt = [int(x) for x in rng.integers(3, V, size=int(rng.integers(1, 12)))]
            want = ort_greedy(model, prompt, 16, L, kvh, hd)
            got, r = generate_json(T, folder, "--prompt-ids", ",".join(map(str, prompt)), "--temperature", "0",
                                   "--max-tokens", "16", "--ignore-eos")
            ok = got is not None and got["tokens"] == want
            check(ok, f"greedy ids equal ONNX Runtime's, prompt {p} ({len(prompt)} tokens)")
            if not ok:
                print("   want", want, "\n   got ", got and got["tokens"], r.stderr[-500:])
            if got:
                for k in ("text", "tokens", "prompt_tokens", "prefill_tokens_per_s", "decode_tokens_per_s",
                          "ttft_ms"):
                    check(k in got, f"--json has '{k}'")
                check(got["prompt_tokens"] == len(prompt), "prompt_tokens")
                check(got["decode_tokens_per_s"] > 0 and got["ttft_ms"] > 0, "timings are positive")

        # memory budget (issue 21): a roomy cpu budget gives the same ids; the KV cache counts
        # against it (max_length long), each part too big is named
        prompt = "3,4,5"
        base, _ = generate_json(T, folder, "--prompt-ids", prompt, "--max-tokens", "8", "--ignore-eos")
        roomy, r = generate_json(T, folder, "--prompt-ids", prompt, "--max-tokens", "8", "--ignore-eos",
                                 "--device-memory", "cpu=1GiB")
        check(base is not None and roomy is not None and roomy["tokens"] == base["tokens"],
              "--device-memory cpu=1GiB: the same ids")
        ml = min(4096, cfg.get("max_position_embeddings", 4096))  # max_length is capped at the folder's
        kv = L * 2 * kvh * hd * ml * 4  # float32 K and V per layer
        r = run([T, "generate", folder, "--prompt-ids", prompt, "--max-tokens", "2", "--max-length", "4096",
                 "--device-memory", f"cpu={kv // 2}B"])
        check(r.returncode != 0 and "KV cache alone" in r.stderr, "a budget below the KV cache is refused")
        r = run([T, "generate", folder, "--prompt-ids", prompt, "--max-tokens", "2", "--max-length", "4096",
                 "--device-memory", f"cpu={kv + 1024}B"])
        check(r.returncode != 0 and "less the KV cache" in r.stderr and "exceed" in r.stderr,
              "a budget with room for the KV cache but not the weights names both")
        r = run([T, "generate", folder, "--prompt-ids", prompt, "--device-memory", "cpu=12XB"])
        check(r.returncode != 0 and "unknown unit" in r.stderr, "a bad budget is refused")

        # sampling: same seed, same ids; --max-tokens; --stop-id
        args = ["--prompt-ids", "5,6,7", "--temperature", "1.2", "--top-k", "50", "--top-p", "0.95", "--seed", "11",
                "--max-tokens", "20", "--ignore-eos"]
        s1, _ = generate_json(T, folder, *args)
        s2, _ = generate_json(T, folder, *args)
        check(s1 is not None and s1 == {**s2, **{k: s1[k] for k in s1 if k.endswith(("_per_s", "_ms"))}},
              "sampling with a seed is repeatable")
        check(s1 is not None and len(s1["tokens"]) == 20 and s1["stop_reason"] == "max_tokens", "--max-tokens 20")
        if s1:
            stop = s1["tokens"][5]
            first = s1["tokens"].index(stop)
            s3, _ = generate_json(T, folder, *args, "--stop-id", str(stop))
            check(s3 is not None and s3["tokens"] == s1["tokens"][:first] and s3["stop_reason"] == "stop_token",
                  "--stop-id ends before the stop token")

        # text through the tokenizer (when the build has one)
        r = run([T, "generate", folder, "--prompt", "Hello", "--no-chat", "--max-tokens", "4", "--json"])
        if "has no tokenizer" in r.stderr:
            print("note: this build has no tokenizer: the --prompt / --chat checks are skipped")
        else:
            from tokenizers import Tokenizer
            tk = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
            for text in ["Hello, world!", "The capital of France is"]:
                ids = tk.encode(text, add_special_tokens=True).ids
                want = ort_greedy(model, ids, 12, L, kvh, hd)
                got, r = generate_json(T, folder, "--prompt", text, "--no-chat", "--max-tokens", "12",
                                       "--ignore-eos")
                check(got is not None and got["prompt_tokens"] == len(ids) and got["tokens"] == want,
                      f"--prompt {text!r}: HF tokenizers' ids, ONNX Runtime's greedy ids")
                check(got is not None and got["text"] == tk.decode(want, skip_special_tokens=True),
                      f"--prompt {text!r}: the text is the decode of the ids")
                if got is None:
                    print(r.stderr[-800:])
            import jinja2
            tc = json.load(open(os.path.join(folder, "tokenizer_config.json")))
            rendered = jinja2.Environment().from_string(tc["chat_template"]).render(
                messages=[{"role": "user", "content": "Hi there"}], add_generation_prompt=True,
                bos_token=tc.get("bos_token", ""), eos_token=tc.get("eos_token", ""))
            ids = tk.encode(rendered, add_special_tokens=False).ids
            got, r = generate_json(T, folder, "--prompt", "Hi there", "--chat", "--max-tokens", "4", "--ignore-eos")
            check(got is not None and got["chat"] and got["prompt_tokens"] == len(ids),
                  "--chat: the chat template rendered as jinja2 does")
            got2, _ = generate_json(T, folder, "--prompt", "Hi there", "--max-tokens", "4", "--ignore-eos")
            check(got2 is not None and got2["chat"], "a folder with a chat template: chat by default")

        # streaming text mode ends with the summary on stderr
        r = run([T, "generate", folder, "--prompt-ids", "5,6,7", "--max-tokens", "5", "--ignore-eos"])
        check(r.returncode == 0 and "prefill" in r.stderr and "decode" in r.stderr and "time to first token"
              in r.stderr, "text mode prints the summary")

        # bench --llm
        r = run([T, "bench", folder, "--llm", "--prompt-tokens", "32", "--gen-tokens", "8", "--depth", "40",
                 "--repetitions", "2", "--threads", "1", "--json"])
        ok = r.returncode == 0
        if ok:
            d = json.loads(r.stdout)
            ok = all(k in d for k in ("pp", "tg", "tg_depth", "peak_rss_mib")) and \
                d["pp"]["tokens_per_s"]["mean"] > 0 and "stddev" in d["tg"]["tokens_per_s"] and \
                d["tg_depth"]["depth"] == 40 and len(d["tg"]["tokens_per_s"]["samples"]) == 2
        check(ok, "bench --llm --json: pp, tg, tg at depth, peak RSS")
        if not ok:
            print(r.stdout, r.stderr)
        # the weights a decode step reads: a float model's own bytes (its tables one row each),
        # within 5% (tandem may lay a matrix out again)
        want, _ = decode_weight_bytes(model)
        got = d.get("weight_bytes_per_token", 0) if ok else 0
        check(abs(got - want) <= 0.05 * want and d.get("tg_weight_gbps", 0) > 0,
              f"bench --llm --json: weight_bytes_per_token {got} of the float model's {want}")
        r = run([T, "bench", folder, "--llm", "--prompt-tokens", "16", "--gen-tokens", "4", "--repetitions", "1"])
        check(r.returncode == 0 and "pp16" in r.stdout and "tg4" in r.stdout and "±" in r.stdout,
              "bench --llm table")
        # --depth D0,D: both depths in each repetition, and each repetition's ratio of their rates
        r = run([T, "bench", folder, "--llm", "--prompt-tokens", "0", "--gen-tokens", "6", "--depth", "3,30",
                 "--repetitions", "3", "--threads", "1", "--json"])
        ok = r.returncode == 0
        if ok:
            d = json.loads(r.stdout)
            ok = "pp" not in d and d["tg_depth0"]["depth"] == 3 and d["tg_depth"]["depth"] == 30
            if ok:
                lo = d["tg_depth0"]["tokens_per_s"]["samples"]
                hi = d["tg_depth"]["tokens_per_s"]["samples"]
                q = d["tg_depth_ratio"]
                want = sorted(h / b for h, b in zip(hi, lo))
                ok = q["depths"] == [3, 30] and len(q["samples"]) == 3 and \
                    all(abs(x - y) <= 1e-3 * y for x, y in zip(sorted(q["samples"]), want)) and \
                    abs(q["median"] - want[1]) <= 1e-3 * want[1] and \
                    abs(q["min"] - want[0]) <= 1e-3 * want[0] and abs(q["max"] - want[2]) <= 1e-3 * want[2]
        check(ok, "bench --llm --depth D0,D --json: the paired ratios, their median and range")
        if not ok:
            print(r.stdout, r.stderr[-800:])
        r = run([T, "bench", folder, "--llm", "--prompt-tokens", "0", "--gen-tokens", "4", "--depth", "2,20",
                 "--repetitions", "2"])
        check(r.returncode == 0 and "tg4 @ d2 " in r.stdout and "tg4 @ d20 " in r.stdout and
              "paired in each repetition: median" in r.stdout, "bench --llm --depth D0,D table")
        # --profile: per test, the per-node times of its last repetition's decode steps (G runs):
        # the op type rows' node counts add up to the nodes run and their shares to 100%
        r = run([T, "bench", folder, "--llm", "--prompt-tokens", "0", "--gen-tokens", "5", "--depth", "3,30",
                 "--repetitions", "2", "--threads", "1", "--profile", "--json"])
        ok = r.returncode == 0
        if ok:
            prof = json.loads(r.stdout).get("profile", {})
            ok = sorted(prof) == ["tg", "tg_depth", "tg_depth0"]
            for text in prof.values():
                lines = text.splitlines()
                head = lines[0].split() if lines else []
                ok = ok and head[:4] == ["measured", "over", "5", "runs:"] and head[-1] == "nodes"
                if not ok:
                    break
                rows = [(int(f[1]), float(f[3].rstrip("%"))) for f in op_rows(text)]
                ok = ok and len(rows) > 1 and sum(n for n, _ in rows) == int(head[-2]) and \
                    abs(sum(sh for _, sh in rows) - 100) <= 0.2 * len(rows)
        check_run(ok, "bench --llm --profile --json: each tg test's decode steps per op type", r)
        r = run([T, "bench", folder, "--llm", "--prompt-tokens", "0", "--gen-tokens", "3", "--depth", "20",
                 "--repetitions", "1", "--profile"])
        check(r.returncode == 0 and "== the 3 decode steps of tg3 @ d20, last repetition ==" in r.stdout and
              "measured over 3 runs" in r.stdout, "bench --llm --profile: the tables after the figures")
        for bad in ("20,2", "2,", ",20", "2,x", "-1,5"):
            r = run([T, "bench", folder, "--llm", "--depth", bad])
            check(r.returncode == 2 and "--depth" in r.stderr, f"bench --llm --depth {bad}: an error")

        # bench --llm --streams (GenAI folders, the LLM engine): per way, the decode rate is the
        # tokens after each stream's first over the union of the streams' first-to-last spans:
        # within the way's wall time, the counted tokens streams * (G - 1)
        gfolder = os.path.join(tmp, "genai")
        r = run([sys.executable, os.path.join(a.repo, "tools", "make_tiny_llama.py"), gfolder, "--seed", "7"])
        check(r.returncode == 0, "make_tiny_llama.py --form genai")
        # --profile counts GroupQueryAttention's FLOPs from the rows each step saw (seqlens_k),
        # not from the cache buffer's shape (max_length at every step): its FLOPs a step
        # (ms x GFLOP/s of the op type row) after 30 tokens are ~5x those after 3 (32-36 rows
        # seen against 5-9), where a count from shapes gives 1x
        r = run([T, "bench", gfolder, "--llm", "--prompt-tokens", "0", "--gen-tokens", "5", "--depth", "3,30",
                 "--repetitions", "1", "--threads", "1", "--profile", "--json"])
        ok = r.returncode == 0
        if ok:
            work = {}
            for key, text in json.loads(r.stdout).get("profile", {}).items():
                for f in op_rows(text):
                    if f[0] == "GroupQueryAttention":
                        work[key] = float(f[2]) * float(f[4])
            ok = sorted(work) == ["tg", "tg_depth", "tg_depth0"] and work["tg_depth0"] > 0 and \
                3.0 <= work["tg_depth"] / work["tg_depth0"] <= 8.0
        check_run(ok, "bench --llm --profile: GroupQueryAttention's FLOPs follow the rows seen", r)
        # --streams --profile: the engine's steps of the batched way (one run a step: the
        # prompts' step and G - 1 decode steps), PagedAttention among the op types, the rows'
        # node counts adding up; the text form's heading
        r = run([T, "bench", gfolder, "--llm", "--streams", "3", "--prompt-tokens", "4", "--gen-tokens", "8",
                 "--repetitions", "1", "--threads", "1", "--profile", "--json"])
        ok = r.returncode == 0
        if ok:
            d = json.loads(r.stdout)
            prof = d.get("profile", {})
            batched = next((w for w in d["ways"] if w["name"] == "batched"), {})
            text = prof.get("batched", "")
            lines = text.splitlines()
            head = lines[0].split() if lines else []
            ok = sorted(prof) == ["batched"] and head[:3] == ["measured", "over", str(batched.get("steps"))]
            rows = op_rows(text)
            ok = ok and any(f[0] == "PagedAttention" for f in rows) and \
                sum(int(f[1]) for f in rows) == int(head[-2])
        check_run(ok, "bench --llm --streams --profile --json: the batched way's steps per op type", r)
        r = run([T, "bench", gfolder, "--llm", "--streams", "2", "--prompt-tokens", "4", "--gen-tokens", "4",
                 "--repetitions", "1", "--profile"])
        check(r.returncode == 0 and "steps of the batched way (median repetition" in r.stdout and
              "PagedAttention" in r.stdout, "bench --llm --streams --profile: the table after the figures")
        n_st, G = 3, 16
        r = run([T, "bench", gfolder, "--llm", "--streams", str(n_st), "--prompt-tokens", "4", "--gen-tokens",
                 str(G), "--repetitions", "1", "--threads", "1", "--json"])
        ok = r.returncode == 0
        if ok:
            d = json.loads(r.stdout)
            ways = d["ways"]
            ok = len(ways) == 3 and "decode_batched_over_one" in d and \
                d.get("isa") in ("portable", "sse41", "avx2", "avx512_core", "avx512_core_vnni",
                                 "avx512_core_bf16", "avx512_core_amx")  # the ISA beside the figures
            for w in ways:
                counted = w["decode_tokens_per_s"] * w["decode_s"]
                ok = ok and w["decode_s"] > 0 and w["decode_s"] <= w["wall_s"] + 1e-6 and \
                    abs(counted - w["streams"] * (G - 1)) <= 0.01 * w["streams"] * (G - 1) + 0.01
            if not ok:
                print(json.dumps(ways, indent=1))
        check(ok, "bench --llm --streams --json: decode tokens/s over the union of decode spans")
        # the steady rate: the tokens while every stream decoded over that window; one stream's
        # window is its decode span (its G - 1 tokens after the first), one at a time has none,
        # the batched streams' counts at most every token after the firsts (it may be empty:
        # the tiny model's first stream can end before the last one's first token, once in CI)
        ok = r.returncode == 0 and "steady_batched_over_one" in d
        if ok:
            one, bat, seq = ways
            steady = lambda w: w["steady_decode_tokens_per_s"] * w["steady_s"]
            ok = abs(steady(one) - (G - 1)) <= 0.01 * (G - 1) and abs(one["steady_s"] - one["decode_s"]) < 1e-6 \
                and seq["steady_s"] == 0 and seq["steady_decode_tokens_per_s"] == 0 \
                and 0 <= bat["steady_s"] <= bat["decode_s"] + 1e-6 \
                and 0 <= steady(bat) <= bat["streams"] * (G - 1) + 0.01 \
                and (bat["steady_s"] > 0) == (bat["steady_decode_tokens_per_s"] > 0)
            if not ok:
                print(json.dumps(ways, indent=1))
        check(ok, "bench --llm --streams --json: the steady rate over the window every stream decoded in")
        if r.returncode != 0:
            print(r.stdout, r.stderr[-800:])
        # the GenAI form's packed weights: at least the 4-bit codes, at most the file's bytes
        # (scales may be held as float16; the embedding one row)
        want, codes = decode_weight_bytes(os.path.join(gfolder, "model.onnx"))
        r = run([T, "bench", gfolder, "--llm", "--prompt-tokens", "4", "--gen-tokens", "4", "--repetitions", "1",
                 "--threads", "1", "--json"])
        got = json.loads(r.stdout).get("weight_bytes_per_token", 0) if r.returncode == 0 else 0
        check(codes <= got <= 1.02 * want,
              f"bench --llm --json (GenAI form): weight_bytes_per_token {got} within [{codes}, {want}]")
        # the KV rows a step reads per position (make_tiny_llama's defaults: 2 layers, 2 kv heads
        # of 16): float32 2 * 2 * 2 * 16 * 4 bytes; int4 rows of 16 bytes of nibbles + a 2-byte
        # scale; and the depth ratio bound by the bytes read at the runs' mean positions
        kv_ok = r.returncode == 0 and json.loads(r.stdout).get("kv_bytes_per_position") == 512
        G4 = 4
        r = run([T, "bench", gfolder, "--llm", "--prompt-tokens", "0", "--gen-tokens", str(G4), "--depth", "10,100",
                 "--repetitions", "1", "--threads", "1", "--kv-type", "int4", "--json"])
        if kv_ok and r.returncode == 0:
            d = json.loads(r.stdout)
            w, kv = d["weight_bytes_per_token"], d["kv_bytes_per_position"]
            mean = (G4 + 1) / 2
            bound = (w + kv * (10 + mean)) / (w + kv * (100 + mean))
            kv_ok = kv == 2 * 2 * 2 * 18 and abs(d["tg_depth_bytes_bound"] - bound) < 1e-3 and bound < 1
        else:
            kv_ok = False
        check(kv_ok, "bench --llm --json: kv_bytes_per_position (float32, int4) and the depth ratio's bytes bound")

        # bad arguments
        r = run([T, "generate", folder])
        check(r.returncode == 2 and "usage" in r.stderr, "no prompt: usage")
        r = run([T, "generate", os.path.join(tmp, "nope"), "--prompt-ids", "1"])
        check(r.returncode != 0 and "nope" in r.stderr, "missing folder: an error naming it")
        r = run([T, "generate", folder, "--prompt-ids", "1,x"])
        check(r.returncode == 2 and "--prompt-ids" in r.stderr, "bad --prompt-ids")
        r = run([T, "generate", folder, "--prompt-ids", "1", "--top-p", "2"])
        check(r.returncode == 2 and "--top-p" in r.stderr, "bad --top-p")
        r = run([T, "generate", folder, "--prompt-ids", str(V + 5)])
        check(r.returncode != 0 and "vocabulary" in r.stderr, "token outside the vocabulary")
        r = run([T, "bench", folder, "--llm", "--repetitions", "0"])
        check(r.returncode == 2, "bench --llm --repetitions 0")

        # malformed genai_config.json: an error naming the field, never another file or input
        with open(os.path.join(gfolder, "genai_config.json")) as f:
            good_cfg = json.load(f)
        bad_dir = os.path.join(tmp, "genai_bad")
        os.makedirs(bad_dir)
        os.symlink(os.path.join(gfolder, "model.onnx"), os.path.join(bad_dir, "model.onnx"))
        cases = [("filename", 7, "model.decoder.filename must be a string"),
                 ("filename", "", "model.decoder.filename must be a string"),
                 ("filename", "m" * 2000, "model.decoder.filename must be a string"),
                 ("filename", "model.onnx\u0000.x", "genai_config.json"),  # NUL: jansson or the check
                 ("filename", "../genai/model.onnx", "must be a name in the folder"),
                 ("input_ids", ["input_ids"], "model.decoder.inputs.input_ids must be a string"),
                 ("input_ids", "i" * 300, "model.decoder.inputs.input_ids must be a string"),
                 ("past_key_names", "past.key", "must hold one %d")]
        for field, value, want in cases:
            cfg = json.loads(json.dumps(good_cfg))
            dec = cfg["model"]["decoder"]
            (dec if field == "filename" else dec["inputs"])[field] = value
            with open(os.path.join(bad_dir, "genai_config.json"), "w") as f:
                json.dump(cfg, f)
            r = run([T, "generate", bad_dir, "--prompt-ids", "1", "--max-tokens", "1"])
            check_run(r.returncode != 0 and want in r.stderr and "invalid model" in r.stderr,
                      f"genai_config.json {field} = {str(value)[:24]!r}: refused ({want})", r)
    print(f"{len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
