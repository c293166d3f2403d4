#!/usr/bin/env python3
"""dlm on the CPU against the PyTorch eager reference: same checkpoint, prompts and settings.

    bench/compare_cpu.py [--checkpoint DIR] [--prompts FILE] [--gen-length 64] [--block-length 32]
                         [--steps 64] [--threshold T] [--cache none|prefix] [--repeats 5]
                         [--threads N] [--json out.json]

Compiles the checkpoint with dlmc, then for each repeat and prompt runs `dlm-run --json` and
`tests/reference/generate.py --json` one after the other (interleaved, so drift in machine
load hits both alike). Each engine reports its own generation time (model loading excluded);
the table gives medians of tokens/s, forwards/s, tokens per forward (TPF) and whether both
produced the same tokens. The baseline is the reference sampler in PyTorch eager mode on the
same number of threads, which is what the correctness tests compare against.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build"))
DEFAULT_CHECKPOINT = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")
DEFAULT_PROMPTS = ["The license grants", "def main():", "In this document, the term"]


def run_json(cmd, env=None):
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{result.stderr}")
    return json.loads(result.stdout)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    ap.add_argument("--prompts", help="file with one prompt per line")
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--threshold", type=float)
    ap.add_argument("--cache", default="none", choices=["none", "prefix"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    prompts = DEFAULT_PROMPTS
    if args.prompts:
        with open(args.prompts) as f:
            prompts = [line.rstrip("\n") for line in f if line.strip()]

    settings = ["--gen-length", str(args.gen_length), "--block-length", str(args.block_length),
                "--steps", str(args.steps), "--cache", args.cache, "--temperature", "0"]
    if args.threshold is not None:
        settings += ["--threshold", str(args.threshold)]

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), DLM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        artifact = os.path.join(tmp, "model.dlm")
        subprocess.run([os.path.join(BUILD, "bin", "dlmc"), "compile", args.checkpoint, "-o",
                        artifact, "--gen-length", str(args.gen_length), "--block-length",
                        str(args.block_length), "--steps", str(args.steps)], check=True)
        engines = {
            "dlm": [os.path.join(BUILD, "bin", "dlm-run"), artifact, "--json", *settings],
            "pytorch": [sys.executable, os.path.join(ROOT, "tests", "reference", "generate.py"),
                        args.checkpoint, "--json", "--threads", str(args.threads), *settings],
        }
        runs = {name: [] for name in engines}
        agree = True
        for _ in range(args.repeats):
            for prompt in prompts:
                outputs = {}
                for name, cmd in engines.items():
                    out = run_json(cmd + ["--prompt", prompt], env)
                    runs[name].append(out)
                    outputs[name] = out["output_ids"]
                agree = agree and outputs["dlm"] == outputs["pytorch"]

    def summary(name):
        rs = runs[name]
        tokens = [len(r["output_ids"]) for r in rs]
        return {
            "tokens_per_s": statistics.median(t / r["seconds"] for t, r in zip(tokens, rs)),
            "forwards_per_s": statistics.median(r["forwards"] / r["seconds"] for r in rs),
            "tokens_per_forward": statistics.median(t / r["forwards"] for t, r in zip(tokens, rs)),
            "seconds_median": statistics.median(r["seconds"] for r in rs),
            "runs": len(rs),
        }

    result = {
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": args.threads},
        "settings": {"checkpoint": args.checkpoint, "prompts": len(prompts),
                     "gen_length": args.gen_length, "block_length": args.block_length,
                     "steps": args.steps, "threshold": args.threshold, "cache": args.cache,
                     "repeats": args.repeats},
        "dlm": summary("dlm"),
        "pytorch": summary("pytorch"),
        "same_tokens": agree,
    }
    result["speedup_tokens_per_s"] = result["dlm"]["tokens_per_s"] / result["pytorch"]["tokens_per_s"]

    print(f"machine: {result['machine']['cpu']}, {args.threads} threads")
    print(f"settings: gen {args.gen_length}, block {args.block_length}, steps {args.steps}, "
          f"threshold {args.threshold}, cache {args.cache}, {len(prompts)} prompts x {args.repeats}")
    print(f"{'engine':<10}{'tokens/s':>12}{'forwards/s':>12}{'TPF':>8}{'s/request':>12}")
    for name in ("dlm", "pytorch"):
        s = result[name]
        print(f"{name:<10}{s['tokens_per_s']:>12.1f}{s['forwards_per_s']:>12.1f}"
              f"{s['tokens_per_forward']:>8.2f}{s['seconds_median']:>12.4f}")
    print(f"dlm / pytorch tokens/s: {result['speedup_tokens_per_s']:.2f}x; "
          f"same tokens: {'yes' if agree else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
