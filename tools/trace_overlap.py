#!/usr/bin/env python3
"""How much of the copy time in a tandem Chrome trace overlaps kernel execution.

    tools/trace_overlap.py TRACE.json [--json]

Reads a trace written by `tandem run|bench ... --trace FILE` (or tdm_session_trace_stop) and
prints, per device that copies, the number of copies and their bytes, the copy time, the part of
that time during which a kernel ran (on the same device's queue, on another device's queue, on
any), and the overlap fraction = overlapped copy time / copy time. The row `all` takes the copies
of every device together.

What counts (src/sched/executor*.c, src/core/trace.c): complete events ("ph": "X") with
category "copy" are copies, their device the side of "from"/"to" that is not "host" (else the
track name without " copies"); complete events whose args name an "op" are kernels, their device
args "device" (else the track name). Runs, waits and flow arrows are neither. Copy time is the
length of the union of a device's copy intervals (copies on one queue that overlap each other
count once); `copy_sum_ms` is the plain sum of their durations.

How tandem records them: a kernel's span ends after its device synchronised (tracing on), so it
is the kernel's execution; a blocking copy's span is the host call; an asynchronous download's
span runs from its issue to the moment its reader saw it done, an upper bound of the transfer.

Standard library only (json, argparse). Exit status 0, or 2 when the trace cannot be read.
"""
import argparse
import json
import sys

NOT_KERNELS = {"copy", "run", "wait", "flow"}


class TraceError(Exception):
    pass


def union(intervals):
    """Sorted, disjoint intervals covering the given (start, end) pairs."""
    out = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def length(u):
    return sum(e - s for s, e in u)


def intersection_length(a, b):
    """Length of the intersection of two unions (each sorted and disjoint)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def load_events(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from exc
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list")
    return events


def classify(events):
    """Returns (copies, kernels): lists of dicts with device, start, end (µs) and bytes."""
    tracks = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name":
            tracks[(e.get("pid"), e.get("tid"))] = str((e.get("args") or {}).get("name", ""))
    copies, kernels = [], []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            start = float(e["ts"])
            end = start + float(e.get("dur", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"an event without a numeric ts/dur: {e!r}") from exc
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        track = tracks.get((e.get("pid"), e.get("tid")), "")
        cat = e.get("cat", "")
        if cat == "copy":
            dev = None
            for side in (args.get("from"), args.get("to")):
                if side and side != "host":
                    dev = str(side)
                    break
            if dev is None:
                dev = track[: -len(" copies")] if track.endswith(" copies") else (track or "?")
            nbytes = args.get("bytes", 0)
            copies.append({"device": dev, "start": start, "end": end,
                           "bytes": nbytes if isinstance(nbytes, int) else 0})
        elif "op" in args and cat not in NOT_KERNELS:
            kernels.append({"device": str(args.get("device") or track or "?"), "start": start, "end": end})
    return copies, kernels


def row(name, copies, kern_same, kern_other, kern_any):
    cu = union((c["start"], c["end"]) for c in copies)
    copy_us = length(cu)
    over_any = intersection_length(cu, kern_any)
    return {
        "device": name,
        "copies": len(copies),
        "bytes": sum(c["bytes"] for c in copies),
        "copy_ms": copy_us / 1e3,
        "copy_sum_ms": sum(c["end"] - c["start"] for c in copies) / 1e3,
        "overlap_ms": over_any / 1e3,
        "overlap_same_device_ms": intersection_length(cu, kern_same) / 1e3 if kern_same is not None else None,
        "overlap_other_devices_ms": intersection_length(cu, kern_other) / 1e3 if kern_other is not None else None,
        "fraction": over_any / copy_us if copy_us > 0 else None,
    }


def analyse(events):
    copies, kernels = classify(events)
    devices = sorted({c["device"] for c in copies})
    kern_any = union((k["start"], k["end"]) for k in kernels)
    rows = []
    for d in devices:
        same = union((k["start"], k["end"]) for k in kernels if k["device"] == d)
        other = union((k["start"], k["end"]) for k in kernels if k["device"] != d)
        rows.append(row(d, [c for c in copies if c["device"] == d], same, other, kern_any))
    return {
        "kernels": len(kernels),
        "kernel_devices": sorted({k["device"] for k in kernels}),
        "kernel_ms": length(kern_any) / 1e3,
        "devices": rows,
        "all": row("all", copies, None, None, kern_any),
    }


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def text(result):
    lines = [f"{'device':<12} {'copies':>7} {'bytes':>12} {'copy ms':>10} {'overlap ms':>11} "
             f"{'same dev':>9} {'other dev':>10} {'fraction':>9}"]
    for r in result["devices"] + [result["all"]]:
        lines.append(f"{r['device']:<12} {r['copies']:>7} {r['bytes']:>12} {r['copy_ms']:>10.3f} "
                     f"{r['overlap_ms']:>11.3f} {fmt(r['overlap_same_device_ms'], '9.3f'):>9} "
                     f"{fmt(r['overlap_other_devices_ms'], '10.3f'):>10} {fmt(r['fraction'], '9.3f'):>9}")
    lines.append(f"kernels: {result['kernels']} on {', '.join(result['kernel_devices']) or 'no device'}, "
                 f"{result['kernel_ms']:.3f} ms of kernel time (union)")
    if not result["all"]["copies"]:
        lines.append("no copies in this trace: nothing to overlap")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="Chrome trace JSON written by tandem --trace")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    try:
        result = analyse(load_events(a.trace))
    except TraceError as exc:
        print(f"trace_overlap: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if a.json else text(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
