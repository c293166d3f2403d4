#!/usr/bin/env python3
"""How far a model decodes in parallel, and at what cost in quality: one token per forward
against Fast-dLLM's confidence threshold, over many prompts.

    bench/parallel_decoding.py [--checkpoint DIR] [--prompts FILE] [--thresholds 0.9,0.8,0.7]
                               [--gen-length 64] [--block-length 32] [--json out.json]

Compiles the checkpoint with dlmc, then for each prompt runs `dlm-run --score` once with one
token per forward (steps = gen_length) and once per threshold (steps = gen_length too, so the
step count never forces a token out). Per threshold it prints the median tokens per forward, the
median change of the output's NLL under the model against the one-token-per-forward run
(nats/token, lower is better), and how many prompts decode at least 2 tokens per forward with an
NLL no worse than that run's. The baseline is that run on the same prompt, same artifact.

Default prompts: the first five words of each paragraph of at least nine words in the bundled
demo model's training text (the first 10 kB of /usr/share/common-licenses/GPL-3), the prompts
that model knows the continuation of.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build"))
DEFAULT_CHECKPOINT = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")


def training_prompts():
    """The first five words of the demo model's training paragraphs (those of nine words or
    more), the paragraphs taken exactly as its training script takes them."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "models", "demo"))
    from train_demo_model import DEFAULT_CORPUS_CHARS, corpus_paragraphs
    return [" ".join(p.split()[:5]) for p in corpus_paragraphs(DEFAULT_CORPUS_CHARS)
            if len(p.split()) > 8]


def generate(artifact, prompt, args, threshold=None):
    cmd = [os.path.join(BUILD, "bin", "dlm-run"), artifact, "--prompt", prompt,
           "--gen-length", str(args.gen_length), "--block-length", str(args.block_length),
           "--steps", str(args.gen_length), "--score", "--json"]
    if threshold is not None:
        cmd += ["--threshold", str(threshold)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"dlm-run failed on {prompt!r}: {run.stderr.strip()}")
    result = json.loads(run.stdout)
    return {"tokens_per_forward": result["tokens_per_forward"], "nll": result["output_nll"],
            "text": result["text"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    ap.add_argument("--prompts", help="one prompt per line (default: the demo model's)")
    ap.add_argument("--thresholds", default="0.9,0.8,0.7")
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    if args.prompts:
        with open(args.prompts) as f:
            prompts = [line.strip() for line in f if line.strip()]
    else:
        prompts = training_prompts()
    thresholds = [float(t) for t in args.thresholds.split(",")]

    with tempfile.TemporaryDirectory() as work:
        artifact = os.path.join(work, "model.dlm")
        subprocess.run([os.path.join(BUILD, "bin", "dlmc"), "compile", args.checkpoint, "-o",
                        artifact], check=True, stdout=subprocess.DEVNULL)
        serial = {p: generate(artifact, p, args) for p in prompts}
        runs = {t: {p: generate(artifact, p, args, t) for p in prompts} for t in thresholds}

    print(f"{len(prompts)} prompts, gen {args.gen_length}, block {args.block_length}, "
          f"steps {args.gen_length}; baseline: one token per forward, median "
          f"{statistics.median(r['tokens_per_forward'] for r in serial.values()):.2f} "
          "tokens/forward")
    print(f"{'threshold':>9} {'tokens/forward':>15} {'NLL change':>11} {'>= 2 and no worse':>18}")
    for t in thresholds:
        tpf = [runs[t][p]["tokens_per_forward"] for p in prompts]
        change = [runs[t][p]["nll"] - serial[p]["nll"] for p in prompts]
        both = sum(1 for p in prompts if runs[t][p]["tokens_per_forward"] >= 2
                   and runs[t][p]["nll"] <= serial[p]["nll"])
        print(f"{t:>9} {statistics.median(tpf):>15.2f} {statistics.median(change):>+11.3f} "
              f"{both:>12}/{len(prompts)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"serial": serial, "threshold": {str(t): r for t, r in runs.items()}}, f,
                      indent=1)


if __name__ == "__main__":
    main()
