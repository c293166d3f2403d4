#!/usr/bin/env python3
"""A random-weight DiffusionGemmaForBlockDiffusion checkpoint for the CPU benchmark (issue 12).

    .venv/bin/python bench/make_diffusion_gemma_checkpoint.py [--out DIR] [--dtype bf16|f32]
        [--seed N] [--hidden 512] [--layers 8] [--heads 8] [--kv-heads 4] [--head-dim 64]
        [--full-head-dim 128] [--full-kv-heads 2] [--full-every 4] [--intermediate 1024]
        [--experts 16] [--top-k 4] [--moe-intermediate 256] [--vocab 8192]
        [--sliding-window 128] [--canvas 64] [--max-denoising-steps 48] [--max-new-tokens 64]

Writes the directory exactly as transformers 5.23's `save_pretrained` lays it out (see
docs/design/diffusion-gemma.md §1-§2): config.json (root + text_config with `per_layer_config`
for the full-attention layers + a tiny gemma4_vision vision_config, the one the oracle fixtures
use), generation_config.json, model.safetensors (decoder copy `model.decoder.*`, the encoder's own
`model.encoder.language_model.layers.{i}.layer_scalar`, a tiny vision tower so that
`from_pretrained` reports nothing missing), tokenizer.json and tokenizer_config.json.

No transformers and no torch needed: numpy + tokenizers (the repo `.venv` has both; so does the
reference venv /work/refvenv). The weights come from numpy's seeded PCG64 and are rounded to bf16
by round-to-nearest-even, so a seed gives the same model.safetensors anywhere. The tokenizer is a
byte-level BPE (Llama 3 pre-tokenizer, BOS template) trained by tests/models/train_tokenizer.py on
text every Debian machine has; vocab_size is set to its exact id count. It is deterministic on a
given machine (the corpus is the machine's Python stdlib and license texts).

Scales (numerically sane, not trained): embeddings N(0, 0.1^2) (times sqrt(H) in the model:
residual rms ~2), every projection N(0, 1/fan_in), norm weights U(0.8, 1.2), layer scalars
U(0.9, 1.1) (encoder and decoder differ), router scale / per-expert scale U(0.8, 1.2), router
projection N(0, 1) (router logits ~N(0, 1): routing spread over the experts), final norm weight
times --logit-gain (default 4: logits std ~8 before the softcap of 30, mean entropy ~0.7 nats at
T 0.8, so the entropy-bound sampler accepts a few positions per step but the stop rule (mean
entropy < 0.005) never fires: every canvas runs max_denoising_steps forwards, in both engines).

Default output: $DLM_BENCH_CACHE/diffusion-gemma-<tag> (DLM_BENCH_CACHE defaults to
~/.cache/dlm-bench), never inside the repository. Verify it against transformers with
`/work/refvenv/bin/python bench/diffusion_gemma_hf.py check DIR`.
"""
import argparse
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from checkpoint_files import bench_cache, write_json, write_safetensors  # noqa: E402

TRANSFORMERS_VERSION = "5.23.0"

# The oracle fixtures' vision tower (tests/reference/diffusion_gemma/make_fixtures.py VISION),
# with every field save_pretrained writes.
VISION_CONFIG = {
    "attention_bias": False, "attention_dropout": 0.0, "head_dim": 8,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 16, "initializer_range": 0.02,
    "intermediate_size": 32, "max_position_embeddings": 131072, "model_type": "gemma4_vision",
    "num_attention_heads": 2, "num_hidden_layers": 1, "num_key_value_heads": 2, "patch_size": 4,
    "pooling_kernel_size": 1, "position_embedding_size": 16, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 100.0, "rope_type": "axial"}, "standardize": False,
    "use_clipped_linears": False,
}

# Special tokens: EOS, BOS (the template prepends it, like Gemma's tokenizer), PAD. They get the
# last ids of the vocabulary.
EOS, BOS, PAD = "<|endoftext|>", "<|begin_of_text|>", "<pad>"


def default_out(tag):
    return bench_cache("diffusion-gemma-" + tag)


def layer_types(n, every):
    types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]
    types[-1] = "full_attention"  # transformers forces the last layer to full attention
    return types


