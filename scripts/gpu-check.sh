#!/bin/sh
# The CUDA backend on a GPU machine (Linux x86-64, NVIDIA driver, no network, no package
# manager), from a bundle built elsewhere by scripts/build-gpu-bundle.sh:
#
#   scripts/gpu-check.sh [BUNDLE]          (default build-gpu/bundle)
#
#   1. tandem devices: cuda:0 must be listed; without it the reason is printed and the
#      script exits 3 ("no GPU") before anything else. The bench models (bench/models.py:
#      ResNet-50, BERT-base, DLRM; python3 with onnx and numpy) are built in the background
#      from here on
#   2. the CUDA unit test (every op case on cuda:0 against the CPU, precisions, memory
#      limit, copies and events)
#   3. the ONNX node tests on cuda:0 (the CPU takes what CUDA lacks): the pinned pass list,
#      restricted to the tests this machine's test data has, in 8 shards at once (each test
#      makes a CUDA context of its own in a fresh process)
#   4. the model tests (tests/models) on cuda:0, and (4c) the int8 models (tests/models_int8)
#      with cuda:0 first, compared with ONNX Runtime's outputs in quantization steps
#   5. ResNet-50 and BERT-base on cuda:0 at batch 1 and 32 in FP32 and FP16, against PyTorch
#      eager on the same GPU when `import torch` works (torchvision ResNet-50, transformers
#      BERT-base, random weights; FP32 with TF32 off on both sides; one python process)
#   6. Chrome traces of GPU runs (tandem bench --trace): ResNet-50 with auto placement, and
#      two runs split between cuda:0 and the CPU by affinity rules (BERT with Softmax on the
#      CPU, DLRM with the embedding Gathers on the CPU) so that tensors cross the link
#   7. (issue 5) auto placement against the best single device: ResNet-50, BERT, DLRM at
#      batch 1, `--devices cuda:0,cpu` (auto), `--devices cpu`, and cuda:0 alone
#      (`--devices cuda:0,cpu --placement cuda:0`: the CPU only for what cuda:0 cannot run);
#      mean latency, auto / best single (target <= 1.05); `tandem plan --measure` on
#      ResNet-50 and BERT: predicted against measured time, the cost model's error
#   8. (issue 7) throughput: `--mode throughput --devices cuda:0,cpu` against cuda:0 alone on
#      ResNet-50 batch 32 and DLRM batch 256 (items/s); examples/classify_folder over
#      generated 640x480 images (decode+resize+normalize on CPU threads -> ResNet-50 ->
#      top-k): --sequential against the pipeline with the model stage on cuda:0, and the
#      pipeline with a cuda:0,cpu throughput-mode model stage (images/s)
#   9. (issue 9) tools/trace_overlap.py on the traces of step 6: per device, copy time, the
#      part of it that overlaps kernel execution, and the overlap fraction
#  10. (issue 21) scripts/gpu-membudget.sh: an ~8 GB random-weight Llama-style model written on
#      this machine, decoded with `--device-memory cuda:0=2GiB` (streamed, layers on the CPU,
#      the cost model's choice) against all-resident; H2D achieved against a pinned
#      cudaMemcpyAsync peak; copy/compute overlap of the streamed plan's trace; where each
#      layer's KV cache lives under the budget and its bytes copied per token. Its own budget
#      (MEMBUDGET_SECONDS, default 180 s): it runs when that much is left after step 9, or
#      alone right after step 1 with GPU_CHECK_ONLY=membudget (then GPU_CHECK_BUDGET is
#      MEMBUDGET_SECONDS + 20 by default). Dry runs use test:0 and a 0.05 GB model
#  12. (before 10) tests/tools/serve_instances_check.py: `tandem serve` with a CPU and a GPU
#      instance of one model under concurrent KServe v2 requests, answers against the CPU's,
#      both instances busy in /metrics, and a GPU-only model
#  11. bench/run_cpu_bench.py --quick on the host's cores (tandem against ONNX Runtime, CPU
#      only: TANDEM_CUDA_DISABLE=1), when 130 s of the budget are left after step 10
#  13. diagnostics, when 60 s are left: `tandem bench` of one model in configurations that
#      isolate one cause each (DLRM with and without cuda:0 in the list, BERT with CUDA graphs
#      on and off, BERT batch 1 with its shape chains folded (--free-dims), BERT batch 32
#      auto against cuda:0 alone)
#
# Without the bench models (python3 lacking onnx or numpy) step 5 is skipped and steps 6-8
# use the small models of tests/models instead (mobilenet_block, bert_layer, dlrm_like); the
# summary says so, as it says what else was skipped and why.
#
# Results: $OUT/gpu-results.md (or bench/results/gpu-<date>.md when OUT is unset), the log
# gpu-check.log, devices.txt and the traces trace-*.json beside it (6 files: $OUT brings back
# 8 at most). Exit status: 0 when every test step passed, 1 when one failed, 2 without a
# bundle, 3 without a GPU. Budget: under 5 minutes in all (GPU_CHECK_BUDGET seconds, default
# 285): every step runs under `timeout`, capped by what is left, and a measurement that no
# longer fits is skipped, with the reason in the summary. GPU_CHECK_DRY=1 walks every step on
# this machine instead (no GPU: opencl:0 stands in for cuda:0 when it is listed, else the
# CPU; the small test models, few iterations, a node-test subset, no PyTorch): a check of
# the script itself.
set -u
cd "$(dirname "$0")/.." || exit 2
dry="${GPU_CHECK_DRY:-0}"
py="${PYTHON:-python3}" # with onnx and numpy (the GPU machine's python3 has them and torch)
devs="cuda:0,cpu"; bench_models="resnet50 bert"; batches="1 32"
[ "$dry" = 1 ] && { devs="cpu"; bench_models="resnet50"; batches="1"; }
root="$(pwd)"
bundle="${1:-build-gpu/bundle}"
case "$bundle" in /*) ;; *) bundle="$root/$bundle" ;; esac
outdir="${OUT:-$root/bench/results}"
mkdir -p "$outdir"
stamp="$(date -u +%Y-%m-%d)"
if [ -n "${OUT:-}" ]; then results="$outdir/gpu-results.md"; else results="$outdir/gpu-$stamp.md"; fi
log="$outdir/gpu-check.log"
work="${TMPDIR:-/tmp}/tandem-gpu-check.$$" # scratch (images, JSON): not under $OUT
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
: > "$log"
say() { echo "$*" | tee -a "$log"; }
t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }
only="${GPU_CHECK_ONLY:-}"
mb_secs="${MEMBUDGET_SECONDS:-180}"
if [ "$only" = membudget ]; then budget="${GPU_CHECK_BUDGET:-$((mb_secs + 20))}"; else budget="${GPU_CHECK_BUDGET:-285}"; fi
left() { echo $((budget - $(elapsed))); }
# cap N: N seconds, or what the budget has left (less a margin for the results), at least 0
cap() { c=$(($(left) - 5)); [ $c -lt 0 ] && c=0; [ "$1" -lt $c ] && c=$1; echo $c; }
# capr N R: N seconds, or what is left after keeping R seconds for the steps after it
capr() { c=$(($(left) - $2)); [ $c -lt 1 ] && c=1; [ "$1" -lt $c ] && c=$1; echo $c; }
# afford N: whether N seconds are left
afford() { [ "$(left)" -ge "$1" ]; }
skipped=""
skip() { # what, why
  skipped="$skipped
- $1: $2"
  say "-- $1 SKIPPED: $2"
}
# ratio A B: A / B with 2 decimals, "-" unless both are numbers and B > 0
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 == a && b + 0 == b && b > 0) printf "%.2f", a / b; else printf "-" }' 2> /dev/null || echo "-"; }
# jv FILE EXPR: a value of the JSON object d in FILE (EXPR is Python over d), "-" when missing
jv() { python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(("%.3f" % v) if isinstance(v, float) else v)' "$1" "$2" 2> /dev/null || echo "-"; }
mfail="" # measurements that failed: "- what: the error"
# tbench JSON LIMIT WHAT ARGS...: tandem bench ARGS --json > JSON under timeout LIMIT; a failure
# goes into the summary with tandem's last message
tbench() {
  tj="$1"; tl="$2"; tw="$3"; shift 3
  rm -f "$tj"
  timeout "$tl" "$tandem" bench "$@" --json > "$tj" 2> "$work/tbench.err"
  trc=$?
  cat "$work/tbench.err" >> "$log"
  if [ $trc -ne 0 ]; then
    [ $trc -eq 124 ] && echo "stopped after ${tl}s (time limit)" >> "$work/tbench.err"
    mfail="$mfail
- $tw (exit $trc): $(grep -v '^ *$' "$work/tbench.err" | tail -n 1)"
    say "bench $tw failed (exit $trc): $(tail -n 1 "$work/tbench.err")"
    rm -f "$tj"
  fi
  return $trc
}

if [ ! -x "$bundle/tandem" ] && [ -f "$bundle.tar.xz" ]; then # as scripts/build-gpu-bundle.sh carries it
  tar -C "$(dirname "$bundle")" -xJf "$bundle.tar.xz" || say "gpu-check: cannot unpack $bundle.tar.xz"
fi
if [ ! -x "$bundle/tandem" ]; then
  say "gpu-check: no bundle at $bundle (build it with scripts/build-gpu-bundle.sh and carry it)"
  exit 2
fi

# ---- libraries: the bundle's, then the machine's cuBLAS / cuDNN ----
cuda_dirs=""
py_dirs="$(python3 -c 'import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "cu*", "lib")):
        print(d)' 2> /dev/null)"
for lib in libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libcudnn_cnn.so.9 libcudnn_ops.so.9; do
  [ "$dry" = 1 ] && break
  found=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu $py_dirs; do
    if [ -e "$d/$lib" ]; then found="$d"; break; fi
  done
  if [ -z "$found" ]; then
    found="$(find /usr /opt -name "$lib" 2> /dev/null | head -1)"
    found="${found%/*}"
  fi
  if [ -n "$found" ]; then
    case ":$cuda_dirs:" in *":$found:"*) ;; *) cuda_dirs="${cuda_dirs:+$cuda_dirs:}$found" ;; esac
  else
    say "gpu-check: $lib not found on this machine"
  fi
done
export LD_LIBRARY_PATH="$bundle:$bundle/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TANDEM_PLUGIN_DIR="$bundle"
export TANDEM_CACHE_DIR="${TANDEM_CACHE_DIR:-/tmp/tandem-gpu-cache}"
tandem="$bundle/tandem"
say "gpu-check: bundle $bundle; CUDA libraries from ${cuda_dirs:-nowhere}; budget ${budget}s"
[ -f "$bundle/README" ] && cat "$bundle/README" >> "$log"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
  --format=csv,noheader >> "$log" 2>&1

# ---- 1. devices ----
say "== 1. tandem devices"
timeout 60 "$tandem" devices > "$outdir/devices.txt" 2>&1
tee -a "$log" < "$outdir/devices.txt"
if [ "$dry" != 1 ] && ! grep -q '^cuda:0' "$outdir/devices.txt"; then
  why="$(grep 'cuda:' "$outdir/devices.txt" | head -1)"
  say "gpu-check: NO GPU: ${why:-cuda:0 is not listed}"
  say "gpu-check: nothing ran on a GPU"
  exit 3
fi
# the accelerator of steps 6-8 (a dry run: opencl:0 when there is one, else the CPU)
accel="cuda:0"; thr=""
if [ "$dry" = 1 ]; then
  accel="cpu"; thr="--threads 1"
  grep -q '^opencl:0 ' "$outdir/devices.txt" && accel="opencl:0"
fi
if [ "$accel" = cpu ]; then mixed="cpu"; else mixed="$accel,cpu"; fi
say "gpu-check: accelerator of steps 6-8: $accel"

# ---- 10. (issue 21) a model bigger than the accelerator (scripts/gpu-membudget.sh) ----
membudget() { # SECONDS
  if [ "$dry" = 1 ]; then
    TANDEM_TEST_DEVICES=1 MEMBUDGET_DEV=test:0 MEMBUDGET_GB=0.05 MEMBUDGET_SMALL=1 \
      MEMBUDGET_BUDGET="${MEMBUDGET_BUDGET:-25%}" PYTHON="$py" scripts/gpu-membudget.sh "$tandem" "$outdir" "$1"
  else
    PYTHON="$py" scripts/gpu-membudget.sh "$tandem" "$outdir" "$1"
  fi
}
if [ "$only" = membudget ]; then
  say "== 10. models bigger than the accelerator (GPU_CHECK_ONLY=membudget, ${mb_secs}s)"
  membudget "$(cap "$mb_secs")"
  rc=$?
  { echo "# tandem: models bigger than the accelerator on $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1) ($stamp)"
    echo
    echo "From GPU_CHECK_ONLY=membudget scripts/gpu-check.sh in $(elapsed) s$([ "$dry" = 1 ] && echo " (GPU_CHECK_DRY=1: test:0 and a small model on this machine)"). $(head -1 "$bundle/README" 2> /dev/null)"
    echo
    cat "$outdir/membudget.md" 2> /dev/null || echo "(no results: exit $rc)"
  } > "$results"
  say "gpu-check: results in $results (at $(elapsed)s)"
  cat "$results"
  exit $([ $rc -eq 0 ] && echo 0 || echo 1)
fi

# ---- the bench models, built in the background (CPU only) while steps 2-4 run ----
models="/tmp/tandem-gpu-models"
mkdir -p "$models"
build_list="resnet50 bert dlrm"
[ "$dry" = 1 ] && build_list="resnet50"
( timeout 150 "$py" - "$models" $build_list > "$work/models.log" 2>&1 << 'EOF'
import os, sys
sys.path.insert(0, "bench")
try:
    import numpy, onnx  # noqa: F401
    import models
except ImportError as e:
    print("python3 cannot build the bench models: %s" % e)
    sys.exit(3)
out = sys.argv[1]
for name in sys.argv[2:]:
    path = os.path.join(out, name + ".onnx")
    if not os.path.exists(path):
        onnx.save(models.BUILDERS[name](), path + ".part")
        os.rename(path + ".part", path)
    print("built", path, flush=True)
EOF
  echo $? > "$work/models.rc" ) &
builder=$!

failed=""
step() { # name, time limit, command...: runs it with its output in the log
  name="$1"; limit="$(cap "$2")"; shift 2
  if [ "$limit" -lt 5 ]; then
    skip "$name" "time budget (${budget}s) spent"
    failed="$failed $name"
    return 1
  fi
  say "== $name (limit ${limit}s, at $(elapsed)s)"
  timeout "$limit" "$@" > "$work/step.out" 2>&1
  rc=$?
  cat "$work/step.out" >> "$log"
  tail -n 5 "$work/step.out"
  if [ $rc -ne 0 ]; then
    failed="$failed $name"
    say "-- $name FAILED (exit $rc)"
  else
    say "-- $name passed"
  fi
  return $rc
}

# ---- 2. unit test ----
unit_summary="not run"; precision_lines=""
if [ -x "$bundle/test_cuda" ]; then
  step "2.test_cuda" 70 "$bundle/test_cuda"
  unit_summary="$(grep -E 'PASSED|FAILED' "$work/step.out" | head -2 | tr '\n' ' ')"
  precision_lines="$(grep '^precision ' "$work/step.out")"
else
  skip "2.test_cuda" "not in the bundle"
fi

# ---- 3. node tests ----
node_dir=""
# a machine without the test data: build-gpu/node-tests.tar.xz (the pinned tests present here,
# written by scripts/build-gpu-bundle.sh) travels beside the bundle
node_tar="$(dirname "$bundle")/node-tests.tar.xz"
if [ ! -d /usr/share/libonnx-testdata/data/node ] && [ -f "$node_tar" ]; then
  mkdir -p "$work/node-data" && tar -C "$work/node-data" -xJf "$node_tar" || say "gpu-check: cannot unpack $node_tar"
fi
for d in /usr/share/libonnx-testdata/data/node "$work/node-data" \
         "$("$py" -c 'import os, onnx.backend.test as t; print(os.path.join(os.path.dirname(t.__file__), "data", "node"))' 2> /dev/null)"; do
  if [ -n "$d" ] && [ -d "$d" ]; then node_dir="$d"; break; fi
done
conf_summary="not run (no ONNX node test data on this machine)"
if [ -n "$node_dir" ]; then
  expect="$work/expect.txt"
  : > "$expect"
  missing=0
  filter=""
  [ "$dry" = 1 ] && filter="^test_(add|relu|conv|gemm|matmul|softmax)" # a dry run: a subset
  grep -E "${filter:-.}" tests/conformance_pass.txt > "$work/pinned.txt"
  while read -r t; do
    if [ -d "$node_dir/$t" ]; then echo "$t" >> "$expect"; else missing=$((missing + 1)); fi
  done < "$work/pinned.txt"
  # the pinned tests go to parallel shards (folders of links), each a `tandem conformance`
  shards=8; [ "$dry" = 1 ] && shards=2
  lim="$(cap 80)"
  say "== 3.node_tests_cuda ($(wc -l < "$expect") pinned tests, $shards shards at once, limit ${lim}s, at $(elapsed)s)"
  i=0
  k=0
  while [ $k -lt $shards ]; do mkdir -p "$work/node.$k"; k=$((k + 1)); done
  while read -r t; do
    k=$((i % shards)); i=$((i + 1))
    ln -s "$node_dir/$t" "$work/node.$k/$t"
    echo "$t" >> "$work/node.$k.txt"
  done < "$expect"
  pids=""; k=0
  while [ $k -lt $shards ]; do
    if [ -s "$work/node.$k.txt" ]; then
      # one test process (one CUDA context) a shard, a new one only after a crash (a process
      # per test, each making a context, ran ~114 tests in more than 80 s on the H200 machine,
      # 2026-12-04; --no-fork, used since, lost the shard's other results to one crash)
      ( timeout "$lim" "$tandem" conformance "$work/node.$k" --devices "$devs" --placement first \
          --expect "$work/node.$k.txt" > "$work/node.$k.out" 2>&1
        echo $? > "$work/node.$k.rc" ) &
      pids="$pids $!"
    fi
    k=$((k + 1))
  done
  [ -n "$pids" ] && wait $pids
  cat "$work"/node.*.out >> "$log" 2> /dev/null
  grep -h -E '^(FAIL|REGRESSION) ' "$work"/node.*.out 2> /dev/null | head -n 5
  totals="$(cat "$work"/node.*.out 2> /dev/null | awk '
    / regressions against / { r += $1 }
    / passed, .* failed, .* skipped$/ { p += $1; f += $3; s += $5; n++ }
    END { printf "%d regressions; %d passed, %d failed, %d skipped (%d shards reported)", r, p, f, s, n }')"
  bad=""
  for rcf in "$work"/node.*.rc; do
    [ -f "$rcf" ] || continue
    rc="$(cat "$rcf")"
    [ "$rc" = 0 ] || bad="$bad $(basename "$rcf" .rc):exit-$rc"
  done
  if [ -n "$bad" ] || [ -z "$pids" ]; then
    failed="$failed 3.node_tests_cuda"
    say "-- 3.node_tests_cuda FAILED ($totals;${bad:- no tests}; exit 124 = the time limit)"
  else
    say "-- 3.node_tests_cuda passed ($totals)"
  fi
  conf_summary="$totals, ${bad:+shards that failed:$bad, }($(wc -l < "$expect") pinned tests present in $node_dir, $missing absent; only pinned tests run)"
else
  skip "3.node_tests_cuda" "no ONNX node test data on this machine"
fi

# ---- 4. model tests ----
step "4.model_tests_cuda" 30 "$tandem" conformance tests/models --rtol 1e-3 --atol 1e-4 \
  --devices "$devs" --placement first
model_summary="$(tail -n 1 "$work/step.out")"
# 4b. (issue 4) CUDA graphs (off by default): the model tests with TANDEM_CUDA_GRAPHS=1,
# test_segments when the bundle has it (repeated runs on cuda:0 against the CPU, replays
# required), bert_layer at batch 1 with graphs on vs off (mean ms, on / off); the counts are
# the devices' lines in TANDEM_CUDA_GRAPHS_LOG, summed
gl="$work/graphs.log"; : > "$gl"
# (TANDEM_LOG=info: the log says why a segment runs without a graph)
step "4b.model_tests_cuda_graphs" 15 env TANDEM_LOG=info TANDEM_CUDA_GRAPHS=1 TANDEM_CUDA_GRAPHS_LOG="$gl" \
  "$tandem" conformance tests/models --rtol 1e-3 --atol 1e-4 --devices "$devs" --placement first
[ -x "$bundle/test_segments" ] && step "4b.test_segments" 15 env TANDEM_LOG=info TANDEM_CUDA_GRAPHS_LOG="$gl" "$bundle/test_segments"
g_it=100; [ "$dry" = 1 ] && g_it=3
for g in 1 0; do
  afford 40 && TANDEM_CUDA_GRAPHS=$g && export TANDEM_CUDA_GRAPHS TANDEM_CUDA_GRAPHS_LOG="$gl" &&
    tbench "$work/graphs$g.json" "$(cap 8)" "bert_layer batch 1 graphs=$g" tests/models/bert_layer/model.onnx \
      --devices "$devs" --placement first --warmup 4 --iterations $g_it
done
unset TANDEM_CUDA_GRAPHS TANDEM_CUDA_GRAPHS_LOG
g_on="$(jv "$work/graphs1.json" 'd["latency_ms"]["mean"]')"; g_off="$(jv "$work/graphs0.json" 'd["latency_ms"]["mean"]')"
g_n="$(awk '{ for (i = 1; i <= NF; i++) if (split($i, kv, "=") == 2 && kv[2] ~ /^[0-9]+$/) s[kv[1]] += kv[2] }
  END { printf "%d replays, %d captures, %d fallbacks, %d not capturable", s["replays"], s["captures"], s["fallbacks"], s["not_capturable"] }' "$gl")"
say "-- 4b. CUDA graphs: bert_layer batch 1 on $g_on ms, off $g_off ms, on / off $(ratio "$g_on" "$g_off"); $g_n"
model_summary="$model_summary; with CUDA graphs (TANDEM_CUDA_GRAPHS=1): bert_layer b1 on/off $(ratio "$g_on" "$g_off") ($g_on / $g_off ms), $g_n"

# 4c. (issue 20) the int8 models of tests/models_int8 (ONNX Runtime quantize_static QDQ and
# QOperator models with ORT's outputs) with cuda:0 first: QuantizeLinear, DequantizeLinear and
# the integer products (QLinearConv / QConv, QLinearMatMul / QMatMul: k_ops_quant.c) on the
# GPU, compared with ORT in steps of the output's quantization (tests/tools/check_int8_models.py)
int8_summary="not run"
if "$py" -c "import numpy, onnx" 2> /dev/null; then
  step "4c.int8_models_cuda" 40 "$py" tests/tools/check_int8_models.py --tandem "$tandem" \
    --devices "$devs" --threads 1
  int8_summary="$(tail -n 1 "$work/step.out")"
else
  skip "4c.int8_models_cuda" "$py lacks numpy or onnx"
fi

# ---- the models of steps 5-8 ----
say "== waiting for the bench models (at $(elapsed)s)"
wait "$builder" 2> /dev/null
cat "$work/models.log" >> "$log"
models_note=""
if [ "$(cat "$work/models.rc" 2> /dev/null)" != 0 ]; then
  models_note="bench models not built ($(tail -n 1 "$work/models.log" 2> /dev/null)); "
fi
# model NAME: the bench model's path, or the small test model standing in for it
model() {
  if [ "$dry" != 1 ] && [ -f "$models/$1.onnx" ]; then echo "$models/$1.onnx"; return; fi
  case "$1" in
    resnet50) echo tests/models/mobilenet_block/model.onnx ;;
    bert) echo tests/models/bert_layer/model.onnx ;;
    dlrm) echo tests/models/dlrm_like/model.onnx ;;
  esac
}
mname() { # the name shown for model NAME
  case "$(model "$1")" in tests/models/*) echo "$1 (as $(basename "$(dirname "$(model "$1")")"))" ;; *) echo "$1" ;; esac
}
fallbacks=""
for n in resnet50 bert dlrm; do
  case "$(model "$n")" in tests/models/*) fallbacks="$fallbacks $n" ;; esac
done
if [ -n "$fallbacks" ]; then
  why="${models_note:-a dry run; }"
  skip "bench models for steps 6-8:$fallbacks" "${why%; } - the small models of tests/models stand in"
fi
iters_b1=30; warm=5; dur="--duration 2"
[ "$dry" = 1 ] && { iters_b1=5; warm=2; dur="--iterations 3"; }

# ---- 5. benchmarks against PyTorch ----
bench_rows=""
say "== 5. benchmarks (at $(elapsed)s)"
if [ -f "$models/resnet50.onnx" ]; then
  : > "$work/torch.in"
  for name in $bench_models; do
    [ -f "$models/$name.onnx" ] || { skip "5.$name" "the model was not built"; continue; }
    for prec in fp32 fp16; do
      for b in $batches; do
        if ! afford 170; then skip "5.$name $prec batch $b" "time budget (kept for steps 6-9)"; continue; fi
        iters=20; [ $b -eq 32 ] && iters=10
        rm -f "$work/bench.json"
        TANDEM_CUDA_PRECISION=$prec timeout "$(cap 40)" "$tandem" bench "$models/$name.onnx" \
          --devices "$devs" --batch $b --warmup 3 --iterations $iters --json \
          > "$work/bench.json" 2>> "$log"
        t_ms="$(jv "$work/bench.json" 'd["latency_ms"]["mean"]')"
        echo "$name $prec $b $iters $t_ms" >> "$work/torch.in"
      done
    done
  done
  : > "$work/torch.out"
  if [ "$dry" = 1 ]; then
    skip "5.PyTorch" "a dry run"
  elif ! afford 125; then
    skip "5.PyTorch" "time budget (kept for steps 6-9)"
  elif [ -s "$work/torch.in" ]; then
    # (not torch.py: python puts the script's folder first on sys.path, and `import torch`
    # would import the script itself)
    cat > "$work/torch_bench.py" << 'EOF'
import sys, time
try:
    import torch
    assert torch.cuda.is_available()
except (ImportError, AssertionError):
    sys.exit(4)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
dev = "cuda"
built = {}
def model(name, prec):
    if (name, prec) not in built:
        dt = torch.float16 if prec == "fp16" else torch.float32
        if name == "resnet50":
            import torchvision
            m = torchvision.models.resnet50()
        else:
            from transformers import BertConfig, BertModel
            m = BertModel(BertConfig())
        built[(name, prec)] = m.eval().to(dev, dt)
    return built[(name, prec)]
for line in sys.stdin:
    name, prec, batch, iters = line.split()[:4]
    batch, iters = int(batch), int(iters)
    dt = torch.float16 if prec == "fp16" else torch.float32
    try:
        with torch.inference_mode():
            m = model(name, prec)
            if name == "resnet50":
                args = (torch.randn(batch, 3, 224, 224, device=dev, dtype=dt),)
            else:
                args = (torch.randint(0, 30522, (batch, 128), device=dev),
                        torch.ones(batch, 128, dtype=torch.int64, device=dev))
            for _ in range(3):
                m(*args)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(iters):
                m(*args)
            torch.cuda.synchronize()
            ms = "%.3f" % ((time.perf_counter() - t) / iters * 1000)
    except Exception as e:  # one configuration failing leaves the others
        print("torch %s %s %d: %s" % (name, prec, batch, e), file=sys.stderr)
        ms = "-"
    print(name, prec, batch, ms, flush=True)
EOF
    timeout "$(capr 60 100)" "$py" "$work/torch_bench.py" < "$work/torch.in" > "$work/torch.out" 2>> "$log"
    rc=$?
    if [ $rc -eq 4 ]; then skip "5.PyTorch" "python3 has no torch with CUDA"
    elif [ $rc -ne 0 ]; then say "PyTorch timing stopped (exit $rc): rows without a PyTorch figure show -"; fi
  fi
  while read -r name prec b iters t_ms; do
    p_ms="$(awk -v n="$name" -v p="$prec" -v b="$b" '$1 == n && $2 == p && $3 == b { print $4 }' "$work/torch.out")"
    [ -n "$p_ms" ] || p_ms="-"
    row="| $name | $prec | $b | $t_ms | $p_ms | $(ratio "$t_ms" "$p_ms") |"
    say "$row"
    bench_rows="$bench_rows$row
"
  done < "$work/torch.in"
else
  skip "5.benchmarks against PyTorch" "${models_note:-a dry run without the bench models; }- nothing to compare"
fi

# ---- 6. traces ----
say "== 6. traces (at $(elapsed)s)"
: > "$work/traces" # lines "FILE|what it shows"
trace() { # file, what, bench arguments...
  tf="$1"; what="$2"; shift 2
  if ! afford 95; then skip "6.trace $what" "time budget (kept for steps 7-9)"; return; fi
  if timeout "$(capr 25 80)" "$tandem" bench "$@" --warmup 2 --iterations 3 $thr --trace "$outdir/$tf" \
      >> "$log" 2>&1; then
    echo "$tf|$what" >> "$work/traces"
  else
    mfail="$mfail
- 6. trace $what: $(tail -n 1 "$log")"
    say "trace $what failed"; rm -f "$outdir/$tf"
  fi
}
trace trace-gpu.json "$(mname resnet50) batch 1, $devs auto" "$(model resnet50)" --devices "$devs" --batch 1
if [ "$accel" != cpu ]; then
  trace trace-bert-split.json "$(mname bert) batch 1, $accel + Softmax on the cpu" "$(model bert)" \
    --devices "$mixed" --placement "$accel" --affinity "Softmax=cpu" --batch 1
  trace trace-dlrm-split.json "$(mname dlrm) batch 256, $accel + Gather on the cpu" "$(model dlrm)" \
    --devices "$mixed" --placement "$accel" --affinity "Gather=cpu" --batch 256
else
  skip "6.split traces" "no second device in this dry run"
fi

# ---- 7. (issue 5) auto placement against the best single device ----
say "== 7. placement (at $(elapsed)s)"
place_rows=""
for n in resnet50 bert dlrm; do
  if ! afford 80; then skip "7.placement $n" "time budget (kept for steps 8-9)"; continue; fi
  m="$(model "$n")"
  for cfg in auto cpu accel; do
    case $cfg in
      auto) set -- --devices "$mixed" ;;
      cpu) set -- --devices cpu ;;
      accel) set -- --devices "$mixed" --placement "$accel" ;;
    esac
    tbench "$work/p-$cfg.json" "$(capr 30 40)" "7. $n $cfg" "$m" "$@" --batch 1 --warmup $warm \
      --iterations $iters_b1 $thr
  done
  a_ms="$(jv "$work/p-auto.json" 'd["latency_ms"]["mean"]')"
  c_ms="$(jv "$work/p-cpu.json" 'd["latency_ms"]["mean"]')"
  g_ms="$(jv "$work/p-accel.json" 'd["latency_ms"]["mean"]')"
  best="$(awk -v c="$c_ms" -v g="$g_ms" 'BEGIN { b = "-"; if (c + 0 == c) b = c; if (g + 0 == g && (b == "-" || g < b)) b = g; print b }')"
  r="$(ratio "$a_ms" "$best")"
  ok="-"; [ "$r" != "-" ] && ok="$(awk -v r="$r" 'BEGIN { print (r <= 1.05 ? "yes" : "NO") }')"
  a50="$(jv "$work/p-auto.json" 'd["latency_ms"]["p50"]')"
  c50="$(jv "$work/p-cpu.json" 'd["latency_ms"]["p50"]')"
  g50="$(jv "$work/p-accel.json" 'd["latency_ms"]["p50"]')"
  r50="$(ratio "$a50" "$(awk -v c="$c50" -v g="$g50" 'BEGIN { b = "-"; if (c + 0 == c) b = c; if (g + 0 == g && (b == "-" || g < b)) b = g; print b }')")"
  kern="$(jv "$work/p-auto.json" '", ".join("%s %d" % (x["device"], x["kernels"]) for x in d["per_device"])')"
  row="| $(mname "$n") | $a_ms | $c_ms | $g_ms | $r | $ok | $r50 | $kern |"
  say "$row"
  place_rows="$place_rows$row
"
done
plan_rows=""
for n in resnet50 bert; do
  if ! afford 50; then skip "7.plan --measure $n" "time budget (kept for steps 8-9)"; continue; fi
  pm=10; [ "$dry" = 1 ] && pm=3
  if timeout "$(capr 30 40)" "$tandem" plan "$(model "$n")" --devices "$mixed" --measure $pm $thr --json \
      > "$work/plan.json" 2>> "$log"; then
    # the log: each node's device, predicted ms per device and measured ms (the cost model's misses)
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("plan --measure %s: node, op, device, predicted ms by device, measured ms" % sys.argv[2])
for n in d["nodes"]:
    pr = " ".join("%s=%s" % (k, "-" if v is None else "%.4f" % v) for k, v in n.get("predicted_ms_by_device", {}).items())
    print("  %-40s %-14s %-7s %s measured=%s" % (n["name"][:40], n["op"], n["device"], pr, n.get("measured_ms")))' \
      "$work/plan.json" "$n" >> "$log" 2>&1
    pr="$(jv "$work/plan.json" 'd["predicted_total_ms"]')"
    me="$(jv "$work/plan.json" 'd["measured_total_ms"]')"
    err="$(awk -v p="$pr" -v m="$me" 'BEGIN { if (p + 0 == p && m + 0 == m && m > 0) printf "%+.0f%%", 100 * (p - m) / m; else printf "-" }')"
    node_err="$(jv "$work/plan.json" '"%.0f%%" % (100 * d["cost_model_mean_abs_error"])')"
    singles="$(jv "$work/plan.json" '", ".join("%s %s" % (k, "cannot run all" if v is None else "%.3f" % v) for k, v in d["predicted_single_device_ms"].items())')"
    cps="$(jv "$work/plan.json" '"%d (%d bytes)" % (len(d["copies"]), d["copy_bytes_per_run"])')"
    row="| $(mname "$n") | $pr | $me | $err | $node_err | $singles | $cps |"
    say "$row"
    plan_rows="$plan_rows$row
"
  else
    mfail="$mfail
- 7. plan --measure $n: $(tail -n 1 "$log")"
    say "plan --measure $n failed"
  fi
done

# ---- 8. (issue 7) throughput ----
say "== 8. throughput (at $(elapsed)s)"
tput_rows=""
for nb in resnet50:32 dlrm:256; do
  n="${nb%:*}"; b="${nb#*:}"
  if [ "$accel" = cpu ]; then skip "8.throughput $n" "no second device in this dry run"; continue; fi
  if ! afford 35; then skip "8.throughput $n" "time budget (kept for classify_folder and step 9)"; continue; fi
  m="$(model "$n")"
  tbench "$work/t-accel.json" "$(capr 30 25)" "8. $n batch $b $accel alone" "$m" --devices "$mixed" \
    --placement "$accel" --batch "$b" --warmup 3 $dur $thr
  # (TANDEM_LOG=info: the log has each change of the split ratio and its reason)
  export TANDEM_LOG=info
  tbench "$work/t-both.json" "$(capr 30 25)" "8. $n batch $b throughput mode" "$m" --devices "$mixed" \
    --mode throughput --batch "$b" --warmup 3 $dur $thr
  unset TANDEM_LOG
  g="$(jv "$work/t-accel.json" '"%.1f" % d["throughput_per_s"]')"
  t="$(jv "$work/t-both.json" '"%.1f" % d["throughput_per_s"]')"
  util="$(jv "$work/t-both.json" '", ".join("%s %.0f%%" % (x["device"], 100 * x["utilization"]) for x in d["per_device"])')"
  row="| $(mname "$n") | $b | $g | $t | $(ratio "$t" "$g") | $util |"
  say "$row"
  tput_rows="$tput_rows$row
"
done
classify_rows=""
cf="$bundle/classify_folder"
if [ ! -x "$cf" ]; then
  skip "8.classify_folder" "not in the bundle (scripts/build-gpu-bundle.sh carries it)"
elif ! afford 20; then
  skip "8.classify_folder" "time budget (kept for step 9)"
else
  n_img=96; size="640 480"; workers=6
  [ "$dry" = 1 ] && { n_img=12; size="160 120"; workers=2; }
  cm="$(model resnet50)"
  mkdir -p "$work/images"
  timeout 30 "$cf" --make-images "$work/images" $n_img $size >> "$log" 2>&1
  accel_only="$accel"
  seq_ips="-"; pipe_ips="-"
  for cfg in sequential pipeline both; do
    if ! afford 12; then skip "8.classify_folder $cfg" "time budget (kept for step 9)"; continue; fi
    case $cfg in
      sequential) set -- --devices "$accel_only" --sequential; what="--sequential, model on $accel_only" ;;
      pipeline) set -- --devices "$accel_only" --workers $workers; what="pipeline ($workers decode workers), model stage on $accel_only" ;;
      both) set -- --devices "$mixed" --mode throughput --workers $workers; what="pipeline ($workers decode workers), model stage on $mixed --mode throughput" ;;
    esac
    [ $cfg = both ] && [ "$accel" = cpu ] && { skip "8.classify_folder $cfg" "no second device in this dry run"; continue; }
    timeout "$(cap 40)" "$cf" "$work/images" --model "$cm" "$@" > "$work/c-$cfg.txt" 2> "$work/c-$cfg.err"
    rc=$?
    cat "$work/c-$cfg.err" >> "$log"
    if [ $rc -ne 0 ] && [ "$accel_only" != "$mixed" ] && [ $cfg = sequential ]; then
      # an op cuda:0 cannot run: the model with the CPU behind it (auto placement) from here on
      say "classify_folder on $accel_only alone failed; again with $mixed"
      accel_only="$mixed"
      set -- --devices "$accel_only" --sequential; what="--sequential, model on $accel_only"
      timeout "$(cap 40)" "$cf" "$work/images" --model "$cm" "$@" > "$work/c-$cfg.txt" 2> "$work/c-$cfg.err"
      rc=$?
      cat "$work/c-$cfg.err" >> "$log"
    fi
    ips="$(sed -n 's/.* \([0-9.]*\) images\/s.*/\1/p' "$work/c-$cfg.err" | head -1)"
    if [ $rc -ne 0 ] || [ -z "$ips" ]; then
      ips="-"
      mfail="$mfail
