#!/bin/sh
# The whole test suite: a warnings-as-errors release build and an ASan+UBSan build, each
# running every test (unit, ONNX conformance with the pinned pass list, model tests, CLI).
set -e
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs="$(nproc)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTANDEM_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_ASAN=ON -DTANDEM_WERROR=ON > /dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
