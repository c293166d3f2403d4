#!/usr/bin/env python3
"""SDAR (`SDARForCausalLM`, model_type `sdar`) oracle fixture: a tiny random checkpoint laid out as published ones
(config.json field names of JetLM/SDAR-4B-Chat, Qwen3 tensor names, float32), and traces of sdar_reference.py's
forward and of SDAR's block-diffusion decoding loop (greedy) driving it. And sdar_moe_tiny, SDAR's MoE variant
(`SDARMoeForCausalLM`, model_type `sdar_moe`: the same field list plus Qwen3-MoE's, per-expert Qwen3-MoE tensor
names), traced with transformers' Qwen3MoeForCausalLM under an explicit 4-D block-causal mask, the same decoding
loop driving it, and re-checked by sdar_moe_reference.py.

    /work/refvenv/bin/python tests/reference/sdar/make_fixtures.py            # (re)write fixtures/
    /work/refvenv/bin/python tests/reference/sdar/make_fixtures.py --check    # regenerate to a temp dir, compare
    ... [--sdar-src DIR]   # also run SDAR's own modeling_sdar.py and huggingface_bd3.py block_diffusion_generate
                           # (CPU shims for flash_attn / einops) on the fixture; recorded in trace.json

No transformers / SGLang class runs SDAR on CPU (see README.md), so the checkpoint is written directly (seeded random
tensors) and traced with the plain-PyTorch reference. Refuses a fixture whose greedy argmax margin is below 1e-2
where an argmax decides, or whose threshold / top-k decisions are within 1e-3, at any step of any run, a run with
fewer than 6 distinct tokens, a decoded mask token, or a step where top-k would pick a non-mask position; the MoE
fixture also one whose k-th and (k+1)-th router probabilities are within 1e-3 for any token, layer and forward.
"""

import ast
import json
import math
import os
import shutil
import sys
import tempfile
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import sdar_reference as ref  # noqa: E402
import sdar_moe_reference as moe_ref  # noqa: E402
import fixture_tools  # noqa: E402
import transformers  # noqa: E402
from fixture_tools import (draw_prompt, f32, i64, refuse_if_fragile, replay_arrays, seeded_draws,  # noqa: E402
                           write_checkpoint, write_fixture_files)
from torch_blocks import rope_interleaved  # noqa: E402

FIXTURES = os.path.join(HERE, "fixtures")
MADE_BY = "tests/reference/sdar/make_fixtures.py"
GREEDY_MIN_MARGIN = 1e-2
DECISION_MIN_GAP = 1e-3

SPEC = {
    "name": "sdar_tiny",
    "seed": 6,
    "gains": {"qk": 2.5, "branch": 1.6, "logit": 0.5, "mask_row": 0.05},
    # JetLM/SDAR-4B-Chat config.json's fields (same order), the fixture's values
    "config": {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig", "AutoModel": "modeling_sdar.SDARModel",
                     "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_implementation": "flex_attention",
        "bos_token_id": 1,
        "debug": False,
        "eos_token_id": 1,
        "block_size": 4,
        "mask_token_id": 255,
        "ep_size": 1,
        "fuse_cross_entropy": True,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "max_position_embeddings": 512,
        "max_window_layers": 3,
        "micro_forward": False,
        "model_type": "sdar",
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000,
        "skip_checkpoint": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.52.4",
        "use_cache": False,
        "use_deepep": False,
        "use_sliding_window": False,
        "vocab_size": 256,
    },
    # published generation_config.json: eos_token_id [<|im_end|>, <|endoftext|>] -> generate.py's stop ids
    "generation_config": {"bos_token_id": 1, "eos_token_id": [2, 1], "pad_token_id": 0},
    "special": {"<pad>": 0, "<eos>": 1, "<|im_end|>": 2, "<unk>": 3, "<|MASK|>": 255},
    "mask_token": "<|MASK|>",
    "prompt_len": 14,
    "gen_length": 16,
    "runs": [
        {"name": "static", "settings": dict(gen_length=16, block_length=4, denoising_steps=4,
                                            remasking_strategy="low_confidence_static", stop_ids=[2, 1])},
        {"name": "static_steps2", "settings": dict(gen_length=16, block_length=4, denoising_steps=2,
                                                   remasking_strategy="low_confidence_static", stop_ids=[2, 1])},
        {"name": "dynamic", "settings": dict(gen_length=16, block_length=4, denoising_steps=4,
                                             remasking_strategy="low_confidence_dynamic", confidence_threshold=0.5,
                                             stop_ids=[2, 1])},
        {"name": "sequential", "settings": dict(gen_length=16, block_length=4, denoising_steps=4,
                                                remasking_strategy="sequential", stop_ids=[2, 1])},
        {"name": "stop", "settings": dict(gen_length=16, block_length=4, denoising_steps=4,
                                          remasking_strategy="low_confidence_static", stop_ids=[2, 1, None])},
    ],
    "stop_token_from": ("static", 11),   # "stop"'s extra stop id: the static run's token at generated position 11
}


