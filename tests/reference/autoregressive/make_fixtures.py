#!/usr/bin/env python3
"""Autoregressive-decoding oracle fixtures: tiny random Qwen3 / Llama / Qwen2 / Qwen3-MoE checkpoints (and an
I-DLM-style SDARForCausalLM one, Qwen3-shaped) made by transformers' own classes, and traces of their forward and of
`generate()` (greedy and sampled).

Run with the reference venv (torch 2.15.0, transformers 5.23.x; see ../diffusion_gemma/README.md):

    /work/refvenv/bin/python tests/reference/autoregressive/make_fixtures.py            # (re)write fixtures/
    /work/refvenv/bin/python tests/reference/autoregressive/make_fixtures.py --check    # regenerate to a temp dir, compare

For every spec in SPECS it
  1. builds a `Qwen3ForCausalLM` / `LlamaForCausalLM` / `Qwen2ForCausalLM` / `Qwen3MoeForCausalLM` from a tiny
     config, overwrites every parameter with seeded random values (norm weights all different from 1, scaled so
     that greedy decoding is neither degenerate nor decided by rounding noise), and `save_pretrained`s it (float32
     safetensors, config.json, generation_config.json with the greedy settings) together with a tiny word-level
     tokenizer; an `sdar` spec then rewrites config.json the way I-DLM's SDAR checkpoints spell it (architectures
     ["SDARForCausalLM"], model_type "sdar", mask_token_id, top-level rope_theta); a Qwen3-MoE checkpoint must
     come out of save_pretrained in published Qwen3-MoE checkpoints' per-expert layout (transformers 5 fuses the
     experts in memory and un-fuses them on save: checked tensor by tensor, and the reloaded model's logits must
     be bit-identical to the in-memory model's);
  2. reloads it with `from_pretrained` (so the trace is of what is on disk; an SDAR checkpoint is loaded as
     Qwen3ForCausalLM, the same weights and math) and records:
     - the full logits of the prompt forward (one call, no cache) and `generate`'s first-step logits;
     - a greedy `generate` (the checkpoint's generation_config.json): output ids and per-step logits;
     - sampled `generate` runs (do_sample, explicit temperature / top_k / top_p, torch seeded): per step the raw
       logits, the processed scores (after transformers' warpers) and the drawn token;
     - Qwen3-MoE: the router logits and chosen experts of every sparse layer over prompt + greedy tokens, and
       the smallest gap between the k-th and (k+1)-th router probability (refused at or below 1e-3);
  3. re-checks everything with the independent plain-PyTorch reference ar_reference.py and refuses to write a
     fixture that it does not reproduce;
  4. writes replay/ (extract_replay.py: the sampled runs' logits and scores as .npy for the C++ tests).

Files per fixture (fixtures/<name>/): config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, trace.npz (arrays), trace.json (metadata), replay/*.npy. fixtures/MANIFEST.json lists
every file's size and sha256 and the versions that made them.
"""

import json
import math
import os
import shutil
import sys

import numpy as np
import torch

import transformers
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import ar_reference  # noqa: E402
import extract_replay  # noqa: E402
import fixture_tools  # noqa: E402
from fixture_tools import (chmod_files, f32, i64, parse_args, randomize_llama, reference_check,  # noqa: E402
                           run_per_fixture, save_trace, setup, word_level_tokenizer, write_json)

FIXTURES = os.path.join(HERE, "fixtures")
MADE_BY = "tests/reference/autoregressive/make_fixtures.py"
TORCH_VERSION = "2.15.0"
TRANSFORMERS_SERIES = "5.23."

ARCH = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM)}

