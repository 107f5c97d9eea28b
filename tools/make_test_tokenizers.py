#!/usr/bin/env python3
"""Test tokenizers and Hugging Face `tokenizers` reference outputs for tandem's tokenizer.

    python tools/make_test_tokenizers.py                  writes tests/tokenizers/
    python tools/make_test_tokenizers.py --expect TOKENIZER_DIR_OR_JSON OUT.jsonl.gz

The first form trains small BPE tokenizers (vocab 2000) with `tokenizers` on a deterministic
corpus (tools/make_tokenizer_corpus.py, seed 7) and writes them in HF's tokenizer.json form:
  sp_legacy   Llama-2 style SentencePiece BPE: Prepend+Replace normalizer, byte fallback,
              unk fused, decoder Replace/ByteFallback/Fuse/Strip, "<s> $A" template
  sp_meta     the same model with the Metaspace pre-tokenizer (split) and decoder
  gpt2        byte-level BPE with GPT-2's regex, merges as "a b" strings, added tokens
              (special, not special, lstrip/rstrip)
  gpt2_digits the same model with Sequence[Digits(individual), ByteLevel] (SmolLM's form)
  llama3      Split(Llama-3 regex) + ByteLevel(use_regex false), ignore_merges, template
  gpt2_prefix     gpt2 with ByteLevel(add_prefix_space)          (first 1500 cases)
  llama3_roberta  llama3 with RobertaProcessing and no decoder   (first 1500 cases)
  sp_always       sp_meta with Metaspace(always, no split) and Strip after Fuse (1500)
  qwen2       the llama3 model with Qwen2's regex (\\p{N} one at a time) and NFC normalizer
and, for each, NAME.expect.jsonl.gz: per case of the test corpus (seed 19) the text, the ids
(and with add_special for some), and HF's decode with and without skip_special_tokens.
The second form writes the expectations of an existing tokenizer (the SmolLM2 test).
"""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_corpus import corpus  # noqa: E402
from gguf_tokenizer_json import LLAMA3_REGEX, QWEN2_REGEX  # noqa: E402

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,  # noqa: E402
                        normalizers, pre_tokenizers, processors, trainers)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tokenizers")
N_TEST = 6000
VOCAB = 2000
VARIANTS = ("gpt2_prefix", "llama3_roberta", "sp_always")


def train_sp():
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                             limit_alphabet=250, show_progress=False)
    tok.train_from_iterator(corpus(3000, seed=7), tr)
    j = json.loads(tok.to_str())
    # Llama 2's layout: <unk> <s> </s>, the 256 byte tokens, then the learned vocabulary
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for t in ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]:
        vocab[t] = len(vocab)
    for t, _ in old:
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    j["added_tokens"] = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for t in ["<unk>", "<s>", "</s>"]]
    j["pre_tokenizer"] = None
    j["decoder"] = json.loads(decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0)]).__getstate__())
    j["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]).__getstate__())
    legacy = Tokenizer.from_str(json.dumps(j))
    j2 = json.loads(legacy.to_str())
    j2["normalizer"] = None
    j2["pre_tokenizer"] = json.loads(pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first", split=True).__getstate__())
    j2["decoder"] = json.loads(decoders.Sequence([
        decoders.ByteFallback(),
        decoders.Metaspace(replacement="▁", prepend_scheme="first")]).__getstate__())
    return {"sp_legacy": legacy, "sp_meta": Tokenizer.from_str(json.dumps(j2))}


def train_byte_level(pre, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(3000, seed=7), tr)
    return tok


def make_all():
    toks = train_sp()
    gpt2 = train_byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    gpt2.add_tokens([AddedToken(" hello world", special=False, normalized=False),
                     AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
    j = json.loads(gpt2.to_str())
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]  # the older form
    toks["gpt2"] = Tokenizer.from_str(json.dumps(j))
    j["pre_tokenizer"] = json.loads(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]).__getstate__())
    toks["gpt2_digits"] = Tokenizer.from_str(json.dumps(j))
    split = pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False)
    llama3 = train_byte_level(pre_tokenizers.Sequence([
        split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ignore_merges=True)
    llama3.add_special_tokens(["<|begin_of_text|>", "<|eot_id|>"])
    llama3.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[
            ("<|begin_of_text|>", llama3.token_to_id("<|begin_of_text|>"))])
    toks["llama3"] = llama3
    j = json.loads(llama3.to_str())
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN2_REGEX
    j["normalizer"] = {"type": "NFC"}
    toks["qwen2"] = Tokenizer.from_str(json.dumps(j))
    # variants of the same models, checked on the first 1500 cases
    j = json.loads(toks["gpt2"].to_str())
    j["pre_tokenizer"]["add_prefix_space"] = True
    toks["gpt2_prefix"] = Tokenizer.from_str(json.dumps(j))
    j = json.loads(llama3.to_str())
    j["post_processor"] = json.loads(processors.RobertaProcessing(
        ("<|im_end|>", llama3.token_to_id("<|im_end|>")),
        ("<|im_start|>", llama3.token_to_id("<|im_start|>"))).__getstate__())
    j["decoder"] = None
    toks["llama3_roberta"] = Tokenizer.from_str(json.dumps(j))
    j = json.loads(toks["sp_meta"].to_str())
    j["pre_tokenizer"] = json.loads(pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="always", split=False).__getstate__())
    j["decoder"] = json.loads(decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0)]).__getstate__())
    toks["sp_always"] = Tokenizer.from_str(json.dumps(j))
    os.makedirs(OUT, exist_ok=True)
    cases = corpus(N_TEST, seed=19)
    for name, tok in toks.items():
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            f.write(tok.to_str())
        write_expect(Tokenizer.from_file(os.path.join(OUT, name + ".json")),
                     cases[:1500] if name in VARIANTS else cases,
                     os.path.join(OUT, name + ".expect.jsonl.gz"))


def write_expect(tok, cases, path):
    with gzip.GzipFile(path, "wb", mtime=0) as gz:
        for i, text in enumerate(cases):
            enc = tok.encode(text, add_special_tokens=False)
            rec = {"text": text, "ids": enc.ids}
            if i % 7 == 0:
                rec["ids_special"] = tok.encode(text, add_special_tokens=True).ids
            dec = tok.decode(enc.ids, skip_special_tokens=False)
            if dec != text:
                rec["decode"] = dec
            dec2 = tok.decode(enc.ids, skip_special_tokens=True)
            if dec2 != dec:
                rec["decode_skip"] = dec2
            gz.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--expect":
        src, out = sys.argv[2], sys.argv[3]
        if os.path.isdir(src):
            src = os.path.join(src, "tokenizer.json")
        write_expect(Tokenizer.from_file(src), corpus(N_TEST, seed=19), out)
    else:
        make_all()


if __name__ == "__main__":
    main()
