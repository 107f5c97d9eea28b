#!/bin/sh
# CLI behaviour: help on every command, clear failures with non-zero exit, run/inspect on the
# bundled model. Usage: test_cli.sh TANDEM SOURCE_DIR
T="$1"
SRC="$2"
fails=0
passes=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect() { # expect NAME EXIT_CODE_PREDICATE(0|nonzero) PATTERN CMD...
  name=$1; want=$2; pat=$3; shift 3
  "$@" > "$tmp/out" 2>&1
  rc=$?
  ok=1
  if [ "$want" = 0 ] && [ $rc -ne 0 ]; then ok=0; fi
  if [ "$want" = nonzero ] && [ $rc -eq 0 ]; then ok=0; fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" "$tmp/out"; then ok=0; fi
  if [ $ok = 1 ]; then passes=$((passes + 1)); else
    fails=$((fails + 1)); echo "FAIL $name (exit $rc)"; sed 's/^/    /' "$tmp/out" | head -20
  fi
}

M="$SRC/models/default/model.onnx"
expect version 0 "tandem 0" "$T" --version
expect help 0 "usage" "$T" --help
for c in run inspect conformance devices; do
  expect "help-$c" 0 "usage" "$T" $c --help
done
expect no-args nonzero "usage" "$T"
expect unknown-command nonzero "unknown command" "$T" frobnicate
expect run-no-model nonzero "usage" "$T" run
expect run-missing-file nonzero "cannot open" "$T" run "$tmp/nope.onnx" --random
expect run-unknown-option nonzero "unknown option" "$T" run "$M" --bogus
expect run-garbage nonzero "invalid model" sh -c "head -c 64 /dev/urandom > $tmp/g.onnx; \"$T\" run $tmp/g.onnx --random"
expect run-missing-input nonzero "was not given" "$T" run "$M"
expect run-bad-device nonzero "not available" "$T" run "$M" --random --devices cuda:7
expect run-default 0 "probabilities: float32 \[1,10\]" "$T" run "$M" --input "input=$SRC/models/default/input.npy" --output-dir "$tmp/o"
expect run-wrote-npy 0 "" test -s "$tmp/o/probabilities.npy"
expect run-random 0 "float32" "$T" run "$M" --random --threads 1
expect run-bad-npy nonzero "not a .npy" sh -c "echo hello > $tmp/x.npy; \"$T\" run $M --input input=$tmp/x.npy"
expect inspect 0 "operators:" "$T" inspect "$M"
expect inspect-params 0 "parameters:" "$T" inspect "$M"
expect devices 0 "cpu" "$T" devices
expect conformance-line 0 "passed, 0 failed" "$T" conformance --filter '^test_relu$'
expect conformance-bad-dir nonzero "cannot open" "$T" conformance "$tmp/none"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
