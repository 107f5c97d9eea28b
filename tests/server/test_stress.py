#!/usr/bin/env python3
"""Stress tests of `tandem serve` under hostile clients (loopback only, bounded in count and time).

Each test starts a server with small budgets and checks behaviour, not speed:
- idle_flood: 2,000 idle connections against --max-connections 300: the connections idle
  longest are closed first (a kept-alive one, then the oldest silent ones) and a new client is
  answered;
- slowloris: 300 clients that send a header line every 0.5 s are closed by --header-timeout
  while a well-behaved client is served throughout;
- slow_body: a body that stalls is dropped by the minimum upload rate;
- transport_errors: unsupported transfer codings (501 at once, then close), the HTTP/2
  preface, HTTP/0.9, an over-long request line, 300 KB of headers, malformed header lines and
  request lines, blanks after Content-Length or chunked, and heads that would overflow
  libmicrohttpd's pool (many lines, a big cookie) are answered with JSON {"error": ...};
- first_request_framing: a broken chunked body, a missing Host, a bad Content-Length on a first
  request: JSON 400 (the accept thread checks them before libmicrohttpd reads the request);
- chunked_framing: a chunked body whose framing breaks past the first 64 KiB (a bad size line,
  a blank after the size, a chunk longer than its size, an over-long size line or trailer, a
  stray CR), sent at once or in pieces, on a first or a later request or after 100 Continue:
  JSON 400 (libmicrohttpd would send an HTML page); good chunked bodies split anywhere keep
  their bytes;
- head_limits: the largest request head the server takes (short, middling, long lines; a body
  sent along with Content-Length or chunked with long extensions and trailers; first or later
  request) is served, and one line more gets JSON 431 (libmicrohttpd's pool would overflow
  into its HTML page);
- later_requests_no_keep_alive: with --keep-alive 0 each answer closes its connection, and a
  bad chunk or a malformed head sent as the next request (pipelined or not) gets JSON;
- later_requests_keep_alive: with the default keep-alive, a bad head of a later request (after
  the answer, pipelined, after 300 requests, trickling) gets JSON; good requests, pipelined
  ones included, are served on the same connection; later_heads_unjudged: where tandem cannot
  judge the next head before libmicrohttpd parses it (after a chunked body, a pipelined head
  not complete in the bytes seen, more than 8 pipelined heads) the answer before it closes the
  connection: no HTML page; later_requests_unchecked: with --check-heads 0 such a head reaches
  libmicrohttpd (its HTML page);
- nonfinite_json: NaN and infinities in a JSON answer are NaN / Infinity / -Infinity, which
  tritonclient reads; binary outputs are bit-exact;
- per_ip: the connection past --max-connections-per-ip gets 503 (JSON, Retry-After);
- request_memory: 20 uploads declaring 60 MiB and 4 JSON bodies of 60 MiB against
  --request-memory 128: the bodies past the budget get 503 at once, the JSON ones too, the
  server's peak RSS grows by about the budget, and once the uploads go the budget is free again;
- json_stream: tensor "data" arrays are decoded straight from the body: values and errors as
  with jansson, a 75 MiB JSON body is taken with RSS growing by a small multiple of it, and
  --max-json-mb limits only the rest of the JSON;
- fd_limit: started with a soft descriptor limit of 256, the server raises it to the hard limit
  and keeps 600 idle connections while it answers a new client;
- drain: SIGTERM with idle, slowloris and half-sent connections open: the server stops
  quickly and refuses new connections; drain_waiting: SIGTERM with kept-alive connections
  waiting for, answered on, or trickling their next head: a clean exit.

Usage: test_stress.py --tandem BUILD/tandem [--filter SUBSTRING]
"""
import argparse
import functools
import json
import os
import resource
import signal
import socket
import sys
import tempfile
import shutil
import threading
import time
import traceback

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server as ts  # noqa: E402  (Server, raw, make_model, save)

import tritonclient.http as httpclient  # noqa: E402

P = "/v2/models/identity_fp32/infer"
OK = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                             "data": [0.5] * 16}]}).encode()


def build_repository(repo):
    identf = ts.make_model([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
                           [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["b", 16])],
                           [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["b", 16])])
    ts.save(repo, "identity_fp32", identf, """
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
""")
    rsum = ts.make_model([helper.make_node("ReduceSum", ["X"], ["S"], keepdims=1)],
                         [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])],
                         [helper.make_tensor_value_info("S", TensorProto.FLOAT, [1])])
    ts.save(repo, "sum", rsum, """
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "S" data_type: TYPE_FP32 dims: [ 1 ] } ]
""")
    log = ts.make_model([helper.make_node("Log", ["X"], ["Y"])],
                        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 4])],
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 4])])
    ts.save(repo, "log", log, """
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
""")


def connect(server, timeout=10):
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


_readers = {}


def read_answer(sock, timeout=10, closes=True):
    """Reads one answer (status, headers, body) and, when `closes`, whether the server closed
    the connection afterwards (else None). One buffered reader per socket, so that answers
    that arrive together are all read."""
    sock.settimeout(timeout)
    f = _readers.get(id(sock))
    if f is None or f.raw._sock is not sock:
        f = _readers[id(sock)] = sock.makefile("rb")
    status = f.readline()
    headers = {}
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers.get("content-length", "0")))
    closed = None
    if closes:
        try:
            closed = f.read(1) == b""
        except (socket.timeout, OSError):
            closed = False
    code = int(status.split()[1]) if status.startswith(b"HTTP/1.") else 0
    return code, headers, body, closed


