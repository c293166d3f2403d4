#!/usr/bin/env python3
"""dlm-serve against the official `openai` client (issue 14 item 2; docs/design/serving.md §6).

    check_serve_openai.py --dlmc build/bin/dlmc --dlm-run build/bin/dlm-run
                          --dlm-serve build/bin/dlm-serve [--only NAME,...] [--keep DIR]

Compiles the bundled demo model (tests/models/demo/checkpoint) and a copy of it with a chat
template, starts dlm-serve on free loopback ports, waits for /health, and checks:
  * completions and chat completions (text, finish_reason, usage, /v1/models);
  * streaming: each chunk is committed text, the chunks concatenate to the non-streamed text at
    temperature 0, include_usage ends the stream with the usage;
  * stop strings, max_tokens not a multiple of block_length;
  * errors through the client's exception types: a bad field, an unknown knob, n=2,
    context_length_exceeded, an unknown model (404), chat without a template, a full queue (429);
  * 16 concurrent clients on a `--batch-invariant` server equal single `dlm-run --json` runs with
    the same prompt, knobs and seed, and again on one whose KV pool holds 4 such requests;
  * a client that disconnects cancels its request (metrics: cancelled, KV pages freed);
  * SIGTERM lets a running request finish, then dlm-serve exits 0 (check_serve_http.py holds
    the server to the rest of HTTP: pipelining, limits, shutdown with streams in flight).
Exit status 77 (ctest: skipped) when the openai package is missing.
"""

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

try:
    import openai
except ImportError:
    print("skipped: the openai package is missing (scripts/setup installs it)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DEMO = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")
PROMPT = "For the developers' and authors'"
# Openings of paragraphs the demo model learnt (and some it did not): 16 different requests.
PROMPTS = [
    "For the developers' and authors'",
    "The GNU General Public License is a free, copyleft license",
    "When we speak of free software, we are referring to freedom",
    "To protect your rights, we need to prevent others",
    "For example, if you distribute copies of such a program",
    "Developers that use the GNU GPL protect your rights",
    "Some devices are designed to deny users access",
    "Finally, every program is threatened constantly by software patents.",
    "The precise terms and conditions for copying, distribution",
    "\"This License\" refers to version 3 of the GNU General Public License.",
    "To \"modify\" a work means to copy from or adapt all or part",
    "A \"covered work\" means either the unmodified Program",
    "To \"propagate\" a work means to do anything with it",
    "An interactive user interface displays \"Appropriate Legal Notices\"",
    "The \"source code\" for a work means the preferred form",
    "Hello there, general kenobi",
]
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['content'] }}"
                 "{% if not loop.last %}\n{% endif %}{% endfor %}")