SPECS = [
    {
        # Qwen3: q_norm / k_norm, head_dim 32 != hidden / heads = 16, GQA 4q/2kv, tied head, rope_theta 1e6
        # (written by transformers 5 as rope_parameters.rope_theta only). No BOS (like Qwen's tokenizer). Greedy
        # stops at EOS: the EOS id is the token a dry run produces at new-token index `eos_step` (and nowhere
        # before it), so generate emits eos_step + 1 tokens < max_new_tokens.
        "name": "qwen3_tiny",
        "arch": "qwen3",
        "seed": 2025,
        "config": dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=512,
                       pad_token_id=0, bos_token_id=None),
        "bos": None,
        "logit_gain": 0.5,
        "branch_gain": 5.0,   # tied head: small branches leave each token predicting itself (1-token loops)
        "qk_gain": 2.0,       # sharper attention than the unit q/k norms give
        "prompt_len": 9,
        "max_new_tokens": 16,
        "eos": "dry_run",
        "eos_step": 9,
        "sampled": [dict(temperature=0.7, top_k=20, top_p=0.9, seed=11)],
    },
    {
        # Llama: GQA 4q/2kv (head_dim 12 = hidden / heads), 3 layers, untied lm_head, rope_theta 5e5, eps 1e-5,
        # BOS prepended by the tokenizer. EOS id 1 is never produced: greedy stops on max_new_tokens.
        "name": "llama_tiny",
        "arch": "llama",
        "seed": 8,
        "config": dict(vocab_size=256, hidden_size=48, intermediate_size=112, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, max_position_embeddings=512, pad_token_id=0, bos_token_id=2,
                       attention_bias=False, mlp_bias=False),
        "bos": 2,
        "logit_gain": 1.0,
        "branch_gain": 1.0,
        "prompt_len": 10,
        "max_new_tokens": 16,
        "eos": 1,
        "sampled": [dict(temperature=1.3, top_k=0, top_p=0.8, seed=21),
                     dict(temperature=1.0, top_k=5, top_p=1.0, seed=22)],
    },
    {
        # Qwen2: q/k/v biases (random, large enough to matter: trace.json records the logits' change without
        # them), no q/k norms, MQA 4q/1kv, head_dim 16 = hidden / heads, untied lm_head, rope_theta 1e6. No BOS.
        # Greedy stops at EOS, chosen by a dry run as for qwen3_tiny; so does the second sampled run.
        "name": "qwen2_tiny",
        "arch": "qwen2",
        "seed": 3,
        "config": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=1, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=False, max_position_embeddings=512, pad_token_id=0, bos_token_id=None,
                       use_sliding_window=False),
        "bos": None,
        "logit_gain": 1.0,
        "branch_gain": 2.0,
        "bias_gain": 0.5,
        "prompt_len": 8,
        "max_new_tokens": 16,
        "eos": "dry_run",
        "eos_step": 12,
        "sampled": [dict(temperature=0.8, top_k=40, top_p=0.95, seed=31),
                    dict(temperature=2.0, top_k=0, top_p=0.8, seed=33)],  # this one stops at EOS
    },
    {
        # I-DLM (thuEcstasy/I-DLM) style: SDARForCausalLM is Qwen3ForCausalLM's weights and math with a
        # mask_token_id in config.json. Built and traced with Qwen3ForCausalLM; config.json rewritten as the
        # authors' training/model/Qwen3-8B-b1-allmasked/config.json spells it (see SDAR_CONFIG). Untied head
        # (as I-DLM-8B), GQA 4q/2kv, head_dim 16, 2 layers. Greedy runs 24 tokens (a
        # speculative decoder's test: several tokens per forward) and stops on max_new_tokens; EOS 1 and the
        # mask token are never produced.
        "name": "sdar_tiny",
        "arch": "qwen3",
        "sdar": True,
        "seed": 6,
        "config": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=512,
                       pad_token_id=0, bos_token_id=None),
        "bos": None,
        "mask": 255,
        "logit_gain": 1.0,
        "branch_gain": 1.0,
        "qk_gain": 1.5,
        "prompt_len": 9,
        "max_new_tokens": 24,
        "eos": 1,
        "sampled": [dict(temperature=1.3, top_k=5, top_p=0.95, seed=43)],  # top-k binds at 8 of 24 steps
    },
    {
        # Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention (q/k norms, GQA 4q/2kv, head_dim 16), 3 layers:
        # 0 and 2 sparse (top-2 of 8 experts, each a SiLU MLP of width 32, renormalised top-k weights as
        # Qwen3-30B-A3B), 1 dense (mlp_only_layers, width 96). Untied head, no BOS; EOS 1 never produced.
        # Router weights are random too (router_gain): routing differs across tokens, and the 2nd / 3rd router
        # probabilities are apart by > 1e-3 at every token of every recorded run (checked; seed and router_gain
        # picked from a small sweep for the widest such gap, 0.0048, with a wide greedy margin).
        "name": "qwen3_moe_tiny",
        "arch": "qwen3_moe",
        "seed": 137,
        "config": dict(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                       num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                       mlp_only_layers=[1], num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                       max_position_embeddings=512, pad_token_id=0, bos_token_id=None),
        "bos": None,
        "logit_gain": 1.0,
        "branch_gain": 1.0,
        "qk_gain": 1.5,
        "router_gain": 1.5,
        "prompt_len": 9,
        "max_new_tokens": 16,
        "eos": 1,
        "sampled": [dict(temperature=1.2, top_k=6, top_p=0.95, seed=61),
                    dict(temperature=1.5, top_k=0, top_p=0.8, seed=62)],
    },
]

