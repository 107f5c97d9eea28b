#!/bin/sh
# Quick start: install what is missing, build, and run the bundled default model.
set -e
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"
echo
echo "== tandem run models/default/model.onnx =="
./build/tandem run models/default/model.onnx --input input=models/default/input.npy --output-dir build/out
