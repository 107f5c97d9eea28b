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
POCL_CACHE_DIR="$(pwd)/build/cache/pocl"
mkdir -p "$POCL_CACHE_DIR"
export TANDEM_CACHE_DIR POCL_CACHE_DIR
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTANDEM_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
# The CUDA plugin (src/backends/cuda) is built and its tests run in the release build only:
# sanitizers cannot see into the CUDA libraries, and nvcc would only cost time here.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_ASAN=ON -DTANDEM_WERROR=ON \
  -DTANDEM_CUDA=OFF > /dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
# The threaded parts (thread pool, concurrent and asynchronous runs, memory plans, devices
# running at the same time, throughput mode, user pipelines and pipeline mode, the server under
# hostile clients) under ThreadSanitizer.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_TSAN=ON -DTANDEM_CUDA=OFF > /dev/null
cmake --build build-tsan -j"$jobs" --target test_core test_api test_memplan test_throughput test_trace test_monitor test_pipeline test_pipeline_rebalance test_cancel tandem_cli
# oneDNN's primitive cache is off here: it hands a primitive built on one thread to another
# through C++ atomics inside libdnnl, which ThreadSanitizer cannot see, so a matching primitive
# created by two sessions at once was reported as a race in tandem's query of it (CI, test_api's
# concurrent If runs). tandem's own caches stay on and are what this stage checks.
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 ctest --output-on-failure -j"$jobs" \
   -R '^(test_core|test_api|test_memplan|test_throughput|test_trace|test_monitor|test_pipeline|test_pipeline_rebalance|test_cancel|server_stress)$')
# Fuzzing (clang, libFuzzer, ASan+UBSan): every saved crash and the seed corpus are replayed
# (must pass); then each target is fuzzed for a bounded time (12 s each here: the whole run
# took 23.7-24.1 minutes on a 2-core AVX2 machine at 15 s, 24-25 at 20 s; FUZZ_SECONDS or
# tests/fuzz/run.sh for longer runs). A new finding there is printed loudly but does not fail
# the run: exploratory fuzzing is not deterministic, and what it finds is turned into a
# regression input (tests/fuzz/regressions) that the replay keeps.
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_FUZZ=ON \
  -DTANDEM_CUDA=OFF > /dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_model fuzz_tensor fuzz_wire \
  fuzz_infer_json fuzz_infer_binary fuzz_config fuzz_tokenizer fuzz_chat_template fuzz_openai fuzz_openai_text \
  fuzz_llm
(cd build-fuzz && ctest --output-on-failure -R fuzz_replay)
if ! FUZZ_SECONDS="${FUZZ_SECONDS:-12}" sh tests/fuzz/run.sh; then
  echo "=== FUZZING FOUND A NEW PROBLEM: see the report above and build-fuzz/fuzz-*.log ==="
fi