UNK = 3
MASK_TOKEN = "<|MASK|>"   # the spelling of Qwen3's / SDAR's tokenizer (id 151669 there)
# config.json fields an SDAR checkpoint has where transformers 5's Qwen3Config differs (I-DLM's, written by
# transformers 4.51: top-level rope_theta, no rope_parameters; model_type "sdar")
# block_size 1: an I-DLM checkpoint is trained causally (SDAR's block diffusion checkpoints give their block
# size); dlmc refuses an SDARForCausalLM config without it as ambiguous.
SDAR_CONFIG = {"architectures": ["SDARForCausalLM"], "model_type": "sdar", "block_size": 1}
GREEDY_MIN_MARGIN = 1e-2     # top-1 minus top-2 logit at every greedy step (so 1e-4 noise cannot flip a token)
ROUTER_MIN_GAP = ar_reference.ROUTER_MIN_GAP   # MoE: k-th minus (k+1)-th router probability, every token/layer
MIN_DISTINCT = 6             # distinct tokens among the greedy new tokens (not degenerate)


# ------------------------------------------------------------------------------------------------------------
# Building


def tiny_config(spec, eos):
    cls = ARCH[spec["arch"]][0]
    return cls(**dict(spec["config"], eos_token_id=eos))


def randomize(model, spec):
    """Seeded random values for every parameter (norm weights too), scaled for a non-degenerate greedy run:
    Qwen3's per-head norms fix |q|, |k| (qk_gain sets how sharp attention is), the final norm how peaked the
    logits are (logit_gain)."""
    randomize_llama(model, spec["seed"], spec["branch_gain"], spec.get("qk_gain", 1.0), spec["logit_gain"],
                    spec.get("bias_gain"), router_gain=spec.get("router_gain"))
    if spec["config"]["tie_word_embeddings"]:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    else:
        assert model.lm_head.weight is not model.model.embed_tokens.weight


@torch.no_grad()
def make_tokenizer(vocab_size, special, bos):
    """Word-level tokenizer: id i is 'w<i>' except the special tokens; prepends <bos> when the model has one;
    <|MASK|> (when in `special`) is the tokenizer's mask_token."""
    return word_level_tokenizer(vocab_size, special, bos, MASK_TOKEN if MASK_TOKEN in special else None)


def greedy_generation_config(spec, eos):
    return GenerationConfig(do_sample=False, max_new_tokens=spec["max_new_tokens"], eos_token_id=eos,
                            bos_token_id=spec["bos"], pad_token_id=spec["config"]["pad_token_id"])


def prompt_ids(spec):
    """[bos +] fixed pseudo-random word ids (not special; the mask token, when there is one, is the last id)."""
    g = torch.Generator().manual_seed(spec["seed"] + 7)
    V = spec["config"]["vocab_size"]
    n = spec["prompt_len"] - (spec["bos"] is not None)
    if "mask" in spec:
        assert spec["mask"] == V - 1
        V -= 1
    words = torch.randint(4, V, (n,), generator=g)
    if spec["bos"] is not None:
        words = torch.cat([torch.tensor([spec["bos"]]), words])
    return words.unsqueeze(0)


# ------------------------------------------------------------------------------------------------------------
# Helpers


