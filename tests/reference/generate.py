#!/usr/bin/env python3
"""Reference generation from a checkpoint directory (independent of the dlm compiler/runtime).

    generate.py CKPT_DIR (--prompt-ids 1,2,3 | --prompt TEXT)
                [--policy low-confidence|entropy-bound] [--gen-length 32] [--block-length 8]
                [--steps 16] [--threshold T] [--step-cap N] [--temperature 0] [--seed 0] [--request 0]
                [--cache none|prefix|dual] [--knob NAME=VALUE]... [--dump-logits first_forward.npy]
                [--json]
                entropy-bound: [--max-steps 48] [--t-min 0.4] [--t-max 0.8]
                               [--entropy-bound 0.1] [--stability-threshold 1]
                               [--confidence-threshold 0.005] [--noise mask|uniform]

Prints one JSON object (with --json; otherwise a short human-readable summary):
  prompt_ids  the prompt token ids
  output_ids  generated ids, prompt excluded, up to and including the first EOS
  forwards    model forward passes run
  text        output_ids decoded with the checkpoint's tokenizer.json (special tokens skipped;
              "" if the checkpoint has no tokenizer.json)
  seconds     wall time of the generation (model loading excluded)

--prompt TEXT is encoded with tokenizer.json through the `tokenizers` library with its default
post-processor (which adds BOS if the tokenizer is configured to).  --dump-logits writes the
float32 logits [tokens fed, vocab_size] of the first forward whose logits are decoded (after the
Dream logit shift, padded embedding columns dropped).  Exit status 2 with a message on bad
arguments (gen_length not a multiple of block_length, steps not divisible by the number of
blocks, prompt + gen_length above max_sequence_length / max_position_embeddings, ...).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import models  # noqa: E402
import samplers  # noqa: E402


def load_tokenizer(ckpt):
    path = os.path.join(ckpt, "tokenizer.json")
    if not os.path.exists(path):
        return None
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="dlm reference generation")
    ap.add_argument("ckpt")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--prompt-ids", help="comma-separated token ids")
    g.add_argument("--prompt", help="text, encoded with the checkpoint's tokenizer.json")
    ap.add_argument("--policy", default="low-confidence",
                    choices=["low-confidence", "entropy-bound"])
    ap.add_argument("--gen-length", type=int, default=32)
    ap.add_argument("--block-length", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16, help="low-confidence: total steps")
    ap.add_argument("--threshold", type=float, default=None,
                    help="low-confidence: confidence threshold (as many steps as the block needs)")
    ap.add_argument("--step-cap", type=int, default=None,
                    help="low-confidence with --threshold: the block's last step (default: none)")
    ap.add_argument("--temperature", type=float, default=0.0, help="low-confidence: Gumbel T")
    ap.add_argument("--low-threshold", type=float, default=None,
                    help="low-confidence: dInfer's hierarchical decoding")
    ap.add_argument("--depth", type=int, default=1, help="hierarchical decoding's levels")
    ap.add_argument("--credit", default="off", choices=["on", "off"],
                    help="low-confidence: dInfer's credit decoding")
    ap.add_argument("--credit-alpha", type=float, default=0.7)
    ap.add_argument("--credit-beta", type=float, default=0.8)
    ap.add_argument("--credit-gamma", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--request", type=int, default=0)
    ap.add_argument("--cache", default="none", choices=["none", "prefix", "dual"],
                    help="dual: low-confidence only (the Fast-dLLM / dInfer dual cache)")
    ap.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                    help="low-confidence: prefix_look, after_look, warmup_steps (dInfer's "
                         "vicinity refresh); smoothing, smoothing_init, smoothing_growth, "
                         "threshold_decay (its iteration smoothing); as dlm-run --knob takes them")
    ap.add_argument("--dump-logits", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-steps", type=int, default=48, help="entropy-bound: S")
    ap.add_argument("--t-min", type=float, default=0.4)
    ap.add_argument("--t-max", type=float, default=0.8)
    ap.add_argument("--entropy-bound", type=float, default=0.1)
    ap.add_argument("--stability-threshold", type=int, default=1)
    ap.add_argument("--confidence-threshold", type=float, default=0.005)
    ap.add_argument("--noise", default=None, choices=["mask", "uniform"],
                    help="entropy-bound canvas noise (default: mask if the model has a mask token)")
    ap.add_argument("--threads", type=int, default=1)
    return ap, ap.parse_args(argv)


# The --knob names generate.py takes, with their types, as the low-confidence program declares
# them.
KNOBS = {"prefix_look": int, "after_look": int, "warmup_steps": int, "smoothing": float,
         "smoothing_init": float, "smoothing_growth": float, "threshold_decay": float}


def knob_arguments(ap, knobs):
    out = {}
    for knob in knobs:
        name, _, value = knob.partition("=")
        try:
            out[name] = KNOBS[name](value)
        except (KeyError, ValueError):
            ap.error(f"--knob {knob}: expected NAME=VALUE with NAME one of {', '.join(KNOBS)}")
        if not out[name] >= 0:
            ap.error(f"--knob {knob}: the value must be >= 0")
    return out


def main(argv=None):
    ap, a = parse_args(argv)
    torch.set_num_threads(max(1, a.threads))
    tok = load_tokenizer(a.ckpt)
    if a.prompt_ids is not None:
        try:
            prompt = [int(t) for t in a.prompt_ids.split(",") if t.strip()]
        except ValueError:
            ap.error("--prompt-ids must be comma-separated integers")
    else:
        if tok is None:
            ap.error(f"--prompt needs {a.ckpt}/tokenizer.json")
        prompt = tok.encode(a.prompt).ids
    try:
        model = models.Model(a.ckpt)
    except (models.UnsupportedArchitecture, FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if any(t < 0 or t >= model.vocab_size for t in prompt):
        ap.error(f"prompt token id out of range [0, {model.vocab_size})")
    max_len = model.config.get("max_sequence_length") or model.config.get("max_position_embeddings")
    if max_len and len(prompt) + a.gen_length > max_len:
        print(f"error: prompt ({len(prompt)}) + gen_length ({a.gen_length}) exceeds the model's "
              f"maximum sequence length {max_len}", file=sys.stderr)
        return 2
    try:
        if a.policy == "low-confidence":
            res = samplers.low_confidence(model, prompt, gen_length=a.gen_length,
                                          block_length=a.block_length, steps=a.steps,
                                          threshold=a.threshold, temperature=a.temperature,
                                          seed=a.seed, request=a.request, cache=a.cache,
                                          dump=a.dump_logits is not None, step_cap=a.step_cap,
                                          low_threshold=a.low_threshold, depth=a.depth,
                                          credit=a.credit == "on", credit_alpha=a.credit_alpha,
                                          credit_beta=a.credit_beta,
                                          credit_gamma=a.credit_gamma,
                                          **knob_arguments(ap, a.knob))
        else:
            if a.knob:
                ap.error("--knob: the entropy-bound reference takes no knobs")
            res = samplers.entropy_bound(model, prompt, gen_length=a.gen_length,
                                         block_length=a.block_length, max_steps=a.max_steps,
                                         t_min=a.t_min, t_max=a.t_max, bound=a.entropy_bound,
                                         stability_threshold=a.stability_threshold,
                                         confidence_threshold=a.confidence_threshold,
                                         seed=a.seed, request=a.request, cache=a.cache,
                                         noise=a.noise, dump=a.dump_logits is not None)
    except samplers.GenerateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    first = res.pop("first_logits", None)
    if a.dump_logits:
        np.save(a.dump_logits, first)
    res["text"] = tok.decode(res["output_ids"], skip_special_tokens=True) if tok else ""
    out = {k: res[k] for k in ("prompt_ids", "output_ids", "forwards", "text", "seconds")}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"prompt ({len(prompt)} ids): {prompt}")
        print(f"output ({len(out['output_ids'])} ids): {out['output_ids']}")
        print(f"text: {out['text']!r}")
        print(f"forwards: {out['forwards']}  seconds: {out['seconds']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
