#!/usr/bin/env python3
"""Writes expected.json beside a tiny GenAI folder (tests/llm/models/tiny_genai, made by
tools/make_tiny_llama.py --form genai --seed 7): for a few prompts of token ids, ONNX Runtime
GenAI's greedy ids (do_sample false, eos does not stop: min_length = max_length) and its logits of
the last position at the first steps (logits[j]: what generated[j] was chosen from). test_generator.c compares tandem's generator with them.

Usage: make_genai_expected.py FOLDER
"""
import json
import os
import sys

import numpy as np
import onnxruntime_genai as og

PROMPTS = [[1, 40, 50, 60, 70], [7], [3, 9, 27, 81, 243, 100, 200, 300, 383, 5, 6, 7, 8], [250, 251]]
NEW, LOGIT_STEPS = 24, 4


def main():
    folder = sys.argv[1]
    model = og.Model(folder)
    out = []
    for ids in PROMPTS:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(ids) + NEW, min_length=len(ids) + NEW)
        gen = og.Generator(model, params)
        gen.append_tokens(ids)
        logits = []
        while not gen.is_done():
            if len(logits) < LOGIT_STEPS:
                lg = np.array(gen.get_output("logits"), dtype=np.float32).reshape(-1)
                logits.append([round(float(x), 6) for x in lg[-384:]])
            gen.generate_next_token()
        seq = [int(t) for t in gen.get_sequence(0)]
        # before generate_next_token k (k >= 1) the logits are those token k - 1 is chosen from
        # (the first call samples from append_tokens' logits without a run): logits[j] below is
        # what generated[j] was chosen from
        out.append({"prompt": ids, "generated": seq[len(ids):], "logits": logits[1:]})
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump({"vocab": 384, "new_tokens": NEW, "cases": out}, f)


if __name__ == "__main__":
    main()