def make_weights(a, types, vocab, rng):
    H, I, E, Im = a.hidden, a.intermediate, a.experts, a.moe_intermediate
    t = {}

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def uniform(shape, lo, hi):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    def linear(out_f, in_f):
        return normal((out_f, in_f), 1.0 / np.sqrt(in_f))

    d = "model.decoder."
    t[d + "embed_tokens.weight"] = normal((vocab, H), 0.1)
    t[d + "norm.weight"] = uniform((H,), 0.8, 1.2) * np.float32(a.logit_gain)
    t[d + "self_conditioning.pre_norm.weight"] = uniform((H,), 0.8, 1.2)
    t[d + "self_conditioning.gate_proj.weight"] = linear(I, H)
    t[d + "self_conditioning.up_proj.weight"] = linear(I, H)
    t[d + "self_conditioning.down_proj.weight"] = linear(H, I)
    for i, kind in enumerate(types):
        full = kind == "full_attention"
        hd = a.full_head_dim if full else a.head_dim
        kv = a.full_kv_heads if full else a.kv_heads
        p = f"{d}layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm_1", "pre_feedforward_layernorm_2",
                  "post_feedforward_layernorm_2", "post_feedforward_layernorm"):
            t[p + n + ".weight"] = uniform((H,), 0.8, 1.2)
        t[p + "self_attn.q_proj.weight"] = linear(a.heads * hd, H)
        t[p + "self_attn.k_proj.weight"] = linear(kv * hd, H)
        if not full:  # full-attention layers have no v_proj (K doubles as V)
            t[p + "self_attn.v_proj.weight"] = linear(kv * hd, H)
        t[p + "self_attn.o_proj.weight"] = linear(H, a.heads * hd)
        t[p + "self_attn.q_norm.weight"] = uniform((hd,), 0.8, 1.2)
        t[p + "self_attn.k_norm.weight"] = uniform((hd,), 0.8, 1.2)
        t[p + "mlp.gate_proj.weight"] = linear(I, H)
        t[p + "mlp.up_proj.weight"] = linear(I, H)
        t[p + "mlp.down_proj.weight"] = linear(H, I)
        t[p + "router.proj.weight"] = normal((E, H), 1.0)
        t[p + "router.scale"] = uniform((H,), 0.8, 1.2)
        t[p + "router.per_expert_scale"] = uniform((E,), 0.8, 1.2)
        t[p + "experts.gate_up_proj"] = normal((E, 2 * Im, H), 1.0 / np.sqrt(H))
        t[p + "experts.down_proj"] = normal((E, H, Im), 1.0 / np.sqrt(Im))
        t[p + "layer_scalar"] = uniform((1,), 0.9, 1.1)
    for i in range(len(types)):
        t[f"model.encoder.language_model.layers.{i}.layer_scalar"] = uniform((1,), 0.9, 1.1)
    # the tiny vision tower (never used for text)
    v = VISION_CONFIG
    vh, vi, vhd = v["hidden_size"], v["intermediate_size"], v["head_dim"]
    t["model.encoder.embed_vision.embedding_projection.weight"] = linear(H, vh)
    vt = "model.encoder.vision_tower."
    for i in range(v["num_hidden_layers"]):
        p = f"{vt}encoder.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            t[p + n + ".weight"] = uniform((vh,), 0.8, 1.2)
        t[p + "mlp.gate_proj.linear.weight"] = linear(vi, vh)
        t[p + "mlp.up_proj.linear.weight"] = linear(vi, vh)
        t[p + "mlp.down_proj.linear.weight"] = linear(vh, vi)
        for n in ("q", "k", "v"):
            t[p + f"self_attn.{n}_proj.linear.weight"] = linear(v["num_attention_heads"] * vhd, vh)
        t[p + "self_attn.o_proj.linear.weight"] = linear(vh, v["num_attention_heads"] * vhd)
        t[p + "self_attn.q_norm.weight"] = uniform((vhd,), 0.8, 1.2)
        t[p + "self_attn.k_norm.weight"] = uniform((vhd,), 0.8, 1.2)
    patch = 3 * v["patch_size"] ** 2
    t[vt + "patch_embedder.input_proj.weight"] = linear(vh, patch)
    t[vt + "patch_embedder.position_embedding_table"] = normal((2, v["position_embedding_size"], vh), 0.02)
    return t


def make_config(a, types, vocab, ids):
    width = len(str(a.layers - 1))  # save_pretrained zero-pads the keys ("05", "11", ...)
    override = {}
    if a.full_head_dim != a.head_dim:
        override["head_dim"] = a.full_head_dim
    if a.full_kv_heads != a.kv_heads:
        override["num_key_value_heads"] = a.full_kv_heads
    per_layer = {str(i).zfill(width): dict(override)
                 for i, k in enumerate(types) if k == "full_attention" and override}
    text = {
        "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": ids[BOS], "eos_token_id": ids[EOS],
        "head_dim": a.head_dim, "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": a.hidden, "initializer_range": 0.02,
        "intermediate_size": a.intermediate, "layer_types": types,
        "max_position_embeddings": 131072, "model_type": "diffusion_gemma_text",
        "moe_intermediate_size": a.moe_intermediate, "num_attention_heads": a.heads,
        "num_experts": a.experts, "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "pad_token_id": ids[PAD],
        "per_layer_config": per_layer,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                               "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
        "sliding_window": a.sliding_window, "tie_word_embeddings": True,
        "top_k_experts": a.top_k, "use_bidirectional_attention": "vision",
        "vocab_size": vocab,
    }
    return {
        "architectures": ["DiffusionGemmaForBlockDiffusion"],
        "boi_token_id": 255999, "canvas_length": a.canvas,
        "dtype": "bfloat16" if a.dtype == "bf16" else "float32",
        "eoi_token_id": 258882, "image_token_id": 258880, "initializer_range": 0.02,
        "model_type": "diffusion_gemma", "text_config": text, "tie_word_embeddings": True,
        "transformers_version": TRANSFORMERS_VERSION, "vision_config": VISION_CONFIG,
    }