# SDAR-MoE (`SDARMoeForCausalLM`, SGLang 0.5.23 sdar_moe.py; SDAR-30B-A3B's config.json not available): SDAR's
# published field list (above; auto_map by analogy) with Qwen3-MoE's fields (Qwen3-30B-A3B's names) added in
# alphabetical place; every layer sparse (decoder_sparse_step 1, mlp_only_layers []: what sdar_moe.py builds
# whatever they say, and what transformers' Qwen3-MoE builds from these values). intermediate_size is carried as
# Qwen3-MoE configs carry it but no layer reads it. 8 experts, top 2, renormalised, expert width 16 (the
# checkpoint stays under 600 KB). Seed 802 and the dynamic threshold 0.55 from a sweep (the router gap is the scarce
# one); sdar_tiny's runs less `sequential`, which took the router gap below its bound.
SPEC_MOE = {
    "name": "sdar_moe_tiny",
    "seed": 802,
    "gains": {"qk": 2.5, "branch": 1.6, "logit": 0.5, "mask_row": 0.05, "router": 1.5},
    "config": {
        "architectures": ["SDARMoeForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_sdar_moe.SDARMoeConfig",
                     "AutoModel": "modeling_sdar_moe.SDARMoeModel",
                     "AutoModelForCausalLM": "modeling_sdar_moe.SDARMoeForCausalLM"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_implementation": "flex_attention",
        "bos_token_id": 1,
        "debug": False,
        "decoder_sparse_step": 1,
        "eos_token_id": 1,
        "block_size": 4,
        "mask_token_id": 255,
        "ep_size": 1,
        "fuse_cross_entropy": True,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "max_position_embeddings": 512,
        "max_window_layers": 3,
        "micro_forward": False,
        "mlp_only_layers": [],
        "model_type": "sdar_moe",
        "moe_intermediate_size": 16,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000,
        "router_aux_loss_coef": 0.001,
        "skip_checkpoint": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.52.4",
        "use_cache": False,
        "use_deepep": False,
        "use_sliding_window": False,
        "vocab_size": 256,
    },
    "generation_config": SPEC["generation_config"],
    "special": SPEC["special"],
    "mask_token": SPEC["mask_token"],
    "prompt_len": 14,
    "gen_length": 16,
    "runs": [
        {"name": "static", "settings": dict(gen_length=16, block_length=4, denoising_steps=4,
                                            remasking_strategy="low_confidence_static", stop_ids=[2, 1])},
        {"name": "static_steps2", "settings": dict(gen_length=16, block_length=4, denoising_steps=2,
                                                   remasking_strategy="low_confidence_static", stop_ids=[2, 1])},
        {"name": "dynamic", "settings": dict(gen_length=16, block_length=4, denoising_steps=4,
                                             remasking_strategy="low_confidence_dynamic", confidence_threshold=0.55,
                                             stop_ids=[2, 1])},
        {"name": "stop", "settings": dict(gen_length=16, block_length=4, denoising_steps=4,
                                          remasking_strategy="low_confidence_static", stop_ids=[2, 1, None])},
    ],
    "stop_token_from": ("static", 11),
}


# ------------------------------------------------------------------------------------------------------------
# Checkpoint


def make_tensors(spec):
    """Seeded random tensors under the published (Qwen3) names, float32: embeddings / head N(0, 1), q/k/v/gate/up
    N(0, 1/fan_in), o/down N(0, branch²/fan_in), norms U(0.5, 1.5) (q/k norms × qk, final norm × logit), the mask
    row of lm_head × mask_row (never the argmax)."""
    c, g_ = spec["config"], spec["gains"]
    normal, uniform = seeded_draws(spec["seed"])
    H, hd, nh, kv, I = (c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"],
                        c["intermediate_size"])

    t = {"model.embed_tokens.weight": normal([c["vocab_size"], H], 1.0)}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = uniform([H], 0.5, 1.5)
        t[p + "self_attn.q_proj.weight"] = normal([nh * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.k_proj.weight"] = normal([kv * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.v_proj.weight"] = normal([kv * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.o_proj.weight"] = normal([H, nh * hd], g_["branch"] / math.sqrt(nh * hd))
        t[p + "self_attn.q_norm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "self_attn.k_norm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "post_attention_layernorm.weight"] = uniform([H], 0.5, 1.5)
        t[p + "mlp.gate_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
        t[p + "mlp.up_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
        t[p + "mlp.down_proj.weight"] = normal([H, I], g_["branch"] / math.sqrt(I))
    t["model.norm.weight"] = uniform([H], 0.5, 1.5) * g_["logit"]
    head = normal([c["vocab_size"], H], 1.0)
    head[spec["special"][spec["mask_token"]]] *= g_["mask_row"]
    t["lm_head.weight"] = head
    return {k: v.contiguous() for k, v in t.items()}


def make_moe_tensors(spec):
    """make_tensors' draws in a Qwen3-MoE checkpoint's tensor order, each layer's MLP being the router
    mlp.gate.weight [E, H] N(0, router²/H) and per expert e mlp.experts.{e}.gate_proj / up_proj [I, H] N(0, 1/H),
    down_proj [H, I] N(0, branch²/I)."""
    c, g_ = spec["config"], spec["gains"]
    normal, uniform = seeded_draws(spec["seed"])
    H, hd, nh, kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    E, I = c["num_experts"], c["moe_intermediate_size"]

    t = {"model.embed_tokens.weight": normal([c["vocab_size"], H], 1.0)}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = uniform([H], 0.5, 1.5)
        t[p + "self_attn.q_proj.weight"] = normal([nh * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.k_proj.weight"] = normal([kv * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.v_proj.weight"] = normal([kv * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.o_proj.weight"] = normal([H, nh * hd], g_["branch"] / math.sqrt(nh * hd))
        t[p + "self_attn.q_norm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "self_attn.k_norm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "post_attention_layernorm.weight"] = uniform([H], 0.5, 1.5)
        t[p + "mlp.gate.weight"] = normal([E, H], g_["router"] / math.sqrt(H))
        for e in range(E):
            q = p + "mlp.experts.%d." % e
            t[q + "gate_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
            t[q + "up_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
            t[q + "down_proj.weight"] = normal([H, I], g_["branch"] / math.sqrt(I))
    t["model.norm.weight"] = uniform([H], 0.5, 1.5) * g_["logit"]
    head = normal([c["vocab_size"], H], 1.0)
    head[spec["special"][spec["mask_token"]]] *= g_["mask_row"]
    t["lm_head.weight"] = head
    return {k: v.contiguous() for k, v in t.items()}


# ------------------------------------------------------------------------------------------------------------
# Making


GAP_LIMITS = (("greedy_margin", GREEDY_MIN_MARGIN), ("threshold", DECISION_MIN_GAP),
              ("topk_rank", DECISION_MIN_GAP))


class Fixture:
    def __init__(self, spec, model, tok, prompt, prompt_text):
        self.spec, self.model, self.tok, self.prompt, self.prompt_text = spec, model, tok, prompt, prompt_text
        self.block = spec["config"]["block_size"]
        self.mask_id = spec["config"]["mask_token_id"]
        self.trace = {"prompt_ids": i64(prompt)}
        self.forwards, self.problems = [], []
        self.gaps = {name: math.inf for name, _ in GAP_LIMITS}

    def lower_gap(self, name, value):
        self.gaps[name] = min(self.gaps[name], value)

    def record_forward(self, name, ids, mask_kind):
        T = len(ids)
        mask = {"block_causal": ref.block_causal_mask(T, self.block), "full": ref.full_mask(T),
                "causal": ref.causal_mask(T)}[mask_kind]
        out = self.model.forward(torch.tensor(ids), mask)
        self.trace[name + "_ids"] = i64(ids)
        self.trace[name + "_logits"] = f32(out["logits"])
        f = {"name": name, "ids": name + "_ids", "logits": name + "_logits", "mask": mask_kind}
        if mask_kind == "block_causal":
            f["block_size"] = self.block
        self.forwards.append(f)
        return out


def resolve_settings(spec, run, earlier):
    """The run's settings with the "stop" run's extra stop id filled in (a token the static run generates)."""
    s = dict(run["settings"])
    if None in s.get("stop_ids", []):
        src, pos = spec["stop_token_from"]
        tok = int(earlier[src]["sequence"][pos])
        s["stop_ids"] = [tok if i is None else i for i in s["stop_ids"]]
    return s


def note_gaps(fx, name, s, steps):
    """Greedy margins where a token is committed; threshold and top-k rank gaps of the mask positions."""
    for st in steps:
        if st["overwrote_unmasked"]:
            fx.problems.append("%s: top-k picked a non-mask position (block %d step %d)" % (name, st["block"],
                                                                                         st["step"]))
        tr = st["transfer"]
        lg = st["logits"].sort(-1, descending=True).values
        fx.lower_gap("greedy_margin", float((lg[:, 0] - lg[:, 1])[tr].min()))
        if bool((st["sampled"][tr] == fx.mask_id).any()):
            fx.problems.append("%s: mask token decoded" % name)
        strategy = s["remasking_strategy"]
        if strategy == "sequential":
            continue
        active = st["mask_before"]
        pa = st["probs"][active]
        n = st["schedule_n"]
        topk_used = True
        if strategy == "low_confidence_dynamic":
            fx.lower_gap("threshold", float((pa - s["confidence_threshold"]).abs().min()))
            topk_used = int((pa > s["confidence_threshold"]).sum()) < n
        if topk_used and int(active.sum()) > n:
            ps = pa.sort(descending=True).values
            fx.lower_gap("topk_rank", float(ps[n - 1] - ps[n]))


def record_run(fx, name, s):
    x, steps, forwards = ref.block_diffusion_generate(fx.model, fx.prompt, mask_id=fx.mask_id, **s)
    note_gaps(fx, name, s, steps)
    P = len(fx.prompt)
    seq = x[P:]
    fx.trace[name + "_sequence"] = i64(seq)
    fx.trace[name + "_canvas"] = i64(torch.stack([st["canvas"] for st in steps]))
    fx.trace[name + "_sampled"] = i64(torch.stack([st["sampled"] for st in steps]))
    fx.trace[name + "_probs"] = f32(torch.stack([st["probs"] for st in steps]))
    fx.trace[name + "_transfer"] = np.stack([st["transfer"].numpy() for st in steps])
    fx.trace[name + "_block"] = i64([st["block"] for st in steps])
    fx.trace[name + "_step"] = i64([st["step"] for st in steps])
    generated = [int(t) for t in seq if int(t) != fx.mask_id]
    thr = s.get("confidence_threshold")
    return {
        "name": name, "settings": s, "sequence": seq.tolist(),
        "distinct_tokens": len(set(generated)),
        "forwards": len(forwards),
        "forward_kinds": {k: sum(1 for f in forwards if f[0] == k) for k in ("prefill", "denoise", "store")},
        "blocks_decoded": sorted({st["block"] for st in steps}),
        "steps_per_block": {str(b): sum(1 for st in steps if st["block"] == b)
                            for b in sorted({st["block"] for st in steps})},
        "threshold_commits": (int(sum(int((st["transfer"] & (st["probs"] > thr)).sum()) for st in steps))
                              if thr is not None and s["remasking_strategy"] == "low_confidence_dynamic" else 0),
        "commits": int(sum(int(st["transfer"].sum()) for st in steps)),
        "stopped_early": len(seq) > 0 and bool((seq == fx.mask_id).any()),
        "text": fx.tok.decode(generated),
    }, x, steps


# --- how much each rule matters ---


class Variant(ref.SDARReference):
    def __init__(self, base, what):
        self.cfg, self.t, self.what = base.cfg, base.t, what

    def rope(self, x, pos):
        if self.what != "rope_interleaved":
            return super().rope(x, pos)
        return rope_interleaved(x, pos, self.cfg["rope_theta"])

    def attention(self, l, x, pos, mask):
        if self.what != "no_qk_norm":
            return super().attention(l, x, pos, mask)
        c, t = self.cfg, self.t
        p = "model.layers.%d.self_attn." % l
        T = x.shape[0]
        nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        q = self.rope((x @ t[p + "q_proj.weight"].T).view(T, nh, hd), pos)      # no q_norm / k_norm
        k = self.rope((x @ t[p + "k_proj.weight"].T).view(T, kv, hd), pos)
        v = (x @ t[p + "v_proj.weight"].T).view(T, kv, hd)
        k, v = k.repeat_interleave(nh // kv, dim=1), v.repeat_interleave(nh // kv, dim=1)
        s = (torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5).masked_fill(~mask[None], float("-inf"))
        return torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(T, nh * hd) @ t[p + "o_proj.weight"].T


def prompt_aligned_generate(model, prompt, mask_id, s):
    """What a decoder that starts the first generated block at the prompt's end (prompt as its own causal-free
    context, blocks of B counted from P) would produce: the sensitivity to SDAR's alignment from position 0."""
    P, B = len(prompt), s["block_length"]
    gen_blocks = (s["gen_length"] + B - 1) // B
    total = P + gen_blocks * B
    x = torch.full((total,), mask_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt)
    blk_of = torch.cat([torch.zeros(P, dtype=torch.long), 1 + torch.arange(gen_blocks * B) // B])
    mask = blk_of[None, :] <= blk_of[:, None]
    sched = ref.get_num_transfer_tokens(B, s["denoising_steps"])
    for b in range(gen_blocks):
        start, end = P + b * B, P + (b + 1) * B
        for step in range(s["denoising_steps"]):
            cur = x[start:end]
            mi = cur == mask_id
            if not bool(mi.any()):
                break
            lg = model.forward(x[:end], mask[:end, :end])["logits"][start:end]
            x0 = lg.argmax(-1)
            p = torch.softmax(lg, -1).gather(-1, x0[:, None])[:, 0]
            conf = torch.where(mi, p, torch.full_like(p, -math.inf))
            tr = torch.zeros(B, dtype=torch.bool)
            tr[torch.topk(conf, sched[step]).indices] = True
            x[start:end] = torch.where(tr, x0, cur)
    return x[P:P + s["gen_length"]]


def sensitivity(fx, static_settings, static_seq):
    tr = fx.trace
    full_x, _, _ = ref.block_diffusion_generate(fx.model, fx.prompt, mask_id=fx.mask_id, attention="full",
                                                **static_settings)
    out = {"full_window_attention": {
        "window_logits_max_abs_diff": float("%.3g" % np.abs(tr["window_full_logits"] - tr["window_logits"]).max()),
        "static_sequence_differs": bool(not np.array_equal(full_x.numpy()[len(fx.prompt):], static_seq))}}
    causal = fx.model.forward(torch.from_numpy(tr["window_ids"]), ref.causal_mask(len(tr["window_ids"])))["logits"]
    out["causal_window_attention"] = {
        "window_logits_max_abs_diff": float("%.3g" % np.abs(causal.numpy() - tr["window_logits"]).max())}
    for what in ("rope_interleaved", "no_qk_norm"):
        v = Variant(fx.model, what)
        lg = v.forward(torch.from_numpy(tr["window_ids"]), ref.block_causal_mask(len(tr["window_ids"]), fx.block))
        out[what] = {"window_logits_max_abs_diff": float("%.3g" % np.abs(lg["logits"].numpy()
                                                                          - tr["window_logits"]).max())}
    aligned = prompt_aligned_generate(fx.model, fx.prompt, fx.mask_id, static_settings)
    out["blocks_from_prompt_end"] = {
        "static_sequence": aligned.tolist(),
        "differs": bool(not np.array_equal(aligned.numpy(), static_seq[:len(aligned)]))}
    return out


# ------------------------------------------------------------------------------------------------------------
# SDAR's own code (optional, --sdar-src): modeling_sdar.py + huggingface_bd3.py's block_diffusion_generate


SDAR_SRC_FILES = ("configuration_sdar.py", "modeling_sdar.py", "huggingface_bd3.py", "generate.py")


def _install_cpu_shims():
    """Stand-ins for the GPU-only imports of modeling_sdar.py (flash_attn's Triton RMSNorm and its attention, used
    at inference when the mask is all ones), einops.rearrange, the training loss module, and the names
    transformers 5 dropped (LossKwargs; ROPE_INIT_FUNCTIONS["default"])."""
    import importlib
    import torch.nn.functional as F
    import transformers.modeling_rope_utils as rope_utils
    import transformers.utils as tu
    from typing import TypedDict
    # what modeling_sdar.py imports from transformers, imported before the flash_attn stand-in exists (transformers
    # probes for an installed flash_attn at import time)
    for name in ("transformers.activations", "transformers.cache_utils", "transformers.generation",
                 "transformers.integrations", "transformers.modeling_attn_mask_utils",
                 "transformers.modeling_flash_attention_utils", "transformers.modeling_layers",
                 "transformers.modeling_outputs", "transformers.modeling_utils", "transformers.processing_utils",
                 "transformers.configuration_utils"):
        importlib.import_module(name)

    def rms_norm_fn(x, weight, bias=None, eps=1e-6, **kw):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

    def flash_attn_func(q, k, v, causal=False, softmax_scale=None, **kw):   # [b, l, h, d]
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=causal, scale=softmax_scale, enable_gqa=True)
        return o.transpose(1, 2)

    def rearrange(x, pattern):
        if pattern == "b h l d -> b l (h d)":
            return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)
        if pattern == "b l h d -> b l (h d)":
            return x.reshape(x.shape[0], x.shape[1], -1)
        raise NotImplementedError(pattern)

    mods = {}
    for name in ("flash_attn", "flash_attn.ops", "flash_attn.ops.triton", "flash_attn.ops.triton.layer_norm",
                 "flash_attn.bert_padding", "einops"):
        mods[name] = types.ModuleType(name)
    mods["flash_attn.ops.triton.layer_norm"].rms_norm_fn = rms_norm_fn
    mods["flash_attn"].flash_attn_func = flash_attn_func
    mods["flash_attn"].flash_attn_varlen_func = None
    for f in ("index_first_axis", "pad_input", "unpad_input"):
        setattr(mods["flash_attn.bert_padding"], f, None)
    mods["einops"].rearrange = rearrange
    sys.modules.update(mods)
    if not hasattr(tu, "LossKwargs"):
        tu.LossKwargs = TypedDict("LossKwargs", {}, total=False)
    if "default" not in rope_utils.ROPE_INIT_FUNCTIONS:
        def default_rope(config, device=None, **kw):
            hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
            return 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)), 1.0
        rope_utils.ROPE_INIT_FUNCTIONS["default"] = default_rope
    if not hasattr(rope_utils, "rope_config_validation"):
        rope_utils.rope_config_validation = lambda *a, **k: None


def list_cache_class():
    from transformers.cache_utils import Cache

    class ListCache(Cache):
        """The cache interface modeling_sdar.py uses (update / len / [layer] / get_seq_length); transformers 5's
        DynamicCache has no __getitem__. A Cache subclass for SDARModel's isinstance check."""

        def __init__(self):  # noqa: E301 (Cache.__init__ not called: none of its state is used)
            self.k, self.v = [], []

        update, __len__, __getitem__, get_seq_length = (ListCacheMethods.update, ListCacheMethods.__len__,
                                                        ListCacheMethods.__getitem__, ListCacheMethods.get_seq_length)

    return ListCache


class ListCacheMethods:
    def __init__(self):
        self.k, self.v = [], []

    def update(self, k, v, layer_idx, *a, **kw):
        if layer_idx < len(self.k):
            self.k[layer_idx] = torch.cat([self.k[layer_idx], k], dim=-2)
            self.v[layer_idx] = torch.cat([self.v[layer_idx], v], dim=-2)
        else:
            self.k.append(k)
            self.v.append(v)
        return self.k[layer_idx], self.v[layer_idx]

    def __len__(self):
        return len(self.k)

    def __getitem__(self, i):
        return self.k[i], self.v[i]

    def get_seq_length(self, layer_idx=0):
        return self.k[layer_idx].shape[-2] if self.k else 0


def load_sdar_remote(src, d):
    """SDARForCausalLM from src's modeling_sdar.py / configuration_sdar.py (copied into a temporary package; the
    loss module stubbed), weights from fixture d, float32, eval mode."""
    _install_cpu_shims()
    from safetensors.torch import load_file
    pkg_dir = tempfile.mkdtemp(prefix="sdar_remote_")
    pkg = os.path.join(pkg_dir, "sdar_remote")
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    for f in ("configuration_sdar.py", "modeling_sdar.py"):
        shutil.copy(os.path.join(src, f), os.path.join(pkg, f))
    with open(os.path.join(pkg, "fused_linear_diffusion_cross_entropy.py"), "w") as fh:
        fh.write("FusedLinearDiffusionCrossEntropyLoss = None\n")
    sys.path.insert(0, pkg_dir)
    try:
        from sdar_remote.configuration_sdar import SDARConfig
        from sdar_remote.modeling_sdar import SDARForCausalLM
    finally:
        sys.path.remove(pkg_dir)
    cfg_dict = json.load(open(os.path.join(d, "config.json")))
    cfg_dict = {k: v for k, v in cfg_dict.items() if k not in ("auto_map", "architectures", "model_type",
                                                               "transformers_version", "torch_dtype",
                                                               "attn_implementation")}
    cfg = SDARConfig(**cfg_dict)
    if not hasattr(cfg, "pad_token_id"):   # transformers 4's PretrainedConfig default; 5 has none
        cfg.pad_token_id = None
    cfg._attn_implementation = "sdpa"
    model = SDARForCausalLM(cfg).float().eval()
    missing, unexpected = model.load_state_dict(load_file(os.path.join(d, "model.safetensors")), strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]
    if missing or unexpected:
        raise SystemExit("SDAR's model: missing %s unexpected %s" % (missing, unexpected))
    shutil.rmtree(pkg_dir)
    return model


def bd3_generate_fn(src):
    """huggingface_bd3.py's block_diffusion_generate and the samplers it calls (extracted by ast; the file's
    opencompass imports are not needed), with ListCache as its DynamicCache."""
    import torch.nn.functional as F
    tree = ast.parse(open(os.path.join(src, "huggingface_bd3.py")).read())
    names = {"add_gumbel_noise", "top_k_logits", "top_p_logits", "sample_with_temperature_topk_topp",
             "get_num_transfer_tokens", "block_diffusion_generate"}
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    for fn in fns:
        fn.decorator_list = []
    ns = {"torch": torch, "F": F, "np": np, "DynamicCache": list_cache_class()}
    exec(compile(ast.Module(body=fns, type_ignores=[]), "huggingface_bd3", "exec"), ns)
    return ns["block_diffusion_generate"]


def greedy_sample(logits, temperature=1.0, top_k=0, top_p=1.0):
    """The greedy sampler the fixture traces (argmax, its softmax probability), put in place of generate.py's
    `sample_with_temperature_topk_topp` (whose top_k=1 would give probability 1 everywhere)."""
    p = torch.softmax(logits.float(), dim=-1)
    tok = logits.argmax(-1)
    return tok, p.gather(-1, tok[..., None])[..., 0]


def generate_py_fn(src):
    """generate.py's block_diffusion_generate (extracted by ast), sampler replaced by greedy_sample."""
    import torch.nn.functional as F
    tree = ast.parse(open(os.path.join(src, "generate.py")).read())
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)
           and n.name in ("get_num_transfer_tokens", "block_diffusion_generate")]
    for fn in fns:
        fn.decorator_list = []
    ns = {"torch": torch, "F": F, "DynamicCache": list_cache_class(),
          "sample_with_temperature_topk_topp": greedy_sample}
    exec(compile(ast.Module(body=fns, type_ignores=[]), "sdar_generate", "exec"), ns)
    return ns["block_diffusion_generate"]


@torch.no_grad()
def crosscheck_sdar(src, d, fx, runs):
    """SDAR's own forward on the recorded forwards (the 3-D float mask generate.py builds), and its own decoding
    loop (huggingface_bd3.py, temperature 1, top_k 1 = greedy) on the low-confidence runs."""
    model = load_sdar_remote(src, d)
    worst = 0.0
    for f in fx.forwards:
        ids = torch.from_numpy(fx.trace[f["ids"]])[None]
        T = ids.shape[1]
        m = {"block_causal": ref.block_causal_mask(T, fx.block), "full": ref.full_mask(T),
             "causal": ref.causal_mask(T)}[f["mask"]]
        lg = model(input_ids=ids, attention_mask=m.float()[None], position_ids=torch.arange(T)[None]).logits[0]
        worst = max(worst, float((lg - torch.from_numpy(fx.trace[f["logits"]])).abs().max()))
    gen, gen_py = bd3_generate_fn(src), generate_py_fn(src)
    torch.manual_seed(0)
    P = len(fx.prompt)
    same, same_py = {}, {}
    for run in runs:
        s = run["settings"]
        x = gen_py(model, {"input_ids": torch.tensor([fx.prompt])}, fx.mask_id, gen_length=s["gen_length"],
                   block_length=s["block_length"], denoising_steps=s["denoising_steps"],
                   remasking_strategy=s["remasking_strategy"],
                   confidence_threshold=s.get("confidence_threshold"), stopping_criteria_idx=s["stop_ids"])
        same_py[run["name"]] = bool(np.array_equal(x[0, P:].numpy(), fx.trace[run["name"] + "_sequence"]))
        if s["remasking_strategy"] == "sequential":
            continue   # huggingface_bd3.py has low_confidence only
        thr = s["confidence_threshold"] if s["remasking_strategy"] == "low_confidence_dynamic" else 1.0
        x = gen(model, None, {"input_ids": torch.tensor([fx.prompt]), "attention_mask": torch.ones(1, P)},
                mask_id=fx.mask_id, gen_length=s["gen_length"], block_length=s["block_length"],
                denoising_steps=s["denoising_steps"], temperature=1.0, top_k=1, top_p=1.0,
                remasking="low_confidence", threshold=thr, stopping_criteria_idx=s["stop_ids"])
        same[run["name"]] = bool(np.array_equal(x[0, P:].numpy(), fx.trace[run["name"] + "_sequence"]))
    return {"files": "JetAstra/SDAR c2041a8 training/model/SDAR-4B-Chat/{configuration_sdar,modeling_sdar}.py, "
                     "evaluation/opencompass/opencompass/models/huggingface_bd3.py (block_diffusion_generate, "
                     "temperature 1, top_k 1), generate.py (block_diffusion_generate, sampler -> greedy_sample)",
            "shims": "flash_attn rms_norm_fn / flash_attn_func -> torch; einops.rearrange; LossKwargs; "
                     "ROPE_INIT_FUNCTIONS['default']; pad_token_id None; DynamicCache -> ListCache (update/len/[i])",
            "forward_logits_max_abs_diff": float("%.3g" % worst),
            "same_sequences_huggingface_bd3": same,
            "same_sequences_generate_py": same_py}


# ------------------------------------------------------------------------------------------------------------


# The arrays the C++ tests read, as plain .npy in replay/. name -> dtype written.
def replay_names(runs):
    names = {"prompt_ids": "<i4", "window_ids": "<i4", "window_logits": "<f4", "final_canvas_ids": "<i4",
             "final_canvas_logits": "<f4"}
    for run in runs:
        names[run["name"] + "_canvas"] = "<i4"
        names[run["name"] + "_sequence"] = "<i4"
    return names


def make_fixture(spec, d, sdar_src=None):
    torch.manual_seed(0)
    if os.path.isdir(d):
        shutil.rmtree(d)   # no stale files (save_trace hashes every file of d)
    tok = write_checkpoint(d, spec, make_tensors(spec), {"generation_config.json": spec["generation_config"]})
    m = ref.SDARReference.load(d)
    prompt, text = draw_prompt(spec, tok, m.cfg["vocab_size"])
    fx = Fixture(spec, m, tok, prompt, text)
    B, P = fx.block, len(prompt)
    total = (P + spec["gen_length"] + B - 1) // B * B
    window = prompt + [fx.mask_id] * (total - P)     # the whole canvas before decoding
    fx.record_forward("window", window, "block_causal")
    fx.record_forward("window_full", window, "full")
    fx.record_forward("prompt_causal", prompt, "causal")
    runs, done = [], {}
    for run in spec["runs"]:
        s = resolve_settings(spec, run, done)
        summary, x, steps = record_run(fx, run["name"], s)
        runs.append(summary)
        done[run["name"]] = summary
    fx.record_forward("final_canvas", [int(t) for t in fx.trace["static_canvas"][-1]], "block_causal")
    sens = sensitivity(fx, runs[0]["settings"], fx.trace["static_sequence"])
    refuse_if_fragile(fx.problems, fx.gaps, GAP_LIMITS, runs)
    meta = {
        "made_by": MADE_BY,
        "versions": fixture_tools.versions(),
        "architecture": "SDARForCausalLM",
        "seed": spec["seed"], "gains": spec["gains"],
        "config": spec["config"],
        "generation_config": spec["generation_config"],
        "derived": {"head_dim": m.cfg["head_dim"], "gqa_group": m.cfg["num_attention_heads"]
                    // m.cfg["num_key_value_heads"], "canvas_length": total, "prefill_length": P // B * B,
                    "first_decoded_block": P // B, "prompt_tokens_in_first_decoded_block": P % B},
        "special_tokens": spec["special"], "mask_token": spec["mask_token"], "mask_token_id": fx.mask_id,
        "prompt_text": fx.prompt_text, "prompt_ids": fx.prompt, "block_size": B,
        "forwards": fx.forwards,
        "runs": runs,
        "min_gaps": {k: float("%.4g" % v) if v != math.inf else None for k, v in fx.gaps.items()},
        "sensitivity": sens,
    }
    if sdar_src:
        meta["sdar_crosscheck"] = crosscheck_sdar(sdar_src, d, fx, runs)
        cc = meta["sdar_crosscheck"]
        bad = [k for k, v in list(cc["same_sequences_huggingface_bd3"].items())
               + list(cc["same_sequences_generate_py"].items()) if not v]
        if meta["sdar_crosscheck"]["forward_logits_max_abs_diff"] > 1e-4 or bad:
            raise SystemExit("SDAR's own code disagrees: %s" % json.dumps(meta["sdar_crosscheck"]))
    write_fixture_files(d, spec["name"], fx.trace, meta, replay_arrays(fx.trace, replay_names(runs)),
                        ref.verify_fixture)
    return meta


# ------------------------------------------------------------------------------------------------------------
# SDAR-MoE (sdar_moe_tiny): the oracle is transformers' Qwen3MoeForCausalLM, loaded from the fixture's own
# checkpoint, attending by an explicit 4-D block-causal mask; SDAR's decoding loop (block_diffusion_generate above,
# sdar_reference.py) drives its forward. sdar_moe_reference.py (sdar_reference.py's math with a routed MLP) is the
# independent re-check.


ROUTER_MIN_GAP = 1e-3   # k-th minus (k+1)-th router probability, every token, layer and forward
MOE_GAP_LIMITS = GAP_LIMITS + (("router_rank", ROUTER_MIN_GAP),)
# config.json -> Qwen3MoeConfig: the fields both name alike (the SDAR-only ones dropped: auto_map, architectures,
# model_type, attn_implementation, block_size, mask_token_id, debug, ep_size, fuse_cross_entropy, micro_forward,
# skip_checkpoint, use_deepep, max_window_layers, rope_scaling null, torch_dtype, transformers_version), and
# rope_theta as transformers 5's rope_parameters.
QWEN3_MOE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "initializer_range",
                    "rms_norm_eps", "use_cache", "tie_word_embeddings", "attention_bias", "use_sliding_window",
                    "sliding_window", "attention_dropout", "decoder_sparse_step", "moe_intermediate_size",
                    "num_experts_per_tok", "num_experts", "norm_topk_prob", "output_router_logits",
                    "router_aux_loss_coef", "mlp_only_layers", "bos_token_id", "eos_token_id")


def transformers_config_kwargs(d):
    c = json.load(open(os.path.join(d, "config.json")))
    assert c["rope_scaling"] is None
    kw = {k: c[k] for k in QWEN3_MOE_FIELDS}
    kw["rope_parameters"] = {"rope_type": "default", "rope_theta": c["rope_theta"]}
    return kw


def load_transformers(d, attn="sdpa", experts="grouped_mm", **override):
    """Qwen3MoeForCausalLM.from_pretrained(d) (float32, eval) with the Qwen3MoeConfig config.json maps to (its
    model_type sdar_moe is not transformers'); transformers' loader fuses the per-expert tensors itself.
    sdpa / grouped_mm: transformers' defaults."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(**dict(transformers_config_kwargs(d), **override))
    m = Qwen3MoeForCausalLM.from_pretrained(d, config=cfg, dtype=torch.float32, attn_implementation=attn,
                                            experts_implementation=experts).eval()
    c = m.config
    sparse = [i for i, layer in enumerate(m.model.layers) if hasattr(layer.mlp, "gate")]
    assert sparse == list(range(c.num_hidden_layers)), "not every layer sparse: %s" % sparse
    assert m.model.layers[0].self_attn.head_dim == c.head_dim and c.sliding_window is None
    assert m.model.layers[0].mlp.gate.norm_topk_prob == c.norm_topk_prob
    return m


@torch.no_grad()
def check_loaded(model, d):
    """Every parameter transformers loaded equals the file's tensor(s) of its name (the fused experts
    gate_up_proj [E, 2I, H] = per expert [gate_proj; up_proj], down_proj [E, H, I]), and every file tensor was
    used. trace.json's transformers_load."""
    from safetensors.torch import load_file
    f = load_file(os.path.join(d, "model.safetensors"))
    used, fused = set(), {}
    for name, p in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            pre, what = name.rsplit(".", 1)
            fused[name] = list(p.shape)
            for e in range(p.shape[0]):
                parts = ["gate_proj", "up_proj"] if what == "gate_up_proj" else ["down_proj"]
                keys = ["%s.%d.%s.weight" % (pre, e, n) for n in parts]
                want = torch.cat([f[k] for k in keys], 0)
                if not torch.equal(p[e], want):
                    raise SystemExit("transformers' %s[%d] is not the file's %s" % (name, e, keys))
                used.update(keys)
        elif name in f:
            if not torch.equal(p, f[name]):
                raise SystemExit("transformers' %s differs from the file's" % name)
            used.add(name)
        else:
            raise SystemExit("transformers' parameter %s not in the file" % name)
    if set(f) != used:
        raise SystemExit("file tensors transformers did not load: %s" % sorted(set(f) - used)[:6])
    return {"class": "transformers %s Qwen3MoeForCausalLM.from_pretrained(config=Qwen3MoeConfig(mapped))"
                     % transformers.__version__,
            "file_tensors": len(f), "parameters": len(model.state_dict()), "fused_in_memory": fused,
            "every_parameter_equals_the_file": True}


class TransformersBlockCausal:
    """transformers' Qwen3MoeForCausalLM as the reference's `model.forward(ids, mask)`: batch 1, positions
    0..T-1, no cache, the [T, T] boolean mask passed whole as a 4-D attention_mask [1, 1, T, T] (boolean for
    sdpa, additive 0 / float32 min for eager; transformers uses a 4-D mask as given). Tracks the smallest k-th
    minus (k+1)-th router probability of every token in every layer (forward hooks on the routers)."""

    def __init__(self, model):
        self.model, self.k = model, model.config.num_experts_per_tok
        self.router_gap, self.calls, self._router = math.inf, 0, []
        for layer in model.model.layers:
            layer.mlp.gate.register_forward_hook(lambda mod, inp, out: self._router.append(out[0]))

    @torch.no_grad()
    def forward(self, ids, mask):
        ids = torch.as_tensor(ids, dtype=torch.long).view(1, -1)
        T = ids.shape[1]
        mask = torch.as_tensor(mask, dtype=torch.bool)
        assert mask.shape == (T, T)
        if self.model.config._attn_implementation == "eager":
            m4 = torch.zeros(T, T).masked_fill(~mask, torch.finfo(torch.float32).min)[None, None]
        else:
            m4 = mask[None, None]
        self._router.clear()
        out = self.model(input_ids=ids, attention_mask=m4, position_ids=torch.arange(T)[None], use_cache=False)
        assert len(self._router) == self.model.config.num_hidden_layers
        for lg in self._router:
            p = torch.softmax(lg.float(), dim=-1).sort(dim=-1, descending=True).values
            self.router_gap = min(self.router_gap, float((p[:, self.k - 1] - p[:, self.k]).min()))
        self.calls += 1
        return {"logits": out.logits[0].float()}


@torch.no_grad()
def moe_side_checks(fx, d, static_settings, static_seq):
    """Other transformers implementations on the recorded forwards (kernel-noise scale), and how much each rule
    matters (sensitivity)."""
    tr, B = fx.trace, fx.block
    win = torch.from_numpy(tr["window_ids"])
    T = len(win)

    def diff(lg, name="window"):
        return float("%.3g" % np.abs(f32(lg) - tr[name + "_logits"]).max())

    eager = TransformersBlockCausal(load_transformers(d, attn="eager", experts="eager"))
    alt = max(diff(eager.forward(torch.from_numpy(tr[f["ids"]]), ref.block_causal_mask(len(tr[f["ids"]]), B))
                   ["logits"], f["name"]) for f in fx.forwards)
    sens = {}
    full_x, _, _ = ref.block_diffusion_generate(fx.model, fx.prompt, mask_id=fx.mask_id, attention="full",
                                                **static_settings)
    sens["full_window_attention"] = {
        "window_logits_max_abs_diff": diff(fx.model.forward(win, ref.full_mask(T))["logits"]),
        "static_sequence_differs": bool(not np.array_equal(full_x.numpy()[len(fx.prompt):], static_seq))}
    default = fx.model.model(input_ids=win[None], use_cache=False).logits[0]   # transformers' own causal mask
    sens["transformers_default_causal_mask"] = {"window_logits_max_abs_diff": diff(default)}
    for what, override in (("no_norm_topk_prob", {"norm_topk_prob": False}),
                           ("top1_routing", {"num_experts_per_tok": 1})):
        v = TransformersBlockCausal(load_transformers(d, **override))
        x, _, _ = ref.block_diffusion_generate(v, fx.prompt, mask_id=fx.mask_id, **static_settings)
        sens[what] = {"window_logits_max_abs_diff": diff(v.forward(win, ref.block_causal_mask(T, B))["logits"]),
                      "static_sequence_differs": bool(not np.array_equal(x.numpy()[len(fx.prompt):], static_seq))}
    return {"eager_attention_additive_mask_eager_experts_max_abs_diff": alt}, sens


def make_moe_fixture(spec, d):
    torch.manual_seed(0)
    if os.path.isdir(d):
        shutil.rmtree(d)
    tok = write_checkpoint(d, spec, make_moe_tensors(spec), {"generation_config.json": spec["generation_config"]})
    hf = load_transformers(d)
    load = check_loaded(hf, d)
    model = TransformersBlockCausal(hf)
    prompt, text = draw_prompt(spec, tok, spec["config"]["vocab_size"])
    fx = Fixture(spec, model, tok, prompt, text)
    B, P = fx.block, len(prompt)
    total = (P + spec["gen_length"] + B - 1) // B * B
    fx.record_forward("window", prompt + [fx.mask_id] * (total - P), "block_causal")
    runs, done = [], {}
    for run in spec["runs"]:
        s = resolve_settings(spec, run, done)
        summary, x, steps = record_run(fx, run["name"], s)
        runs.append(summary)
        done[run["name"]] = summary
    fx.record_forward("final_canvas", [int(t) for t in fx.trace["static_canvas"][-1]], "block_causal")
    fx.gaps["router_rank"] = model.router_gap   # over every forward above (window, runs, final canvas)
    calls = model.calls
    alternatives, sens = moe_side_checks(fx, d, runs[0]["settings"], fx.trace["static_sequence"])
    refuse_if_fragile(fx.problems, fx.gaps, MOE_GAP_LIMITS, runs)
    if alternatives["eager_attention_additive_mask_eager_experts_max_abs_diff"] > 1e-4:
        raise SystemExit("transformers' eager path disagrees: %s" % alternatives)
    c = spec["config"]
    meta = {
        "made_by": MADE_BY,
        "versions": fixture_tools.versions(),
        "architecture": "SDARMoeForCausalLM",
        "oracle": {"model": "transformers Qwen3MoeForCausalLM (sdpa attention, grouped_mm experts: the defaults), "
                            "float32, eval, from_pretrained of this folder with config.json mapped to "
                            "Qwen3MoeConfig (transformers_config)",
                   "mask": "explicit 4-D boolean attention_mask [1, 1, T, T]: token i sees j iff "
                           "j // block_size <= i // block_size (blocks from position 0); position_ids 0..T-1; "
                           "no cache",
                   "decoding": "sdar_reference.block_diffusion_generate (SDAR generate.py's loop, greedy) calling "
                               "that forward", "forward_calls": calls},
        "transformers_config": transformers_config_kwargs(d),
        "transformers_load": load,
        "transformers_alternatives": alternatives,
        "seed": spec["seed"], "gains": spec["gains"],
        "config": c,
        "generation_config": spec["generation_config"],
        "derived": {"head_dim": c["head_dim"], "gqa_group": c["num_attention_heads"] // c["num_key_value_heads"],
                    "sparse_layers": list(range(c["num_hidden_layers"])), "canvas_length": total,
                    "prefill_length": P // B * B, "first_decoded_block": P // B,
                    "prompt_tokens_in_first_decoded_block": P % B},
        "special_tokens": spec["special"], "mask_token": spec["mask_token"], "mask_token_id": fx.mask_id,
        "prompt_text": fx.prompt_text, "prompt_ids": fx.prompt, "block_size": B,
        "forwards": fx.forwards,
        "runs": runs,
        "min_gaps": {k: float("%.4g" % v) if v != math.inf else None for k, v in fx.gaps.items()},
        "sensitivity": sens,
    }
    write_fixture_files(d, spec["name"], fx.trace, meta, replay_arrays(fx.trace, replay_names(runs)),
                        moe_ref.verify_fixture)
    return meta


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", default=FIXTURES)
    ap.add_argument("--only", action="append", choices=[SPEC["name"], SPEC_MOE["name"]],
                    help="only this fixture (repeatable)")
    ap.add_argument("--sdar-src", help="folder with SDAR's configuration_sdar.py, modeling_sdar.py, "
                                       "huggingface_bd3.py (see README.md); sdar_tiny only")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fixture_tools.setup("2.15", "5.23.")
    transformers.utils.logging.disable_progress_bar()
    makers = [(SPEC, lambda d: make_fixture(SPEC, d, args.sdar_src)),
              (SPEC_MOE, lambda d: make_moe_fixture(SPEC_MOE, d))]
    makers = [(spec, make) for spec, make in makers if not args.only or spec["name"] in args.only]
    if args.check:
        errors = []
        with tempfile.TemporaryDirectory() as tmp:
            for spec, make in makers:
                make(os.path.join(tmp, spec["name"]))
                fixture_tools.compare_dirs(os.path.join(FIXTURES, spec["name"]), os.path.join(tmp, spec["name"]),
                                           errors, json_keys=("config", "prompt_ids", "runs", "forwards",
                                                              "mask_token_id", "min_gaps"))
        return fixture_tools.check_report(errors, " (%d fixture%s)" % (len(makers), "s" * (len(makers) > 1)))
    os.makedirs(args.out, exist_ok=True)
    for spec, make in makers:
        meta = make(os.path.join(args.out, spec["name"]))
        print(json.dumps({"fixture": spec["name"],
                          "runs": [{k: r[k] for k in ("name", "sequence", "forwards", "forward_kinds", "commits",
                                                      "threshold_commits", "distinct_tokens")} for r in meta["runs"]],
                          "min_gaps": meta["min_gaps"], "sensitivity": meta["sensitivity"],
                          "sdar_crosscheck": meta.get("sdar_crosscheck"),
                          "transformers_alternatives": meta.get("transformers_alternatives"),
                          "reference_check": meta["reference_check"]}, indent=1))
    fixture_tools.write_manifest(args.out, MADE_BY)
    return 0


if __name__ == "__main__":
    sys.exit(main())