def load(path, arch, attn="sdpa", experts="grouped_mm"):
    kw = {"experts_implementation": experts} if arch == "qwen3_moe" else {}   # grouped_mm: transformers' default
    return ARCH[arch][1].from_pretrained(path, dtype=torch.float32, attn_implementation=attn, **kw).eval()


class ProcessorSpy:
    """Records the logits processors generate() builds (to prove which warpers ran, in which order)."""

    def __init__(self, model):
        self.model, self.lists = model, []

    def __enter__(self):
        orig = self.orig = self.model._get_logits_processor
        spy = self

        def wrapped(*a, **kw):
            out = orig(*a, **kw)
            spy.lists.append([describe_processor(p) for p in out])
            return out
        self.model._get_logits_processor = wrapped
        return self

    def __exit__(self, *exc):
        del self.model._get_logits_processor
        return False


def describe_processor(p):
    d = {"class": type(p).__name__}
    for k in ("temperature", "top_k", "top_p", "min_tokens_to_keep", "filter_value"):
        if hasattr(p, k):
            v = getattr(p, k)
            d[k] = v if not isinstance(v, float) or math.isfinite(v) else str(v)
    return d


@torch.no_grad()
def run_generate(model, prompt, seed, **kw):
    torch.manual_seed(seed)
    with ProcessorSpy(model) as spy:
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), return_dict_in_generate=True,
                             output_logits=True, output_scores=True, **kw)
    assert len(spy.lists) == 1
    return out, spy.lists[0]


def stop_reason(new_ids, eos, max_new):
    if eos is not None and len(new_ids) and new_ids[-1] == eos:
        return "eos at new token %d" % (len(new_ids) - 1)
    assert len(new_ids) == max_new, (len(new_ids), max_new)
    return "max_new_tokens"


def choose_eos(model, spec, prompt):
    """EOS = the dry run's greedy token at new-token index eos_step, absent from the prompt and before it."""
    out, _ = run_generate(model, prompt, 0, do_sample=False, max_new_tokens=spec["max_new_tokens"],
                          eos_token_id=None, pad_token_id=spec["config"]["pad_token_id"])
    seq = out.sequences[0].tolist()
    P, k = prompt.shape[1], spec["eos_step"]
    for j in list(range(k, len(seq) - P - 1)) + list(range(k - 1, 1, -1)):
        t = seq[P + j]
        if t >= 4 and t not in seq[:P + j]:
            return t
    raise SystemExit("%s: no EOS candidate in %s" % (spec["name"], seq[P:]))


# ------------------------------------------------------------------------------------------------------------
# Recording