- 8. classify_folder $cfg (exit $rc): $(tail -n 1 "$work/c-$cfg.err")"
      say "classify_folder $cfg failed (exit $rc)"
    fi
    same="-"
    if [ $cfg != sequential ] && [ -s "$work/c-sequential.txt" ] && [ $rc -eq 0 ]; then
      # devices round differently in the last digits: compare the classes, not the scores
      if [ "$(sed 's/ score=[0-9.eE+-]*//g' "$work/c-sequential.txt")" = "$(sed 's/ score=[0-9.eE+-]*//g' "$work/c-$cfg.txt")" ]; then
        same="yes"; else same="NO"; fi
    fi
    case $cfg in
      sequential) seq_ips="$ips"; r="1.00"; [ "$ips" = "-" ] && r="-" ;;
      pipeline) pipe_ips="$ips"; r="$(ratio "$ips" "$seq_ips")" ;;
      both) r="$(ratio "$ips" "$seq_ips") ($(ratio "$ips" "$pipe_ips") of the $accel_only pipeline)" ;;
    esac
    row="| $what | $ips | $r | $same |"
    say "$row"
    classify_rows="$classify_rows$row
"
  done
  classify_note="$n_img images ${size% *}x${size#* } (P6/P5 written by classify_folder --make-images), model $(mname resnet50)"
