#!/usr/bin/env python3
"""A small closed-loop load generator for KServe v2 servers (tandem serve, Triton).

Each of C workers keeps one HTTP/1.1 keep-alive connection (asyncio streams, no third-party
packages) and sends the same pre-built binary-tensor inference request again and again, for a
fixed time after a warm-up. Reports requests/s and latency percentiles.

    loadgen.py --url 127.0.0.1:8000 --model resnet --input input:FP32:1,3,64,64 \
               --concurrency 1,4,16 --duration 5

Only loopback targets are accepted.
"""
import argparse
import asyncio
import json
import sys
import time

import numpy as np

DTYPES = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "INT32": np.int32,
          "INT64": np.int64, "UINT8": np.uint8, "INT8": np.int8, "BOOL": np.bool_}


def build_request(host, model, inputs, outputs, seed=0):
    """inputs: [(name, datatype, shape)]. Returns the raw HTTP request bytes."""
    rng = np.random.default_rng(seed)
    head = {"inputs": [], "parameters": {"binary_data_output": True}}
    blobs = []
    for name, dt, shape in inputs:
        arr = rng.standard_normal(shape).astype(DTYPES[dt]) if dt.startswith("FP") else \
            rng.integers(0, 10, shape).astype(DTYPES[dt])
        b = arr.tobytes()
        blobs.append(b)
        head["inputs"].append({"name": name, "datatype": dt, "shape": list(shape),
                               "parameters": {"binary_data_size": len(b)}})
    if outputs:
        head["outputs"] = [{"name": o, "parameters": {"binary_data": True}} for o in outputs]
    hj = json.dumps(head).encode()
    body = hj + b"".join(blobs)
    return (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: {len(hj)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return status


async def worker(host, port, request, stop_at, record_from, lat, errors, sent):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                break
            writer.write(request)
            status = await read_response(reader)
            t1 = time.perf_counter()
            sent[0] += 1
            if t0 >= record_from:
                if status == 200:
                    lat.append(t1 - t0)
                else:
                    errors.append(status)
    finally:
        writer.close()


async def run_level(host, port, request, concurrency, duration, warmup):
    lat, errors, sent = [], [], [0]
    start = time.perf_counter()
    record_from = start + warmup
    stop_at = record_from + duration
    await asyncio.gather(*[worker(host, port, request, stop_at, record_from, lat, errors, sent)
                           for _ in range(concurrency)])
    return lat, errors, sent[0]


def summarize(lat, errors, duration, sent):
    a = np.array(lat) * 1e3 if lat else np.array([np.nan])
    return {"qps": len(lat) / duration, "p50_ms": float(np.percentile(a, 50)),
            "p90_ms": float(np.percentile(a, 90)), "p99_ms": float(np.percentile(a, 99)),
            "mean_ms": float(np.mean(a)), "requests": len(lat), "errors": len(errors),
            "all_requests": sent}


def measure(url, model, inputs, outputs, concurrencies, duration, warmup):
    host, port = url.rsplit(":", 1)
    if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
        raise SystemExit("loadgen: only loopback targets are allowed")
    request = build_request(host, model, inputs, outputs)
    results = {}
    for c in concurrencies:
        lat, errors, sent = asyncio.run(run_level(host, int(port), request, c, duration, warmup))
        results[c] = summarize(lat, errors, duration, sent)
    return results


def parse_input(s):
    name, dt, shape = s.split(":")
    return name, dt, [int(x) for x in shape.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="host:port (loopback only)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", action="append", required=True, help="NAME:DATATYPE:d0,d1,...")
    ap.add_argument("--output", action="append", default=[])
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds measured per level")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = measure(a.url, a.model, [parse_input(s) for s in a.input], a.output,
                  [int(c) for c in a.concurrency.split(",")], a.duration, a.warmup)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{'conc':>5} {'qps':>9} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for c, r in res.items():
        print(f"{c:>5} {r['qps']:>9.1f} {r['p50_ms']:>8.2f} {r['p90_ms']:>8.2f} {r['p99_ms']:>8.2f} "
              f"{r['errors']:>6}")


if __name__ == "__main__":
    sys.exit(main())
