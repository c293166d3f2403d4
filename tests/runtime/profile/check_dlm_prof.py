#!/usr/bin/env python3
"""dlm-prof on a tiny compiled model: the printed report has its sections, --json has its fields,
and --trace writes a valid Chrome trace (JSON object form, trace event schema).

    check_dlm_prof.py --dlmc build/bin/dlmc --dlm-prof build/bin/dlm-prof [--work DIR]
    check_dlm_prof.py --validate-trace trace.json        # only validate a trace

Exit status 77 (ctest: skipped) when the packages that make the tiny checkpoint are missing.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The bundled demo model: what a user profiles first.
DEMO_CHECKPOINT = os.path.join(HERE, "..", "..", "models", "demo", "checkpoint")

REPORT_SECTIONS = [
    "== Kernels (calling thread) ==",
    "== Denoise steps ==",
    "== Requests ==",
    "== Memory (peak) ==",
]
REPORT_LINES = ["step time", "host overhead/step", "steps per block", "weights", "KV pages",
                "activations", "gemm", "attention", "lm_head"]
KERNEL_KINDS = {"embedding", "rmsnorm", "gemm", "rope", "kv_store", "attention", "elementwise",
                "lm_head"}
METADATA_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index",
                  "process_labels"}
# Slack for the microsecond rounding of ts and dur.
EPSILON_US = 0.002


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_trace(trace):
    """Problems with `trace` (a parsed Chrome trace, JSON object form); empty when valid."""
    problems = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["the trace is not an object with a traceEvents array"]
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit {trace['displayTimeUnit']!r} is not ms or ns")
    complete = {}
    named_threads, named_processes = set(), set()
    for i, e in enumerate(trace["traceEvents"]):
        where = f"event {i} ({e.get('name')!r})" if isinstance(e, dict) else f"event {i}"
        if not isinstance(e, dict):
            problems.append(f"{where} is not an object")
            continue
        for key, kind in (("name", str), ("ph", str), ("pid", int), ("tid", int)):
            if not isinstance(e.get(key), kind) or isinstance(e.get(key), bool):
                problems.append(f"{where}: {key} missing or not {kind.__name__}")
        if "args" in e and not isinstance(e["args"], dict):
            problems.append(f"{where}: args is not an object")
        ph = e.get("ph")
        if ph == "X":
            if not isinstance(e.get("cat"), str):
                problems.append(f"{where}: cat missing")
            for key in ("ts", "dur"):
                if not is_number(e.get(key)) or e[key] < 0:
                    problems.append(f"{where}: {key} missing or negative")
            if all(is_number(e.get(k)) for k in ("ts", "dur")):
                complete.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        elif ph == "M":
            if e.get("name") not in METADATA_NAMES:
                problems.append(f"{where}: unknown metadata event")
            args = e.get("args", {})
            if e.get("name") in ("process_name", "thread_name"):
                if not isinstance(args.get("name"), str):
                    problems.append(f"{where}: args.name missing")
                (named_processes if e["name"] == "process_name" else named_threads).add(
                    e.get("pid") if e["name"] == "process_name" else (e.get("pid"), e.get("tid")))
            if e.get("name", "").endswith("sort_index") and not isinstance(
                    args.get("sort_index"), int):
                problems.append(f"{where}: args.sort_index missing")
        else:
            problems.append(f"{where}: phase {ph!r} is not X or M")

    if not complete:
        problems.append("no complete (X) events")
    for (pid, tid), events in sorted(complete.items()):
        if (pid, tid) not in named_threads:
            problems.append(f"track pid {pid} tid {tid} has no thread_name")
        if pid not in named_processes:
            problems.append(f"process {pid} has no process_name")
        # Complete events on one track must nest: each starts after its parent starts and ends
        # before it ends, or starts after it ended.
        events = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in events:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and start >= stack[-1] - EPSILON_US:
                stack.pop()
            if stack and end > stack[-1] + EPSILON_US:
                problems.append(f"pid {pid} tid {tid}: {e['name']!r} at {start} overlaps its "
                                f"parent without nesting")
                break
            stack.append(end)
    return problems


def run(cmd, expect=0):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != expect:
        raise AssertionError(f"{' '.join(cmd)}: exit {proc.returncode}, expected {expect}\n"
                             f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")
    return proc


def check(work, dlmc, prof):
    problems = []
    artifact = os.path.join(work, "demo.dlm")
    run([dlmc, "compile", DEMO_CHECKPOINT, "-o", artifact, "--gen-length",
         "16", "--block-length", "8", "--steps", "8"])
    prompts = os.path.join(work, "prompts.txt")
    with open(prompts, "w") as f:
        f.write("Hello world\n\nThe quick brown fox\n")
    trace_path = os.path.join(work, "trace.json")
    base = [prof, artifact, "--prompts", prompts, "--synthetic-length", "12", "--repeat", "2",
            "--threads", "2"]

    # The printed report.
    text = run(base + ["--warmup", "1", "--trace", trace_path]).stdout
    for header in REPORT_SECTIONS:
        if header not in text:
            problems.append(f"report: no section {header!r}")
    for line in REPORT_LINES:
        if not any(l.startswith(line) for l in text.splitlines()):
            problems.append(f"report: no line starting {line!r}")

    # The trace.
    with open(trace_path) as f:
        trace = json.load(f)
    problems += [f"trace: {p}" for p in validate_trace(trace)]
    xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    cats = {e["cat"] for e in xs}
    for needed in ("gemm", "attention", "forward", "denoise_step", "request", "block"):
        if needed not in cats and needed not in {e["name"] for e in xs}:
            problems.append(f"trace: no {needed!r} events")
    requests = [e for e in xs if e["cat"] == "request"]
    if len(requests) != 6:  # 3 prompts x 2 repeats; the warmup is not recorded
        problems.append(f"trace: {len(requests)} request events, expected 6")
    if len({e["tid"] for e in requests}) != 6:
        problems.append("trace: requests do not each have their own track")
    if any(e["cat"] in KERNEL_KINDS and e["pid"] != 1 for e in xs):
        problems.append("trace: kernel events outside the thread tracks (pid 1)")

    # A prompt long enough for the attention to run on the pool: one track per worker thread.
    workers_trace = os.path.join(work, "workers.json")
    run([prof, artifact, "--synthetic-length", "100", "--threads", "4", "--trace", workers_trace])
    with open(workers_trace) as f:
        workers = json.load(f)
    problems += [f"workers trace: {p}" for p in validate_trace(workers)]
    tids = {e["tid"] for e in workers["traceEvents"] if e.get("ph") == "X" and e["pid"] == 1}
    if tids != {0, 1, 2, 3}:
        problems.append(f"workers trace: thread tracks {sorted(tids)}, expected [0, 1, 2, 3]")

    # --json.
    report = json.loads(run(base + ["--json", "--cache", "prefix"]).stdout)
    for key in ("kernels", "gemm_shapes", "step_ms", "host_overhead_ms", "steps_per_block", "forward_ms",
                "requests", "totals", "memory", "untracked_ms", "events", "dropped_events"):
        if key not in report:
            problems.append(f"json: no {key!r}")
    if not problems:
        kinds = {k["kind"] for k in report["kernels"]}
        if not {"gemm", "attention", "lm_head", "rmsnorm"} <= kinds or not kinds <= KERNEL_KINDS:
            problems.append(f"json: kernel kinds {sorted(kinds)}")
        share = sum(k["share"] for k in report["kernels"])
        if not 0.5 < share <= 1.0 + 1e-9:
            problems.append(f"json: kernel shares sum to {share}")
        gemm = [k for k in report["kernels"] if k["kind"] == "gemm"]
        if not gemm or not gemm[0].get("gflops", 0) > 0:
            problems.append(f"json: the gemm row has no GFLOP/s: {gemm}")
        shapes = report.get("gemm_shapes", [])
        if not shapes or any(not (s["m"] > 0 and s["n"] > 0 and s["k"] > 0 and s["gflops"] > 0)
                             for s in shapes):
            problems.append(f"json: gemm_shapes {shapes}")
        elif sum(s["calls"] for s in shapes if s["kind"] == "gemm") != gemm[0]["calls"]:
            problems.append("json: gemm_shapes' calls differ from the gemm row's")
        if len(report["requests"]) != 6:
            problems.append(f"json: {len(report['requests'])} requests, expected 6")
        for r in report["requests"]:
            if r["generated_tokens"] <= 0 or r["tokens_per_second"] <= 0 or \
                    r["tokens_per_forward"] <= 0:
                problems.append(f"json: request {r['id']} has no throughput: {r}")
        if report["step_ms"]["count"] != sum(r["decode_steps"] for r in report["requests"]):
            problems.append("json: step count differs from the requests' decode steps")
        if report["steps_per_block"]["count"] != sum(r["blocks"] for r in report["requests"]):
            problems.append("json: block count differs from the requests' blocks")
        if report["host_overhead_ms"]["mean"] > report["step_ms"]["mean"]:
            problems.append("json: host overhead exceeds the step time")
        memory = report["memory"]
        for key in ("weight_bytes", "kv_pool_bytes", "kv_peak_bytes", "activation_bytes",
                    "peak_rss_bytes"):
            if not memory.get(key, 0) > 0:
                problems.append(f"json: memory.{key} is not positive")
        # Which GEMM the demo model's projections and LM head took, and the loops' level.
        paths = report.get("kernel_paths", [])
        if not any(re.match(r"\d+ projections: \S", p) for p in paths) or \
                not any(re.match(r"\d+ LM head: \S", p) for p in paths) or \
                not any(p.startswith("vectorised loops: ") for p in paths):
            problems.append(f"json: kernel_paths {paths}")
        if report["cache"] != "prefix" or report["dropped_events"] != 0:
            problems.append(f"json: cache {report['cache']}, dropped {report['dropped_events']}")

    # Bad arguments: exit status 2 with a message.
    for args, message in ((["--repeat", "0", "--synthetic-length", "4"], "bad value"),
                          ([], "give a workload"),
                          (["--prompts", os.path.join(work, "missing.txt")], "cannot read")):
        proc = run([prof, artifact] + args, expect=2)
        if message not in proc.stderr:
            problems.append(f"dlm-prof {args}: stderr {proc.stderr.strip()[:120]!r}, expected "
                            f"{message!r}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlmc")
    ap.add_argument("--dlm-prof")
    ap.add_argument("--work", help="work in this directory (emptied first)")
    ap.add_argument("--validate-trace", help="only validate this trace file")
    args = ap.parse_args(argv)

    if args.validate_trace:
        with open(args.validate_trace) as f:
            problems = validate_trace(json.load(f))
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0

    if not args.dlmc or not args.dlm_prof:
        ap.error("--dlmc and --dlm-prof are required")
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: making the tiny checkpoint needs {e.name}", file=sys.stderr)
        return 77
    work = args.work or os.path.join(os.getcwd(), "dlm_prof_work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        problems = check(work, args.dlmc, args.dlm_prof)
    except AssertionError as e:
        problems = [str(e)]
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    if not problems:
        print("dlm-prof: report, --json and --trace are as expected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
