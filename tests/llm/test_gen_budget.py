"""ctest llm_gen_budget (issue 21): the generator on a device with memory of its own under budgets.

    test_gen_budget.py --tandem build/tandem --repo . --out build/llm_gen_budget [--model DIR]...

Models: tiny random Llamas from tools/make_tiny_llama.py (the GenAI form: GroupQueryAttention with
the shared KV cache, MatMulNBits; the optimum form: standard ops, fed-back caches), 4 layers each,
and any --model folder given (ctest gives the real SmolLM2 when there is one).

For each model, `tandem generate --ignore-eos --temperature 0 --json` on the CPU alone gives the
reference ids; then on the test device (TANDEM_TEST_DEVICES=1: memory of its own, CPU kernels)
`--device test:0` with no budget (all weights resident) and with `--device-memory test:0=P%` for
P = 100, 50, 25, 10 (a share of the weights on top of the activations), weights streamed
(`--residency streamed`) and as the cost model picks (auto); the optimum form also on opencl:0
and the GenAI form on opencl:0 at 25% and 10% streamed (skipped when the environment has no OpenCL
device). Every run must give the CPU's ids; the monitor's peak on the device (prefill and decode)
must not exceed the budget the plan resolved; with streamed weights the bytes uploaded from pinned
(registered) host memory by the decode steps must be exactly decode tokens x the plan's
bytes_streamed_per_run, and, when no node moved to the CPU, the decode uploads must exceed those
of the all-resident run by exactly that (the inputs and the KV cache, which stays in host memory,
are uploaded alike in both). At 10% the tied embedding is more than the budget can hold next to
the activations: the nodes reading it (the embedding's Gather, the lm head) must run on the CPU,
with that reason in the plan's explanation, and everything else as above.

KV cache placement (check_kv): each layer's cache on the device of its attention (a state bound in
place), in host memory copied every token (kv=host), or in host memory with its attention on the
CPU (kv=cpu, and the layers a byte budget cannot hold). With --max-length 256 on test:0: no budget
keeps every cache on the device and the monitor counts no KV copies per decoded token; kv=host
copies exactly the caches' bytes up and down per token (the shared form's max_length-long past
and present); kv=cpu and byte budgets from "every cache fits" down to "none fits" (all three kinds
must show) give the placement the plan reports (device layers first), KV copies per token equal
to its prediction, the CPU's ids, and a device peak within the budget. The fed-back form (optimum)
keeps its caches in host memory: it copies exactly sum over decode steps of c rows up and c + 1
rows down (c = tokens cached before the step). opencl:0 runs no GroupQueryAttention: the GenAI
form's caches stay with their attention on the CPU, no KV copies. A --model folder (SmolLM2)
gets the no-budget, kv=host and three byte-budget (100%, 50%, 25%) KV runs.
Prints one table row per run. Exit 77 when the .venv lacks onnx.
"""
import argparse
import json
import os
import subprocess
import sys


def weights_bytes(model):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(model)
    return sum(numpy_helper.to_array(t).nbytes for t in m.graph.initializer)