def closed_by_server(sock, timeout):
    """Whether the server closes `sock` (EOF or reset) within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except (socket.timeout, BlockingIOError):
        return False


def still_open(sock):
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""  # data: not expected, but the socket is open
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def infer_ok(server, timeout=10):
    """One inference request on a fresh connection: (status, seconds)."""
    t0 = time.time()
    st, _, body = ts.raw(server, "POST", P, OK)
    assert st == 200, (st, body[:200])
    dt = time.time() - t0
    assert dt < timeout, f"answered after {dt:.1f} s"
    return dt


def metric(server, line_start):
    st, _, text = ts.raw(server, "GET", "/metrics", port=server.metrics_port)
    assert st == 200
    for line in text.decode().splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {line_start}")


def json_error(body):
    e = json.loads(body)["error"]
    assert isinstance(e, str) and e, body
    return e


# ---------------------------------------------------------------------------------------------


def test_idle_flood(s):
    keep = connect(s)
    keep.sendall(f"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    code, _, _, _ = read_answer(keep, 10, closes=False)
    assert code == 200
    time.sleep(0.3)  # the kept-alive connection is now the longest idle
    idle = []
    t0 = time.time()
    try:
        for _ in range(2000):
            idle.append(connect(s))
        opened = time.time() - t0
        dt = infer_ok(s, timeout=10)  # a new client while 2,000 idle connections are open
        print(f"    2,000 idle connections opened in {opened:.2f} s; a new client answered in "
              f"{dt * 1000:.0f} ms", flush=True)
        assert closed_by_server(keep, 5), "the kept-alive idle connection (idle longest) is still open"
        assert closed_by_server(idle[0], 5), "the oldest idle connection is still open"
        assert all(still_open(c) for c in idle[-100:]), "one of the newest idle connections was closed"
        for _ in range(20):  # clients keep being served while the flood stays
            infer_ok(s, timeout=10)
        m = metric(s, 'tandem_http_connections_closed_total{reason="idle_for_new_client"}')
        assert m >= 2000 + 1 - 300, f"{m} idle connections closed for new clients"
        assert metric(s, 'tandem_http_connections{state="open"}') <= 300
    finally:
        for c in idle:
            c.close()
        keep.close()


def test_slowloris(s):
    n = 300
    socks = []
    for i in range(n):
        c = connect(s)
        c.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\n".encode())
        socks.append(c)
    start = time.time()
    served = 0
    open_ = set(range(n))
    while open_ and time.time() - start < 15:  # --header-timeout 2: all closed well before
        for i in list(open_):
            try:
                socks[i].sendall(b"X-Slow: 1\r\n")
            except OSError:
                open_.discard(i)
        infer_ok(s, timeout=10)
        served += 1
        time.sleep(0.5)
    closed = sum(closed_by_server(c, 0.5) for c in socks)
    for c in socks:
        c.close()
    print(f"    {closed}/{n} slowloris connections closed after {time.time() - start:.1f} s; "
          f"{served} requests served meanwhile", flush=True)
    assert closed == n, f"{n - closed} slowloris connections still open after 15 s"
    infer_ok(s)


def test_slow_body(s):
    c = connect(s)
    try:
        c.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 20}\r\n\r\n".encode())
        c.sendall(b" " * 16384)  # then nothing: below --min-upload-kbps 64 after the grace
        t0 = time.time()
        assert closed_by_server(c, 15), "a stalled body was not dropped"
        print(f"    a stalled body dropped after {time.time() - t0:.1f} s", flush=True)
    finally:
        c.close()
    infer_ok(s)


def test_transport_errors(s):
    cases = [
        ("Transfer-Encoding: gzip, chunked", f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        ("Transfer-Encoding: identity", f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n", 501),
        ("Transfer-Encoding: chunked, identity", f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501),
        ("GET with Transfer-Encoding: gzip", "GET /v2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
        ("HTTP/0.9", "GET /v2\r\n", 400),
        ("HTTP/3.0", "GET /v2 HTTP/3.0\r\nHost: x\r\n\r\n", 505),
        ("request line of 9000 bytes", "GET /" + "a" * 9000 + " HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        ("300 KB of headers", "GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + "a" * 300000 + "\r\n\r\n", 431),
        ("a header line without a colon", "GET /v2 HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400),
        ("no URI", "GET HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("a tab after the method", "GET\t/v2 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("a blank before the method", " GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("a NUL in a header name", "GET /v2 HTTP/1.1\r\nHost: x\r\nX\0Y: z\r\n\r\n", 400),
        ("a folded header line", "GET /v2 HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400),
        ("a blank after Content-Length", f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Length: 2 \r\n\r\n{{}}", 400),
        ("a blank after chunked", f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked \r\n\r\n2\r\n{{}}\r\n0\r\n\r\n", 501),
        ("2,500 short header lines", "GET /v2 HTTP/1.1\r\nHost: x\r\n" + "".join(f"X{i:05d}: a\r\n" for i in range(2500)) + "\r\n", 431),
        ("a cookie of 40 KB", "GET /v2 HTTP/1.1\r\nHost: x\r\nCookie: a=" + "b" * 40000 + "\r\n\r\n", 431),
    ]
    for what, data, want in cases:
        c = connect(s)
        try:
            t0 = time.time()
            c.sendall(data.encode())
            code, headers, body, closed = read_answer(c, 10)
            dt = time.time() - t0
        finally:
            c.close()
        assert code == want, f"{what}: {code} {body[:200]!r}"
        assert headers.get("content-type") == "application/json", f"{what}: {headers}"
        json_error(body)
        assert closed, f"{what}: the connection stayed open"
        assert dt < 5, f"{what}: answered after {dt:.1f} s (it must not wait for a timeout)"
        infer_ok(s)
    # request heads that arrive in pieces: judged once complete (or past 64 KiB)
    c = connect(s)
    try:
        c.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: ")
        for _ in range(70):
            c.sendall(b"a" * 1000)
            time.sleep(0.005)
        code, headers, body, closed = read_answer(c, 10)
    finally:
        c.close()
    assert code == 431 and headers.get("content-type") == "application/json", (code, body)
    c = connect(s)
    try:
        for b in b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n":
            c.sendall(bytes([b]))
            time.sleep(0.005)
        code, _, body, _ = read_answer(c, 10, closes=False)
    finally:
        c.close()
    assert code == 200, (code, body)


def answer_of(s, data, closes=True):
    c = connect(s)
    try:
        c.sendall(data)
        return read_answer(c, 10, closes)
    finally:
        c.close()


def test_first_request_framing(s):
    """What libmicrohttpd would answer with an HTML page on a first request: a broken chunked
    body, an HTTP/1.1 request without Host, a Content-Length that is not a number."""
    head = f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    cases = [
        ("bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"),
        ("chunk longer than its size", head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n"),
        ("no Host", f"GET /v2/health/live HTTP/1.1\r\nUser-Agent: t\r\n\r\n"),
        ("Content-Length: abc", head + "Content-Length: abc\r\n\r\n{}"),
    ]
    for what, data in cases:
        code, headers, body, closed = answer_of(s, data.encode())
        assert code == 400, f"{what}: {code} {body[:200]!r}"
        assert headers.get("content-type") == "application/json", f"{what}: {headers} {body[:200]!r}"
        json_error(body)
        assert closed, f"{what}: the connection stayed open"
    # a well-formed chunked body still goes through
    body = OK.encode() if isinstance(OK, str) else OK
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7])
                       for i in range(0, len(body), 7)) + b"0\r\n\r\n"
    code, _, ans, _ = answer_of(s, head.encode() + b"Transfer-Encoding: chunked\r\n\r\n" + chunked,
                             closes=False)
    assert code == 200, (code, ans[:200])
    infer_ok(s)


def chunked(parts):
    """A chunked body of the given chunk payloads, with the terminating chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def sum_request(n, seed):
    """A JSON request for the "sum" model over n small integers (every partial sum is exact in
    FP32, in any order), and their sum: a byte lost, doubled or moved changes the answer."""
    x = np.random.default_rng(seed).integers(-100, 101, n)
    body = json.dumps({"inputs": [{"name": "X", "shape": [n], "datatype": "FP32",
                                   "data": [float(v) for v in x]}]}).encode()
    return body, float(np.sum(x))


