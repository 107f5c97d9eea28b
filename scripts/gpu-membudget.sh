#!/bin/sh
# Issue 21 on a GPU (step 10 of scripts/gpu-check.sh, or alone): a model bigger than the
# accelerator's budget. Runs from the repository root:
#
#   scripts/gpu-membudget.sh TANDEM OUTDIR [SECONDS]      (SECONDS: the step's budget, default 180)
#
#   a. tools/make_big_llama.py writes a random-weight Llama-style model (optimum form, float32,
#      external data) of MEMBUDGET_GB GB (default 8: 11 Llama-2-7B-sized layers) in /dev/shm
#      when it has room for twice that, else /tmp (MEMBUDGET_DIR overrides; kept for a rerun);
#      needs python3 with numpy and onnx, no network
#   b. the pinned H2D peak: cudaMemcpyAsync of 256 MiB from cudaHostAlloc memory on a stream,
#      through libcudart with ctypes (and pageable memory for comparison); skipped when the
#      device is not cuda:N or libcudart cannot be loaded
#   c. `tandem bench DIR --llm --prompt-tokens 0 --gen-tokens T` (decode tokens/s, bytes
#      uploaded per token, device peak) with the decoder on DEV: all resident (no budget),
#      `--device-memory DEV=BUDGET --residency streamed`, `... --residency layers` (the layers
#      that fit on DEV, the rest on the CPU: llama.cpp's -ngl), and the cost model's choice
#   d. a trace of the streamed plan (`tandem bench DIR/model.onnx` with one decode step's
#      shapes, --trace) read by tools/trace_overlap.py: copy time and the part overlapping
#      kernels on DEV
#   e. the KV cache placement under the budget: `tandem generate DIR --device DEV
#      --device-memory DEV=BUDGET --max-length 256 --json` (where each layer's cache lives:
#      on DEV, in host memory copied each token, or with its attention on the CPU; the KV
#      bytes copied per decoded token, measured by the monitor, against the plan's prediction)
#
# H2D achieved = the streamed run's bytes uploaded per token x its tokens/s (decode is bound
# by the uploads: 6+ GB per token against milliseconds of kernels), against the pinned peak
# (target >= 80%); overlap from the trace (target >= 90%). Writes OUTDIR/membudget.md (the
# table) and appends to OUTDIR/gpu-check.log; traces to OUTDIR/trace-membudget.json.
# MEMBUDGET_DEV (default cuda:0), MEMBUDGET_BUDGET (2GiB), MEMBUDGET_TOKENS (8) and
# MEMBUDGET_GB change the set-up; a dry run on a machine without a GPU:
#   TANDEM_TEST_DEVICES=1 MEMBUDGET_DEV=test:0 MEMBUDGET_GB=0.05 MEMBUDGET_BUDGET=25% \
#     MEMBUDGET_SMALL=1 scripts/gpu-membudget.sh build/tandem /tmp/mb 120
# (MEMBUDGET_SMALL=1: hidden 256, ffn 512, so the small size still has layers to fit).
# Exit status 0 when every run worked, 1 when one failed, 2 when the model could not be made.
tandem="$1"; outdir="$2"; secs="${3:-180}"
[ -n "$tandem" ] && [ -n "$outdir" ] || { echo "usage: $0 TANDEM OUTDIR [SECONDS]" >&2; exit 2; }
dev="${MEMBUDGET_DEV:-cuda:0}"
mbudget="${MEMBUDGET_BUDGET:-2GiB}"
tokens="${MEMBUDGET_TOKENS:-8}"
gb="${MEMBUDGET_GB:-8}"
py="${PYTHON:-python3}"
mkdir -p "$outdir"
log="$outdir/gpu-check.log"
md="$outdir/membudget.md"
work="${TMPDIR:-/tmp}/tandem-membudget.$$"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
left() { echo $((secs - ($(date +%s) - t0))); }
# lim N: N seconds or what is left (less 5), at least 1
lim() { c=$(($(left) - 5)); [ $c -lt 1 ] && c=1; [ "$1" -lt $c ] && c=$1; echo $c; }
say() { echo "$*" | tee -a "$log"; }
notes=""
note() { notes="$notes
- $*"; say "membudget: $*"; }
bad=0

# ---- a. the model ----
small=""
[ "${MEMBUDGET_SMALL:-0}" = 1 ] && small="--hidden 256 --heads 8 --kv-heads 2 --ffn 512"
# in memory (/dev/shm) when it has room for twice the model: no disk writes, fast loads
base=/tmp
shm_kb=$(df -Pk /dev/shm 2> /dev/null | awk 'NR == 2 { print $4 }')
need_kb=$(awk -v g="$gb" 'BEGIN { printf "%d", g * 2 * 1e6 }')
[ -n "$shm_kb" ] && [ "$shm_kb" -gt "$need_kb" ] && base=/dev/shm
model="${MEMBUDGET_DIR:-$base/tandem-bigllama-$gb${small:+-small}}"
if [ ! -f "$model/model.onnx" ]; then
  say "membudget: writing a ${gb} GB model to $model (at $(($(date +%s) - t0))s)"
  rm -rf "$model.part"
  if ! timeout "$(lim 90)" "$py" tools/make_big_llama.py "$model.part" --gb "$gb" $small >> "$log" 2>&1; then
    say "membudget: could not write the model (python3 with numpy and onnx?); see the log"
    printf '## 10. Models bigger than the accelerator (issue 21)\n\nNot run: the model could not be written.\n' > "$md"
    exit 2
  fi
  mv "$model.part" "$model"
fi
wbytes=$(stat -c %s "$model/model.onnx.data")
say "membudget: model $model, $wbytes B of weights (at $(($(date +%s) - t0))s)"

# ---- b. the pinned H2D peak ----
peak="-"; pageable="-"
case "$dev" in
cuda:*)
  ord="${dev#cuda:}"
  if timeout "$(lim 30)" "$py" - "$ord" > "$work/h2d.txt" 2>> "$log" << 'EOF'