def generate(a, folder, extra, tokens):
    env = dict(os.environ, TANDEM_TEST_DEVICES="1")
    cmd = [a.tandem, "generate", folder, "--prompt-ids", "1,17,42,99,5,23", "--max-tokens", str(tokens),
           "--ignore-eos", "--temperature", "0", "--json", "--threads", "1"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def kv_run(a, name, folder, extra, ref, label, rows):
    """One generate run for the KV checks: ids, peak, KV copies against the reported placement."""
    got, err = generate(a, folder, ["--max-length", "256"] + extra, a.tokens)
    if err:
        print(f"FAIL {name} kv {label}: {err[-500:]}")
        return None, 1
    bad = 0
    dev_name = extra[extra.index("--device") + 1]
    dev = [d for d in got["devices"] if d["device"] == dev_name][0]
    kv = got.get("kv_placement") or {}
    places = [l["place"] for l in kv.get("layers", [])]
    n = dev["decode_tokens"]
    up, down = dev["decode_kv_bytes_uploaded"], dev["decode_kv_bytes_downloaded"]
    if got["tokens"] != ref:
        print(f"FAIL {name} kv {label}: ids {got['tokens']} != cpu {ref}")
        bad += 1
    pb = got.get("plan_budget") or {}
    budget = ((pb.get("devices") or {}).get(dev_name) or {}).get("budget_bytes", 0)
    if budget and dev["memory_peak"] > budget:
        print(f"FAIL {name} kv {label}: peak {dev['memory_peak']} B above the budget {budget} B")
        bad += 1
    if not places:
        print(f"FAIL {name} kv {label}: no kv_placement in the output")
        return got, bad + 1
    if places != sorted(places, key=lambda p: p != "device"):
        print(f"FAIL {name} kv {label}: device layers are not the first ones: {places}")
        bad += 1
    if kv.get("fed_back"):  # the exact copies of a fed-back cache: c rows up, c + 1 down per step
        row = sum(l["bytes"] for l in kv["layers"] if l["place"] == "host") // 256
        c0 = got["prompt_tokens"]
        want_up = row * sum(range(c0, c0 + n))
        want_down = row * sum(range(c0 + 1, c0 + n + 1))
    else:
        want_up = n * kv["bytes_uploaded_per_token"]
        want_down = n * kv["bytes_downloaded_per_token"]
        host = sum(l["bytes"] for l in kv["layers"] if l["place"] == "host")
        if kv["bytes_uploaded_per_token"] != host or kv["bytes_downloaded_per_token"] != host:
            print(f"FAIL {name} kv {label}: predicted copies {kv['bytes_uploaded_per_token']} / "
                  f"{kv['bytes_downloaded_per_token']} B per token != the host layers' {host} B")
            bad += 1
    if up != want_up or down != want_down:
        print(f"FAIL {name} kv {label}: KV copies {up} B up / {down} B down over {n} tokens != "
              f"expected {want_up} / {want_down}")
        bad += 1
    rows.append(f"| {name} | {dev_name} | {label} | {budget or ''} | {dev['memory_peak']} | "
                f"{''.join(p[0] for p in places)} | {kv.get('bytes_uploaded_per_token', 0)} | "
                f"{up / max(n, 1):.0f} / {down / max(n, 1):.0f} | {'yes' if got['tokens'] == ref else 'NO'} |")
    return got, bad


def check_kv(a, name, folder, genai, full=True):
    bad = 0
    rows = []
    ref, err = generate(a, folder, ["--max-length", "256"], a.tokens)
    if err:
        print(f"FAIL {name} kv: cpu run: {err[-400:]}")
        return 1
    ref = ref["tokens"]
    dev = ["--device", "test:0"]
    got, b = kv_run(a, name, folder, dev, ref, "no budget", rows)
    bad += b
    if got and genai and any(l["place"] != "device" for l in got["kv_placement"]["layers"]):
        print(f"FAIL {name} kv: without a budget every cache should stay on test:0: {got['kv_placement']}")
        bad += 1
    if genai:
        for force in ("host", "cpu") if full else ("host",):
            got, b = kv_run(a, name, folder, dev + ["--residency", f"kv={force}"], ref, f"kv={force}", rows)
            bad += b
            if got and any(l["place"] != force for l in got["kv_placement"]["layers"]):
                print(f"FAIL {name} kv={force}: placement {got['kv_placement']['layers']}")
                bad += 1
        # byte budgets from every cache fitting to none: all three kinds must show
        big, err = generate(a, folder, ["--max-length", "256"] + dev + ["--device-memory", "test:0=64GiB"], a.tokens)
        if err:
            print(f"FAIL {name} kv: 64GiB run: {err[-400:]}")
            return bad + 1
        d = big["plan_budget"]["devices"]["test:0"]
        need = d["weights_bytes"] + d["activation_bytes"] + d["reserved_bytes"]
        kinds = set()
        for frac in (1.0, 0.75, 0.5, 0.35, 0.25, 0.2) if full else (1.0, 0.5, 0.25):
            budget = int(need * frac) + (1024 if frac == 1.0 else 0)
            got, b = kv_run(a, name, folder, dev + ["--device-memory", f"test:0={budget}B"], ref,
                            f"{budget} B ({frac:.0%})", rows)
            bad += b
            if got:
                pl = [l["place"] for l in got["kv_placement"]["layers"]]
                kinds.add("all" if all(p == "device" for p in pl) else "none" if "device" not in pl else "split")
                if frac == 1.0 and kinds != {"all"}:
                    print(f"FAIL {name} kv: at {budget} B every cache should fit: {pl}")
                    bad += 1
        if kinds != {"all", "split", "none"}:
            print(f"FAIL {name} kv: the budgets gave only {sorted(kinds)} placements")
            bad += 1
    if a.opencl and full:
        ocl = ["--device", "opencl:0", "--device-memory", "opencl:0=25%"] + (["--residency", "streamed"] if genai else [])
        got, err = generate(a, folder, ["--max-length", "256"] + ocl, a.tokens)
        if err and "'opencl:0' is not available" in err:
            print(f"SKIP opencl:0: {err[-200:]}")
        else:
            got, b = kv_run(a, name, folder, ocl, ref, "opencl:0 25%", rows)
            bad += b
    print("| model | device | KV case | budget B | peak B | layers (d=device, c=cpu, h=host) | "
          "predicted KV B/token up | measured KV B/token up / down | ids = cpu |")
    print("|---|---|---|---:|---:|---|---:|---:|---|")
    for r in rows:
        print(r)
    return bad


def check_model(a, name, folder, tokens):
    bad = 0
    wb = weights_bytes(os.path.join(folder, "model.onnx"))
    ref, err = generate(a, folder, [], tokens)
    if err:
        print(f"FAIL {name}: cpu run: {err[-400:]}")
        return 1
    base, err = generate(a, folder, ["--device", "test:0", "--device-memory", "test:0=64GiB"], tokens)
    if err:
        print(f"FAIL {name}: test:0 without a budget: {err[-400:]}")
        return 1
    if base["tokens"] != ref["tokens"]:
        print(f"FAIL {name}: test:0 (resident) ids {base['tokens']} != cpu {ref['tokens']}")
        bad += 1
    dev0 = [d for d in base["devices"] if d["device"] == "test:0"][0]
    print(f"{name}: weights {wb} B; cpu ids {ref['tokens'][:8]}...; test:0 resident: peak {dev0['memory_peak']} B, "
          f"{dev0['bytes_uploaded_per_token']:.0f} B uploaded per token (inputs + KV cache)")
    print("| model | budget | residency | plan | budget B | peak B | streamed B/run | uploaded B/token | "
          "extra B/token vs resident | ids = cpu |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|")
    streamed25 = None
    for pct in (100, 50, 25, 10):
        for res in ("streamed", "auto"):
            extra = ["--device", "test:0", "--device-memory", f"test:0={pct}%"]
            if res != "auto":
                extra += ["--residency", res]
            got, err = generate(a, folder, extra, tokens)
            if err:
                print(f"FAIL {name} {pct}% {res}: {err[-600:]}")
                bad += 1
                continue
            dev = [d for d in got["devices"] if d["device"] == "test:0"][0]
            pb = got.get("plan_budget") or {}
            bdev = (pb.get("devices") or {}).get("test:0") or {}
            budget = bdev.get("budget_bytes", 0)
            streamed = pb.get("bytes_streamed_per_run", 0)
            ok_ids = got["tokens"] == ref["tokens"]
            if not ok_ids:
                print(f"FAIL {name} {pct}% {res}: ids {got['tokens']} != cpu {ref['tokens']}")
                bad += 1
            if not budget or dev["memory_peak"] > budget:
                print(f"FAIL {name} {pct}% {res}: test:0 peak {dev['memory_peak']} B above the budget {budget} B")
                bad += 1
            diff = dev["decode_bytes_uploaded"] - dev0["decode_bytes_uploaded"]
            why = pb.get("reason", "")
            moved = "not even streaming fits them" in why
            if pct == 10 and name != "tiny_optimum" and not moved:
                print(f"FAIL {name} 10% {res}: the tied embedding should be on the CPU: {why[:300]}")
                bad += 1
            if dev["decode_bytes_uploaded_pinned"] != dev["decode_tokens"] * int(streamed):
                print(f"FAIL {name} {pct}% {res}: {dev['decode_bytes_uploaded_pinned']} B uploaded from pinned "
                      f"memory != {dev['decode_tokens']} tokens x {int(streamed)} B streamed per run")
                bad += 1
            if res == "streamed" and not moved and diff != dev["decode_tokens"] * int(streamed):
                print(f"FAIL {name} {pct}% {res}: decode uploads {dev['decode_bytes_uploaded']} B - resident "
                      f"{dev0['decode_bytes_uploaded']} B = {diff} B != {dev['decode_tokens']} tokens x "
                      f"{int(streamed)} B streamed per run")
                bad += 1
            if pct == 25 and res == "streamed":
                streamed25 = int(streamed)
            if moved:
                print(f"  {name} {pct}% {res}: {why[:why.find(';') if ';' in why else 300]}")
            print(f"| {name} | {pct}% | {res} | {pb.get('choice', '?')}{' +cpu' if moved else ''} | {budget} | "
                  f"{dev['memory_peak']} | "
                  f"{int(streamed)} | {dev['bytes_uploaded_per_token']:.0f} | "
                  f"{diff / max(dev['decode_tokens'], 1):.0f} | {'yes' if ok_ids else 'NO'} |")
    # opencl:0 (PoCL here; a device with memory of its own): the optimum form (standard ops) at
    # 25%, streamed; the GenAI form (its GroupQueryAttention / MatMulNBits have no OpenCL kernels:
    # a share of the few weights opencl:0 gets) at 25% and 10%
    ocl = {"tiny_optimum": ("25",), "tiny_genai": ("25", "10")}.get(name, ()) if a.opencl else ()
    for pct in ocl:
        got, err = generate(a, folder, ["--device", "opencl:0", "--device-memory", f"opencl:0={pct}%",
                                        "--residency", "streamed"], tokens)
        if err and "'opencl:0' is not available" in err:
            print(f"SKIP opencl:0: {err[-200:]}")
        elif err:
            print(f"FAIL {name} opencl:0 {pct}%: {err[-400:]}")
            bad += 1
        else:
            dev = [d for d in got["devices"] if d["device"] == "opencl:0"][0]
            pb = got.get("plan_budget") or {}
            budget = ((pb.get("devices") or {}).get("opencl:0") or {}).get("budget_bytes", 0)
            ok_ids = got["tokens"] == ref["tokens"]
            print(f"| {name} | opencl:0 {pct}% | streamed | {pb.get('choice', '?')} | {budget} | {dev['memory_peak']} | "
                  f"{int(pb.get('bytes_streamed_per_run', 0))} | {dev['bytes_uploaded_per_token']:.0f} | | "
                  f"{'yes' if ok_ids else 'NO'} |")
            if not ok_ids or not budget or dev["memory_peak"] > budget:
                print(f"FAIL {name} opencl:0 {pct}%: ids {got['tokens']} (cpu {ref['tokens']}), peak "
                      f"{dev['memory_peak']} B, budget {budget} B")
                bad += 1
    # tandem bench --llm reports the same: uploads per decoded token >= the streamed weights
    # (plus inputs and the KV cache, at most a few resident-run tokens' worth at this depth)
    if streamed25:
        env = dict(os.environ, TANDEM_TEST_DEVICES="1")
        r = subprocess.run([a.tandem, "bench", folder, "--llm", "--prompt-tokens", "4", "--gen-tokens", "6",
                            "--repetitions", "1", "--warmup", "0", "--threads", "1", "--json", "--device", "test:0",
                            "--device-memory", "test:0=25%", "--residency", "streamed"],
                           capture_output=True, text=True, env=env)
        if r.returncode:
            print(f"FAIL {name}: bench --llm: {r.stderr[-400:]}")
            return bad + 1
        up = json.loads(r.stdout)["bytes_uploaded_per_token"]
        hi = streamed25 + 4 * dev0["bytes_uploaded_per_token"]
        print(f"{name}: bench --llm at 25% streamed: {up:.0f} B uploaded per decoded token "
              f"(streamed weights {streamed25} B)")
        if not streamed25 <= up <= hi:
            print(f"FAIL {name}: bench --llm uploads {up} B per token outside [{streamed25}, {hi}]")
            bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", action="append", default=[], help="another model folder (e.g. SmolLM2)")
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--no-opencl", dest="opencl", action="store_false", help="skip the opencl:0 run")
    a = ap.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("SKIPPED: no onnx in this Python")
        sys.exit(77)
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for form in ("genai", "optimum"):
        folder = os.path.join(a.out, f"tiny_{form}")
        if not os.path.exists(os.path.join(folder, "model.onnx")):
            subprocess.run([sys.executable, os.path.join(a.repo, "tools", "make_tiny_llama.py"), folder, "--form",
                            form, "--seed", "5", "--layers", "4"], check=True)
        bad += check_model(a, f"tiny_{form}", folder, a.tokens)
        bad += check_kv(a, f"tiny_{form}", folder, form == "genai")
    for m in a.model:
        bad += check_model(a, os.path.basename(m.rstrip("/")), m, a.tokens)
        # (the real model: no budget, kv=host and three byte budgets; the tiny ones cover the rest)
        bad += check_kv(a, os.path.basename(m.rstrip("/")), m,
                        os.path.exists(os.path.join(m, "genai_config.json")), full=False)
    if bad:
        sys.exit(f"FAIL: {bad} check(s)")
    print("PASS")


if __name__ == "__main__":
    main()
