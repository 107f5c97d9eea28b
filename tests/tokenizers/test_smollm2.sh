#!/bin/sh
# tokenizer_smollm2 (tests/CMakeLists.txt): REPO TOK_CHECK OUT_DIR
repo=$1 check=$2 out=$3
cached=$repo/.cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$cached" ] || cached=/work/smollm2.gguf
gguf=${TANDEM_SMOLLM2_GGUF:-$cached}
py=$repo/.venv/bin/python
[ -f "$gguf" ] || { echo "SKIPPED: no SmolLM2 GGUF at $gguf (set TANDEM_SMOLLM2_GGUF)"; exit 77; }
[ -x "$py" ] || { echo "SKIPPED: $repo/.venv is missing (python3 -m venv .venv && .venv/bin/pip install -r tools/requirements.txt)"; exit 77; }
mkdir -p "$out" || exit 1
"$py" "$repo/tools/gguf_tokenizer_json.py" "$gguf" "$out" || exit 1
"$py" "$repo/tools/make_test_tokenizers.py" --expect "$out" "$out/expect.jsonl.gz" || exit 1
exec "$check" "$out" "$out/expect.jsonl.gz"