def make_generation_config(a, ids):
    return {
        "bos_token_id": ids[BOS], "confidence_threshold": 0.005,
        "eos_token_id": ids[EOS] if a.eos else None,
        "max_denoising_steps": a.max_denoising_steps, "max_new_tokens": a.max_new_tokens,
        "pad_token_id": ids[PAD], "return_dict_in_generate": True,
        "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
        "stability_threshold": 1, "t_max": 0.8, "t_min": 0.4,
        "transformers_version": TRANSFORMERS_VERSION,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (default $DLM_BENCH_CACHE/diffusion-gemma-<dtype>)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--full-head-dim", type=int, default=128)
    ap.add_argument("--full-kv-heads", type=int, default=2)
    ap.add_argument("--full-every", type=int, default=4, help="layer i is full attention when (i+1) %% N == 0; the last always is")
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--moe-intermediate", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192, help="tokenizer ids to train (vocab_size = the exact count)")
    ap.add_argument("--sliding-window", type=int, default=128)
    ap.add_argument("--canvas", type=int, default=64)
    ap.add_argument("--max-denoising-steps", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--logit-gain", type=float, default=4.0, help="final norm weight factor")
    ap.add_argument("--no-eos", dest="eos", action="store_false",
                    help="leave eos_token_id out of generation_config.json (never stop early)")
    a = ap.parse_args()
    if a.heads % a.kv_heads or a.heads % a.full_kv_heads:
        ap.error("--heads must be a multiple of both kv-head counts")
    out = a.out or default_out(a.dtype)
    if os.path.abspath(out).startswith(ROOT + os.sep):
        print(f"warning: writing inside the repository: {out}", file=sys.stderr)

    from train_tokenizer import train_bpe_tokenizer  # tests/models/train_tokenizer.py
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tok = train_bpe_tokenizer(os.path.join(tmp, "tokenizer.json"), vocab_size=a.vocab,
                              special_tokens=(EOS, BOS, PAD), style="llama3")
    vocab = tok.get_vocab_size()
    ids = {s: tok.token_to_id(s) for s in (EOS, BOS, PAD)}
    write_json(os.path.join(tmp, "tokenizer_config.json"), {
        "backend": "tokenizers", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "model_max_length": 1000000000000000019884624838656, "tokenizer_class": "TokenizersBackend"})

    types = layer_types(a.layers, a.full_every)
    rng = np.random.Generator(np.random.PCG64(a.seed))
    tensors = make_weights(a, types, vocab, rng)
    nbytes = write_safetensors(os.path.join(tmp, "model.safetensors"), tensors, a.dtype)
    write_json(os.path.join(tmp, "config.json"), make_config(a, types, vocab, ids))
    write_json(os.path.join(tmp, "generation_config.json"), make_generation_config(a, ids))
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)

    text_params = sum(v.size for k, v in tensors.items() if not k.startswith("model.encoder."))
    per_token = sum(v.size for k, v in tensors.items()
                    if k.startswith("model.decoder.layers.") and ".experts." not in k) \
        + a.layers * a.top_k * 3 * a.hidden * a.moe_intermediate
    print(f"wrote {out}")
    print(f"  DiffusionGemmaForBlockDiffusion, {a.dtype}, seed {a.seed}: hidden {a.hidden}, "
          f"{a.layers} layers ({''.join('F' if t == 'full_attention' else 'S' for t in types)}), "
          f"{a.heads} heads, sliding hd {a.head_dim} / {a.kv_heads} kv, full hd {a.full_head_dim} / "
          f"{a.full_kv_heads} kv, intermediate {a.intermediate}, {a.experts} experts top-{a.top_k} "
          f"x {a.moe_intermediate}, vocab {vocab}, window {a.sliding_window}, canvas {a.canvas}")
    print(f"  {text_params / 1e6:.1f}M text parameters, {per_token / 1e6:.1f}M active per token in "
          f"the layers (+ {vocab * a.hidden / 1e6:.1f}M head); model.safetensors {nbytes / 2**20:.1f} MiB, "
          f"{len(tensors)} tensors")
    print(f"  generation: max_denoising_steps {a.max_denoising_steps}, max_new_tokens "
          f"{a.max_new_tokens}, eos {ids[EOS] if a.eos else None}, bos {ids[BOS]}, pad {ids[PAD]}")
    print("  files: " + ", ".join(sorted(os.listdir(out))))


if __name__ == "__main__":
    main()
