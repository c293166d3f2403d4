#!/usr/bin/env python3
"""dlm-serve soaked and shaken (issue 31 item 4): mixed load for a long time, memory sampled, the
server killed with SIGKILL halfway and restarted, and every request accounted for.

    bench/serve_soak.py [--minutes 30] [--clients 8] [--kill-at 0.5] [--checkpoint DIR]
                        [--threads N] [--json out.json]

Each client sends, one after another, a random mix: streaming and not; short and long prompts;
both decode programs of the artifact (low-confidence and entropy-bound); 10% that disconnect
before the answer (non-streaming: the socket closed while the request runs); 10% cancelled
mid-stream (closed after the first event). Every 10 s the server's resident memory is read from
/proc. Halfway through (--kill-at, a fraction of the run; 0 for never), the server is killed with
SIGKILL and started again on the same port.

Reported: requests sent; answered (a 200 with one complete answer, or one [DONE]); refused with
a named error (counted by status); abandoned on purpose (disconnects, cancellations); lost
(a request that should have had an answer and did not: a connection error or a stream without
[DONE]) apart from those in flight at the kill, which are reported on their own line; duplicated
(a response id seen twice); the resident memory's slope over each server's life after its first
minute (MiB per hour, least squares), over the whole life, its second half and each quarter,
against the noise of the samples around that line. The
server's own counters (/metrics) must agree with the answers it gave before the kill.
"""
import argparse
import http.client
import json
import os
import random
import signal
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
SHORT = ["For the developers' and authors'", "To protect your rights",
         "When we speak of free software"]