PAGE_TOKENS = 16


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, artifact, *flags):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [binary, artifact, "--port", str(self.port), "--threads", "1", *flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1) as response:
                    if json.load(response)["status"] == "ok":
                        break
            except OSError:
                pass
            if self.process.poll() is not None or time.time() > deadline:
                raise RuntimeError("dlm-serve did not start:\n" + self.output())
            time.sleep(0.05)
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key="none", max_retries=0)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def metrics(self):
        with urllib.request.urlopen(self.base + "/metrics", timeout=5) as response:
            text = response.read().decode()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def dlm_run(args, artifact, prompt, knobs, seed):
    command = [args.dlm_run, artifact, "--prompt", prompt, "--json", "--threads", "1",
               "--seed", str(seed)]
    for name, value in knobs.items():
        command += ["--" + name.replace("_", "-"), str(value)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def expect_error(kind, call, code=None, param=None, status=None):
    try:
        call()
    except kind as error:
        body = error.body if isinstance(error.body, dict) else {}
        if code is not None and body.get("code") != code:
            raise AssertionError(f"expected code {code}, got {body}")
        if param is not None and body.get("param") != param:
            raise AssertionError(f"expected param {param}, got {body}")
        if status is not None and error.status_code != status:
            raise AssertionError(f"expected HTTP {status}, got {error.status_code}")
        return error
    raise AssertionError(f"expected {kind.__name__}")


# ---- the checks ---------------------------------------------------------------------------------

def check_completions(ctx):
    server = ctx.demo
    models = [model.id for model in server.client.models.list().data]
    assert models == ["demo"], models
    done = server.client.completions.create(model="demo", prompt=PROMPT, temperature=0)
    choice = done.choices[0]
    assert choice.text.startswith(" protection, the GPL"), choice.text
    assert choice.finish_reason in ("stop", "length"), choice.finish_reason
    assert done.usage.completion_tokens > 0 and done.usage.prompt_tokens > 0, done.usage
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
    # Token ids as the prompt give the same text.
    ids = dlm_run(ctx.args, ctx.demo_artifact, PROMPT, {}, 0)["prompt_ids"]
    by_ids = server.client.completions.create(model="demo", prompt=ids, temperature=0)
    assert by_ids.choices[0].text == choice.text
    # max_tokens not a multiple of block_length (32): generated in whole blocks, cut.
    cut = server.client.completions.create(model="demo", prompt=PROMPT, max_tokens=40)
    assert cut.usage.completion_tokens == 40, cut.usage
    assert cut.choices[0].finish_reason == "length"
    assert choice.text.startswith(cut.choices[0].text), (cut.choices[0].text, choice.text)
    print(f"  completion: {done.usage.completion_tokens} tokens, {choice.text[:50]!r}...")


def check_streaming(ctx):
    client = ctx.demo.client
    whole = client.completions.create(model="demo", prompt=PROMPT, temperature=0)
    for max_tokens in (None, 40):
        extra = {} if max_tokens is None else {"max_tokens": max_tokens}
        whole = client.completions.create(model="demo", prompt=PROMPT, temperature=0, **extra)
        chunks = list(client.completions.create(model="demo", prompt=PROMPT, temperature=0,
                                                stream=True,
                                                stream_options={"include_usage": True}, **extra))
        texts = [chunk.choices[0].text for chunk in chunks if chunk.choices]
        assert "".join(texts) == whole.choices[0].text, (texts, whole.choices[0].text)
        # Committed blocks of 32: at most one chunk per block, plus the closing one.
        assert 1 < len(texts) <= 64 // 32 + 1, texts
        finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
        assert finish[-1] == whole.choices[0].finish_reason and not any(finish[:-1]), finish
        assert chunks[-1].usage is not None and not chunks[-1].choices
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    print(f"  {len(texts)} chunks concatenate to the non-streamed text")


def check_stop(ctx):
    client = ctx.demo.client
    whole = client.completions.create(model="demo", prompt=PROMPT).choices[0].text
    stop = " the GPL requires"
    assert stop in whole, whole
    cut = client.completions.create(model="demo", prompt=PROMPT, stop=[stop, "zzz"])
    assert cut.choices[0].text == whole[:whole.index(stop)], cut.choices[0].text
    assert cut.choices[0].finish_reason == "stop"
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
        model="demo", prompt=PROMPT, stop=stop, stream=True))
    assert streamed == cut.choices[0].text, streamed


