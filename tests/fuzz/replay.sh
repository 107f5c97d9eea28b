#!/bin/sh
# Replays every seed (tests/fuzz/corpus/TARGET) and every saved crash
# (tests/fuzz/regressions/TARGET, not slow/) once through each fuzz target: the fuzz_replay
# ctest. Every input runs: after a failure the replay goes on with the next input, and all
# failing inputs are listed with their first report. Usage: replay.sh BIN_DIR [SOURCE_DIR]
set -u
bin_dir="$1"
here="${2:-$(cd "$(dirname "$0")" && pwd)}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$here/ubsan.supp}"
failed=0
for t in fuzz_model fuzz_tensor fuzz_wire fuzz_infer_json fuzz_infer_binary fuzz_config fuzz_tokenizer \
    fuzz_chat_template fuzz_openai fuzz_openai_text fuzz_llm; do
    list="$(mktemp)"
    for d in "$here/corpus/$t" "$here/regressions/$t"; do
        [ -d "$d" ] && find "$d" -maxdepth 1 -type f ! -name '*.md' ! -name '.*' | sort >> "$list"
    done
    n="$(wc -l < "$list")"
    log="$bin_dir/replay-$t.log"
    : > "$log"
    bad=0
    while [ -s "$list" ]; do
        # shellcheck disable=SC2046
        if "$bin_dir/$t" -timeout=60 -rss_limit_mb=3072 -malloc_limit_mb=1024 $(cat "$list") \
            > "$log.part" 2>&1; then
            cat "$log.part" >> "$log"
            break
        fi
        cat "$log.part" >> "$log"
        culprit="$(sed -n 's/^Running: //p' "$log.part" | tail -1)"
        first="$(grep -m1 'runtime error:\|ERROR: \|blocks leaked\|malformed status' "$log.part")"
        echo "$t: FAILED on ${culprit:-?}"
        echo "    ${first:-(no report; see $log)}"
        bad=$((bad + 1))
        failed=1
        [ -n "$culprit" ] || break
        awk -v c="$culprit" 'f { print } $0 == c { f = 1 }' "$list" > "$list.next"
        mv "$list.next" "$list"
    done
    rm -f "$list" "$log.part"
    echo "$t: $n inputs, $bad failing (log: $log)"
done
exit $failed
