#!/bin/sh
# The CUDA backend on a GPU machine (Linux x86-64, NVIDIA driver, no network, no package
# manager), from a bundle built elsewhere by scripts/build-gpu-bundle.sh:
#
#   scripts/gpu-check.sh [BUNDLE]          (default build-gpu/bundle)
#
#   1. tandem devices: cuda:0 must be listed; without it the reason is printed and the
#      script exits 3 ("no GPU") before anything else
#   2. the CUDA unit test (every op case on cuda:0 against the CPU, precisions, memory
#      limit, copies and events)
#   3. the ONNX node tests on cuda:0 (the CPU takes what CUDA lacks) against the pinned
#      pass list, restricted to the tests this machine's test data has
#   4. the model tests (tests/models) on cuda:0
#   5. ResNet-50 and BERT-base (bench/models.py, built here with python3's onnx) on cuda:0
#      at batch 1 and 32 in FP32 and FP16, against PyTorch eager on the same GPU when
#      `import torch` works (torchvision ResNet-50, transformers BERT-base, random weights;
#      FP32 with TF32 off on both sides)
#   6. a Chrome trace of a GPU run (tandem bench --trace)
#
# Results: $OUT/gpu-results.md (or bench/results/gpu-<date>.md when OUT is unset), the log
# gpu-check.log and trace-gpu.json beside it. Exit status: 0 when every test step passed,
# 1 when one failed, 2 without a bundle, 3 without a GPU. Budget: under 5 minutes (each
# step has its own time limit). GPU_CHECK_DRY=1 walks every step on the CPU instead (ResNet-50
# at batch 1 only, no PyTorch): a check of the script itself on a machine without a GPU.
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
: > "$log"
say() { echo "$*" | tee -a "$log"; }
t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }

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
say "gpu-check: bundle $bundle; CUDA libraries from ${cuda_dirs:-nowhere}"
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

failed=""
step() { # name, time limit, command...: runs it with its output in the log
  name="$1"; limit="$2"; shift 2
  say "== $name (limit ${limit}s, at $(elapsed)s)"
  timeout "$limit" "$@" > "$outdir/step.out" 2>&1
  rc=$?
  cat "$outdir/step.out" >> "$log"
  tail -n 5 "$outdir/step.out"
  if [ $rc -ne 0 ]; then
    failed="$failed $name"
    say "-- $name FAILED (exit $rc)"
  else
    say "-- $name passed"
  fi
  return $rc
}

# ---- 2. unit test ----
step "2.test_cuda" 120 "$bundle/test_cuda"
unit_summary="$(grep -E 'PASSED|FAILED' "$outdir/step.out" | head -2 | tr '\n' ' ')"
precision_lines="$(grep '^precision ' "$outdir/step.out")"

# ---- 3. node tests ----
node_dir=""
for d in /usr/share/libonnx-testdata/data/node \
         "$("$py" -c 'import os, onnx.backend.test as t; print(os.path.join(os.path.dirname(t.__file__), "data", "node"))' 2> /dev/null)"; do
  if [ -n "$d" ] && [ -d "$d" ]; then node_dir="$d"; break; fi
done
conf_summary="not run (no ONNX node test data on this machine)"
if [ -n "$node_dir" ]; then
  expect="$outdir/expect.txt"
  : > "$expect"
  missing=0
  while read -r t; do
    if [ -d "$node_dir/$t" ]; then echo "$t" >> "$expect"; else missing=$((missing + 1)); fi
  done < tests/conformance_pass.txt
  step "3.node_tests_cuda" 110 "$tandem" conformance "$node_dir" --devices "$devs" \
    --placement first --expect "$expect"
  conf_summary="$(tail -n 2 "$outdir/step.out" | tr '\n' ' ') ($(wc -l < "$expect") pinned tests present in $node_dir, $missing absent)"
fi

# ---- 4. model tests ----
step "4.model_tests_cuda" 60 "$tandem" conformance tests/models --rtol 1e-3 --atol 1e-4 \
  --devices "$devs" --placement first
model_summary="$(tail -n 1 "$outdir/step.out")"

# ---- 5. benchmarks ----
models="/tmp/tandem-gpu-models"
mkdir -p "$models"
bench_rows=""
say "== 5. benchmarks (at $(elapsed)s)"
if timeout 90 "$py" - "$models" $bench_models >> "$log" 2>&1 << 'EOF'
import os, sys
sys.path.insert(0, "bench")
import onnx, models
out = sys.argv[1]
for name in sys.argv[2:]:
    path = os.path.join(out, name + ".onnx")
    if not os.path.exists(path):
        onnx.save(models.BUILDERS[name](), path)
    print("built", path)
