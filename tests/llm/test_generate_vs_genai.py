#!/usr/bin/env python3
"""Greedy generations of tandem against ONNX Runtime GenAI (PyPI onnxruntime-genai) on one
ONNX Runtime GenAI model folder (e.g. the SmolLM2 folder of tools/gguf_to_onnx.py, or
tools/make_tiny_llama.py --form genai).

For each prompt (>= 10 built in, or --prompts FILE with one per line) the prompt is tokenized
by GenAI's tokenizer; GenAI generates greedily (do_sample false) up to --tokens new tokens
(default 64; it stops at eos); `tandem generate DIR --prompt-ids IDS --json --temperature 0
--max-tokens N` does the same from the same ids. The generated ids must be identical. With
--chat the prompts are first put in the folder's chat template (GenAI's apply_chat_template
when this version has it, else jinja2 on tokenizer_config.json's template). With
--check-text, tandem is also run with --prompt TEXT (its own tokenizer) and its prompt token
count and ids must equal GenAI's.

Usage: test_generate_vs_genai.py --tandem TANDEM --model DIR [--tokens 64] [--threads N]
                                 [--prompts FILE] [--chat] [--check-text] [--tie-margin M]
Exit 0 when every prompt matches, 1 otherwise, 77 when onnxruntime-genai is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import time

PROMPTS = [
    "The capital of France is",
    "Write a short poem about the sea.",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "What is 12 times 7?",
    "Explain what a neural network is in one sentence.",
    "The three primary colors are",
    "List the days of the week:",
    "In 1969, the first humans",
    "Translate 'good morning' into Spanish:",
    "import numpy as np\n# compute the mean of an array\n",
    "Hello! How are you today?",
]


def genai_greedy(og, model, tokenizer, ids, new_tokens):
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + new_tokens)
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    while not gen.is_done():
        gen.generate_next_token()
    seq = [int(t) for t in gen.get_sequence(0)]
    return seq[len(ids):]


def genai_logits_at(og, model, ids, prefix):
    """GenAI's logits that generated token len(prefix) is chosen from (after ids + prefix)."""
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + len(prefix) + 1)
    gen = og.Generator(model, params)
    gen.append_tokens(ids + prefix if prefix else ids)
    import numpy as np
    return np.array(gen.get_output("logits"), dtype=np.float32).reshape(-1)


def render_chat(folder, og, tokenizer, prompt):
    msgs = [{"role": "user", "content": prompt}]
    if hasattr(tokenizer, "apply_chat_template"):
        try:
            return tokenizer.apply_chat_template(json.dumps(msgs), add_generation_prompt=True)
        except Exception:  # older GenAI: the template from tokenizer_config.json below
            pass
    import jinja2
    tc = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    return jinja2.Environment().from_string(tc["chat_template"]).render(
        messages=msgs, add_generation_prompt=True, bos_token=tc.get("bos_token", ""),
        eos_token=tc.get("eos_token", ""))


def tandem_generate(tandem, folder, args):
    r = subprocess.run([tandem, "generate", folder, "--json", *args], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1]), ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompts")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--check-text", action="store_true")
    ap.add_argument("--tie-margin", type=float, default=0.0,
                    help="count a divergence as a near tie (not a failure) when GenAI's logit of its "
                         "token is less than this above the logit of tandem's token (default 0: strict)")
    a = ap.parse_args()
    try:
        import onnxruntime_genai as og
    except ImportError as e:
        print(f"SKIPPED: {e}")
        return 77
    prompts = PROMPTS
    if a.prompts:
        prompts = [l.rstrip("\n").replace("\\n", "\n") for l in open(a.prompts, encoding="utf-8") if l.strip()]
    model = og.Model(a.model)
    tokenizer = og.Tokenizer(model)
    fails = ties = 0
    t_genai = t_tandem = 0.0
    for i, prompt in enumerate(prompts):
        text = render_chat(a.model, og, tokenizer, prompt) if a.chat else prompt
        ids = [int(t) for t in tokenizer.encode(text)]
        t0 = time.time()
        want = genai_greedy(og, model, tokenizer, ids, a.tokens)
        t_genai += time.time() - t0
        args = ["--prompt-ids", ",".join(map(str, ids)), "--temperature", "0", "--max-tokens", str(a.tokens),
                "--no-chat"]
        if a.threads:
            args += ["--threads", str(a.threads)]
        t0 = time.time()
        got, err = tandem_generate(a.tandem, a.model, args)
        t_tandem += time.time() - t0
        # GenAI keeps a final eos in the sequence; tandem's "tokens" leave the stop token out
        want_cmp = want
        if got is not None and got.get("stop_reason") == "stop_token" and len(want) == len(got["tokens"]) + 1:
            want_cmp = want[:-1]
        ok = got is not None and got["tokens"] == want_cmp
        if a.check_text and ok:
            gt, err2 = tandem_generate(a.tandem, a.model, ["--prompt", prompt, "--temperature", "0",
                                                           "--max-tokens", str(a.tokens)] +
                                       (["--chat"] if a.chat else ["--no-chat"]))
            ok = gt is not None and gt["prompt_tokens"] == len(ids) and gt["tokens"] == got["tokens"]
            err = err or err2 or ("" if ok else f"--prompt text: {gt and gt['prompt_tokens']} prompt tokens")
        status, detail = ("ok  " if ok else "FAIL"), []
        if not ok:
            n = 0
            if got is not None:
                while n < min(len(want_cmp), len(got["tokens"])) and want_cmp[n] == got["tokens"][n]:
                    n += 1
            gap = None
            if got is not None and n < len(want_cmp) and n < len(got["tokens"]):
                lg = genai_logits_at(og, model, ids, want_cmp[:n])
                gap = float(lg[want_cmp[n]] - lg[got["tokens"][n]])
            if gap is not None and gap < a.tie_margin:
                ties += 1
                status = "tie "
            else:
                fails += 1
            detail = [f"     first difference at generated token {n}" +
                      (f"; GenAI's logit of its token is {gap:.4f} above tandem's choice" if gap is not None else ""),
                      f"     genai  {want_cmp}", f"     tandem {got['tokens'] if got else err}"]
        print(f"{status} prompt {i}: {len(ids)} prompt tokens, {len(want)} generated by GenAI")
        for line in detail:
            print(line)
    if ties:
        print(f"{ties} prompts diverge only where GenAI's top two logits are within --tie-margin "
              f"{a.tie_margin} (kernel rounding)")
    print(f"{len(prompts) - fails - ties}/{len(prompts)} prompts identical; wall time GenAI {t_genai:.1f} s, "
          f"tandem (processes, model load each) {t_tandem:.1f} s")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
