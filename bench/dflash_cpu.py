#!/usr/bin/env python3
"""DFlash speculative decoding on the CPU against the target alone (issue 13 item 5).

    .venv/bin/python bench/dflash_cpu.py [--pair DIR] [--threads N] [--repeats 3]
        [--prompts K] [--max-new-tokens 96] [--json out.json]

The pair is the target and drafter bench/train_dflash_pair.py trains (a 26M-parameter Qwen3
target, 105 MB in f32, and a 2-layer DFlash drafter, block 8); without --pair it is made once
under $DLM_BENCH_CACHE/dflash-pair (default ~/.cache/dlm-bench; about 18 minutes on one thread).
The prompts are the script's check prompts (training_log.json: each corpus paragraph's BOS and
first 8 tokens), the first K of them.

One artifact, `dlmc compile target --draft draft` (the dflash program, the autoregressive one
beside it), so both engines run the same weights in the same runtime. Baseline: the target alone,
`dlm-run --policy autoregressive` (one token per forward, KV cached). Runs are interleaved (per
repeat and prompt: the target alone, then DFlash), greedy, each `dlm-run --json` timing its own
generation (load excluded).

Figures, medians over the repeats: tokens/s = all prompts' generated tokens / their generation
seconds; forwards per token (DFlash counts its draft and verify forwards); acceptance length =
tokens committed per verify, the bonus token included (the first token, from the prefill, is not
a verify's), mean over all verifies and histogram 1..B as dflash/benchmark.py counts them; and
whether every prompt's output is identical to the target alone's.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_cpu import cpu_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build"))


def default_pair():
    cache = os.environ.get("DLM_BENCH_CACHE", os.path.expanduser("~/.cache/dlm-bench"))
    path = os.path.join(cache, "dflash-pair")
    if not os.path.exists(os.path.join(path, "draft", "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "train_dflash_pair.py"),
                        "--out", path], check=True)
    return path


def run(artifact, prompt, policy, args):
    done = subprocess.run([os.path.join(BUILD, "bin", "dlm-run"), artifact, "--prompt-ids",
                           ",".join(map(str, prompt)), "--policy", policy, "--max-new-tokens",
                           str(args.max_new_tokens), "--threads", str(args.threads), "--json"],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", help="a directory with target/ and draft/ (default: trained once)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=36)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    pair = args.pair or default_pair()
    with open(os.path.join(pair, "training_log.json")) as f:
        log = json.load(f)
    prompts = [p["prompt_ids"] for p in log["prompts"][:args.prompts]]
    block = int(log["block_size"])

    with tempfile.TemporaryDirectory() as scratch:
        artifact = os.path.join(scratch, "pair.dlm")
        subprocess.run([os.path.join(BUILD, "bin", "dlmc"), "compile", os.path.join(pair, "target"),
                        "--draft", os.path.join(pair, "draft"), "-o", artifact], check=True)
        rates = {"target alone": [], "DFlash": []}
        forwards = {"target alone": [], "DFlash": []}
        histogram = collections.Counter()
        identical = True
        for _ in range(args.repeats):
            totals = {name: [0, 0.0, 0] for name in rates}  # tokens, seconds, forwards
            verifies = collections.Counter()
            for prompt in prompts:
                alone = run(artifact, prompt, "autoregressive", args)
                spec = run(artifact, prompt, "dflash", args)
                identical &= alone["output_ids"] == spec["output_ids"]
                for name, out in (("target alone", alone), ("DFlash", spec)):
                    totals[name][0] += len(out["output_ids"])
                    totals[name][1] += out["seconds"]
                    totals[name][2] += out["forwards"]
                verifies.update(spec["block_lengths"][1:])
            histogram = verifies  # the same every repeat: greedy
            for name, (tokens, seconds, count) in totals.items():
                rates[name].append(tokens / seconds)
                forwards[name].append(count / tokens)

    verify_count = sum(histogram.values())
    mean_acceptance = sum(k * v for k, v in histogram.items()) / verify_count
    alone, spec = statistics.median(rates["target alone"]), statistics.median(rates["DFlash"])
    figures = {
        "cpu": cpu_name(), "threads": args.threads, "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "block_size": block,
        "tokens_per_second": {"target alone": alone, "DFlash": spec}, "speedup": spec / alone,
        "forwards_per_token": {k: statistics.median(v) for k, v in forwards.items()},
        "verifies": verify_count, "mean_acceptance_length": mean_acceptance,
        "acceptance_histogram": {str(k): histogram.get(k, 0) for k in range(1, block + 1)},
        "outputs_identical": identical,
    }
    print("DFlash on %s, %d threads, %d prompts x %d new tokens, %d repeats (medians)" %
          (figures["cpu"], args.threads, len(prompts), args.max_new_tokens, args.repeats))
    print("| | tokens/s | forwards/token |")
    print("|---|---|---|")
    for name in ("target alone", "DFlash"):
        print("| %s | %.1f | %.3f |" % (name, figures["tokens_per_second"][name],
                                        figures["forwards_per_token"][name]))
    print("speed-up %.2fx; mean acceptance length %.2f over %d verifies; histogram %s; "
          "outputs identical: %s" % (figures["speedup"], mean_acceptance, verify_count,
                                     figures["acceptance_histogram"], identical))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
