#!/usr/bin/env python3
"""Hugging Face tokenizer.json + tokenizer_config.json from a GGUF file's tokenizer metadata.

Byte-level BPE only (tokenizer.ggml.model "gpt2": SmolLM, GPT-2, Llama 3, Qwen2); the
pre-tokenizer follows tokenizer.ggml.pre as Hugging Face's own files for those models have
it. Control tokens (token_type 3) become special added tokens, user-defined ones (4) added
tokens that are not special. Library use (tools/gguf_to_onnx.py):

    from gguf_tokenizer_json import tokenizer_files
    tok_json, tok_config = tokenizer_files(gguf.GGUFReader(path))   # two dicts

Command line: python tools/gguf_tokenizer_json.py MODEL.gguf OUT_DIR
"""
import json
import os
import sys

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def _split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
            "invert": False}


def pre_tokenizer_for(pre):
    if pre in ("smollm", "starcoder", "refact"):
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, _byte_level(True)]}
    if pre in ("default", "gpt-2", "gpt2"):
        return _byte_level(True)
    if pre in ("llama-bpe", "llama3", "smaug-bpe"):
        return {"type": "Sequence", "pretokenizers": [_split(LLAMA3_REGEX), _byte_level(False)]}
    if pre in ("qwen2",):
        return {"type": "Sequence", "pretokenizers": [_split(QWEN2_REGEX), _byte_level(False)]}
    raise ValueError(f"tokenizer.ggml.pre '{pre}' is not one this script knows")


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def tokenizer_files(reader):
    """(tokenizer.json dict, tokenizer_config.json dict) from a gguf.GGUFReader."""
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"tokenizer.ggml.model '{model}': only byte-level BPE ('gpt2') is handled")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
    merges = _field(reader, "tokenizer.ggml.merges", [])
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):
            special = ty == 3
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": not special, "special": special})
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer_for(pre),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": pre == "llama-bpe",
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ", 1) for m in merges]},
    }

    def name(key):
        i = _field(reader, f"tokenizer.ggml.{key}_token_id")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    config = {
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in a if k != "id"} for a in added},
        "bos_token": name("bos"),
        "eos_token": name("eos"),
        "unk_token": name("unknown"),
        "pad_token": name("padding"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(_field(reader, "llama.context_length", 8192) or 8192),
        "tokenizer_class": "GPT2Tokenizer",
    }
    tmpl = _field(reader, "tokenizer.chat_template")
    if tmpl is not None:
        config["chat_template"] = tmpl
    return tok, config


def write_tokenizer_files(reader, out_dir):
    tok, config = tokenizer_files(reader)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_tokenizer_json.py MODEL.gguf OUT_DIR")
    import gguf
    write_tokenizer_files(gguf.GGUFReader(sys.argv[1]), sys.argv[2])


if __name__ == "__main__":
    main()