fi

# ---- 9. (issue 9) copies overlapping compute in the traces ----
say "== 9. trace overlap (at $(elapsed)s)"
overlap_rows=""
if [ ! -s "$work/traces" ]; then
  skip "9.trace overlap" "no trace was written"
elif ! command -v python3 > /dev/null; then
  skip "9.trace overlap" "no python3"
else
  while IFS='|' read -r tf what; do
    timeout 30 python3 tools/trace_overlap.py "$outdir/$tf" < /dev/null >> "$log" 2>&1
    if timeout 30 python3 tools/trace_overlap.py "$outdir/$tf" --json < /dev/null > "$work/ov.json" 2>> "$log"; then
      rows="$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for r in d["devices"] + ([d["all"]] if len(d["devices"]) > 1 else []):
    f = "-" if r["fraction"] is None else "%.3f" % r["fraction"]
    same = "-" if r["overlap_same_device_ms"] is None else "%.3f" % r["overlap_same_device_ms"]
    other = "-" if r["overlap_other_devices_ms"] is None else "%.3f" % r["overlap_other_devices_ms"]
    print("| %s | %s | %d | %.3f | %.3f | %.3f | %s | %s | %s |" % (sys.argv[2], r["device"], r["copies"],
          r["bytes"] / 1e6, r["copy_ms"], r["overlap_ms"], same, other, f))' "$work/ov.json" "$tf")"
      [ -n "$rows" ] || rows="| $tf | (no copies) | 0 | 0 | 0 | 0 | - | - | - |"
      say "$rows"
      overlap_rows="$overlap_rows$rows
