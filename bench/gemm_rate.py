#!/usr/bin/env python3
"""The forward's GEMM rate against the GEMM library's own rate on the same shapes, in one run.

    .venv/bin/python bench/gemm_rate.py [--checkpoint DIR] [--build DIR] [--weights f32]
        [--threads 2] [--rounds 3] [--prompt-length 5] [--gen-length 64] [--block-length 32]
        [--steps 64] [--cache none] [--json OUT]

The checkpoint defaults to the 86M LLaDA bench model (bench/make_llada_checkpoint.py, made when
missing). dlmc compiles it once with --weights (f32 by default; bf16 and int8 run the tiled
GEMM, held to the same float32 library rates); then each round runs, one after the other,
  - dlm-prof on the artifact (a synthetic prompt, the settings above, one warm-up request):
    the time and shape of every GEMM call of the forwards (`gemm_shapes`: projections and LM head);
  - dlm-bench-gemm-library on exactly those shapes: oneDNN alone, warm, on the same thread count,
    as dnnl_sgemm on W [N, K] read transposed (sgemm_nt), dnnl_sgemm on W^T (sgemm_nn) and a matmul
    primitive with weights prepacked in its own layout (matmul_packed); and, apart, that matmul
    on weights cycled through 256 MiB of copies so that they come from memory as a forward's do
    (matmul_packed_streamed: what the library does with the forward's access pattern, not part
    of "best").
A rate over all shapes is the forward's FLOPs over the time the calls take, each shape weighted
by its call count in the forward: for the library, the time its rate on that shape gives. The
library's best takes the fastest method per shape. Figures are medians over the rounds; the
ratio is dlm's rate over the library's best, per round, then the median; "dlm / streamed" the same
against matmul_packed_streamed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from checkpoint_files import bench_cache  # noqa: E402

METHODS = ("sgemm_nt", "sgemm_nn", "matmul_packed")
# Not a candidate for "best" (the baseline is the library called alone, warm): the packed
# matmul with its weights coming from memory, as they do in a forward.
STREAMED = "matmul_packed_streamed"


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd[:2])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def prof_report(a, artifact, block_length, steps, cache):
    """dlm-prof's JSON report of one request on a synthetic prompt (a.prompt_length tokens,
    a.gen_length generated, a.threads threads), after one warm-up request."""
    return json.loads(run([
        os.path.join(a.build, "bin", "dlm-prof"), artifact, "--json",
        "--synthetic-length", str(a.prompt_length), "--gen-length", str(a.gen_length),
        "--block-length", str(block_length), "--steps", str(steps), "--cache", cache,
        "--threads", str(a.threads), "--warmup", "1", "--repeat", "1"]))


def profile(a, artifact):
    report = prof_report(a, artifact, a.block_length, a.steps, a.cache)
    forwards = report["forward_ms"]
    return report["gemm_shapes"], forwards["count"] / forwards["total"] * 1e3


def library(a, shapes):
    cmd = [os.path.join(a.build, "bin", "dlm-bench-gemm-library"), "--json",
           "--threads", str(a.threads), "--repeats", str(a.library_repeats)]
    for s in shapes:
        cmd += ["--shape", f"{s['m']}x{s['n']}x{s['k']}"]
    return {(r["m"], r["n"], r["k"]): r for r in json.loads(run(cmd))["shapes"]}


def flops(s):
    return 2.0 * s["m"] * s["n"] * s["k"]


def one_round(a, artifact):
    shapes, forwards_per_s = profile(a, artifact)
    rates = library(a, shapes)
    total = sum(flops(s) * s["calls"] for s in shapes)
    result = {"forwards_per_s": forwards_per_s,
              "dlm": total / sum(s["ms"] for s in shapes) * 1e-6, "shapes": []}
    seconds = {m: 0.0 for m in METHODS + ("best", STREAMED)}
    for s in shapes:
        r = rates[(s["m"], s["n"], s["k"])]
        best = max(r[m] for m in METHODS)
        work = flops(s) * s["calls"] * 1e-9
        for m in METHODS + (STREAMED,):
            seconds[m] += work / r[m]
        seconds["best"] += work / best
        result["shapes"].append({**s, **{m: r[m] for m in METHODS + (STREAMED,)}, "best": best,
                                 "matmul_impl": r["matmul_impl"]})
    for m, sec in seconds.items():
        result[m] = total * 1e-9 / sec
    result["ratio"] = result["dlm"] / result["best"]
    result["streamed_ratio"] = result["dlm"] / result[STREAMED]
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default=bench_cache("llada-768x12-bf16"))
    ap.add_argument("--build", default=os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--weights", default="f32", choices=["f32", "bf16", "int8"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--library-repeats", type=int, default=5)
    ap.add_argument("--prompt-length", type=int, default=5)
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--cache", default="none")
    ap.add_argument("--json", help="write the rounds and medians here")
    a = ap.parse_args()

    if not os.path.isdir(a.checkpoint):
        if a.checkpoint != bench_cache("llada-768x12-bf16"):
            sys.exit(f"no checkpoint at {a.checkpoint}")
        run([sys.executable, os.path.join(ROOT, "bench", "make_llada_checkpoint.py")])
    artifact = bench_cache(f"gemm_rate-{a.weights}.dlm")
    os.makedirs(os.path.dirname(artifact), exist_ok=True)
    run([os.path.join(a.build, "bin", "dlmc"), "compile", a.checkpoint, "-o", artifact,
         "--weights", a.weights])

    rounds = [one_round(a, artifact) for _ in range(a.rounds)]
    med = {k: statistics.median(r[k] for r in rounds)
           for k in ("dlm", "best", "ratio", "streamed_ratio", "forwards_per_s") + METHODS +
           (STREAMED,)}
    print(f"{a.checkpoint} (--weights {a.weights}): {a.threads} threads, prompt {a.prompt_length}, gen {a.gen_length}, "
          f"block {a.block_length}, steps {a.steps}, cache {a.cache}; median of {a.rounds} rounds\n")
    print("| kind | M | N | K | calls | dlm GFLOP/s | " + " | ".join(METHODS) +
          " | library best | dlm / best | " + STREAMED + " | dlm / streamed |")
    print("|---|---|---|---|---|---|" + "---|" * len(METHODS) + "---|---|---|---|")
    for i, s in enumerate(rounds[0]["shapes"]):
        per = lambda k: statistics.median(r["shapes"][i][k] for r in rounds)  # noqa: E731
        dlm = statistics.median(flops(r["shapes"][i]) * r["shapes"][i]["calls"] /
                                r["shapes"][i]["ms"] * 1e-6 for r in rounds)
        print(f"| {s['kind']} | {s['m']} | {s['n']} | {s['k']} | {s['calls']} | {dlm:.1f} | " +
              " | ".join(f"{per(m):.1f}" for m in METHODS) +
              f" | {per('best'):.1f} | {dlm / per('best'):.2f} | {per(STREAMED):.1f} | "
              f"{dlm / per(STREAMED):.2f} |")
    print(f"| **all** | | | | | **{med['dlm']:.1f}** | " +
          " | ".join(f"{med[m]:.1f}" for m in METHODS) +
          f" | **{med['best']:.1f}** | **{med['ratio']:.2f}** | {med[STREAMED]:.1f} | "
          f"**{med['streamed_ratio']:.2f}** |")
    print(f"\nforwards/s (dlm-prof, profiled): {med['forwards_per_s']:.2f}; matmul_packed runs "
          f"{rounds[0]['shapes'][0]['matmul_impl'] if rounds[0]['shapes'] else '-'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": vars(a), "rounds": rounds, "median": med}, f, indent=1)


if __name__ == "__main__":
    main()
