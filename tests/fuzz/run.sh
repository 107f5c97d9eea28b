#!/bin/sh
# Fuzzes each target for a bounded time under ASan+UBSan, one after the other.
#
#   tests/fuzz/run.sh [-t SECONDS] [-b BUILD_DIR] [TARGET...]
#
# SECONDS per target (default 60, or $FUZZ_SECONDS); BUILD_DIR (default build-fuzz) is
# configured and built here if needed: cmake -DCMAKE_C_COMPILER=clang -DTANDEM_FUZZ=ON.
# TARGETs default to all (fuzz_model fuzz_tensor fuzz_wire fuzz_infer_json fuzz_infer_binary
# fuzz_config fuzz_tokenizer fuzz_chat_template fuzz_openai fuzz_openai_text fuzz_llm).
#
# New interesting inputs go to a scratch corpus (BUILD_DIR/fuzz-work/TARGET), which starts
# from the seeds in tests/fuzz/corpus/TARGET; the seeds are never modified. Crashes, leaks
# and out-of-memory reports are copied to tests/fuzz/regressions/TARGET/ (replayed by the
# fuzz_replay ctest), replayed once to print the sanitizer's report (its first lines), and
# make the script fail; timeouts (an input running longer than
# $FUZZ_TIMEOUT seconds, default 10) go to tests/fuzz/regressions/TARGET/slow/ and only
# fail the script with FUZZ_FAIL_ON_TIMEOUT=1. libFuzzer runs in fork mode (one worker) so
# that fuzzing goes on after a crash or a timeout and one run can find several problems.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${FUZZ_SECONDS:-60}"
build="$root/build-fuzz"
while getopts "t:b:h" opt; do
    case "$opt" in
    t) seconds="$OPTARG" ;;
    b) build="$(cd "$OPTARG" 2>/dev/null && pwd || echo "$OPTARG")" ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
targets="${*:-fuzz_model fuzz_tensor fuzz_wire fuzz_infer_json fuzz_infer_binary fuzz_config fuzz_tokenizer fuzz_chat_template fuzz_openai fuzz_openai_text fuzz_llm}"
timeout_s="${FUZZ_TIMEOUT:-10}"

if [ ! -x "$build/tests/fuzz/fuzz_model" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTANDEM_FUZZ=ON -DTANDEM_TESTS=OFF > /dev/null || exit 1
fi
cmake --build "$build" -j"${FUZZ_BUILD_JOBS:-2}" --target $targets > /dev/null || exit 1

max_len_of() {
    case "$1" in
    fuzz_model | fuzz_llm) echo 300000 ;;
    fuzz_tensor) echo 4096 ;;
    *) echo 65536 ;;
    esac
}

# libFuzzer dictionaries of the server targets (tokens of the formats they read)
dict_of() {
    case "$1" in
    fuzz_infer_json | fuzz_infer_binary) echo "-dict=$here/kserve.dict" ;;
    fuzz_config) echo "-dict=$here/pbtxt.dict" ;;
    fuzz_chat_template) echo "-dict=$here/jinja.dict" ;;
    fuzz_openai) echo "-dict=$here/openai.dict" ;;
    esac
}

export TDM_FUZZ_SKIP_ARITY="${TDM_FUZZ_SKIP_ARITY:-0}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$here/ubsan.supp}"
failed=0
for t in $targets; do
    bin="$build/tests/fuzz/$t"
    work="$build/fuzz-work/$t"
    art="$build/fuzz-artifacts/$t"
    mkdir -p "$work" "$art" "$here/corpus/$t"
    log="$build/fuzz-$t.log"
    echo "== $t: ${seconds}s (log: $log)"
    "$bin" "$work" "$here/corpus/$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -max_total_time="$seconds" -max_len="$(max_len_of "$t")" -timeout="$timeout_s" $(dict_of "$t") \
        -rss_limit_mb=3072 -malloc_limit_mb=1024 -artifact_prefix="$art/" > "$log" 2>&1
    rc=$?
    execs="$(sed -n 's/^#\([0-9]*\): cov.*/\1/p' "$log" | tail -1)"
    echo "   exit $rc, ${execs:-?} executions, corpus $(ls "$work" | wc -l) inputs"
    for f in "$art"/*; do
        [ -f "$f" ] || continue
        base="$(basename "$f")"
        case "$base" in
        timeout-* | slow-unit-*)
            mkdir -p "$here/regressions/$t/slow"
            cp "$f" "$here/regressions/$t/slow/$base"
            echo "   SLOW INPUT: tests/fuzz/regressions/$t/slow/$base"
            [ "${FUZZ_FAIL_ON_TIMEOUT:-0}" = 1 ] && failed=1
            ;;
        *)
            mkdir -p "$here/regressions/$t"
            cp "$f" "$here/regressions/$t/$base"
            echo "   CRASH: tests/fuzz/regressions/$t/$base"
            # the report itself (fork mode keeps only the input): replayed once so that a CI
            # log says what failed and where even when the checkout with the input is gone
            "$bin" -rss_limit_mb=3072 -malloc_limit_mb=1024 -timeout="$timeout_s" \
                "$here/regressions/$t/$base" 2>&1 |
                grep -E -m 12 'runtime error|ERROR: |SUMMARY|^ +#[0-9] ' | sed 's/^/     /'
            failed=1
            ;;
        esac
        rm -f "$f"
    done
    if [ "$rc" -ne 0 ] && [ "$failed" = 0 ]; then
        tail -40 "$log"
        failed=1
    fi
done
exit $failed
