#!/bin/sh
# Groups crashing inputs by their first report: replays each file once and prints
# "<count> <kind> at <file:line> <- <first tandem frame>  e.g. <one input>".
#   tests/fuzz/triage.sh BIN FILE_OR_DIR...
# With TRIAGE_UB_ALL=1, UBSan does not halt and every UB site an input reaches is listed.
set -u
bin="$1"
shift
here="$(cd "$(dirname "$0")" && pwd)"
halt=1
[ "${TRIAGE_UB_ALL:-0}" = 1 ] && halt=0
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=$halt:suppressions=$here/ubsan.supp"
tmp="$(mktemp)"
for arg in "$@"; do
    if [ -d "$arg" ]; then find "$arg" -maxdepth 1 -type f; else echo "$arg"; fi
done | while read -r f; do
    out="$(timeout 60 "$bin" -timeout=30 -rss_limit_mb=3072 -malloc_limit_mb=1024 "$f" 2>&1)"
    [ $? -eq 0 ] && [ "$halt" = 1 ] && { echo "passes alone |  |  | $f" >> "$tmp"; continue; }
    echo "$out" | awk -v f="$f" '
        /runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|ERROR: libFuzzer|blocks leaked|malformed status|deadly signal/ && !kind {
            kind = $0
            sub(/.*(runtime error: |ERROR: )/, "", kind)
            sub(/ on address.*/, "", kind)
            gsub(/[0-9]+/, "N", kind)
            if (match($0, /\/src\/[^: ]*:[0-9]+/)) where = substr($0, RSTART, RLENGTH)
            next
        }
        kind && !frame && /#[0-9]+ .* in .*\/(src|tests)\// {
            if (match($0, / in [^ ]+/)) fn = substr($0, RSTART + 4, RLENGTH - 4)
            if (match($0, /\/(src|tests)\/[^: ]*:[0-9]+/)) loc = substr($0, RSTART, RLENGTH)
            frame = fn " " loc
            if (!where) where = loc
        }
        kind && /runtime error:/ && !/^ / { if (0) print }
        END { if (kind) printf "%s | %s | %s | %s\n", kind, where, frame, f }
    ' >> "$tmp"
done
sort -t'|' -k1,3 "$tmp" | awk -F' [|] ' '{ key = $1 " | " $2 " | " $3; n[key]++; if (!(key in ex)) ex[key] = $4 }
    END { for (k in n) printf "%4d  %s  e.g. %s\n", n[k], k, ex[k] }' | sort -rn
rm -f "$tmp"