LONG = ("The GNU General Public License is a free, copyleft license for software and other kinds "
        "of works. The licenses for most software and other practical works are designed to ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, artifact, port, threads):
        self.artifact, self.port, self.threads = artifact, port, threads
        self.log = tempfile.TemporaryFile()
        self.start()

    def start(self):
        self.process = subprocess.Popen(
            [os.path.join(BUILD, "bin", "dlm-serve"), self.artifact, "--port", str(self.port),
             "--threads", str(self.threads)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("dlm-serve did not start")

    def rss_mib(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return {name: float(value) for name, value in
                    (line.rsplit(" ", 1) for line in r.read().decode().splitlines()
                     if line and not line.startswith("#"))}


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.ids = set()
        self.duplicates = 0
        self.errors = []

    def add(self, what, response_id=None, error=None):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            if response_id:
                if response_id in self.ids:
                    self.duplicates += 1
                self.ids.add(response_id)
            if error and len(self.errors) < 20:
                self.errors.append(error)


def body(rng, stream):
    prompt = rng.choice(SHORT) if rng.random() < 0.6 else LONG + rng.choice(SHORT)
    payload = {"model": "demo", "prompt": prompt, "max_tokens": rng.choice([16, 32, 64]),
               "stream": stream, "seed": rng.randrange(2**32),
               "policy": rng.choice(["low-confidence", "entropy-bound"])}
    if rng.random() < 0.5:
        payload["temperature"] = 0.7
    return json.dumps(payload)


def one(port, rng, tally, kill):
    """One request of the mix. `kill` holds the SIGKILL's window once it happened: a request
    started before the restart ended that gets no answer was in flight at the kill."""
    stream = rng.random() < 0.5
    action = rng.random()
    payload = body(rng, stream)
    started = time.time()

    def failed(error):
        if "Connection refused" in error:
            # The server is down (killed, not yet restarted): wait a little before the next one.
            time.sleep(0.2)
            return tally.add("refused: the server was down")
        at_kill = kill.get("restarted") is None and kill.get("killed") is not None or \
            kill.get("restarted") is not None and started <= kill["restarted"]
        tally.add("in flight at the kill" if at_kill else "lost", error=error)

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        if action < 0.1 and not stream:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                             f"{len(payload)}\r\n\r\n{payload}".encode())
                time.sleep(rng.random() * 0.05)
            return tally.add("disconnected")
        connection.request("POST", "/v1/completions", payload,
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            response.read()
            return tally.add(f"refused {response.status}")
        if not stream:
            answer = json.loads(response.read())
            if answer["choices"][0]["finish_reason"] in ("stop", "length"):
                return tally.add("answered", answer["id"])
            return failed(f"bad answer {answer}")
        done, response_id = 0, None
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if action < 0.2:
                return tally.add("cancelled mid-stream")
            data = line[6:]
            if data == "[DONE]":
                done += 1
                continue
            chunk = json.loads(data)
            if "error" in chunk:
                return failed(chunk["error"]["message"])
            response_id = chunk["id"]
        if done == 1:
            return tally.add("answered", response_id)
        failed(f"a stream ended after {done} [DONE]")
    except (OSError, http.client.HTTPException, ValueError) as error:
        failed(f"{type(error).__name__}: {error}")
    finally:
        connection.close()


def slope(samples):
    """(MiB per hour, residual standard deviation in MiB) of (seconds, MiB) samples."""
    if len(samples) < 3:
        return float("nan"), float("nan")
    xs = [s[0] for s in samples]
    ys = [s[1] for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    residual = statistics.pstdev([y - (my + b * (x - mx)) for x, y in zip(xs, ys)])
    return b * 3600, residual


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--kill-at", type=float, default=0.5,
                        help="when to SIGKILL and restart the server, as a fraction of the run; "
                             "0: never (one life, for the memory slope over the whole run)")
    parser.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dlm-soak-")
    artifact = os.path.join(work, "demo.dlm")
    subprocess.run([os.path.join(BUILD, "bin", "dlmc"), "compile", args.checkpoint, "-o",
                    artifact, "--policy", "low-confidence,entropy-bound"], check=True,
                   stdout=subprocess.DEVNULL)
    port = free_port()
    server = Server(artifact, port, args.threads)
    tally = Tally()
    kill = {}
    memory = {0: [], 1: []}
    start = time.time()
    end = start + args.minutes * 60

    def client(index):
        rng = random.Random(index)
        while time.time() < end:
            one(port, rng, tally, kill)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    life, life_start, killed = 0, start, False
    before_kill, metrics_before = {}, {}
    while time.time() < end:
        time.sleep(10)
        now = time.time()
        if now - life_start > 60:
            memory[life].append((now - life_start, server.rss_mib()))
        if not killed and args.kill_at > 0 and now - start > args.minutes * 60 * args.kill_at:
            before_kill = dict(tally.counts)
            metrics_before = server.metrics()
            kill["killed"] = time.time()
            server.process.kill()
            server.process.wait()
            server.start()
            kill["restarted"] = time.time()
            killed, life, life_start = True, 1, time.time()
    for thread in threads:
        thread.join()
    final_metrics = server.metrics()
    server.process.send_signal(signal.SIGTERM)
    exit_status = server.process.wait(timeout=60)

    counts = tally.counts
    lost = counts.get("lost", 0)
    kill_text = (f"SIGKILL + restart at {args.minutes * args.kill_at:g} min" if args.kill_at > 0
                 else "no SIGKILL")
    print(f"dlm-serve soak: {args.minutes:g} min, {args.clients} clients, {kill_text}")
    print("| what | count |\n|---|---|")
    print(f"| requests sent | {sum(counts.values())} |")
    for key in sorted(counts):
        print(f"| {key} | {counts[key]} |")
    print(f"| duplicated (a response id seen twice) | {tally.duplicates} |")
    for life_index in (0, 1) if killed else (0,):
        samples = memory[life_index]
        rate, noise = slope(samples)
        # The allocator's arenas and caches grow for a while and level off; a leak does not.
        late_rate, late_noise = slope(samples[len(samples) // 2:])
        print(f"| RSS, life {life_index + 1}: {len(samples)} samples, "
              f"{samples[0][1] if samples else 0:.1f} -> {samples[-1][1] if samples else 0:.1f} MiB"
              f" | slope {rate:+.1f} MiB/h (residual sd {noise:.2f} MiB); second half "
              f"{late_rate:+.1f} MiB/h (sd {late_noise:.2f}) |")
        quarter = len(samples) // 4
        quarters = [slope(samples[i * quarter:(i + 1) * quarter]) for i in range(4)]
        print(f"| RSS, life {life_index + 1}, by quarters | "
              + ", ".join(f"{rate:+.1f} MiB/h (sd {noise:.2f})" for rate, noise in quarters)
              + " |")
    served = final_metrics.get('dlm_requests_total{outcome="success"}', 0)
    # Its success counter also counts requests whose client left once the answer was complete.
    which = "the restarted server's" if killed else "the server's"
    print(f"| {which} success counter / answers{' since the restart' if killed else ''} | "
          f"{served:.0f} / "
          f"{counts.get('answered', 0) - before_kill.get('answered', 0)} |")
    print(f"| exit status after SIGTERM | {exit_status} |")
    for error in tally.errors:
        print("  error:", error)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": counts, "duplicates": tally.duplicates,
                       "memory": memory, "metrics_before_kill": metrics_before,
                       "final_metrics": final_metrics}, f, indent=1)
    return 1 if lost or tally.duplicates or exit_status != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