def check_sum_answer(code, body, want, what):
    assert code == 200, f"{what}: {code} {body[:300]!r}"
    got = json.loads(body)["outputs"][0]["data"][0]
    assert got == want, f"{what}: sum {got}, expected {want}"


def read_final(c, timeout=10):
    """Reads answers until one that is not 100 Continue: (status, headers, body)."""
    while True:
        code, headers, body, _ = read_answer(c, timeout, closes=False)
        if code != 100:
            return code, headers, body


def send_in_pieces(c, data, cuts):
    """Sends data split at the given offsets, with a short pause after each piece, so that
    libmicrohttpd reads chunk data and the framing after it in separate reads."""
    last = 0
    for cut in list(cuts) + [len(data)]:
        c.sendall(data[last:cut])
        last = cut
        time.sleep(0.02)


def test_chunked_framing(s):
    """A chunked body whose framing breaks past the first 64 KiB (the part that the accept
    thread sees with the head) is parsed by libmicrohttpd, which answers a malformed one with an
    HTML page: the framing is followed from the upload callback instead, and every such body
    gets JSON 400 (never HTML), sent at once or in pieces, on a first request or a later one;
    good chunked bodies, split anywhere, keep their bytes."""
    sp = "/v2/models/sum/infer"
    head = (f"POST {sp} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    filler = [b" " * 1000] * 80  # 80 KB of JSON whitespace in good chunks: past the first 64 KiB
    big = b" " * 0x30000
    cases = [
        ("bad size line after 80 KB", chunked(filler)[:-5] + b"zz\r\n{}\r\n0\r\n\r\n"),
        ("a blank after the size", chunked(filler)[:-5] + b"2 \r\n{}\r\n0\r\n\r\n"),
        ("a chunk longer than its size", b"30000\r\n" + big + b"xyz\r\n0\r\n\r\n"),
        ("a chunk-size line of 2000 bytes", chunked(filler)[:-5] + b"2;" + b"e" * 2000 + b"\r\n{}\r\n0\r\n\r\n"),
        ("a trailer line without a colon", chunked(filler)[:-2] + b"no colon\r\n\r\n"),
        ("a chunk size past 2^64", chunked(filler)[:-5] + b"10000000000000002\r\n{}\r\n0\r\n\r\n"),
        ("a CR alone after a chunk", chunked(filler)[:-5] + b"2\r\n{}\rX0\r\n\r\n"),
    ]
    malformed0 = metric(s, 'tandem_http_chunked_framing_total{result="malformed"}')
    unfollowed0 = metric(s, 'tandem_http_chunked_framing_total{result="unfollowed"}')
    judged = 0
    for what, body in cases:
        bad_at = len(body) - 40
        for how in ("at once", "in pieces"):
            c = connect(s)
            try:
                if how == "at once":
                    c.sendall(head + body)
                else:  # the bad part arrives on its own, after the data before it
                    send_in_pieces(c, head + body, [len(head) + 70000, len(head) + bad_at])
                code, headers, ans, closed = read_answer(c, 10)
            finally:
                c.close()
            assert code in (400, 413) and headers.get("content-type") == "application/json", \
                f"{what} ({how}): {code} {headers} {ans[:200]!r}"
            json_error(ans)
            assert closed, f"{what} ({how}): the connection stayed open"
            judged += 1
    # on a later request of a kept-alive connection, and with 100 Continue asked for
    c = connect(s)
    try:
        c.sendall(infer_request())
        assert read_answer(c, 10, closes=False)[0] == 200
        c.sendall(head + cases[0][1])
        expect_json_error(c, 400, "bad framing after 80 KB on a later request")
        judged += 1
    finally:
        c.close()
    ehead = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    for what, body in (cases[0], ("good", None)):
        c = connect(s)
        try:
            c.sendall(ehead)
            code, _, _, _ = read_answer(c, 5, closes=False)
            assert code == 100, f"Expect: 100-continue ({what}): {code} instead of 100 Continue"
            if body is None:
                body, want = sum_request(20000, 7)
                c.sendall(chunked([body[i:i + 5000] for i in range(0, len(body), 5000)]))
                code, _, ans = read_final(c)  # libmicrohttpd sends one more 100 Continue
                check_sum_answer(code, ans, want, "Expect: 100-continue, good body")
            else:
                c.sendall(body)
                code, headers, ans = read_final(c)
                assert code == 400 and headers.get("content-type") == "application/json", \
                    f"Expect: 100-continue ({what}): {code} {headers} {ans[:200]!r}"
                json_error(ans)
                assert closed_by_server(c, 5), f"Expect: 100-continue ({what}): still open"
                judged += 1
        finally:
            c.close()
    # good chunked bodies keep their bytes, however they are split and sent
    body, want = sum_request(100000, 3)  # about 600 KB of JSON
    rng = np.random.default_rng(5)
    for split in ("one chunk", "chunks of 1 to 9000 bytes", "chunks of 1 byte at the end"):
        if split == "one chunk":
            parts = [body]
        elif split.startswith("chunks of 1 to"):
            parts, i = [], 0
            while i < len(body):
                k = int(rng.integers(1, 9000))
                parts.append(body[i:i + k])
                i += k
        else:
            parts = [body[:-50]] + [body[i:i + 1] for i in range(len(body) - 50, len(body))]
        data = chunked(parts)
        for how in ("at once", "in pieces"):
            c = connect(s)
            try:
                if how == "at once":
                    c.sendall(head + data)
                else:  # cut right after chunk data, inside CRLFs and size lines, at random
                    ends, at = [], 0
                    for p in parts[:12]:
                        line = len(b"%x\r\n" % len(p))
                        ends += [at + line + len(p), at + line + len(p) + 1, at + 1]
                        at += line + len(p) + 2
                    cuts = sorted({len(head) + v for v in ends} |
                                  {len(head) + int(v) for v in rng.integers(1, len(data), 20)})
                    send_in_pieces(c, head + data, cuts)
                code, _, ans = read_final(c, 30)
            finally:
                c.close()
            check_sum_answer(code, ans, want, f"{split} ({how})")
    malformed = metric(s, 'tandem_http_chunked_framing_total{result="malformed"}') - malformed0
    unfollowed = metric(s, 'tandem_http_chunked_framing_total{result="unfollowed"}') - unfollowed0
    print(f"    {judged} malformed chunked bodies answered in JSON ({malformed:.0f} judged in the "
          "upload callback)", flush=True)
    assert malformed == judged, f"{malformed} of {judged} malformed framings judged after the head"
    assert unfollowed == 0, f"{unfollowed} chunked bodies were not followed"
    infer_ok(s)


def test_head_limits(s):
    """libmicrohttpd keeps a request head in its connection's memory pool (64 KiB) with some
    bookkeeping per header line, and answers a head that does not fit (many short lines, with
    a body read along) with an HTML 431 page. For heads of short, middling and long lines
    sent with a body at once (Content-Length, chunked with long extensions and 16 trailers),
    on a first and on a later request: the largest head the server takes is served (the right
    sum), and one more line gets JSON 431."""
    body, want = sum_request(8000, 1)  # about 48 KB: more than libmicrohttpd's read buffer
    parts = [body[i:i + 700] for i in range(0, len(body), 700)]
    chunked_ext = (b"".join(b"%x;%s\r\n%s\r\n" % (len(p), b"e" * 1000, p) for p in parts) + b"0\r\n"
                   + b"".join(b"T%02d: %s\r\n" % (i, b"v" * 55) for i in range(16)) + b"\r\n")
    starts = {
        "Content-Length": ((f"POST /v2/models/sum/infer HTTP/1.1\r\nHost: x\r\n"
                            f"Content-Length: {len(body)}\r\n").encode(), body),
        "chunked": (b"POST /v2/models/sum/infer HTTP/1.1\r\nHost: x\r\n"
                    b"Transfer-Encoding: chunked\r\n", chunked_ext),
    }

    def ask(data, later):
        c = connect(s)
        try:
            if later:
                c.sendall(infer_request())
                assert read_answer(c, 10, closes=False)[0] == 200
            c.sendall(data)
            return read_final(c, 15)
        finally:
            c.close()

    shapes = {  # n -> the head's lines after the start; the most n taken is searched for
        f"lines of {k} bytes": (lambda n, k=k: b"".join((b"X%06d: " % i) + b"a" * (k - 12) + b"\r\n"
                                                       for i in range(n)), 65536 // k + 1)
        for k in (14, 120, 1000, 20000)}
    shapes["a cookie of n * 100 bytes"] = (lambda n: b"Cookie: a=" + b"b" * (100 * n) + b"\r\n", 700)
    shapes["n cookies"] = (lambda n: b"Cookie: " + b"; ".join(b"c%d=1" % i for i in range(n))
                           + b"\r\n", 8000)
    for shape, (lines, most) in shapes.items():
        for kind, (start, tail) in starts.items():
            for later in (False, True):
                def head(n):
                    return start + lines(n) + b"\r\n"
                lo, hi = 0, most  # the most taken: 200 at lo, 431 past hi
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    code, headers, ans = ask(head(mid) + tail, later)
                    what = f"n = {mid}, {shape}, {kind}, later={later}"
                    assert headers.get("content-type") == "application/json", \
                        f"{what}: {code} {headers} {ans[:200]!r}"
                    if code == 200:
                        lo = mid
                    else:
                        assert code == 431, f"{what}: {code} {ans[:200]!r}"
                        json_error(ans)
                        hi = mid - 1
                code, _, ans = ask(head(lo) + tail, later)
                check_sum_answer(code, ans, want, f"the largest head (n = {lo}, {shape}, "
                                 f"{len(head(lo))} bytes), {kind}, later={later}")
                code, headers, ans = ask(head(lo + 1) + tail, later)
                assert code == 431 and headers.get("content-type") == "application/json", \
                    (shape, kind, later, code, ans[:200])
                if kind == "chunked" and not later:
                    print(f"    the largest head taken: n = {lo}, {shape} ({len(head(lo))} bytes)",
                          flush=True)
    infer_ok(s)


def test_later_requests_no_keep_alive(s):
    """--keep-alive 0: each answer closes its connection, so that a later request's head is
    checked like a first one: a bad chunk or a malformed head sent after a first request gets
    JSON, also when pipelined behind it."""
    good = f"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    bad = [
        ("bad chunk", f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".encode()),
        ("malformed head", b"GET /v2 HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"),
        ("HTTP/0.9", b"GET /v2\r\n"),
    ]
    for what, req in bad:
        # pipelined behind a good request: one answer, then the connection closes
        c = connect(s)
        try:
            c.sendall(good + req)
            code, headers, body, closed = read_answer(c, 10)
        finally:
            c.close()
        assert code == 200, f"{what}: {code} {body[:200]!r}"
        assert headers.get("connection", "").lower() == "close", f"{what}: {headers}"
        assert closed, f"{what}: the connection stayed open after its answer"
        # the client's next request (on a new connection): JSON
        code, headers, body, closed = answer_of(s, req)
        assert code == 400 and headers.get("content-type") == "application/json", \
            f"{what}: {code} {headers} {body[:200]!r}"
        json_error(body)
    infer_ok(s)


def later_cases():
    """Heads that libmicrohttpd would answer with an HTML page: (what, bytes, status)."""
    return [
        ("bad chunk", f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".encode(), 400),
        ("malformed head", b"GET /v2 HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400),
        ("HTTP/0.9", b"GET /v2\r\n", 400),
        ("no Host", b"GET /v2/health/live HTTP/1.1\r\nUser-Agent: t\r\n\r\n", 400),
        ("Content-Length: abc", f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{{}}".encode(), 400),
        ("long request line", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        ("large head", b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 70000 + b"\r\n\r\n", 431),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
    ]


def infer_request():
    body = OK.encode() if isinstance(OK, str) else OK
    return (f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def expect_json_error(c, want, what):
    code, headers, body, closed = read_answer(c, 10)
    assert code == want, f"{what}: {code} {headers} {body[:200]!r}"
    assert headers.get("content-type") == "application/json", f"{what}: {headers} {body[:200]!r}"
    json_error(body)
    assert closed, f"{what}: the connection stayed open"


def test_later_requests_keep_alive(s):
    """Default keep-alive (--check-heads 1): a bad head of a later request on a kept-alive
    connection gets JSON too, whether it comes after the answer (at once or later), is
    pipelined behind a good request, follows many good ones, or trickles in; good requests,
    also pipelined ones, keep working on the same connection (a chunked one closes it)."""
    good = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    infer = infer_request()
    def later(how):
        return metric(s, f"tandem_http_later_heads_total{{how=\"{how}\"}}")
    waited0, there0, unchecked0 = later("waited"), later("already_there"), later("unchecked")
    for what, req, want in later_cases():
        for pause in (0.0, 0.05):
            c = connect(s)
            try:
                c.sendall(infer)
                code, _, body, _ = read_answer(c, 10, closes=False)
                assert code == 200, (what, code, body[:200])
                time.sleep(pause)
                c.sendall(req)
                expect_json_error(c, want, f"{what} (after {pause} s)")
            finally:
                c.close()
        # pipelined behind a good request: its answer, then JSON (a pipelined head that is not
        # complete in the first 64 KiB of the connection's bytes is not checked: SECURITY.md)
        if what == "large head":
            continue
        c = connect(s)
        try:
            c.sendall(good + req)
            code, _, body, _ = read_answer(c, 10, closes=False)
            assert code == 200, (what, code, body[:200])
            expect_json_error(c, want, f"{what} (pipelined)")
        finally:
            c.close()
    # 300 requests on one connection, three pipelined ones, a chunked one; then a bad head
    c = connect(s)
    try:
        for i in range(300):
            c.sendall(infer)
            code, _, body, _ = read_answer(c, 10, closes=False)
            assert code == 200, (i, code, body[:200])
        c.sendall(good + infer + good)
        for i in range(3):
            code, _, body, _ = read_answer(c, 10, closes=False)
            assert code == 200, (i, code, body[:200])
        c.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n")
        expect_json_error(c, 400, "malformed head after 303 requests")
    finally:
        c.close()
    c = connect(s)
    try:
        c.sendall(chunked_request())
        code, headers, ans, closed = read_answer(c, 10)
        # after a chunked body the boundary is not known: the answer closes the connection
        assert code == 200 and headers.get("connection", "").lower() == "close" and closed, \
            (code, headers, ans[:200], closed)
    finally:
        c.close()
    # a later head that trickles in: 408 in JSON once --header-timeout (2 s) has passed
    c = connect(s)
    try:
        c.sendall(infer)
        assert read_answer(c, 10, closes=False)[0] == 200
        t0 = time.time()
        c.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        expect_json_error(c, 408, "a later head that trickles")
        dt = time.time() - t0
        assert 1.5 < dt < 5, f"408 after {dt:.1f} s (--header-timeout 2)"
    finally:
        c.close()
    waited, there = later("waited") - waited0, later("already_there") - there0
    unchecked = later("unchecked") - unchecked0
    assert waited > 0 and waited + there >= 300, f"later heads checked: {waited} waited, {there} there"
    assert unchecked == 1, f"{unchecked} later heads unchecked (only the chunked request closes)"
    infer_ok(s)


def chunked_request():
    body = OK.encode() if isinstance(OK, str) else OK
    return (f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))


def answers_until_close(c, what):
    """Reads answers until the server closes `c`; each must be a 200 or an error in JSON (never
    libmicrohttpd's HTML page). Returns their status codes."""
    codes = []
    while True:
        try:
            code, headers, body, _ = read_answer(c, 10, closes=False)
        except ConnectionResetError:
            break
        if code == 0:
            break
        assert code == 200 or headers.get("content-type") == "application/json", \
            f"{what}: answer {len(codes)}: {code} {headers} {body[:200]!r}"
        if code != 200:
            json_error(body)
        codes.append(code)
        assert len(codes) < 64, f"{what}: the connection stays open"
    return codes


def test_later_heads_unjudged(s):
    """Later heads tandem cannot judge before libmicrohttpd parses them (a head after a chunked
    body, a pipelined head not complete in the bytes seen with the request before it, more than
    8 pipelined heads): the answer before them closes the connection, so that no HTML page is
    ever sent; the client sends such a request again on a new connection."""
    bad = b"GET /v2 HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"
    good = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    infer = infer_request()
    split = infer.index(b"\r\n\r\n") + 4 + 5  # the head and 5 bytes of the body
    cases = [
        ("after a chunked body", [chunked_request() + bad], [200]),
        ("pipelined behind a body still arriving", [infer[:split], infer[split:] + bad], [200]),
        ("a pipelined head over 64 KiB", [good + b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: "
                                          + b"b" * 70000 + b"\r\n\r\n"], None),
        ("10 pipelined heads, then a bad one", [good * 10 + bad], None),
        ("a bad chunk after 9 pipelined heads", [good * 9 + later_cases()[0][1]], None),
    ]
    for what, parts, want in cases:
        c = connect(s)
        try:
            for i, part in enumerate(parts):
                if i:
                    time.sleep(0.2)  # the head has been judged, its body is still coming
                c.sendall(part)
            codes = answers_until_close(c, what)
        finally:
            c.close()
        assert codes and codes[0] == 200, f"{what}: {codes}"
        if want is not None:
            assert codes == want, f"{what}: {codes}"
    assert metric(s, "tandem_http_later_heads_total{how=\"unchecked\"}") >= 3
    infer_ok(s)


def test_later_requests_unchecked(s):
    """--check-heads 0: later heads go to libmicrohttpd unchecked (its HTML page); good requests
    on kept-alive connections work as before."""
    infer = infer_request()
    c = connect(s)
    try:
        for i in range(50):
            c.sendall(infer)
            code, _, body, _ = read_answer(c, 10, closes=False)
            assert code == 200, (i, code, body[:200])
        c.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
        code, headers, body, _ = read_answer(c, 10)
        assert code == 400 and headers.get("content-type") != "application/json", (code, headers)
    finally:
        c.close()
    assert metric(s, "tandem_http_later_heads_total{how=\"waited\"}") == 0
    infer_ok(s)


def test_json_stream(s):
    """Tensor "data" arrays are decoded straight from the body (no jansson tree for them): the
    same values and the same errors as before, and a 60 MiB JSON body is taken (--max-json-mb 1
    limits only the rest of the JSON) with RSS growing by a small multiple of the body."""
    def infer(body, path=P):
        return ts.raw(s, "POST", path, body if isinstance(body, bytes) else body.encode())

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    x[0, :4] = [0.0, -0.0, 1e-38, 3.4e38]
    text = json.dumps({"id": "a", "inputs": [{"name": "INPUT0", "shape": [2, 16], "datatype": "FP32",
                                              "data": x.tolist()}],
                       "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]})
    st, _, ans = infer(text)
    assert st == 200, (st, ans[:300])
    got = np.array(json.loads(ans)["outputs"][0]["data"], dtype=np.float32).reshape(2, 16)
    assert np.array_equal(got, x), (got, x)
    # the data array first, spacing, integers and exponents, "data" as a value elsewhere
    body = ('{ "inputs" : [ { "data" : [ [ 1 , 2e0 , -3 , 4.5E+1 ] , [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0] ] ,'
            ' "shape" : [ 2 , 16 ] , "name" : "INPUT0" , "datatype" : "FP32", "parameters": {"x": "data"} } ] }')
    st, _, ans = infer(body)
    assert st == 200, (st, ans[:300])
    got = json.loads(ans)["outputs"][0]["data"]
    assert got[:4] == [1, 2, -3, 45] and not any(got[4:]), got
    bad = [
        ("[1,,2]", "malformed JSON"), ("[1 2]", "malformed JSON"), ("[1,]", "malformed JSON"),
        ("[01]", "malformed JSON"), ("[.5]", "malformed JSON"), ("[1e]", "malformed JSON"),
        ("[NaN]", "malformed JSON"), ("[null]", "expected a number"), ("[true]", "expected a number"),
        ("[[1],2]]", "malformed JSON"), ("[1e999]", "malformed JSON"),
        ("[" + ",".join(["1"] * 17) + "]", "more elements"), ("[1,2]", "elements but the shape"),
    ]
    for arr, want in bad:
        body = '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":' + arr + '}]}'
        st, _, ans = infer(body)
        assert st == 400 and want in json_error(ans), (arr, st, ans[:300])
    # 60 MiB of JSON tensor data: taken, summed right, RSS a small multiple of the body
    n = 15 << 20  # 15 Mi elements of "0.25," (5 bytes): 75 MiB of text
    data = b",".join([b"0.25"] * 1024)
    body = (b'{"inputs":[{"name":"X","shape":[%d],"datatype":"FP32","data":[' % n
            + b",".join([data] * (n // 1024)) + b"]}]}")
    base = rss_kib(s.proc.pid, "VmRSS")
    st, _, ans = infer(body, "/v2/models/sum/infer")
    assert st == 200, (st, ans[:300])
    assert json.loads(ans)["outputs"][0]["data"] == [n * 0.25], ans[:300]
    grew = (rss_kib(s.proc.pid, "VmHWM") - base) / 1024
    print(f"    a {len(body) / (1 << 20):.0f} MiB JSON body ({n} elements): RSS +{grew:.0f} MiB "
          f"(the body and the 60 MiB tensor; a jansson tree would take ~15x the body)", flush=True)
    factor = {"tsan": 6.0, "asan": 1.5}.get(sanitizer(s.proc.pid), 1.0)
    assert grew < 4 * len(body) / (1 << 20) * factor, f"RSS grew by {grew:.0f} MiB"
    # the rest of the JSON is still limited by --max-json-mb (1 here)
    body = '{"id":"' + "a" * (2 << 20) + '","inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[' + ",".join(["1"] * 16) + ']}]}'
    st, _, ans = infer(body)
    assert st == 413 and "max-json-mb" in json_error(ans), (st, ans[:300])
    infer_ok(s)


def test_nonfinite_json(s):
    x = np.array([[1.0, 0.0, -1.0, np.inf]], dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(x)
    c = httpclient.InferenceServerClient(s.url)
    inp = httpclient.InferInput("X", [1, 4], "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    got_json = c.infer("log", [inp], outputs=[httpclient.InferRequestedOutput("Y", binary_data=False)]).as_numpy("Y")
    got_bin = c.infer("log", [inp], outputs=[httpclient.InferRequestedOutput("Y", binary_data=True)]).as_numpy("Y")
    c.close()
    np.testing.assert_array_equal(got_json, want)  # NaN == NaN here, infinities with their sign
    assert got_bin.tobytes() == want.tobytes(), (got_bin, want)
    body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                   "data": [1.0, 0.0, -1.0, 1e39]}]}).encode()
    st, _, ans = ts.raw(s, "POST", "/v2/models/log/infer", body)
    assert st == 200, ans
    assert b"[0,-Infinity,NaN,Infinity]" in ans, ans  # Triton's spelling (RapidJSON's)


def test_per_ip(s):
    socks = [connect(s) for _ in range(8)]
    try:
        time.sleep(0.3)
        extra = connect(s)
        extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        code, headers, body, closed = read_answer(extra, 10)
        extra.close()
        assert code == 503, (code, body)
        assert headers.get("retry-after") == "1", headers
        assert "per-ip" in json_error(body), body
        assert closed
    finally:
        for c in socks:
            c.close()
    deadline = time.time() + 10
    while True:  # the closed ones are noticed at once; allow the server a moment
        try:
            st, _, _ = ts.raw(s, "GET", "/v2/health/live")
            if st == 200:
                break
        except OSError:
            pass
        assert time.time() < deadline, "connections from this address stayed refused"
        time.sleep(0.1)


def sanitizer(pid):
    """'asan', 'tsan' or '' from the libraries mapped into the process."""
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    return "tsan" if "libtsan" in maps else "asan" if "libasan" in maps else ""


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def test_request_memory(s, budget_mib=128):
    pid = s.proc.pid
    base = rss_kib(pid, "VmRSS")
    size = 60 << 20
    socks = []
    try:
        for _ in range(20):
            c = connect(s, timeout=30)
            c.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n"
                      f"Inference-Header-Content-Length: {len(OK)}\r\n\r\n".encode())
            socks.append(c)
        # the uploads past the budget are answered 503 from their headers; the others wait
        # silently for their bodies (up to 10 s for the answers, on a busy machine)
        want_admitted = budget_mib // 60
        answers = {}
        deadline = time.time() + 10
        while len(answers) < len(socks) - want_admitted and time.time() < deadline:
            for i, c in enumerate(socks):
                if i in answers:
                    continue
                c.settimeout(0.05)
                try:
                    answers[i] = c.recv(65536)
                except socket.timeout:
                    pass
        time.sleep(0.5)
        for i, c in enumerate(socks):  # nothing more may come for the admitted ones
            if i not in answers:
                c.settimeout(0.05)
                try:
                    answers[i] = c.recv(65536)
                except socket.timeout:
                    pass
        refused, admitted = 0, []
        for i, c in enumerate(socks):
            head = answers.get(i, b"")
            if head.startswith(b"HTTP/1.1 503"):
                assert b"Retry-After: 1" in head, head
                assert b"request-memory" in head, head
                refused += 1
            else:
                assert not head, head
                admitted.append(c)
        assert len(admitted) == want_admitted, f"{len(admitted)} uploads of 60 MiB admitted"
        assert refused == 20 - len(admitted)
        chunk = b"\0" * (1 << 20)
        for c in admitted:  # all but the last byte: the uploads stall with their memory held
            c.settimeout(60)
            c.sendall(OK)
            left = size - len(OK) - 1
            while left:
                k = min(left, len(chunk))
                c.sendall(chunk[:k])
                left -= k
        # 4 JSON bodies of 60 MiB: refused from their headers (the budget is taken)
        for _ in range(4):
            c = connect(s)
            c.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
            code, _, body, _ = read_answer(c, 10)
            c.close()
            assert code == 503 and "request-memory" in json_error(body), (code, body)
        time.sleep(0.5)
        # meanwhile a body that does not fit (10 MiB; 8 are left) is refused from its headers,
        # small requests are served
        c = connect(s)
        c.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Length: {10 << 20}\r\n"
                  f"Inference-Header-Content-Length: {len(OK)}\r\n\r\n".encode())
        code, h, body, _ = read_answer(c, 10)
        c.close()
        assert code == 503 and h.get("retry-after") == "1", (code, body)
        infer_ok(s)
        peak = rss_kib(pid, "VmHWM")
        grew = (peak - base) / 1024
        print(f"    RSS {base / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB: +{grew:.0f} MiB "
              f"for a --request-memory of {budget_mib} MiB ({len(admitted)} uploads admitted, "
              f"{refused} refused with 503)", flush=True)
        # the server's own account stays within the budget; RSS too, plus the shadow memory
        # of sanitizer builds (ASan: 1/8 of what the bodies take; TSan: several times)
        used = metric(s, 'tandem_request_memory_bytes{value="peak"}') / (1 << 20)
        assert used <= budget_mib, f"{used:.0f} MiB of request memory taken"
        factor = {"tsan": 6.0, "asan": 1.25}.get(sanitizer(pid), 1.0)
        assert grew < budget_mib * factor + 32, f"RSS grew by {grew:.0f} MiB"
    finally:
        for c in socks:
            c.close()
    deadline = time.time() + 10
    while True:  # the uploads' memory comes back when their connections close
        c = connect(s)
        c.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n"
                  f"Inference-Header-Content-Length: {len(OK)}\r\n\r\n".encode())
        c.settimeout(0.5)
        try:
            head = c.recv(4096)
        except socket.timeout:
            head = b""  # admitted: it waits for its body
        c.close()
        if not head:
            break
        assert head.startswith(b"HTTP/1.1 503") and time.time() < deadline, head
        time.sleep(0.1)


def test_fd_limit(tandem, repo):
    """The server raises its descriptor limit to the hard limit at start: started with a soft
    limit of 256, it keeps 600 idle connections open (the default budget comes from the raised
    limit) and still answers a new client."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        print(f"    skipped: the hard descriptor limit is {hard}", flush=True)
        return
    popen = ts.subprocess.Popen
    ts.subprocess.Popen = functools.partial(
        popen, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)))
    try:
        s = ts.Server(tandem, repo)
    finally:
        ts.subprocess.Popen = popen
    conns = []
    try:
        assert any("descriptor limit raised from 256 to" in line for line in s.lines), \
            "".join(s.lines[-10:])
        for _ in range(600):
            conns.append(connect(s))
        infer_ok(s, timeout=10)
        time.sleep(0.5)
        assert all(still_open(c) for c in conns), "an idle connection was closed"
    finally:
        for c in conns:
            c.close()
        rc = s.stop()
    assert rc == 0, f"exit code {rc}\n" + "".join(s.lines[-20:])


def test_drain_waiting(tandem, repo):
    """SIGTERM while kept-alive connections wait for their next head in tandem (suspended in
    libmicrohttpd), have a bad later head answered and lingering, a later head trickling, or a
    bad head pipelined behind a good one: the server resumes them all and exits cleanly, 3
    times over."""
    for _ in range(3):
        s = ts.Server(tandem, repo, ["--header-timeout", "3"])
        socks = []
        try:
            inf = infer_request()
            for i in range(30):
                c = connect(s)
                c.sendall(inf)
                assert read_answer(c, 10, closes=False)[0] == 200
                if i % 3 == 1:
                    c.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n")  # answered, lingers
                elif i % 3 == 2:
                    c.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")  # trickles
                socks.append(c)
            for i in range(10):
                c = connect(s)
                c.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
                          + b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
                socks.append(c)
            time.sleep(0.3)
            t0 = time.time()
            s.proc.send_signal(signal.SIGTERM)
            rc = s.proc.wait(30)
            dt = time.time() - t0
        finally:
            for c in socks:
                c.close()
            s.stop()
        assert rc == 0, f"exit code {rc}\n{''.join(s.lines[-20:])}"
        assert dt < 10, f"the drain took {dt:.1f} s"


def test_drain(tandem, repo):
    s = ts.Server(tandem, repo, ["--model-control-mode", "explicit", "--load-model", "identity_fp32",
                                 "--header-timeout", "30", "--connection-timeout", "60"])
    socks = []
    try:
        for i in range(60):
            c = connect(s)
            if i % 3 == 1:
                c.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\n".encode())  # headers never end
            elif i % 3 == 2:
                c.sendall(f"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n".encode())  # kept alive
            socks.append(c)
        te = connect(s)
        te.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n".encode())
        socks.append(te)
        time.sleep(0.5)
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        try:
            c = connect(s, timeout=5)
            c.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            code, _, _, _ = read_answer(c, 5)
            c.close()
            assert code == 503, f"a new connection during the drain got {code}"
        except (ConnectionRefusedError, ConnectionResetError):
            pass
        rc = s.proc.wait(30)
        dt = time.time() - t0
    finally:
        for c in socks:
            c.close()
        s.stop()
    print(f"    stopped {dt:.1f} s after SIGTERM with 61 idle or unfinished connections", flush=True)
    assert rc == 0, f"exit code {rc}\n{''.join(s.lines[-20:])}"
    assert dt < 10, f"the drain took {dt:.1f} s (--shutdown-timeout is 20)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 8192):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    tmp = tempfile.mkdtemp(prefix="tandem-stress-")
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repository(repo)
    groups = [
        (["--max-connections", "300", "--header-timeout", "2", "--min-upload-kbps", "64",
          "--connection-timeout", "30"],
         ["test_idle_flood", "test_slowloris", "test_slow_body", "test_transport_errors",
          "test_first_request_framing", "test_chunked_framing", "test_head_limits",
          "test_nonfinite_json",
          "test_later_requests_keep_alive", "test_later_heads_unjudged"]),
        (["--check-heads", "0"], ["test_later_requests_unchecked"]),
        (["--keep-alive", "0"], ["test_later_requests_no_keep_alive"]),
        (["--max-json-mb", "1", "--max-body-mb", "128", "--request-memory", "1024"], ["test_json_stream"]),
        (["--max-connections-per-ip", "8"], ["test_per_ip"]),
        (["--max-body-mb", "64", "--request-memory", "128", "--min-upload-kbps", "0",
          "--header-timeout", "5"], ["test_request_memory"]),
    ]
    passed = failed = 0
    t_all = time.time()
    try:
        for extra, names in groups:
            names = [n for n in names if args.filter in n]
            if not names:
                continue
            s = ts.Server(args.tandem, repo, extra)
            try:
                for name in names:
                    t0 = time.time()
                    try:
                        globals()[name](s)
                        passed += 1
                        print(f"PASS {name} ({time.time() - t0:.2f} s)", flush=True)
                    except Exception:  # noqa: BLE001
                        failed += 1
                        print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
                rc = s.stop()
                if rc != 0:
                    failed += 1
                    print(f"FAIL clean shutdown: exit code {rc}\n" + "".join(s.lines[-40:]), flush=True)
            finally:
                s.stop()
        for name in ("test_fd_limit", "test_drain", "test_drain_waiting"):
            if args.filter not in name:
                continue
            t0 = time.time()
            try:
                globals()[name](args.tandem, repo)
                passed += 1
                print(f"PASS {name} ({time.time() - t0:.2f} s)", flush=True)
            except Exception:  # noqa: BLE001
                failed += 1
                print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed ({time.time() - t_all:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
