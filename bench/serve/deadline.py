#!/usr/bin/env python3
"""How fast `tandem serve` gives up on work nobody can use any more:

  - deadlines while a run goes on: a request with a "timeout" parameter on a slow model (96
    MatMuls of N x N, one instance, nothing else queued) is answered 503 "Request timeout
    expired"; reported: the answer's time after the deadline (client side: from the start of
    the upload to the answer, minus the timeout; so it includes the upload and parsing of the
    N*N*4-byte body and the MatMul that was running when the deadline passed), next to the
    time of a full run and of one MatMul;
  - clients that go away: a request queued behind a running one whose client closes its
    socket; reported: the time from the close until /metrics counts it dropped
    (tandem_request_cancelled_total{reason="disconnect"}; the batcher sweeps every 100 ms, and
    the figure includes the /metrics polling).

    .venv/bin/python bench/serve/deadline.py --tandem build/tandem [--n 960] [--reps 5]

Needs numpy, onnx and tritonclient (the repository's .venv has them); uses the helpers of
tests/server/test_server.py. The machine may be shared: the figures are wall-clock.
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "server"))
import test_server as T  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--n", type=int, default=960)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeouts", default="50,100,200,400", help="ms")
    a = ap.parse_args()
    repo = tempfile.mkdtemp(prefix="tandem-deadline-")
    T.save(repo, "slow", T.slow_model(96), "max_batch_size: 1\ndynamic_batching { }\n"
           "instance_group { count: 1 kind: KIND_CPU }\n")
    s = T.Server(a.tandem, repo)
    try:
        T.slow_raw(s, "slow", a.n)  # warm-up
        full = []
        for _ in range(3):
            t0 = time.time()
            st, _ = T.slow_raw(s, "slow", a.n)
            assert st == 200, st
            full.append(time.time() - t0)
        run = statistics.median(full) * 1000
        print(f"full run of 96 MatMuls {a.n}x{a.n}: {run:.0f} ms (median of 3), {run / 96:.1f} ms a MatMul")
        print("timeout ms | answered after the deadline, ms: min / median / max (n)")
        for to in (int(x) for x in a.timeouts.split(",")):
            late = []
            for _ in range(a.reps):
                t0 = time.time()
                st, body = T.slow_raw(s, "slow", a.n, {"timeout": to * 1000}, body=True)
                dt = time.time() - t0
                assert st == 503 and T.error_of(body) == "Request timeout expired", (st, body[:200])
                late.append(dt * 1000 - to)
            print(f"{to:10d} | {min(late):.1f} / {statistics.median(late):.1f} / {max(late):.1f} ({len(late)})")
        drops = []
        for _ in range(a.reps):
            gone0 = T.metric_value(s, "tandem_request_cancelled_total", model="slow", reason="disconnect")
            busy = T.Call(s, "slow", a.n)
            assert T.wait_pending(s, "slow", 1)
            data, headers = T.slow_body(a.n)
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            c.sendall(f"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
                      f"{head}\r\n".encode() + data)
            assert T.wait_pending(s, "slow", 2)
            t0 = time.time()
            c.close()
            while T.metric_value(s, "tandem_request_cancelled_total", model="slow", reason="disconnect") == gone0:
                if time.time() - t0 > 30:
                    raise AssertionError("the closed request was not dropped")
                time.sleep(0.002)
            drops.append((time.time() - t0) * 1000)
            assert busy.result()[0] == 200
        print(f"client closed -> dropped (seen in /metrics), ms: min {min(drops):.1f} / median "
              f"{statistics.median(drops):.1f} / max {max(drops):.1f} ({len(drops)})")
    finally:
        s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