"
    else
      say "trace_overlap $tf failed"
    fi
  done < "$work/traces"
fi

# ---- 12. the server's GPU instances: `tandem serve` with a CPU and a GPU instance of a model
# (tests/tools/serve_instances_check.py: concurrent KServe v2 requests against the CPU's
# answers, both instances busy in /metrics, a GPU-only model) ----
serve_summary="not run"
if [ "$accel" = cpu ]; then
  skip "12.serve instances" "no second device in this dry run"
elif ! "$py" -c "import numpy" 2> /dev/null; then
  skip "12.serve instances" "$py lacks numpy"
elif afford 40; then
  step "12.serve_instances" 30 "$py" tests/tools/serve_instances_check.py --tandem "$tandem" \
    --backend "${accel%%:*}"
  serve_summary="$(grep -E '^serve instances \(' "$work/step.out" | head -1) ($(tail -n 1 "$work/step.out"))"
else
  skip "12.serve instances" "time budget"
fi

# ---- 10. (issue 21), when its budget is left ----
mb_md=""
if afford $((mb_secs + 10)); then
  say "== 10. models bigger than the accelerator (at $(elapsed)s)"
  if membudget "$(cap "$mb_secs")"; then say "-- 10.membudget passed"; else failed="$failed 10.membudget"; fi
  mb_md="$outdir/membudget.md"