import ctypes, ctypes.util, sys, time
names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")]
rt = None
for n in names:
    try:
        rt = ctypes.CDLL(n) if n else None
    except OSError:
        rt = None
    if rt:
        break
if not rt:
    sys.exit("no libcudart")
def ck(e, what):
    if e:
        sys.exit("%s failed: cuda error %d" % (what, e))
ck(rt.cudaSetDevice(int(sys.argv[1])), "cudaSetDevice")
size = 256 << 20
dptr, hpin, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
ck(rt.cudaMalloc(ctypes.byref(dptr), ctypes.c_size_t(size)), "cudaMalloc")
ck(rt.cudaHostAlloc(ctypes.byref(hpin), ctypes.c_size_t(size), 0), "cudaHostAlloc")
ctypes.memset(hpin, 1, size)
ck(rt.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
def rate(src, reps):
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        ck(rt.cudaMemcpyAsync(dptr, src, ctypes.c_size_t(size), 1, stream), "cudaMemcpyAsync")
        ck(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        best = max(best, size / (time.perf_counter() - t))
    return best
rate(hpin, 2)
pin = rate(hpin, 8)
buf = ctypes.create_string_buffer(size)
page = rate(buf, 3)
print("%.2f %.2f" % (pin / 1e9, page / 1e9))
EOF
  then
    read -r peak pageable < "$work/h2d.txt"
    say "membudget: H2D peak pinned $peak GB/s, pageable $pageable GB/s"
  else
    note "H2D peak not measured: $(tail -n 1 "$log")"
  fi ;;
*) note "H2D peak not measured: $dev is not a CUDA device" ;;
esac

# ---- c. decode under the budget ----
rows=""
streamed_up="-"; streamed_pin="-"; streamed_tps="-"; resident_tps="-"; layers_tps="-"
# run WHAT ARGS...: one bench --llm; sets r_tps r_up r_pin r_peak
run() {
  what="$1"; shift
  r_tps="-"; r_up="-"; r_pin="-"; r_peak="-"
  if [ "$(left)" -lt 15 ]; then
    note "$what: not run (the step's ${secs}s are spent)"
    rows="$rows| $what | - | - | - | - | not run |
"
    return 1
  fi
  timeout "$(lim 60)" "$tandem" bench "$model" --llm --prompt-tokens 0 --gen-tokens "$tokens" \
    --repetitions 1 --warmup 1 --json --device "$dev" "$@" > "$work/b.json" 2> "$work/b.err"
  rc=$?
  cat "$work/b.err" >> "$log"
  if [ $rc -ne 0 ]; then
    bad=1
    note "$what failed (exit $rc): $(grep -v '^ *$' "$work/b.err" | tail -n 1)"
    rows="$rows| $what | - | - | - | - | failed |
"
    return 1
  fi
  set -- $("$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("%.3f %.0f %.0f %d" % (d["tg"]["tokens_per_s"]["mean"], d.get("bytes_uploaded_per_token", 0),
                             d.get("bytes_uploaded_pinned_per_token", 0), d.get("device_peak_bytes", 0)))' \
        "$work/b.json" 2>> "$log")
  r_tps="${1:--}"; r_up="${2:--}"; r_pin="${3:--}"; r_peak="${4:--}"
  rows="$rows| $what | $r_tps | $r_up | $r_pin | $r_peak | ok |
"
  say "membudget: $what: $r_tps tokens/s, $r_up B uploaded per token ($r_pin B pinned), peak $r_peak B"
}
run "all resident (no budget)" && resident_tps="$r_tps"
run "$dev=$mbudget streamed" --device-memory "$dev=$mbudget" --residency streamed && {
  streamed_tps="$r_tps"; streamed_up="$r_up"; streamed_pin="$r_pin"; }
