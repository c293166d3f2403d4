#!/usr/bin/env python3
"""dlm against an earlier build of itself: the same checkpoint, prompts and settings, each build
compiling its own artifact, runs interleaved.

    bench/compare_builds.py --baseline-build DIR [--build DIR] [--checkpoint DIR]
                            [--prompts FILE] [--gen-length 64] [--block-length 32] [--steps 64]
                            [--threshold T] [--cache none|prefix] [--repeats 7] [--threads 1]

For a change that must not slow dlm down: build the commit before it in another directory (a
clone's `scripts/setup`, or `cmake --build`), then run this with that directory as the baseline.
Each build's dlmc compiles the checkpoint with the same flags (an artifact written by one build
need not load in the other); then, for each repeat and prompt, the two builds' dlm-run run one
after the other, alternating which goes first, so that drift in the machine's load hits both
alike. dlm-run reports its own decoding time (loading excluded). Prints medians of tokens/s and
forwards/s per build, their ratio, and whether the two builds produced the same tokens.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CHECKPOINT = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")
DEFAULT_PROMPTS = ["For the developers' and authors'", "When we speak of free software",
                   "The licenses for most software"]


def compile_artifact(build, args, path):
    cmd = [os.path.join(build, "bin", "dlmc"), "compile", args.checkpoint, "-o", path,
           "--gen-length", str(args.gen_length), "--block-length", str(args.block_length),
           "--steps", str(args.steps)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"{build}: dlmc compile failed: {run.stderr.strip()}")


def generate(build, artifact, prompt, args):
    cmd = [os.path.join(build, "bin", "dlm-run"), artifact, "--prompt", prompt, "--json",
           "--threads", str(args.threads), "--cache", args.cache]
    if args.threshold is not None:
        cmd += ["--threshold", str(args.threshold)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"{build}: dlm-run failed on {prompt!r}: {run.stderr.strip()}")
    result = json.loads(run.stdout)
    return result["output_ids"], result["forwards"], result["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline-build", required=True, help="the earlier build directory")
    ap.add_argument("--build", default=os.environ.get("DLM_BUILD_DIR",
                                                      os.path.join(ROOT, "build")))
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    ap.add_argument("--prompts", help="one prompt per line")
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--threshold", type=float)
    ap.add_argument("--cache", default="none")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    prompts = DEFAULT_PROMPTS
    if args.prompts:
        with open(args.prompts) as f:
            prompts = [line.strip() for line in f if line.strip()]
    builds = {"baseline": args.baseline_build, "this build": args.build}

    with tempfile.TemporaryDirectory() as work:
        artifacts = {}
        for name, build in builds.items():
            artifacts[name] = os.path.join(work, name.replace(" ", "_") + ".dlm")
            compile_artifact(build, args, artifacts[name])
        tokens_per_s = {name: [] for name in builds}
        forwards_per_s = {name: [] for name in builds}
        outputs = {name: {} for name in builds}
        order = list(builds)
        for repeat in range(args.repeats):
            for prompt in prompts:
                for name in (order if repeat % 2 == 0 else order[::-1]):
                    ids, forwards, seconds = generate(builds[name], artifacts[name], prompt, args)
                    tokens_per_s[name].append(len(ids) / seconds)
                    forwards_per_s[name].append(forwards / seconds)
                    outputs[name][prompt] = ids

    same = all(outputs["baseline"][p] == outputs["this build"][p] for p in prompts)
    print(f"{len(prompts)} prompts x {args.repeats} repeats, gen {args.gen_length}, block "
          f"{args.block_length}, steps {args.steps}, threshold {args.threshold}, cache "
          f"{args.cache}, {args.threads} thread(s); medians")
    print(f"{'build':<12} {'tokens/s':>10} {'forwards/s':>11}")
    for name in builds:
        print(f"{name:<12} {statistics.median(tokens_per_s[name]):>10.1f} "
              f"{statistics.median(forwards_per_s[name]):>11.1f}")
    ratio = statistics.median(tokens_per_s["this build"]) / statistics.median(
        tokens_per_s["baseline"])
    print(f"this build / baseline: {ratio:.3f} (tokens/s); same tokens: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