else
  skip "10.membudget" "needs ${mb_secs}s, $(left)s left (run it alone: GPU_CHECK_ONLY=membudget)"
fi

# ---- 11. the CPU tables on this machine's host (its many cores), when 130 s are left ----
cpu_md=""
cpu_threads="$(nproc 2> /dev/null || echo 1)"
if [ "$dry" = 1 ]; then
  skip "11.cpu tables" "a dry run"
elif ! "$py" -c "import numpy, onnx, onnxruntime" 2> /dev/null; then
  skip "11.cpu tables" "$py lacks numpy, onnx or onnxruntime"
elif afford 130; then
  say "== 11. CPU tables, tandem against ONNX Runtime on $cpu_threads threads (at $(elapsed)s)"
  if TANDEM_CUDA_DISABLE=1 timeout "$(cap 120)" "$py" bench/run_cpu_bench.py --tandem "$tandem" --quick \
      --threads "$cpu_threads" --batches 1,8 --out "$outdir/cpu-host.md" >> "$log" 2>&1; then
    cpu_md="$outdir/cpu-host.md"
  else
    mfail="$mfail
- 11. CPU tables: $(tail -n 1 "$log")"
  fi
else
  skip "11.cpu tables" "needs 130s, $(left)s left"
fi

# ---- 13. diagnostics: the same model in configurations that isolate one cause each (mean ms
# of `tandem bench`), when 60 s are left ----
diag_rows=""
if [ "$dry" = 1 ] || [ ! -f "$models/bert.onnx" ]; then
  skip "13.diagnostics" "a dry run or no bench models"
