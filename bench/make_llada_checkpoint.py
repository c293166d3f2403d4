#!/usr/bin/env python3
"""A random-weight LLaDA-architecture checkpoint of a real model's shape, for the CPU GEMM and
precision benchmarks (issue 16).

    .venv/bin/python bench/make_llada_checkpoint.py [--out DIR] [--dtype bf16|f32] [--seed N]
        [--hidden 768] [--layers 12] [--heads 12] [--kv-heads 12] [--mlp 2048]
        [--max-sequence 1024] [--vocab N] [--zeros]

The default shape is the 87M-parameter model issue 16 measured: hidden 768, 12 layers, 12 heads
(multi-head attention), SwiGLU MLP of 2048, the demo model's tokenizer (tests/models/demo:
945 ids, embedding rows padded to 960), untied LM head. The directory is what LLaDA's
`save_pretrained` writes and dlmc imports: config.json (LLaDAModelLM), generation_config.json,
model.safetensors, tokenizer.json.

Speed does not depend on what the weights are, so they are random (numpy's seeded PCG64: a seed
gives the same file anywhere) and scaled to keep activations sane: projections N(0, 1/fan_in),
norm weights N(1, 0.1^2), embeddings and LM head N(0, 0.4^2), rounded to bf16 by
round-to-nearest-even.

--vocab N makes the vocabulary and the embedding and LM-head rows N (LLaDA-8B: 126464) while
keeping the demo tokenizer (its ids are the first of the vocabulary). --zeros writes every tensor
as zeros, as a hole in model.safetensors: a real model's shape (16 GB for LLaDA-8B) on no disk,
for compiling artifacts whose parameters are external and random (scripts/gpu-kit --real-size).

Default output: $DLM_BENCH_CACHE/llada-<hidden>x<layers>-<dtype> (DLM_BENCH_CACHE defaults to
~/.cache/dlm-bench), never inside the repository.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from checkpoint_files import (bench_cache, write_json, write_safetensors,  # noqa: E402
                              write_zero_safetensors)

DEMO = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")


def weight_shapes(a, embedding_rows):
    """name -> shape of every tensor (the layout make_weights fills)."""
    head_dim = a.hidden // a.heads
    shapes = {"model.transformer.wte.weight": (embedding_rows, a.hidden),
              "model.transformer.ln_f.weight": (a.hidden,),
              "model.transformer.ff_out.weight": (embedding_rows, a.hidden)}
    for i in range(a.layers):
        p = f"model.transformer.blocks.{i}."
        shapes.update({
            p + "attn_norm.weight": (a.hidden,), p + "ff_norm.weight": (a.hidden,),
            p + "q_proj.weight": (a.heads * head_dim, a.hidden),
            p + "k_proj.weight": (a.kv_heads * head_dim, a.hidden),
            p + "v_proj.weight": (a.kv_heads * head_dim, a.hidden),
            p + "attn_out.weight": (a.hidden, a.heads * head_dim),
            p + "ff_proj.weight": (a.mlp, a.hidden), p + "up_proj.weight": (a.mlp, a.hidden),
            p + "ff_out.weight": (a.hidden, a.mlp)})
    return shapes


def make_weights(a, embedding_rows, rng):
    head_dim = a.hidden // a.heads

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def linear(out_features, in_features):
        return normal((out_features, in_features), 1.0 / np.sqrt(in_features))

    t = {"model.transformer.wte.weight": normal((embedding_rows, a.hidden), 0.4)}
    for i in range(a.layers):
        p = f"model.transformer.blocks.{i}."
        t[p + "attn_norm.weight"] = 1.0 + normal((a.hidden,), 0.1)
        t[p + "q_proj.weight"] = linear(a.heads * head_dim, a.hidden)
        t[p + "k_proj.weight"] = linear(a.kv_heads * head_dim, a.hidden)
        t[p + "v_proj.weight"] = linear(a.kv_heads * head_dim, a.hidden)
        t[p + "attn_out.weight"] = linear(a.hidden, a.heads * head_dim)
        t[p + "ff_norm.weight"] = 1.0 + normal((a.hidden,), 0.1)
        t[p + "ff_proj.weight"] = linear(a.mlp, a.hidden)
        t[p + "up_proj.weight"] = linear(a.mlp, a.hidden)
        t[p + "ff_out.weight"] = linear(a.hidden, a.mlp)
    t["model.transformer.ln_f.weight"] = 1.0 + normal((a.hidden,), 0.1)
    t["model.transformer.ff_out.weight"] = normal((embedding_rows, a.hidden), 0.4)
    return t


def make_config(a, demo):
    """The demo model's config (its tokenizer's ids) at the benchmark's shape."""
    config = dict(demo)
    if a.vocab:
        config.update({"vocab_size": a.vocab, "embedding_size": a.vocab})
    config.update({
        "d_model": a.hidden, "n_layers": a.layers, "n_heads": a.heads, "n_kv_heads": a.kv_heads,
        "mlp_hidden_size": a.mlp, "max_sequence_length": a.max_sequence,
        "torch_dtype": "bfloat16" if a.dtype == "bf16" else "float32", "weight_tying": False,
    })
    return config


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (default $DLM_BENCH_CACHE/llada-...)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=12)
    ap.add_argument("--mlp", type=int, default=2048)
    ap.add_argument("--max-sequence", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=0,
                    help="vocabulary and embedding rows (default: the demo tokenizer's, padded)")
    ap.add_argument("--zeros", action="store_true", help="all-zero weights, written as a hole")
    a = ap.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads:
        sys.exit("make_llada_checkpoint: hidden must divide into heads, heads into kv-heads")
    out = a.out or bench_cache(f"llada-{a.hidden}x{a.layers}-{a.dtype}")
    os.makedirs(out, exist_ok=True)

    with open(os.path.join(DEMO, "config.json")) as f:
        demo = json.load(f)
    config = make_config(a, demo)
    if a.vocab and a.vocab < demo["embedding_size"]:
        sys.exit(f"make_llada_checkpoint: --vocab must be at least the demo tokenizer's "
                 f"{demo['embedding_size']} rows")
    path = os.path.join(out, "model.safetensors")
    if a.zeros:
        shapes = weight_shapes(a, config["embedding_size"])
        data = write_zero_safetensors(path, shapes, a.dtype)
        parameters = sum(int(np.prod(s, dtype=np.int64)) for s in shapes.values())
    else:
        weights = make_weights(a, config["embedding_size"],
                               np.random.Generator(np.random.PCG64(a.seed)))
        data = write_safetensors(path, weights, a.dtype)
        parameters = sum(w.size for w in weights.values())
    write_json(os.path.join(out, "config.json"), config)
    for name in ("generation_config.json", "tokenizer.json"):
        shutil.copyfile(os.path.join(DEMO, name), os.path.join(out, name))

    print(f"{out}: LLaDAModelLM, {parameters / 1e6:.1f}M parameters ({a.layers} layers, hidden "
          f"{a.hidden}, {a.heads} heads / {a.kv_heads} kv, MLP {a.mlp}), model.safetensors "
          f"{data / 2**20:.0f} MiB {a.dtype}")


if __name__ == "__main__":
    main()
