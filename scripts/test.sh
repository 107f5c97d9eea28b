#!/bin/sh
# The whole test suite: a warnings-as-errors release build and an ASan+UBSan build, each
# running every test (unit, ONNX conformance with the pinned pass list, model tests, mixed
# devices, CLI, server end-to-end). Python (a local .venv) is only for the server tests'
# real Triton client.
set -e
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements.txt
jobs="$(nproc)"
# device profiles and OpenCL program binaries are cached here (PoCL compiles slowly)
TANDEM_CACHE_DIR="$(pwd)/build/cache"
export TANDEM_CACHE_DIR
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTANDEM_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_ASAN=ON -DTANDEM_WERROR=ON > /dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