elif afford 60; then
  say "== 13. diagnostics (at $(elapsed)s)"
  diag() { # label, env assignments ("-" for none), bench args...
    dl="$1"; de="$2"; shift 2
    if afford 20; then
      if [ "$de" = "-" ]; then tbench "$work/diag.json" "$(cap 25)" "13 $dl" "$@"
      else env $de timeout "$(cap 25)" "$tandem" bench "$@" --json > "$work/diag.json" 2>> "$log"; fi
      dm="$(jv "$work/diag.json" 'd["latency_ms"]["mean"]')"
      dp="$(jv "$work/diag.json" 'd["latency_ms"]["p50"]')"
      say "diag $dl: mean $dm ms, p50 $dp ms"
      diag_rows="$diag_rows| $dl | $dm | $dp |
"
    fi
  }
  diag "dlrm b1, --devices cpu" - "$models/dlrm.onnx" --devices cpu --duration 1
  diag "dlrm b1, --devices cuda:0,cpu --placement cpu" - "$models/dlrm.onnx" --devices cuda:0,cpu --placement cpu --duration 1
  diag "dlrm b1, --devices cuda:0,cpu (auto)" - "$models/dlrm.onnx" --devices cuda:0,cpu --duration 1
  diag "bert b1, cuda:0, CUDA graphs off" "TANDEM_CUDA_GRAPHS=0" "$models/bert.onnx" --devices cuda:0,cpu --placement cuda:0 --warmup 5 --iterations 30
  diag "bert b1, cuda:0, CUDA graphs on" "TANDEM_CUDA_GRAPHS=1" "$models/bert.onnx" --devices cuda:0,cpu --placement cuda:0 --warmup 5 --iterations 30
  # (the shape chains folded away: does the CPU's shape work cost BERT's GPU runs?)
  diag "bert b1, cuda:0,cpu (auto), --free-dims batch=1" - "$models/bert.onnx" --devices cuda:0,cpu --free-dims batch=1 --warmup 5 --iterations 30
  diag "bert b1, cuda:0,cpu (auto)" - "$models/bert.onnx" --devices cuda:0,cpu --warmup 5 --iterations 30
  diag "bert b32, cuda:0,cpu (auto)" - "$models/bert.onnx" --devices cuda:0,cpu --batch 32 --warmup 3 --iterations 10
  diag "bert b32, cuda:0 (placement)" - "$models/bert.onnx" --devices cuda:0,cpu --placement cuda:0 --batch 32 --warmup 3 --iterations 10
  diag "resnet50 b32, cuda:0 (placement)" - "$models/resnet50.onnx" --devices cuda:0,cpu --placement cuda:0 --batch 32 --warmup 3 --iterations 10
  # BERT batch 1 on all the host's cores ran 1.61x ONNX Runtime's time (session 24), at 1-2
  # threads 0.80-0.92x: where the time goes per op type at this thread count
  if afford 25; then
    say "diag: tandem profile bert b1 on the cpu, $(nproc) threads (per op type):"
    TANDEM_CUDA_DISABLE=1 timeout "$(cap 20)" "$tandem" profile "$models/bert.onnx" --devices cpu \
      --runs 5 --no-save 2>&1 | head -40 >> "$log"
  fi