@torch.no_grad()
def record(model, spec, prompt, eos):
    P = prompt.shape[1]
    max_new = spec["max_new_tokens"]
    trace = {"prompt_ids": i64(prompt[0])}
    # forward: the prompt in one call, no cache
    fwd = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=False).logits[0]
    trace["prompt_logits"] = f32(fwd)

    # greedy, from the checkpoint's generation_config.json
    out, procs = run_generate(model, prompt, spec["seed"] + 100)
    assert model.generation_config.do_sample is False
    seq = out.sequences[0]
    new = seq[P:]
    logits = torch.stack([x[0] for x in out.logits])
    scores = torch.stack([x[0] for x in out.scores])
    assert torch.equal(logits, scores), "greedy: no processor should change the logits"
    assert torch.equal(logits.argmax(-1), new)
    top2 = torch.topk(logits, 2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    trace.update(first_step_logits=f32(logits[0]), greedy_sequences=i64(seq), greedy_new_ids=i64(new),
                 greedy_step_logits=f32(logits))
    greedy = {"generation_config": "generation_config.json (do_sample false)", "max_new_tokens": max_new,
              "eos_token_id": eos, "new_ids": new.tolist(), "num_new_tokens": len(new),
              "stop_reason": stop_reason(new.tolist(), eos, max_new), "min_top1_top2_margin": margin,
              "distinct_new_tokens": len(set(new.tolist())), "hf_logits_processors": procs,
              "first_step_vs_prompt_forward_max_abs_diff": float((logits[0] - fwd[-1]).abs().max())}
    if margin < GREEDY_MIN_MARGIN:
        raise SystemExit("%s: greedy margin %.3g too small" % (spec["name"], margin))
    if greedy["distinct_new_tokens"] < MIN_DISTINCT:
        raise SystemExit("%s: degenerate greedy output %s" % (spec["name"], new.tolist()))
    if spec["eos"] == "dry_run" and not greedy["stop_reason"].startswith("eos"):
        raise SystemExit("%s: greedy run should stop at EOS" % spec["name"])
    if spec["eos"] != "dry_run" and greedy["stop_reason"] != "max_new_tokens":
        raise SystemExit("%s: greedy run should not hit EOS" % spec["name"])

    if spec["arch"] == "qwen3_moe":
        logits, ids = router_trace(model, trace["greedy_sequences"])
        trace.update(greedy_router_logits=f32(logits), greedy_expert_ids=i64(ids))
        greedy["min_router_gap"] = min_router_gap(logits, model.config.num_experts_per_tok)
        if greedy["min_router_gap"] <= ROUTER_MIN_GAP:
            raise SystemExit("%s: router k-th / (k+1)-th probability gap %.3g too small"
                             % (spec["name"], greedy["min_router_gap"]))

    sampled = []
    for k, s in enumerate(spec["sampled"]):
        out, procs = run_generate(model, prompt, s["seed"], do_sample=True, temperature=s["temperature"],
                                  top_k=s["top_k"], top_p=s["top_p"], max_new_tokens=max_new)
        seq = out.sequences[0]
        new = seq[P:]
        logits = torch.stack([x[0] for x in out.logits])
        scores = torch.stack([x[0] for x in out.scores])
        assert torch.isfinite(scores[torch.arange(len(new)), new]).all()
        kept = torch.isfinite(scores).sum(-1)
        trace.update({"sample%d_sequences" % k: i64(seq), "sample%d_new_ids" % k: i64(new),
                      "sample%d_step_logits" % k: f32(logits), "sample%d_step_scores" % k: f32(scores)})
        sampled.append(dict(s, torch_manual_seed=s["seed"], max_new_tokens=max_new, eos_token_id=eos,
                            new_ids=new.tolist(), num_new_tokens=len(new),
                            stop_reason=stop_reason(new.tolist(), eos, max_new), kept_per_step=kept.tolist(),
                            hf_logits_processors=procs))
        if spec["arch"] == "qwen3_moe":   # the replay tests feed these tokens too: the same gap required
            gap = sampled[-1]["min_router_gap"] = min_router_gap(router_trace(model, seq)[0],
                                                                 model.config.num_experts_per_tok)
            if gap <= ROUTER_MIN_GAP:
                raise SystemExit("%s: sampled run %d: router k-th / (k+1)-th probability gap %.3g too small"
                                 % (spec["name"], k, gap))
    return trace, greedy, sampled


@torch.no_grad()
def router_trace(model, seq):
    """One forward (no cache) over seq; every sparse layer's router logits [n_moe, T, E] and chosen experts
    [n_moe, T, k] (transformers' Qwen3MoeTopKRouter outputs, caught by forward hooks)."""
    got = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda mod, inp, out: got.append((out[0], out[2])))
             for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    try:
        seq = torch.as_tensor(seq).view(1, -1)
        model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack([g[0] for g in got]), torch.stack([g[1] for g in got])


def min_router_gap(router_logits, top_k):
    """Smallest (over tokens and sparse layers) k-th minus (k+1)-th largest router probability."""
    p = torch.sort(torch.softmax(router_logits.float(), dim=-1), dim=-1, descending=True).values
    return float((p[..., top_k - 1] - p[..., top_k]).min())


@torch.no_grad()
def alternative_impl_diff(path, arch, prompt, trace):
    """Max |diff| of the prompt logits under eager attention (and, MoE, eager experts) vs the recorded sdpa (and
    grouped_mm) ones (kernel noise scale)."""
    m = load(path, arch, attn="eager", experts="eager")
    out = m(input_ids=prompt, use_cache=False).logits[0]
    return float(np.abs(f32(out) - trace["prompt_logits"]).max())


@torch.no_grad()
def without_biases_diff(path, arch, prompt, trace):
    """Max |diff| of the prompt logits with the q/k/v biases zeroed (how much an importer dropping them is off)."""
    m = load(path, arch)
    for name, p in m.named_parameters():
        if name.endswith("_proj.bias"):
            p.zero_()
    out = m(input_ids=prompt, use_cache=False).logits[0]
    return float(np.abs(f32(out) - trace["prompt_logits"]).max())