run "$dev=$mbudget layers (rest on the CPU)" --device-memory "$dev=$mbudget" --residency layers &&
  layers_tps="$r_tps"
run "$dev=$mbudget auto (cost model)" --device-memory "$dev=$mbudget"
timeout "$(lim 30)" "$tandem" plan "$model/model.onnx" --devices "$dev,cpu" --placement "$dev" \
  --device-memory "$dev=$mbudget" --json > "$work/plan.json" 2>> "$log" &&
  reason="$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["budget"]["reason"])' "$work/plan.json" 2>> "$log")"
achieved="$(awk -v u="$streamed_up" -v t="$streamed_tps" 'BEGIN { if (u + 0 == u && t + 0 == t) printf "%.2f", u * t / 1e9; else printf "-" }')"
share="$(awk -v a="$achieved" -v p="$peak" 'BEGIN { if (a + 0 == a && p + 0 == p && p > 0) printf "%.0f%%", 100 * a / p; else printf "-" }')"

# ---- d. the streamed plan's trace ----
ov="-"; ovrow=""
if [ "$(left)" -ge 20 ]; then
  # one decode step's shapes: 1 new token after 1 cached (dynamic dims are 1), random inputs
  timeout "$(lim 60)" "$tandem" bench "$model/model.onnx" --devices "$dev,cpu" --placement "$dev" \
    --device-memory "$dev=$mbudget" --residency streamed --shape attention_mask:1,2 \
    --iterations 2 --warmup 1 --trace "$outdir/trace-membudget.json" >> "$log" 2>&1 || {
      bad=1; note "trace run failed: $(tail -n 1 "$log")"; }
  if [ -s "$outdir/trace-membudget.json" ] &&
     "$py" tools/trace_overlap.py "$outdir/trace-membudget.json" --json > "$work/ov.json" 2>> "$log"; then
    ovrow="$("$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
