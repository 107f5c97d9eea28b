#!/usr/bin/env python3
"""Writes the seed corpora of the server fuzz targets (tests/fuzz/corpus/TARGET):

  fuzz_infer_json    one byte picking the model config of fuzz_serve.h ('0' identity_fp32,
                     '1' identity_bytes, '2' types, '3' pair), then a JSON request body
  fuzz_infer_binary  the same byte, the Inference-Header-Content-Length value and '\\n'
                     (an empty line: no header), then the body (JSON header + binary data)
  fuzz_config        config.pbtxt texts of a model folder named "model": the configurations
                     of tests/server/test_server.py, Triton-style examples, their JSON forms
  fuzz_openai        one byte (bit 0: chat endpoint; bit 1: the tokenizer without a chat
                     template), then an OpenAI completions / chat completions body
  fuzz_openai_text   one byte (the number of stop strings), then fields apart by 0xFF: the
                     stop strings, then the pieces of text of one token each

Valid inputs mostly, plus a few of each kind of bad input the server tests send.
Usage: make_serve_corpus.py [OUT_DIR]   (default: tests/fuzz/corpus next to this script)
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def js(o):
    return json.dumps(o, separators=(",", ":")).encode()


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def byt(*items):
    return b"".join(struct.pack("<I", len(s)) + s for s in items)


def inp(name, dt, shape, data=None, bds=None):
    d = {"name": name, "datatype": dt, "shape": shape}
    if bds is not None:
        d["parameters"] = {"binary_data_size": bds}
    else:
        d["data"] = data
    return d


def json_seeds():
    s = {}
    ok = {"inputs": [inp("INPUT0", "FP32", [1, 16], [0.5] * 16)]}
    s["fp32_flat"] = b"0" + js(ok)
    s["fp32_nested_batch2"] = b"0" + js({"id": "req-7", "inputs": [inp("INPUT0", "FP32", [2, 16],
        [[i * 0.25 for i in range(16)], [1e30, -2.5, 0, -0.0] + [1] * 12])],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        "parameters": {"priority": 1, "timeout": 1000, "binary_data_output": False, "sequence_id": 0}})
    s["fp32_outputs_json"] = b"0" + js({**ok, "outputs": [{"name": "OUTPUT0",
        "parameters": {"binary_data": False, "classification": 0}}]})
    s["fp32_pretty"] = b"0" + json.dumps(ok, indent=2).encode()
    s["bytes_batch2"] = b"1" + js({"inputs": [inp("INPUT0", "BYTES", [2, 2],
        [["ab", "cd"], ["", "\u00e9\u4e2d"]])]})
    s["bytes_escapes"] = b"1" + js({"inputs": [inp("INPUT0", "BYTES", [1, 2], ["a\"b\\n", "\t\u0001"])],
                                    "parameters": {"binary_data_output": True}})
    s["types_all"] = b"2" + js({"inputs": [
        inp("i64", "INT64", [3], [-9223372036854775808, 0, 9223372036854775807]),
        inp("b", "BOOL", [2, 2], [[True, False], [False, True]]),
        inp("h", "FP16", [3], [1.5, -65504, 1e-8]),
        inp("u8", "UINT8", [2, 1], [0, 255]),
        inp("i8", "INT8", [4], [-128, -1, 0, 127]),
        inp("bf", "BF16", [2], [3.14159, -1e38]),
        inp("f64", "FP64", [1], [2.718281828459045]),
        inp("u64", "UINT64", [2], [0, 9223372036854775807]),
        inp("i32", "INT32", [2], [-2147483648, 2147483647]),
        inp("i16", "INT16", [2], [-32768, 32767]),
        inp("u16", "UINT16", [2], [0, 65535]),
        inp("u32", "UINT32", [2], [0, 4294967295]),
        inp("s", "BYTES", [2], ["x", "yz"])]})
    s["types_required_only"] = b"2" + js({"inputs": [
        inp("i64", "INT64", [0], []), inp("b", "BOOL", [2, 2], [True] * 4),
        inp("h", "FP16", [3], [0, 1, 2]), inp("u8", "UINT8", [0, 5], [])]})
    s["pair"] = b"3" + js({"inputs": [inp("x", "FP32", [2, 3, 2], [[[1, 2]] * 3] * 2),
                                       inp("tag", "BYTES", [2, 1], [["a"], ["b"]])],
                           "outputs": [{"name": "tag_out"}, {"name": "y", "parameters": {"binary_data": True}}]})
    # bad ones
    s["bad_deep"] = b"0" + b'{"inputs":' + b"[" * 80 + b"]" * 80 + b"}"
    s["bad_huge_shape"] = b"0" + js({"inputs": [inp("INPUT0", "FP32", [1, 4611686018427387904, 4], [0.5])]})
    s["bad_shape_overflow_batch"] = b"3" + js({"inputs": [inp("x", "FP32", [4, 4611686018427387904, 2], [1]),
                                                         inp("tag", "BYTES", [4, 1], ["a"] * 4)]})
    s["bad_dtype"] = b"0" + js({"inputs": [inp("INPUT0", "INT32", [1, 16], [1] * 16)]})
    s["bad_range"] = b"2" + js({"inputs": [inp("u8", "UINT8", [1, 1], [256])]})
    s["bad_dup_key"] = b"0" + b'{"inputs":[],"inputs":[]}'
    s["bad_batch_disagree"] = b"3" + js({"inputs": [inp("x", "FP32", [1, 1, 2], [1, 2]),
                                                   inp("tag", "BYTES", [2, 1], ["a", "b"])]})
    s["bad_truncated"] = b"0" + js(ok)[:40]
    return s


def binary_seeds():
    s = {}

    def req(pick, head, data, header=True, delta=0):
        h = js(head)
        line = str(len(h) + delta).encode() if header else b""
        return pick + line + b"\n" + h + data

    x = f32(*range(16))
    h = {"inputs": [inp("INPUT0", "FP32", [1, 16], bds=64)]}
    s["fp32"] = req(b"0", h, x)
    s["fp32_binary_out"] = req(b"0", {**h, "parameters": {"binary_data_output": True}}, x)
    s["fp32_batch3"] = req(b"0", {"inputs": [inp("INPUT0", "FP32", [3, 16], bds=192)],
                                  "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]},
                           x * 3)
    b2 = byt(b"abc", b"z")
    s["bytes"] = req(b"1", {"inputs": [inp("INPUT0", "BYTES", [1, 2], bds=len(b2))]}, b2)
    b4 = byt(b"", b"\xff\xfe", b"hello world", b"\xc3\xa9")
    s["bytes_batch2_nonutf8"] = req(b"1", {"inputs": [inp("INPUT0", "BYTES", [2, 2], bds=len(b4))]}, b4)
    s["bytes_binary_out"] = req(b"1", {"inputs": [inp("INPUT0", "BYTES", [2, 2], bds=len(b4))],
                                       "parameters": {"binary_data_output": True}}, b4)
    # mixed: some inputs binary (in input order), some JSON
    i64 = struct.pack("<3q", -1, 0, 1 << 62)
    u8 = bytes([1, 2, 3, 4, 5, 6])
    st = byt(b"q", b"")
    s["types_mixed"] = req(b"2", {"inputs": [
        inp("i64", "INT64", [3], bds=len(i64)),
        inp("b", "BOOL", [2, 2], [True, False, True, False]),
        inp("h", "FP16", [3], bds=6),
        inp("u8", "UINT8", [2, 3], bds=6),
        inp("s", "BYTES", [2], bds=len(st))]}, i64 + struct.pack("<3H", 0x3c00, 0x7c00, 0xfe00) + u8 + st)
    y = f32(1, 2, 3, 4)
    t = byt(b"t1", b"t2")
    s["pair"] = req(b"3", {"inputs": [inp("x", "FP32", [2, 1, 2], bds=16), inp("tag", "BYTES", [2, 1], bds=len(t))],
                           "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "tag_out"}]}, y + t)
    s["json_only_with_header"] = req(b"0", {"inputs": [inp("INPUT0", "FP32", [1, 16], [1] * 16)]}, b"")
    s["json_only_no_header"] = b"0\n" + js({"inputs": [inp("INPUT0", "FP32", [1, 16], [1] * 16)]})
    # inconsistent ones (the server tests' cases)
    s["bad_header_past_body"] = req(b"0", h, x, delta=100)
    s["bad_extra_bytes"] = req(b"0", h, x + b"xx")
    s["bad_short_data"] = req(b"0", h, x[:-4])
    s["bad_size_vs_shape"] = req(b"0", {"inputs": [inp("INPUT0", "FP32", [1, 16], bds=60)]}, x[:60])
    s["bad_no_header"] = req(b"0", h, x, header=False)
    s["bad_header_text"] = b"0-5\n" + js(h) + x
    s["bad_bytes_len_past_end"] = req(b"1", {"inputs": [inp("INPUT0", "BYTES", [1, 2], bds=9)]},
                                      b"\x05\x00\x00\x00abc\x00\x00")
    s["bad_bytes_huge_len"] = req(b"1", {"inputs": [inp("INPUT0", "BYTES", [1, 2], bds=8)]},
                                  b"\xff\xff\xff\xff" + b"\x00" * 4)
    s["bad_bytes_cut_prefix"] = req(b"1", {"inputs": [inp("INPUT0", "BYTES", [1, 2], bds=9)]},
                                    byt(b"ab") + b"\x01\x00\x00")
    s["bad_bytes_nul"] = req(b"1", {"inputs": [inp("INPUT0", "BYTES", [1, 2], bds=10)]}, byt(b"a\x00", b""))
    s["bad_huge_bds"] = req(b"0", {"inputs": [inp("INPUT0", "FP32", [1, 16], bds=9223372036854775807)]}, x)
    return s


SERVER_CONFIGS = {
    "resnet": """