@torch.no_grad()
def without_norm_topk_diff(path, arch, prompt, trace):
    """Max |diff| of the prompt logits with norm_topk_prob off (the chosen experts' softmax weights not
    renormalised: what an importer ignoring the flag computes)."""
    m = ARCH[arch][1].from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa",
                                      experts_implementation="grouped_mm", norm_topk_prob=False).eval()
    assert m.config.norm_topk_prob is False
    out = m(input_ids=prompt, use_cache=False).logits[0]
    return float(np.abs(f32(out) - trace["prompt_logits"]).max())


@torch.no_grad()
def check_moe_layout(path, model, spec):
    """save_pretrained's model.safetensors vs the in-memory model: the per-expert layout of published Qwen3-MoE
    checkpoints (experts.{e}.gate_proj / up_proj [I, H], experts.{e}.down_proj [H, I], router mlp.gate [E, H]),
    each tensor bit-identical to its slice of transformers' fused experts.gate_up_proj [E, 2I, H] (gate rows
    first) / experts.down_proj [E, H, I]; every other tensor equal to the parameter of its name. Returns
    trace.json's checkpoint_layout."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    f = load_file(os.path.join(path, "model.safetensors"))
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as fh:
        header_metadata = fh.metadata()
    cfg = model.config
    E, I = cfg.num_experts, cfg.moe_intermediate_size
    want, fused = {}, {}
    for name, p in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):
            pre = name[:-len("gate_up_proj")]
            fused[name] = list(p.shape)
            for e in range(E):
                want[pre + "%d.gate_proj.weight" % e] = p[e, :I]
                want[pre + "%d.up_proj.weight" % e] = p[e, I:]
        elif name.endswith("mlp.experts.down_proj"):
            pre = name[:-len("down_proj")]
            fused[name] = list(p.shape)
            for e in range(E):
                want[pre + "%d.down_proj.weight" % e] = p[e]
        else:
            want[name] = p
    if sorted(f) != sorted(want):
        raise SystemExit("%s: save_pretrained did not write the per-expert layout: missing %s, unexpected %s"
                         % (spec["name"], sorted(set(want) - set(f))[:6], sorted(set(f) - set(want))[:6]))
    for k, v in want.items():
        if f[k].dtype != torch.float32 or not torch.equal(f[k], v):
            raise SystemExit("%s: %s in model.safetensors differs from the in-memory model" % (spec["name"], k))
    return {"written_by": "save_pretrained (transformers %s, save_original_format=True, the default): it "
                          "reverts the in-memory fusion of Qwen3-MoE experts (conversion_mapping 'qwen2_moe' "
                          "WeightConverters) and writes one tensor per expert; not rewritten afterwards"
                          % transformers.__version__,
            "in_memory_fused": fused,
            "file_tensors": len(f), "file_dtype": "float32", "safetensors_metadata": header_metadata,
            "file_equals_in_memory_slices": True}


def rewrite_sdar_config(path, spec):
    """config.json as an SDAR (I-DLM) checkpoint has it: SDARForCausalLM / model_type sdar, mask_token_id, and
    transformers 4.x's top-level rope_theta (+ rope_scaling null) instead of rope_parameters."""
    p = os.path.join(path, "config.json")
    with open(p) as f:
        c = json.load(f)
    rope = c.pop("rope_parameters")
    assert rope == {"rope_theta": spec["config"]["rope_theta"], "rope_type": "default"}, rope
    c.update(SDAR_CONFIG, rope_theta=rope["rope_theta"], rope_scaling=None, mask_token_id=spec["mask"])
    with open(p, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


# ------------------------------------------------------------------------------------------------------------
# Making one fixture


@torch.no_grad()
def make_fixture(spec, out_dir):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    name, arch = spec["name"], spec["arch"]
    prompt = prompt_ids(spec)
    tmp_dir = out_dir + ".tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)

    # 1. build, randomize, save (EOS from a dry run if asked), reload
    model = ARCH[arch][1](tiny_config(spec, None))
    randomize(model, spec)
    eos = spec["eos"]
    if eos == "dry_run":
        model.generation_config = greedy_generation_config(spec, None)
        model.save_pretrained(tmp_dir)
        eos = choose_eos(load(tmp_dir, arch), spec, prompt)
        shutil.rmtree(tmp_dir)
    model.config.eos_token_id = eos
    model.generation_config = greedy_generation_config(spec, eos)
    if arch == "qwen3_moe":
        model.eval()
        before = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=False).logits[0]
    model.save_pretrained(tmp_dir)
    layout = check_moe_layout(tmp_dir, model, spec) if arch == "qwen3_moe" else None
    special = {"<pad>": spec["config"]["pad_token_id"], "<unk>": UNK, "<eos>": eos}
    if spec["bos"] is not None:
        special["<bos>"] = spec["bos"]
    if "mask" in spec:
        special[MASK_TOKEN] = spec["mask"]
    tok = make_tokenizer(spec["config"]["vocab_size"], special, spec["bos"])
    tok.save_pretrained(tmp_dir)
    hf_class = type(model).__name__
    del model
    if spec.get("sdar"):
        rewrite_sdar_config(tmp_dir, spec)

    # 2. reload what is on disk and record
    model = load(tmp_dir, arch)
    tok = PreTrainedTokenizerFast.from_pretrained(tmp_dir)
    prompt_text = tok.decode(prompt[0], skip_special_tokens=True)
    assert tok(prompt_text)["input_ids"] == prompt[0].tolist(), "the tokenizer does not round-trip the prompt"
    trace, greedy, sampled = record(model, spec, prompt, eos)
    cfg = model.config
    if layout is not None:
        if not np.array_equal(f32(before), trace["prompt_logits"]):
            raise SystemExit("%s: the reloaded checkpoint's prompt logits differ from the in-memory model's (max "
                             "|diff| %.3g)" % (name, np.abs(f32(before) - trace["prompt_logits"]).max()))
        layout["reload_prompt_logits_bit_identical"] = True
    assert cfg.rope_parameters["rope_theta"] == spec["config"]["rope_theta"], cfg.rope_parameters
    if "mask" in spec:
        runs = [trace["prompt_ids"], trace["greedy_sequences"]] + [trace["sample%d_sequences" % k]
                                                                   for k in range(len(sampled))]
        if any(spec["mask"] in r.tolist() for r in runs):
            raise SystemExit("%s: the mask token %d is in the prompt or a generated run" % (name, spec["mask"]))
        assert tok.mask_token == MASK_TOKEN and tok.mask_token_id == spec["mask"]
    meta = {
        "fixture": name,
        "made_by": MADE_BY,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
        "architecture": cfg.architectures[0],
        "traced_with_class": type(model).__name__,
        "built_with_class": hf_class,
        "seed": spec["seed"],
        "model": {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
                  "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
                  "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
                  # Qwen2Config has no head_dim unless given
                  "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
                  "rope_parameters": cfg.rope_parameters, "rms_norm_eps": cfg.rms_norm_eps,
                  "tie_word_embeddings": cfg.tie_word_embeddings, "dtype": "float32"},
        "hf_impl": {"attn_implementation": cfg._attn_implementation, "device": "cpu", "torch_threads": 1},
        "special_tokens": special,
        "bos_prepended": spec["bos"] is not None,
        "eos_token_id": eos,
        "mask_token_id": spec.get("mask"),
        "prompt_text": prompt_text,
        "prompt_ids": prompt[0].tolist(),
        "greedy": greedy,
        "greedy_text": tok.decode(trace["greedy_new_ids"], skip_special_tokens=False),
        "sampled": sampled,
    }
    if arch == "qwen3_moe":
        meta["hf_impl"]["experts_implementation"] = cfg._experts_implementation
        meta["moe"] = {"num_experts": cfg.num_experts, "num_experts_per_tok": cfg.num_experts_per_tok,
                       "moe_intermediate_size": cfg.moe_intermediate_size, "norm_topk_prob": cfg.norm_topk_prob,
                       "decoder_sparse_step": cfg.decoder_sparse_step, "mlp_only_layers": cfg.mlp_only_layers,
                       "moe_layers": [i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")],
                       "router_gain": spec["router_gain"],
                       "config_json_expert_count_key": "num_local_experts",
                       "min_router_gap_required": ROUTER_MIN_GAP,
                       "experts_used_greedy": sorted(set(trace["greedy_expert_ids"].reshape(-1).tolist())),
                       # per sparse layer, how many different expert pairs route prompt + greedy tokens
                       "distinct_expert_sets_greedy": [len({tuple(sorted(r)) for r in layer.tolist()})
                                                       for layer in trace["greedy_expert_ids"]]}
        meta["checkpoint_layout"] = layout
    if spec.get("sdar"):
        meta["config_rewrite"] = ("saved by %s, then config.json rewritten as I-DLM's SDAR configs spell it: %s, "
                                  "mask_token_id, rope_theta top-level (no rope_parameters); traced as %s"
                                  % (hf_class, json.dumps(SDAR_CONFIG), meta["traced_with_class"]))
    meta["alternative_impl_max_abs_diff"] = alternative_impl_diff(tmp_dir, arch, prompt, trace)
    if arch == "qwen3_moe":
        meta["alternative_impl"] = "attn_implementation eager, experts_implementation eager"
        meta["without_norm_topk_prob_prompt_logits_max_abs_diff"] = without_norm_topk_diff(tmp_dir, arch, prompt,
                                                                                            trace)
    if "bias_gain" in spec:
        meta["without_qkv_biases_prompt_logits_max_abs_diff"] = without_biases_diff(tmp_dir, arch, prompt, trace)
    save_trace(tmp_dir, trace, meta)
    write_json(os.path.join(tmp_dir, "trace.json"), meta)

    # 3. independent re-check
    meta["reference_check"] = reference_check(name, ar_reference.verify_fixture, tmp_dir)
    meta["reference_tolerance"] = ar_reference.LOGIT_TOL
    write_json(os.path.join(tmp_dir, "trace.json"), meta)
    chmod_files(tmp_dir)
    # 4. the sampled runs' arrays for the C++ replay test
    extract_replay.extract(tmp_dir, check=False)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp_dir, out_dir)
    return meta