for r in d["devices"]:
    if r["device"] == sys.argv[2]:
        f = "-" if r["fraction"] is None else "%.3f" % r["fraction"]
        print("%d copies, %.1f MB, copy time %.2f ms, overlapped %.2f ms: fraction %s" % (r["copies"],
              r["bytes"] / 1e6, r["copy_ms"], r["overlap_ms"], f))' "$work/ov.json" "$dev" 2>> "$log")"
    ov="${ovrow:-no copies on $dev}"
  fi
else
  note "trace: not run (the step's ${secs}s are spent)"
fi

# ---- e. the KV cache placement ----
kvrow="not run"
if [ "$(left)" -ge 25 ]; then
  if timeout "$(lim 60)" "$tandem" generate "$model" --prompt-ids 1,2,3,4 --max-tokens "$tokens" \
       --max-length 256 --ignore-eos --temperature 0 --json --device "$dev" \
       --device-memory "$dev=$mbudget" > "$work/kv.json" 2>> "$log"; then
    kvrow="$("$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
k = d.get("kv_placement") or {}
dv = [x for x in d["devices"] if x["device"] == sys.argv[2]][0]
n = max(dv["decode_tokens"], 1)
places = {}
for l in k.get("layers", []):
    places[l["place"]] = places.get(l["place"], 0) + 1
print("%s; KV bytes copied per decoded token: %.0f up / %.0f down measured, %d / %d predicted%s; %s" % (
      ", ".join("%d layers %s" % (v, p) for p, v in places.items()) or "none reported",
      dv["decode_kv_bytes_uploaded"] / n, dv["decode_kv_bytes_downloaded"] / n,
      k.get("bytes_uploaded_per_token", 0), k.get("bytes_downloaded_per_token", 0),
      " (fed back: at the full context)" if k.get("fed_back") else "", k.get("reason", "")))' \
      "$work/kv.json" "$dev" 2>> "$log")"
    say "membudget: KV cache: $kvrow"
  else
    bad=1; kvrow="failed: $(tail -n 1 "$log")"; note "KV placement run $kvrow"
  fi
else
  note "KV placement: not run (the step's ${secs}s are spent)"
fi

{
  echo "## 10. Models bigger than the accelerator (issue 21)"
  echo
  echo "Random-weight Llama-style model (tools/make_big_llama.py, optimum form, float32): $wbytes B of"
  echo "weights. \`tandem bench $model --llm --prompt-tokens 0 --gen-tokens $tokens --repetitions 1"
  echo "--warmup 1 --device $dev [--device-memory $dev=$mbudget --residency R]\`. Decode tokens/s"
  echo "(tg), bytes uploaded per decoded token, the device's monitor peak."
  echo
  echo "| run | tokens/s | uploaded B/token | of which pinned | device peak B | |"
  echo "|---|---:|---:|---:|---:|---|"
  printf "%s" "$rows"
  echo
  echo "- streamed / all resident: $(awk -v a="$streamed_tps" -v b="$resident_tps" 'BEGIN { if (a + 0 == a && b + 0 == b && b > 0) printf "%.3f", a / b; else printf "-" }');"
  echo "  streamed / layers on the CPU: $(awk -v a="$streamed_tps" -v b="$layers_tps" 'BEGIN { if (a + 0 == a && b + 0 == b && b > 0) printf "%.2f", a / b; else printf "-" }')"
  echo "- H2D achieved (streamed bytes per token x tokens/s; $streamed_pin B/token of it from registered"
  echo "  (pinned) memory): $achieved GB/s; pinned cudaMemcpyAsync peak"
  echo "  $peak GB/s (pageable $pageable GB/s): $share of the peak (target >= 80%)"
  echo "- copy/compute overlap in the streamed plan's trace (one decode step, tools/trace_overlap.py,"
  echo "  target >= 90%): $ov"
  echo "- the cost model's choice (tandem plan): ${reason:--}"
  echo "- KV cache placement at $dev=$mbudget (generate --max-length 256): $kvrow"
  echo "- notes: ${notes:-none}"
} > "$md"
say "membudget: results in $md (at $(($(date +%s) - t0))s)"
exit $bad