else
  skip "13.diagnostics" "needs 60s, $(left)s left"
fi

# the device profiles the cost model used (key=value files of the cache), for the log
for f in "$TANDEM_CACHE_DIR"/profiles/*.txt; do
  [ -f "$f" ] && { echo "profile $f:"; sed 's/^/  /' "$f"; } >> "$log"
done

# ---- results ----
{
  echo "# tandem CUDA backend on $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1) ($stamp)"
  echo
  echo "From scripts/gpu-check.sh in $(elapsed) s$([ "$dry" = 1 ] && echo " (GPU_CHECK_DRY=1: on this machine, $accel standing in for cuda:0)"). $(head -1 "$bundle/README" 2> /dev/null)"
  echo
  echo "- unit test (test_cuda): $unit_summary"
  echo "- ONNX node tests on cuda:0 (CPU fallback): $conf_summary"
  echo "- model tests on cuda:0: $model_summary"
  echo "- int8 models (tests/models_int8) with cuda:0 first: $int8_summary"
  echo "- tandem serve, a CPU and a GPU instance (step 12): $serve_summary"
  [ -n "$precision_lines" ] && echo "- accuracy against CPU FP32 (test_cuda):" && echo "$precision_lines" | sed 's/^/  - /'
  echo
  echo "## 5. Against PyTorch"
  echo
  echo "Mean latency per run (ms), tandem \`bench --devices $devs\` (FP16: TANDEM_CUDA_PRECISION=fp16,"
  echo "float32 tensors with half-precision tensor-core products) against PyTorch eager on the same"
  echo "GPU (FP16: model.half()). Ratio = tandem / PyTorch (below 1: tandem faster)."
  echo
  echo "| model | precision | batch | tandem ms | PyTorch ms | ratio |"
  echo "|---|---|---|---|---|---|"
  printf "%s" "$bench_rows"
  echo
  echo "## 7. Auto placement against the best single device (issue 5)"
  echo
  echo "Mean latency (ms) at batch 1, $iters_b1 timed runs after $warm warm-up runs, one session per"
  echo "column: auto = \`--devices $mixed\` (cost model, HEFT); cpu = \`--devices cpu\`; $accel ="
  echo "\`--devices $mixed --placement $accel\` (the CPU only for what $accel cannot run)."
  echo "auto / best = auto's latency over the faster single device's; target <= 1.05 (p50: the same"
  echo "with the medians, less moved by a stray slow run)."
  echo
  echo "| model | auto ms | cpu ms | $accel ms | auto / best | <= 1.05 | auto / best (p50) | auto's kernels per device |"
  echo "|---|---:|---:|---:|---:|---|---:|---|"
  printf "%s" "$place_rows"
  echo
  echo "\`tandem plan MODEL --devices $mixed --measure N --json\`: the cost model's predicted time of the"
  echo "auto plan against the measured mean (profiling runs synchronise after every node);"
  echo "error = (predicted - measured) / measured; per node = mean absolute error over the nodes."
  echo
  echo "| model | predicted ms | measured ms | error | per-node error | predicted per single device (ms) | copies per run |"
  echo "|---|---:|---:|---:|---:|---|---|"
  printf "%s" "$plan_rows"
  echo
  echo "## 8. Throughput (issue 7)"
  echo
  echo "Items/s over $([ "$dry" = 1 ] && echo "3 runs" || echo "2 s") after 3 warm-up runs: $accel alone = \`--devices $mixed --placement $accel\`"
  echo "(latency mode), both = \`--devices $mixed --mode throughput\` (a replica per device, the batch"
  echo "split by measured speed, or one device when the other would only add time). Target >= 1.0."
  echo
  echo "| model | batch | $accel alone /s | $accel + cpu /s | ratio | utilisation (throughput mode) |"
  echo "|---|---:|---:|---:|---:|---|"
  printf "%s" "$tput_rows"
  echo
  echo "examples/classify_folder, ${classify_note:-not run}: decode + resize +"
  echo "normalize on CPU threads -> model -> top-k. Ratio against --sequential (one image after the"
  echo "other on one thread); target >= 1.3 for pipelines with CPU pre/post-processing. Same classes ="
  echo "the top-k classes equal the sequential run's."
  echo
  echo "| configuration | images/s | ratio | same classes |"
  echo "|---|---:|---:|---|"
  printf "%s" "$classify_rows"
  echo
  echo "## 9. Copies overlapping compute in the traces (issue 9)"
  echo
  echo "tools/trace_overlap.py on the traces of step 6 (Perfetto opens them):"
  sed 's/^\([^|]*\)|\(.*\)$/- \1: \2/' "$work/traces"
  echo
  echo "Copy time = union of the device's copy spans; overlapped = the part of it during which a"
  echo "kernel ran (same device / other devices); fraction = overlapped / copy time. Kernel spans"
  echo "are execution (tracing synchronises the device after each kernel); an asynchronous"
  echo "download's span runs from its issue to its reader seeing it done (an upper bound)."
  echo
  echo "| trace | device | copies | MB | copy ms | overlapped ms | same device | other devices | fraction |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  printf "%s" "$overlap_rows"
  echo
  [ -n "$mb_md" ] && [ -f "$mb_md" ] && cat "$mb_md" && echo
  if [ -n "$cpu_md" ] && [ -f "$cpu_md" ]; then
    echo "## 11. CPU tables on this machine's host ($cpu_threads threads, bench/run_cpu_bench.py --quick)"
    echo
    sed 's/^#/##/' "$cpu_md"
    echo
  fi
  if [ -n "$diag_rows" ]; then
    echo "## 13. Diagnostics"
    echo
    echo "\`tandem bench\` in configurations that isolate one cause each (ms)."
    echo
    echo "| configuration | mean ms | p50 ms |"
    echo "|---|---:|---:|"
    printf "%s" "$diag_rows"
    echo
  fi
  echo "Skipped: ${skipped:-nothing}"
  echo
  echo "Failed steps: ${failed:-none}"
  echo
  echo "Failed measurements (their rows show -): ${mfail:-none}"
} > "$results"
say "gpu-check: results in $results (at $(elapsed)s)"
cat "$results"
[ -z "$failed" ]