# ------------------------------------------------------------------------------------------------------------
# Checking


def compare_runs(name, ja, jb, errors):
    """trace.json's greedy and sampled runs: the same tokens, stop reasons, warpers and settings."""
    for key in ("new_ids", "stop_reason", "hf_logits_processors"):
        if ja["greedy"].get(key) != jb["greedy"].get(key):
            errors.append("%s/trace.json: greedy.%s differs" % (name, key))
    for x, y in zip(ja["sampled"], jb["sampled"]):
        for key in ("new_ids", "stop_reason", "hf_logits_processors", "temperature", "top_k", "top_p"):
            if x.get(key) != y.get(key):
                errors.append("%s/trace.json: sampled.%s differs" % (name, key))


def compare_dirs(want_dir, got_dir, errors):
    """Checkpoints bit-identical; arrays (replay/ too) by fixture_tools.compare_arrays; trace.json's facts."""
    fixture_tools.compare_dirs(want_dir, got_dir, errors, compare_json=compare_runs, json_keys=(
        "prompt_ids", "prompt_text", "eos_token_id", "mask_token_id", "special_tokens", "model", "files",
        "architecture", "traced_with_class"))


def summary(spec, meta):
    g = meta["greedy"]
    router = "; min router gap %.3g" % g["min_router_gap"] if "min_router_gap" in g else ""
    return ("%s: greedy %s (%s, margin %.3g, %d distinct%s); sampled %s; reference check %s"
            % (spec["name"], g["new_ids"], g["stop_reason"], g["min_top1_top2_margin"], g["distinct_new_tokens"],
               router, [(s["new_ids"], s["stop_reason"]) for s in meta["sampled"]], meta["reference_check"]))


def main():
    args = parse_args(__doc__, FIXTURES)
    setup(TORCH_VERSION, TRANSFORMERS_SERIES)
    return run_per_fixture(args, SPECS, FIXTURES, make_fixture, compare_dirs, summary,
                           lambda root: fixture_tools.write_manifest(root, MADE_BY))


if __name__ == "__main__":
    sys.exit(main())