# resnet_blocks with a dynamic batch dimension
name: "model"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input", data_type: TYPE_FP32, dims: [ 3, 64, 64 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 20000
}
instance_group [ { count: 1, kind: KIND_CPU } ]
""",
    "hetero": """
max_batch_size: 8
dynamic_batching { }
instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU } ]
parameters { key: "tandem_gpu_backend" value { string_value: "opencl" } }
""",
    "identity_fp32": """
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
""",
    "slow": """
max_batch_size: 1
dynamic_batching {
  max_queue_delay_microseconds: 0
  default_queue_policy { max_queue_size: 1, allow_timeout_override: true }
}
instance_group { count: 1 kind: KIND_CPU }
""",
    "slow_prio": """
max_batch_size: 1
dynamic_batching { priority_levels: 2 default_priority_level: 2 }
instance_group { count: 1 kind: KIND_CPU }
""",
    "slow_ordered": """
max_batch_size: 1
dynamic_batching { preserve_ordering: true }
instance_group [ { count: 2, kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
""",
    "multi": "max_batch_size: 8\nversion_policy: { all { } }\n",
    "broken_syntax": 'max_batch_size: 8\ninput [ { name: "INPUT0" dims: [16 }\n',
    "broken_deep": "parameters { " + "x { " * 100 + "}" * 101 + "\n",
    "broken_field": "max_batch_size: 8\nsequence_batching { }\n",
    "broken_type": 'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [16] } ]\n',
    "gpu_only": "instance_group [ { kind: KIND_GPU } ]\n",
    "empty": "",
}

TRITON_CONFIGS = {
    "triton_full": """
name: "model"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
default_model_filename: "model.onnx"
max_batch_size: 16
version_policy: { specific: { versions: [ 1, 3 ] } }
input [
  {
    name: "input"
    data_type: TYPE_FP32
    format: FORMAT_NONE
    dims: [ 32 ]
    reshape: { shape: [ 4, 8 ] }
  }
]
output [
  { name: "logits", data_type: TYPE_FP32, dims: [ 10 ], label_filename: "labels.txt" },
  { name: "probabilities", data_type: TYPE_FP32, dims: [ 10 ] }
]
instance_group [
  { name: "cpus", count: 2, kind: KIND_CPU },
  { count: 1, kind: KIND_GPU, gpus: [ 0, 1 ] }
]
dynamic_batching {
  preferred_batch_size: [ 2, 4, 8 ]
  max_queue_delay_microseconds: 100
  preserve_ordering: false
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy {
    timeout_action: DELAY
    default_timeout_microseconds: 5000
    allow_timeout_override: true
    max_queue_size: 32
  }
  priority_queue_policy {
    key: 1
    value: { timeout_action: REJECT, max_queue_size: 4 }
  }
  priority_queue_policy [ { key: 3, value { default_timeout_microseconds: 1 } } ]
}
optimization { graph { level: 1 } }
model_warmup [ { name: "w" batch_size: 1 } ]
parameters [
  { key: "intra_op_thread_count", value: { string_value: "2" } },
  { key: "tandem_devices" value: { string_value: "cpu" } }
]
""",
    "triton_latest": """
name: 'model'  # single quotes, comments, semicolons
version_policy < latest < num_versions: 2 > >;
max_batch_size: 0;
input: [ { name: "input"; data_type: TYPE_FP32; dims: [ -1, 4, 8 ] } ]
output { name: "logits" data_type: TYPE_FP32 dims: [ -1, 10 ] }
output { name: "probabilities" data_type: TYPE_FP32 dims: [ -1, 10 ] }
""",
    "triton_strings": r"""
name: "mo" "del"
parameters { key: "k\x41\101\n\t\\\"" value { string_value: "v" } }
max_batch_size: 0x10
""",
    "triton_numbers": """
max_batch_size: 4
dynamic_batching { max_queue_delay_microseconds: 1000 preferred_batch_size: [ 1, 2, 4 ] }
parameters { key: "x" value { string_value: "-0x1p3" } }
""",
    "triton_bad_numbers": """
max_batch_size: 4
dynamic_batching { max_queue_delay_microseconds: 1e3 preferred_batch_size: [ 1, -2, 9999999999999999999 ] }
""",
    "triton_unsupported": """
max_batch_size: 4
ensemble_scheduling { step [ { model_name: "a" model_version: -1 } ] }
""",
    "triton_shape_tensor": 'input [ { name: "input" data_type: TYPE_INT64 dims: [ 1 ] is_shape_tensor: true } ]\n',
    "triton_ragged": 'input [ { name: "input" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n',
}

JSON_CONFIGS = {
    "json_full": {"name": "model", "max_batch_size": 8,
                  "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [4, 8]}],
                  "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}],
                  "dynamic_batching": {"preferred_batch_size": [4], "priority_levels": 2, "default_priority_level": 1,
                                       "priority_queue_policy": {"1": {"max_queue_size": 3}}},
                  "instance_group": [{"kind": "KIND_CPU", "count": 1}],
                  "parameters": {"tandem_gpu_backend": {"string_value": "opencl"}},
                  "version_policy": {"latest": {"num_versions": 1}}},
    "json_minimal": {"max_batch_size": 0},
    "json_bad_types": {"max_batch_size": "eight", "input": {"name": 5}},
}


def write(out, target, seeds):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print(f"{target}: {len(seeds)} seeds")


def openai_seeds():
    """OpenAI request bodies for fuzz_openai: the first byte picks the endpoint (bit 0: chat) and
    the tokenizer (bit 1: the one without a chat template)."""
    comp = [
        {"model": "m", "prompt": "Once upon a time", "max_tokens": 16},
        {"model": "m", "prompt": ["Hello"], "max_tokens": 4, "temperature": 0, "stop": ["\n", "."]},
        {"model": "m", "prompt": [1, 2, 3, 4], "logprobs": 3, "seed": 7, "top_p": 0.9, "top_k": 40},
        {"model": "m", "prompt": [[5, 6, 7]], "stream": True, "stream_options": {"include_usage": True}},
        {"model": "m", "prompt": "x", "stop": "end", "repetition_penalty": 1.1, "ignore_eos": True,
         "max_completion_tokens": 8, "n": 1, "best_of": 1, "presence_penalty": 0, "logit_bias": {}},
        {"model": "m", "prompt": "caf\u00e9 \ud83d\ude00 <|im_start|>", "echo": False, "suffix": ""},
        {"model": "m", "prompt": [99999999], "max_tokens": 2},
        {"model": "m", "prompt": "", "temperature": 3},
        {"model": "m", "prompt": "a", "stop": ["a" * 300]},
        {"model": "m", "prompt": "b", "presence_penalty": 0.5, "frequency_penalty": -1.25,
         "logit_bias": {"5": 100, "7": -100, "0012": 0.5}},
        {"model": "m", "prompt": "c", "logit_bias": {"x": 1, "-1": 2, "99999999999": 3}, "frequency_penalty": 2.5},
    ]
    chat = [
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "What is 2+2?"},
                                    {"role": "assistant", "content": "4"},
                                    {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]}],
         "logprobs": True, "top_logprobs": 2, "stream": True},
        {"model": "m", "messages": [{"role": "user", "content": None}], "seed": -1, "stop": None},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        {"model": "m", "messages": [], "top_logprobs": 1},
        {"model": "m", "messages": [{"role": 5}]},
    ]
    seeds = {}
    for i, b in enumerate(comp):
        body = json.dumps(b).encode()
        seeds[f"completion_{i}"] = b"\x00" + body
        seeds[f"completion_notmpl_{i}"] = b"\x02" + body
    for i, b in enumerate(chat):
        body = json.dumps(b).encode()
        seeds[f"chat_{i}"] = b"\x01" + body
        seeds[f"chat_notmpl_{i}"] = b"\x03" + body
    seeds["chat_nul"] = b'\x01{"model":"m","messages":[{"role":"user","content":"a\\u0000b"}]}'
    return seeds


def openai_text_seeds():
    """Stop strings and token pieces for fuzz_openai_text: matches across pieces, overlapping
    stop strings, empty pieces, NUL and UTF-8 bytes, no stop string at all."""
    cases = {
        "across": ([b"world", b"ENDx"], [b"Hello", b" wor", b"ld, ", b"END", b"tail"]),
        "short_first": ([b"abcd", b"c"], [b"ab", b"c", b"d"]),
        "two_in_one": ([b"z q", b"xyz"], [b"xx", b"yz q"]),
        "nul_utf8": ([b"\0\0b"], [b"a\0", b"", b"\0b", b"", b"\xc3", b"\xa9!"]),
        "false_start": ([b"tests", b"ingo"], [b"te", b"st", b"ing", b"!"]),
        "none": ([], [b"plain ", b"text ", b"", b"\xe4\xb8\xad"]),
        "repeats": ([b"aab", b"aaab", b"b"*7], [b"a"] * 9 + [b"b"] * 9),
        "long_stop": ([b"x" * 256], [b"x" * 100, b"x" * 100, b"x" * 55, b"y"]),
    }
    return {k: bytes([len(stops)]) + b"\xff".join(stops + pieces) for k, (stops, pieces) in cases.items()}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus")
    write(out, "fuzz_infer_json", json_seeds())
    write(out, "fuzz_infer_binary", binary_seeds())
    cfg = {f"server_{k}.pbtxt": v.encode() for k, v in SERVER_CONFIGS.items()}
    cfg.update({f"{k}.pbtxt": v.encode() for k, v in TRITON_CONFIGS.items()})
    cfg.update({f"{k}.json": json.dumps(v, indent=1).encode() for k, v in JSON_CONFIGS.items()})
    write(out, "fuzz_config", cfg)
    write(out, "fuzz_openai", openai_seeds())
    write(out, "fuzz_openai_text", openai_text_seeds())


if __name__ == "__main__":
    main()