EOF
then
  have_torch=0
  [ "$dry" != 1 ] && "$py" -c "import torch; assert torch.cuda.is_available()" 2> /dev/null &&
    have_torch=1
  for name in $bench_models; do
    for prec in fp32 fp16; do
      for b in $batches; do
        [ "$(elapsed)" -gt 230 ] && { say "skipping $name $prec batch $b: time budget"; continue; }
        iters=20; [ $b -eq 32 ] && iters=10
        TANDEM_CUDA_PRECISION=$prec timeout 40 "$tandem" bench "$models/$name.onnx" \
          --devices "$devs" --batch $b --warmup 3 --iterations $iters --json \
          > "$outdir/bench.json" 2>> "$log"
        t_ms="$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["latency_ms"]["mean"])' "$outdir/bench.json" 2> /dev/null || echo "-")"
        p_ms="-"
        if [ $have_torch -eq 1 ]; then
          p_ms="$(timeout 40 "$py" - "$name" "$prec" "$b" "$iters" 2>> "$log" << 'EOF'
import sys, time, torch
name, prec, batch, iters = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
dt = torch.float16 if prec == "fp16" else torch.float32
dev = "cuda"
with torch.inference_mode():
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50().eval().to(dev, dt)
        args = (torch.randn(batch, 3, 224, 224, device=dev, dtype=dt),)
    else:
        from transformers import BertConfig, BertModel
        m = BertModel(BertConfig()).eval().to(dev, dt)
        args = (torch.randint(0, 30522, (batch, 128), device=dev),
                torch.ones(batch, 128, dtype=torch.int64, device=dev))
    for _ in range(3):
        m(*args)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        m(*args)
    torch.cuda.synchronize()
    print("%.3f" % ((time.perf_counter() - t) / iters * 1000))
EOF
)"
          [ -n "$p_ms" ] || p_ms="-"
        fi
        ratio="-"
        case "$t_ms$p_ms" in *-*) ;; *) ratio="$(python3 -c "print('%.2f' % ($t_ms / $p_ms))")" ;; esac
        row="| $name | $prec | $b | $t_ms | $p_ms | $ratio |"
        say "$row"
        bench_rows="$bench_rows$row
"
      done
    done
  done
  # ---- 6. trace ----
  say "== 6. trace (at $(elapsed)s)"
  [ "$(elapsed)" -lt 265 ] && timeout 25 "$tandem" bench "$models/resnet50.onnx" --devices "$devs" --batch 1 --warmup 2 \
    --iterations 3 --trace "$outdir/trace-gpu.json" >> "$log" 2>&1 || say "trace failed"
else
  say "benchmark models could not be built (python3 with onnx and numpy needed)"
fi
rm -f "$outdir/bench.json" "$outdir/step.out"

# ---- results ----
{
  echo "# tandem CUDA backend on $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1) ($stamp)"
  echo
  echo "From scripts/gpu-check.sh in $(elapsed) s. $(head -1 "$bundle/README" 2> /dev/null)"
  echo
  echo "- unit test (test_cuda): $unit_summary"
  echo "- ONNX node tests on cuda:0 (CPU fallback): $conf_summary"
  echo "- model tests on cuda:0: $model_summary"
  [ -n "$precision_lines" ] && echo "- accuracy against CPU FP32 (test_cuda):" && echo "$precision_lines" | sed 's/^/  - /'
  echo
  echo "Mean latency per run (ms), tandem \`bench --devices cuda:0,cpu\` (FP16: TANDEM_CUDA_PRECISION=fp16,"
  echo "float32 tensors with half-precision tensor-core products) against PyTorch eager on the same"
  echo "GPU (FP16: model.half()). Ratio = tandem / PyTorch (below 1: tandem faster)."
  echo
  echo "| model | precision | batch | tandem ms | PyTorch ms | ratio |"
  echo "|---|---|---|---|---|---|"
  printf "%s" "$bench_rows"
  echo
  echo "Failed steps: ${failed:-none}"
} > "$results"
say "gpu-check: results in $results (at $(elapsed)s)"
cat "$results"
[ -z "$failed" ]
