#!/usr/bin/env python3
"""dlm-serve under load (issue 14 item 3): 1, 4, 16 and 64 concurrent clients on loopback
against a dlm-serve this script starts on the bundled demo model.

    bench/serve_load.py [--checkpoint DIR] [--concurrency 1,4,16,64] [--requests-per-client 2]
                        [--max-tokens 64] [--threads N] [--serve-flags "..."] [--json out.json]

Every client sends streaming completions (`stream: true`, include_usage) one after another,
each from one of the demo model's training openings at temperature 0, and reads the stream to
its end. Per concurrency level it reports requests/s, generated tokens/s (completion tokens
from the usage chunks over the level's wall time), p50/p99 latency, p50 time to the first
committed block (the first text chunk), and, from /metrics over the level, tokens fed per
packed forward, request forwards per packed forward, and the KV pages in use (peak of samples
every 50 ms). Every request must be answered exactly once (one usage chunk, one [DONE], no
error) and the server's success count must grow by exactly the requests sent. Concurrency 1 is
the named baseline: the table gives each level's throughput as a multiple of it.
"""
import argparse
import http.client
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build"))
DEFAULT_CHECKPOINT = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")
PROMPTS = [
    "For the developers' and authors'",
    "The GNU General Public License is a free, copyleft license",
    "When we speak of free software, we are referring to freedom",
    "To protect your rights, we need to prevent others",
    "For example, if you distribute copies of such a program",
    "Developers that use the GNU GPL protect your rights",
    "Some devices are designed to deny users access",
    "The precise terms and conditions for copying, distribution",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        values = {}
        for line in response.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values


def one_request(port, prompt, max_tokens):
    """Streams one completion; returns (latency, time to first text, completion tokens)."""
    body = json.dumps({"model": "demo", "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]!r}")
    first = None
    usage = []
    done = 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        if data == "[DONE]":
            done += 1
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(chunk["error"]["message"])
        if chunk.get("usage"):
            usage.append(chunk["usage"]["completion_tokens"])
        if first is None and chunk["choices"] and chunk["choices"][0]["text"]:
            first = time.perf_counter() - start
    connection.close()
    if done != 1 or len(usage) != 1:
        raise RuntimeError(f"answered {done} times with {len(usage)} usage chunks")
    latency = time.perf_counter() - start
    return latency, first if first is not None else latency, usage[0]


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def run_level(port, clients, per_client, max_tokens):
    before = metrics(port)
    results, errors = [], []
    lock = threading.Lock()
    peak = {"pages": 0.0, "running": 0.0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            m = metrics(port)
            peak["pages"] = max(peak["pages"], m["dlm_kv_pages_in_use"])
            peak["running"] = max(peak["running"], m["dlm_requests_running"])
            time.sleep(0.05)

    def client(index):
        for i in range(per_client):
            prompt = PROMPTS[(index * per_client + i) % len(PROMPTS)]
            try:
                result = one_request(port, prompt, max_tokens)
                with lock:
                    results.append(result)
            except Exception as error:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(error))

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    after = metrics(port)
    sent = clients * per_client
    succeeded = after['dlm_requests_total{outcome="success"}'] - \
        before['dlm_requests_total{outcome="success"}']
    if errors or len(results) != sent or succeeded != sent:
        raise RuntimeError(f"{clients} clients: {len(results)} of {sent} answered, server counted "
                           f"{succeeded:.0f}; errors: {errors[:3]}")
    runs = after["dlm_scheduler_runs_total"] - before["dlm_scheduler_runs_total"]
    fed = after["dlm_scheduler_fed_tokens_total"] - before["dlm_scheduler_fed_tokens_total"]
    forwards = after["dlm_scheduler_forwards_total"] - before["dlm_scheduler_forwards_total"]
    tokens = sum(r[2] for r in results)
    return {
        "concurrency": clients,
        "requests": sent,
        "seconds": seconds,
        "requests_per_second": sent / seconds,
        "tokens_per_second": tokens / seconds,
        "latency_p50": percentile([r[0] for r in results], 0.5),
        "latency_p99": percentile([r[0] for r in results], 0.99),
        "first_block_p50": percentile([r[1] for r in results], 0.5),
        "fed_tokens_per_forward": fed / runs if runs else 0.0,
        "requests_per_forward": forwards / runs if runs else 0.0,
        "kv_pages_in_use_peak": peak["pages"],
        "running_peak": peak["running"],
        "kv_pages": after["dlm_kv_pages_total"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--serve-flags", default="")
    parser.add_argument("--dlmc", default=os.path.join(BUILD, "bin", "dlmc"))
    parser.add_argument("--dlm-serve", default=os.path.join(BUILD, "bin", "dlm-serve"))
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="dlm-serve-load-")
    artifact = os.path.join(work, "demo.dlm")
    subprocess.run([args.dlmc, "compile", args.checkpoint, "-o", artifact], check=True)
    port = free_port()
    log = open(os.path.join(work, "dlm-serve.log"), "w")
    server = subprocess.Popen([args.dlm_serve, artifact, "--port", str(port),
                               "--threads", str(args.threads), *shlex.split(args.serve_flags)],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while True:
            try:
                metrics(port)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    sys.exit(f"dlm-serve did not start (log: {log.name})")
                time.sleep(0.05)
        one_request(port, PROMPTS[0], args.max_tokens)  # warm up (weights, first kernels)
        levels = [run_level(port, int(c), args.requests_per_client, args.max_tokens)
                  for c in args.concurrency.split(",")]
    finally:
        server.terminate()
        server.wait(timeout=60)

    base = levels[0]
    print(f"dlm-serve, demo model, {args.max_tokens} tokens per request, "
          f"{args.requests_per_client} requests per client, KV pool {base['kv_pages']:.0f} "
          f"pages; baseline: concurrency {base['concurrency']}\n")
    print("| clients | requests | req/s | tokens/s | vs baseline | p50 latency | p99 latency "
          "| p50 first block | fed tokens/forward | requests/forward | KV pages in use (peak) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for level in levels:
        name = f"{level['concurrency']}" + (" (baseline)" if level is base else "")
        print(f"| {name} | {level['requests']} | {level['requests_per_second']:.2f} "
              f"| {level['tokens_per_second']:.0f} "
              f"| {level['tokens_per_second'] / base['tokens_per_second']:.2f}x "
              f"| {level['latency_p50'] * 1000:.0f} ms | {level['latency_p99'] * 1000:.0f} ms "
              f"| {level['first_block_p50'] * 1000:.0f} ms "
              f"| {level['fed_tokens_per_forward']:.0f} | {level['requests_per_forward']:.2f} "
              f"| {level['kv_pages_in_use_peak']:.0f} |")
    print("\nEvery request was answered exactly once.")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(levels, out, indent=1)


if __name__ == "__main__":
    main()
