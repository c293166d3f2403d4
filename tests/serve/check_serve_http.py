#!/usr/bin/env python3
"""dlm-serve over raw sockets, as an attacker and a heavy user drive it (issue 31): each check is
the regression test of a defect the server had on cpp-httplib.

    check_serve_http.py --dlmc build/bin/dlmc --dlm-serve build/bin/dlm-serve [--only NAME,...]

  * pipelining: requests written at once on one connection are all answered, in order;
  * half-close: a complete POST followed by shutdown(SHUT_WR) gets its answer (and counts as a
    success), while a client that closes is still cancelled (check_serve_openai.py);
  * limits: a body over --max-body-bytes is refused with 413 before it is sent, a chunked one
    past it too; headers by size and by count with 431; a compressed body with 415; a request
    that is not received within --read-timeout with 408; Expect: 100-continue is honoured; a
    JSON body is taken whatever its content type; unknown routes 404, wrong methods 405;
  * exact errors: integers of 2^63 and above refused by their real value, seed 2^64-1 taken,
    knob ranges by the program's own message with `param`, threshold outside [0, 1], a prompt
    text too long for the context refused before it is tokenized;
  * a burst of 64 connections is accepted at once (listen backlog);
  * shutdown: SIGTERM with 16 streams in flight (some queued) ends every one with [DONE] and
    exits 0; past --drain-timeout running streams end with an error event; a second signal
    ends the drain at once; a client sending its headers slowly does not hold the exit.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_serve_openai import DEMO, PROMPT, PROMPTS, Server, run_checks  # noqa: E402

INT64_MAX = 2**63 - 1
# Under the sanitizers (the checked build sets ASAN_OPTIONS) a forward, a thread's start and the
# exit's leak check take several times longer: the time bounds stretch by this factor.
SLOW = 5 if "ASAN_OPTIONS" in os.environ else 1


class Reader:
    """HTTP/1.1 responses read off a socket: status, headers, body (Content-Length or chunked,
    or to the close)."""

    def __init__(self, sock, timeout=60):
        self.sock = sock
        self.sock.settimeout(timeout)
        self.buffer = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buffer += data

    def _line(self):
        while b"\r\n" not in self.buffer:
            self._fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line.decode("latin-1")

    def _exactly(self, n):
        while len(self.buffer) < n:
            self._fill()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def response(self, skip_interim=True, on_chunk=None, no_body=False):
        while True:
            status = int(self._line().split(" ", 2)[1])
            headers = {}
            while True:
                line = self._line()
                if not line:
                    break
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200 and skip_interim:
                continue
            break
        if 100 <= status < 200 or no_body:
            return status, headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._line(), 16)
                chunk = self._exactly(size)
                self._exactly(2)
                if size == 0:
                    break
                body += chunk
                if on_chunk:
                    on_chunk(chunk)
            return status, headers, body
        if "content-length" in headers:
            return status, headers, self._exactly(int(headers["content-length"]))
        try:
            while True:
                self._fill()
        except EOFError:
            pass
        body, self.buffer = self.buffer, b""
        return status, headers, body


def request_bytes(method, path, body=b"", headers=None):
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    headers = dict(headers or {})
    if body or method == "POST":
        headers.setdefault("Content-Type", "application/json")
        headers.setdefault("Content-Length", str(len(body)))
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def connect(server):
    return socket.create_connection(("127.0.0.1", server.port), timeout=60)


def post_json(server, path, payload, headers=None):
    """(status, parsed body) of one POST on its own connection."""
    with connect(server) as sock:
        sock.sendall(request_bytes("POST", path, json.dumps(payload).encode(), headers))
        status, _, body = Reader(sock).response()
    return status, json.loads(body)


def completion(**fields):
    return dict({"model": "demo", "prompt": PROMPT, "max_tokens": 16}, **fields)


def expect_error(status_body, status, code=None, param=None, contains=None):
    got_status, body = status_body
    assert got_status == status, (got_status, body)
    error = body["error"]
    if code is not None:
        assert error["code"] == code, body
    if param is not None:
        assert error["param"] == param, body
    if contains is not None:
        assert contains in error["message"], body
    return error["message"]


# ---- the checks ---------------------------------------------------------------------------------

def check_pipelining(ctx):
    server = ctx.demo
    batch = (request_bytes("GET", "/health")
             + request_bytes("POST", "/v1/completions", json.dumps(completion()).encode())
             + request_bytes("GET", "/v1/models")
             + request_bytes("POST", "/v1/completions",
                             json.dumps(completion(prompt=PROMPTS[1])).encode()))
    with connect(server) as sock:
        sock.sendall(batch)
        reader = Reader(sock)
        answers = [reader.response() for _ in range(4)]
    assert [a[0] for a in answers] == [200] * 4, answers
    assert json.loads(answers[0][2])["status"] == "ok"
    assert json.loads(answers[1][2])["object"] == "text_completion"
    assert json.loads(answers[2][2])["object"] == "list"
    second = json.loads(answers[3][2])["choices"][0]["text"]
    alone = post_json(server, "/v1/completions", completion(prompt=PROMPTS[1]))[1]
    assert second == alone["choices"][0]["text"], (second, alone)
    print("  4 pipelined requests answered in order")


def check_half_close(ctx):
    server = ctx.demo
    before = server.metrics()['dlm_requests_total{outcome="success"}']
    with connect(server) as sock:
        sock.sendall(request_bytes("POST", "/v1/completions",
                                   json.dumps(completion(max_tokens=64, steps=64)).encode()))
        sock.shutdown(socket.SHUT_WR)
        status, _, body = Reader(sock).response()
    assert status == 200, (status, body)
    assert json.loads(body)["usage"]["completion_tokens"] > 0
    # HTTP/1.0 may not be sent a 1xx: its half-close gets the answer and nothing before it.
    payload = json.dumps(completion()).encode()
    with connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
        sock.shutdown(socket.SHUT_WR)
        reader = Reader(sock)
        status, _, body = reader.response(skip_interim=False)
    assert status == 200 and json.loads(body)["choices"], (status, body)
    after = server.metrics()['dlm_requests_total{outcome="success"}']
    assert after == before + 2, (before, after)
    print("  half-closed HTTP/1.1 and HTTP/1.0 clients got their completions")


def check_body_limits(ctx):
    server = ctx.limited
    # Content-Length over the limit: refused before a byte of the body is sent.
    with connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 50000000\r\n\r\n")
        status, headers, body = Reader(sock).response()
    assert status == 413, (status, body)
    assert json.loads(body)["error"]["code"] == "body_too_large", body
    assert headers.get("connection") == "close", headers
    # A chunked body that grows past it.
    with connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked"
                     b"\r\n\r\n")
        chunk = b"x" * 30000
        try:
            for _ in range(10):
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except OSError:
            pass
        status, _, body = Reader(sock).response()
    assert status == 413, (status, body)
    # Within it, with Expect: 100-continue: 100, then the answer.
    payload = json.dumps(completion()).encode()
    with connect(server) as sock:
        sock.sendall(request_bytes("POST", "/v1/completions", headers={
            "Content-Length": str(len(payload)), "Expect": "100-continue"}))
        reader = Reader(sock)
        interim, _, _ = reader.response(skip_interim=False)
        assert interim == 100, interim
        sock.sendall(payload)
        status, _, body = reader.response()
    assert status == 200, (status, body)
    # A compressed body.
    with connect(server) as sock:
        sock.sendall(request_bytes("POST", "/v1/completions", b"\x1f\x8b\x08\x00",
                                   {"Content-Encoding": "gzip"}))
        status, _, body = Reader(sock).response()
    assert status == 415 and "uncompressed" in json.loads(body)["error"]["message"], body
    # JSON under a form content type is still JSON.
    assert post_json(server, "/v1/completions", completion(),
                     {"Content-Type": "application/x-www-form-urlencoded"})[0] == 200
    print("  413 before the body, 100-continue, 415 for gzip, JSON whatever its content type")


def check_header_limits(ctx):
    server = ctx.demo
    many = "".join(f"X-H{i}: v\r\n" for i in range(2000)).encode()
    huge = b"X-Big: " + b"a" * 40000 + b"\r\n"
    for extra, what in ((many, "fields"), (huge, "bytes")):
        with connect(server) as sock:
            try:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n")
            except OSError:
                pass
            status, _, body = Reader(sock).response()
        assert status == 431 and what in json.loads(body)["error"]["message"], (status, body)
    with connect(server) as sock:
        sock.sendall(request_bytes("GET", "/nowhere") + request_bytes("GET", "/v1/completions"))
        reader = Reader(sock)
        assert reader.response()[0] == 404
        status, headers, _ = reader.response()
        assert status == 405 and headers.get("allow") == "POST", (status, headers)
    # HEAD: the headers of GET and no body, so the next answer on the connection is intact.
    with connect(server) as sock:
        sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: t\r\n\r\n" + request_bytes("GET", "/health"))
        reader = Reader(sock)
        status, headers, _ = reader.response(no_body=True)
        assert status == 200 and int(headers["content-length"]) > 0, (status, headers)
        status, _, body = reader.response()
        assert status == 200 and json.loads(body)["status"] == "ok", (status, body)
    print("  431 for 2000 header fields and for a 40 kB header; 404, 405; HEAD without a body")


def check_read_timeout(ctx):
    server = ctx.limited
    with connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n{")
        start = time.time()
        status, _, body = Reader(sock).response()
        waited = time.time() - start
    assert status == 408, (status, body)
    assert waited < 10 * SLOW, waited
    print(f"  an unfinished body answered 408 after {waited:.1f} s (--read-timeout 2)")


def check_exact_errors(ctx):
    server = ctx.demo
    path = "/v1/completions"
    expect_error(post_json(server, path, completion(max_tokens=2**63)), 400, param="max_tokens",
                 contains=str(2**63))
    expect_error(post_json(server, path, completion(max_tokens=0)), 400, param="max_tokens",
                 contains="at least 1, got 0")
    expect_error(post_json(server, path, completion(steps=2**63)), 400, param="steps",
                 contains=str(2**63))
    expect_error(post_json(server, path, completion(steps=0)), 400, param="steps",
                 contains="knob 'steps' must be at least 1, got 0")
    expect_error(post_json(server, path, completion(steps=10**6)), 400, param="steps",
                 contains="at most 65536")
    expect_error(post_json(server, path, completion(prompt=[5, 2**64 - 1])), 400,
                 param="prompt", contains=str(2**64 - 1))
    for threshold in (-1, 1.5):
        expect_error(post_json(server, path, completion(threshold=threshold)), 400,
                     param="threshold", contains="knob 'threshold' must be")
    status, body = post_json(server, path, completion(seed=2**64 - 1, temperature=0.7))
    assert status == 200, body
    expect_error(post_json(server, path, completion(seed=-1)), 400, param="seed")
    # Far longer than the 128-position context whatever its tokens: refused before tokenizing.
    message = expect_error(post_json(server, path, completion(prompt="a" * 1_000_000)), 400,
                           code="context_length_exceeded", param="prompt")
    assert "bytes" in message, message
    print("  2^63, 2^64-1, steps 0, threshold -1 and 1.5 refused by value, with param")


def check_backlog(ctx):
    server = ctx.demo

    def one(_):
        start = time.time()
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        connected = time.time() - start
        sock.sendall(request_bytes("GET", "/health", headers={"Connection": "close"}))
        status = Reader(sock).response()[0]
        sock.close()
        return connected, status

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64)))
    slowest = max(r[0] for r in results)
    assert all(r[1] == 200 for r in results), results
    # A dropped SYN is retried after a second: none may wait that long.
    assert slowest < 0.9, slowest
    print(f"  64 connections at once: slowest connect {slowest * 1000:.0f} ms")


def stream_events(server, payload, started=None):
    """(status, the SSE data lines) of one streaming completion read to its end; for a refusal,
    (status, the error object)."""
    with connect(server) as sock:
        sock.sendall(request_bytes("POST", "/v1/completions",
                                   json.dumps(dict(payload, stream=True)).encode()))
        reader = Reader(sock, timeout=120)
        status, _, body = reader.response(on_chunk=lambda _: started and started.set())
    if status != 200:
        return status, json.loads(body)["error"]
    return status, [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]


def start_streams(server, count, payload):
    import threading
    started = [threading.Event() for _ in range(count)]
    pool = concurrent.futures.ThreadPoolExecutor(count)
    futures = [pool.submit(stream_events, server, dict(payload, prompt=PROMPTS[i % 16]),
                           started[i]) for i in range(count)]
    return pool, futures, started


def wait_queued(server, total):
    deadline = time.time() + 60
    while time.time() < deadline:
        metrics = server.metrics()
        if metrics["dlm_requests_running"] + metrics["dlm_requests_waiting"] >= total:
            return metrics
        time.sleep(0.02)
    raise AssertionError(f"{total} requests never all admitted: {server.metrics()}")


def check_sigterm_drains_streams(ctx):
    # A drain long enough for all 16 on any build (the default 30 s is not, under ASan).
    server = ctx.server("--max-batch", "9", "--drain-timeout", "600")
    payload = {"model": "demo", "max_tokens": 96, "steps": 192}
    pool, futures, _ = start_streams(server, 16, payload)
    metrics = wait_queued(server, 16)
    assert metrics["dlm_requests_waiting"] > 0, metrics
    server.process.send_signal(signal.SIGTERM)
    results = [f.result(timeout=120) for f in futures]
    pool.shutdown()
    assert server.process.wait(timeout=60) == 0, server.output()
    for status, stream in results:
        assert status == 200, stream
        assert stream[-1] == "[DONE]", stream[-3:]
        assert not any('"error"' in e for e in stream), stream
        assert json.loads(stream[-2])["choices"][0]["finish_reason"] is not None, stream[-2]
    print(f"  SIGTERM with 16 streams ({metrics['dlm_requests_running']:.0f} running, "
          f"{metrics['dlm_requests_waiting']:.0f} queued): 16 ended with [DONE], exit 0")


def queue_then_signal(server, signals):
    """40 streams of 12 blocks each through --max-batch 1; once all are admitted and the running
    one has sent its first block, the `signals` one after another. Checks what each got: [DONE]
    after its text, or after a "shutting down" error event (cut at the end of the drain), or a
    503 (cut before its first block). Returns (seconds from the last signal to the exit,
    counts)."""
    payload = {"model": "demo", "max_tokens": 96, "block_length": 8, "steps": 96}
    pool, futures, started = start_streams(server, 40, payload)
    wait_queued(server, 40)
    deadline = time.time() + 60
    while not any(event.is_set() for event in started) and time.time() < deadline:
        time.sleep(0.005)
    for sent in signals:
        server.process.send_signal(sent)
    last = time.time()
    status = server.process.wait(timeout=60)
    exited = time.time() - last
    results = [f.result(timeout=60) for f in futures]
    pool.shutdown()
    assert status == 0, server.output()
    counts = {"done": 0, "cut": 0, "refused": 0}
    for code, stream in results:
        if code == 503:
            assert stream["code"] == "shutting_down", stream
            counts["refused"] += 1
            continue
        assert code == 200 and stream[-1] == "[DONE]", (code, stream[-3:])
        counts["cut" if "shutting down" in stream[-2] else "done"] += 1
    assert counts["cut"] >= 1 and counts["refused"] >= 1, counts
    return exited, counts


def check_drain_deadline(ctx):
    # A deadline of 0: the drain ends at once, while the running stream is in its first blocks.
    server = ctx.server("--max-batch", "1", "--drain-timeout", "0")
    exited, counts = queue_then_signal(server, [signal.SIGTERM])
    assert exited < 5 * SLOW, exited
    print(f"  --drain-timeout 0, 40 streams: {counts}, exit {exited:.1f} s after SIGTERM")


def check_second_signal(ctx):
    # SIGINT right after SIGTERM: two different signals cannot merge into one pending signal, and
    # the running stream (a tenth of a second here) is still mid-way when the second arrives.
    server = ctx.server("--max-batch", "1", "--drain-timeout", "600")
    exited, counts = queue_then_signal(server, [signal.SIGTERM, signal.SIGINT])
    assert exited < 1.0 * SLOW, exited
    print(f"  SIGINT after SIGTERM ended the drain in {exited:.2f} s: {counts}")


def check_slow_client_shutdown(ctx):
    server = ctx.server()
    slow = connect(server)
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n")
    time.sleep(0.2)
    slow.sendall(b"X-Slow: 1\r\n")
    start = time.time()
    server.process.send_signal(signal.SIGTERM)
    status = server.process.wait(timeout=30)
    took = time.time() - start
    slow.close()
    assert status == 0, server.output()
    assert took < 2 * SLOW, took
    print(f"  a client sending headers slowly: exit {took:.2f} s after SIGTERM")


CHECKS = [check_pipelining, check_half_close, check_body_limits, check_header_limits,
          check_read_timeout, check_exact_errors, check_backlog, check_sigterm_drains_streams,
          check_drain_deadline, check_second_signal, check_slow_client_shutdown]


class Context:
    """What the checks share; servers a check starts are stopped at the end even when it fails."""

    def __init__(self):
        self.servers = []

    def server(self, *flags):
        started = Server(self.args.dlm_serve, self.demo_artifact, *flags)
        self.servers.append(started)
        return started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dlmc", required=True)
    parser.add_argument("--dlm-serve", required=True)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dlm-serve-http-")
    ctx = Context()
    ctx.args = args
    ctx.demo_artifact = os.path.join(work, "demo.dlm")
    subprocess.run([args.dlmc, "compile", DEMO, "-o", ctx.demo_artifact], check=True,
                   stdout=subprocess.DEVNULL)
    only = set(filter(None, args.only.split(",")))
    checks = [check for check in CHECKS if not only or check.__name__ in only]
    ctx.demo = Server(args.dlm_serve, ctx.demo_artifact)
    ctx.limited = Server(args.dlm_serve, ctx.demo_artifact, "--max-body-bytes", "100000",
                         "--read-timeout", "2")
    try:
        failures = run_checks(checks, ctx, (ctx.demo, ctx.limited))
    finally:
        # What a failed check started and did not stop.
        for server in ctx.servers:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(checks) - failures} of {len(checks)} checks passed" if failures
          else f"all {len(checks)} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