def check_chat(ctx):
    client = ctx.chat.client
    messages = [{"role": "user", "content": PROMPT}]
    done = client.chat.completions.create(model="demo_chat", messages=messages, temperature=0)
    message = done.choices[0].message
    assert message.role == "assistant" and message.content, message
    assert done.object == "chat.completion"
    chunks = list(client.chat.completions.create(model="demo_chat", messages=messages,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert streamed == message.content, (streamed, message.content)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    # No template: a named 400.
    error = expect_error(openai.BadRequestError, lambda: ctx.demo.client.chat.completions.create(
        model="demo", messages=messages), param="messages")
    assert "chat template" in str(error), error
    print(f"  chat: {message.content[:50]!r}...")


def check_errors(ctx):
    client = ctx.demo.client
    expect_error(openai.BadRequestError, lambda: client.completions.create(
        model="demo", prompt=PROMPT, n=2), param="n")
    expect_error(openai.BadRequestError, lambda: client.completions.create(
        model="demo", prompt=PROMPT, extra_body={"stepz": 3}), param="stepz")
    expect_error(openai.BadRequestError, lambda: client.completions.create(
        model="demo", prompt=PROMPT, max_tokens="many"), param="max_tokens")
    expect_error(openai.BadRequestError, lambda: client.completions.create(
        model="demo", prompt=PROMPT, logprobs=2), param="logprobs")
    expect_error(openai.BadRequestError, lambda: client.completions.create(
        model="demo", prompt=PROMPT, max_tokens=200), code="context_length_exceeded")
    expect_error(openai.BadRequestError, lambda: client.completions.create(
        model="demo", prompt=PROMPT, extra_body={"policy": "magic"}), param="policy")
    # A knob value the engine refuses is a 400 with its message.
    expect_error(openai.BadRequestError, lambda: client.completions.create(
        model="demo", prompt=PROMPT, extra_body={"steps": 7}))
    expect_error(openai.NotFoundError, lambda: client.completions.create(
        model="gpt-4", prompt=PROMPT), code="model_not_found")
    # Bad JSON.
    request = urllib.request.Request(ctx.demo.base + "/v1/completions", data=b"{not json",
                                     headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=5)
        raise AssertionError("bad JSON was accepted")
    except urllib.error.HTTPError as error:
        assert error.code == 400 and json.load(error)["error"]["type"] == "invalid_request_error"
    # Diffusion knobs as extra fields are taken.
    fast = client.completions.create(model="demo", prompt=PROMPT,
                                     extra_body={"threshold": 0.9, "cache": "prefix"})
    assert fast.choices[0].text


def concurrent_matches_dlm_run(ctx, server, label):
    cases = []
    for i, prompt in enumerate(PROMPTS):
        # The prefix and dual caches too: cached and window forwards packed with full ones.
        knobs = ({"threshold": 0.9, "cache": ["prefix", "dual"][i // 2 % 2]} if i % 2 else {})
        cases.append((prompt, knobs, i))
    expected = [dlm_run(ctx.args, ctx.demo_artifact, prompt, knobs, seed)
                for prompt, knobs, seed in cases]

    def ask(case):
        prompt, knobs, seed = case
        return server.client.completions.create(model="demo", prompt=prompt, temperature=0,
                                                seed=seed, extra_body=knobs)

    peak = {"dlm_requests_waiting": 0, "dlm_requests_running": 0}
    sampling = [True]

    def sample():
        while sampling[0]:
            metrics = server.metrics()
            for name in peak:
                peak[name] = max(peak[name], metrics[name])
            time.sleep(0.02)

    sampler = concurrent.futures.ThreadPoolExecutor(1)
    sampled = sampler.submit(sample)
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        answers = list(pool.map(ask, cases))
    seconds = time.time() - start
    sampling[0] = False
    sampled.result()
    sampler.shutdown()
    for (prompt, knobs, seed), want, got in zip(cases, expected, answers):
        assert got.choices[0].text == want["text"], (prompt, got.choices[0].text, want["text"])
        assert got.usage.prompt_tokens == len(want["prompt_ids"])
    metrics = server.metrics()
    print(f"  {label}: 16 concurrent requests (no cache, prefix, dual) equal dlm-run in "
          f"{seconds:.2f} s; "
          f"{metrics['dlm_scheduler_requests_per_forward']:.2f} requests per packed forward, "
          f"peaks: {peak['dlm_requests_running']:.0f} running, "
          f"{peak['dlm_requests_waiting']:.0f} waiting")
    metrics["peak"] = peak
    return metrics


def check_concurrent(ctx):
    assert "batch-invariant)" in ctx.demo.output(), ctx.demo.output()
    concurrent_matches_dlm_run(ctx, ctx.demo, "default pool")


def check_small_pool(ctx):
    longest = max(len(dlm_run(ctx.args, ctx.demo_artifact, p, {"gen_length": 32,
                                                               "steps": 32}, 0)["prompt_ids"])
                  for p in PROMPTS)
    pages = 4 * math.ceil((longest + 64) / PAGE_TOKENS)
    server = Server(ctx.args.dlm_serve, ctx.demo_artifact, "--kv-pages", str(pages),
                    "--batch-invariant")
    try:
        metrics = concurrent_matches_dlm_run(ctx, server, f"{pages} KV pages (4 requests)")
        assert metrics["dlm_kv_pages_total"] == pages, metrics
        assert metrics['dlm_requests_total{outcome="success"}'] == 16, metrics
        assert metrics["dlm_kv_pages_in_use"] == 0 and metrics["dlm_kv_pages_reserved"] == 0
        # The pool admits about 4 (shorter prompts need fewer pages): the rest waited.
        assert metrics["peak"]["dlm_requests_running"] <= 6, metrics["peak"]
        assert metrics["peak"]["dlm_requests_waiting"] >= 8, metrics["peak"]
    finally:
        assert server.stop() == 0, server.output()


def check_queue_full(ctx):
    server = Server(ctx.args.dlm_serve, ctx.demo_artifact, "--max-batch", "1", "--max-queue", "1")
    try:
        def ask(i):
            try:
                server.client.completions.create(model="demo", prompt=PROMPT, max_tokens=96,
                                                 extra_body={"steps": 96})
                return "ok"
            except openai.RateLimitError as error:
                assert error.response.headers.get("retry-after") == "1"
                return "429"
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(ask, range(6)))
        assert "429" in results and "ok" in results, results
        print(f"  --max-batch 1 --max-queue 1, 6 at once: {results.count('429')} answered 429")
    finally:
        assert server.stop() == 0, server.output()


def slow_request_body(stream):
    return json.dumps({"model": "demo", "prompt": PROMPT, "max_tokens": 96, "steps": 96,
                       "stream": stream}).encode()


def raw_post(server, body):
    connection = socket.create_connection(("127.0.0.1", server.port))
    connection.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Type: application/json\r\nContent-Length: "
                       + str(len(body)).encode() + b"\r\n\r\n" + body)
    return connection


def wait_metric(server, name, value, timeout=10):
    """Waits until metric `name` is `value` and no request runs (one scrape reads the engine's
    stats a moment before the server's own counters)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        metrics = server.metrics()
        if metrics.get(name) == value and metrics["dlm_requests_running"] == 0:
            return server.metrics()
        time.sleep(0.05)
    raise AssertionError(f"{name} never became {value}: {server.metrics()}")


def check_disconnect(ctx):
    server = Server(ctx.args.dlm_serve, ctx.demo_artifact)
    try:
        # Non-streaming: the client leaves while its request runs.
        connection = raw_post(server, slow_request_body(False))
        time.sleep(0.1)
        connection.close()
        metrics = wait_metric(server, 'dlm_requests_total{outcome="cancelled"}', 1)
        assert metrics["dlm_scheduler_cancelled_total"] >= 1, metrics
        assert metrics["dlm_kv_pages_in_use"] == 0 and metrics["dlm_kv_pages_reserved"] == 0
        # Streaming: the client leaves after the first event.
        connection = raw_post(server, slow_request_body(True))
        received = b""
        while b"data:" not in received:
            received += connection.recv(4096)
        connection.close()
        metrics = wait_metric(server, 'dlm_requests_total{outcome="cancelled"}', 2)
        assert metrics["dlm_kv_pages_in_use"] == 0 and metrics["dlm_kv_pages_reserved"] == 0
        assert metrics['dlm_requests_total{outcome="success"}'] == 0, metrics
        print(f"  2 disconnects cancelled, "
              f"{metrics['dlm_scheduler_cancelled_total']:.0f} forwards refused, pages freed")
    finally:
        assert server.stop() == 0, server.output()


def check_sigterm_drains(ctx):
    server = Server(ctx.args.dlm_serve, ctx.demo_artifact)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(lambda: server.client.completions.create(
            model="demo", prompt=PROMPT, max_tokens=96, extra_body={"steps": 96}))
        deadline = time.time() + 10
        while server.metrics()["dlm_requests_running"] != 1 and time.time() < deadline:
            time.sleep(0.01)
        server.process.send_signal(signal.SIGTERM)
        result = answer.result(timeout=30)
    assert result.usage.completion_tokens > 0
    assert server.process.wait(timeout=30) == 0, server.output()
    assert "draining" in server.output(), server.output()


CHECKS = [check_completions, check_streaming, check_stop, check_chat, check_errors,
          check_concurrent, check_small_pool, check_queue_full, check_disconnect,
          check_sigterm_drains]


class Context:
    pass


def run_checks(checks, ctx, servers):
    """Runs each check, printing ok or FAIL with its traceback, then stops `servers` (a server
    that does not exit 0 fails too). Returns the number of failures."""
    failures = 0
    try:
        for check in checks:
            start = time.time()
            try:
                check(ctx)
                print(f"ok   {check.__name__} ({time.time() - start:.1f} s)", flush=True)
            except Exception:
                failures += 1
                print(f"FAIL {check.__name__}", flush=True)
                traceback.print_exc()
    finally:
        for server in servers:
            status = server.stop()
            if status != 0:
                failures += 1
                print(f"FAIL dlm-serve exited {status}:\n{server.output()}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dlmc", required=True)
    parser.add_argument("--dlm-run", required=True)
    parser.add_argument("--dlm-serve", required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--keep", default="")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="dlm-serve-test-")
    os.makedirs(work, exist_ok=True)
    ctx = Context()
    ctx.args = args
    ctx.demo_artifact = os.path.join(work, "demo.dlm")
    subprocess.run([args.dlmc, "compile", DEMO, "-o", ctx.demo_artifact], check=True)
    chat_checkpoint = os.path.join(work, "demo_chat_checkpoint")
    shutil.rmtree(chat_checkpoint, ignore_errors=True)
    shutil.copytree(DEMO, chat_checkpoint)
    with open(os.path.join(chat_checkpoint, "chat_template.jinja"), "w") as out:
        out.write(CHAT_TEMPLATE)
    chat_artifact = os.path.join(work, "demo_chat.dlm")
    subprocess.run([args.dlmc, "compile", chat_checkpoint, "-o", chat_artifact], check=True)

    only = set(filter(None, args.only.split(",")))
    checks = [check for check in CHECKS if not only or check.__name__ in only]
    # Batch-invariant, so that 16 concurrent requests equal dlm-run whatever they are packed
    # with (check_serve_http.py serves the default mode).
    ctx.demo = Server(args.dlm_serve, ctx.demo_artifact, "--batch-invariant")
    ctx.chat = Server(args.dlm_serve, chat_artifact)
    try:
        failures = run_checks(checks, ctx, (ctx.demo, ctx.chat))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(checks) - failures} of {len(checks)} checks passed" if failures
          else f"all {len(checks)} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
