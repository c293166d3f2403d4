#!/usr/bin/env python3
"""Independent plain-PyTorch (float32) reference for LLaDA2.x checkpoints (`LLaDA2MoeModelLM`, model_type
`llada2_moe`) and for the block-refinement decoding loop of diffusers' `LLaDA2Pipeline` (greedy).

Written from the public definitions recorded in README.md (SGLang 0.5.23 `sglang/srt/models/llada2.py` and the
layers it calls; diffusers 0.42.1 `pipelines/llada2/pipeline_llada2.py` and
`schedulers/scheduling_block_refinement.py`). Imports neither sglang, diffusers nor transformers: torch, numpy,
safetensors and ../torch_blocks.py only.

    python llada2_reference.py fixtures/llada2_tiny        # re-checks a fixture's trace.npz / trace.json

API:
    m = LLaDA2Reference.load(checkpoint_dir)
    out = m.forward(ids, mask)                    # ids [T] int64; mask [T, T] bool (True = may attend)
    out["logits"] [T, V], out["router"][l] = {"logits", "scores", "choice", "ids", "weights", "group_scores",
                                              "group_ids"} per sparse layer l
    block_causal_mask(T, B), causal_mask(T), full_mask(T)
    refine_generate(m, prompt_ids, ...)           # diffusers LLaDA2Pipeline + BlockRefinementScheduler, greedy
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_blocks import (REQUIRED, block_causal_mask, causal_mask, check_layout, full_mask,  # noqa: E402
                          load_safetensors, read_config_fields, rms_norm, rope_neox, swiglu)

# Config fields and the default SGLang uses when config.json lacks them (REQUIRED: read as a plain attribute in
# SGLang, so a published config.json must have it; the reference refuses a config without it).
CONFIG_FIELDS = {
    "vocab_size": REQUIRED, "hidden_size": REQUIRED, "num_hidden_layers": REQUIRED, "num_attention_heads": REQUIRED,
    "num_key_value_heads": REQUIRED, "head_dim": None, "intermediate_size": REQUIRED, "rms_norm_eps": REQUIRED,
    "hidden_act": REQUIRED, "use_bias": REQUIRED, "use_qkv_bias": REQUIRED, "tie_word_embeddings": REQUIRED,
    "max_position_embeddings": REQUIRED, "num_experts": REQUIRED, "num_experts_per_tok": REQUIRED,
    "num_shared_experts": REQUIRED, "moe_intermediate_size": REQUIRED, "first_k_dense_replace": REQUIRED,
    "norm_topk_prob": REQUIRED,
    "use_qk_norm": True, "routed_scaling_factor": 1.0, "score_function": None, "n_group": 0, "topk_group": 0,
    "moe_router_enable_expert_bias": False, "router_dtype": None, "norm_head": False, "rope_theta": 10000.0,
    "rope_scaling": None, "expert_capacity": None,
}


# ------------------------------------------------------------------------------------------------------------
# Model


def read_config(d):
    cfg, out = read_config_fields(d, CONFIG_FIELDS, " (SGLang reads it without a default)")
    # rope: SGLang's get_rope_config: rope_parameters (transformers 5) first, else rope_theta / rope_scaling
    rp = cfg.get("rope_parameters")
    if rp is not None:
        out["rope_theta"] = rp.get("rope_theta", out["rope_theta"])
        if rp.get("rope_type", "default") != "default":
            raise NotImplementedError("rope_type %r" % rp.get("rope_type"))
    elif out["rope_scaling"] is not None:
        raise NotImplementedError("rope_scaling %r" % out["rope_scaling"])
    # head_dim: `config.head_dim or hidden_size // num_attention_heads`
    out["head_dim"] = cfg.get("head_dim") or out["hidden_size"] // out["num_attention_heads"]
    # rotary dims: partial_rotary_factor wins over rotary_dim (hasattr order in LLaDA2MoeAttention)
    if "partial_rotary_factor" in cfg:
        out["rotary_dim"] = int(out["head_dim"] * cfg["partial_rotary_factor"])
    elif "rotary_dim" in cfg:
        out["rotary_dim"] = cfg["rotary_dim"]
    else:
        out["rotary_dim"] = out["head_dim"]
    out["moe_shared_intermediate"] = None
    if out["num_shared_experts"] is not None:
        out["moe_shared_intermediate"] = (cfg.get("moe_shared_expert_intermediate_size",
                                                  out["moe_intermediate_size"]) * out["num_shared_experts"])
    if out["hidden_act"] != "silu":
        raise NotImplementedError("hidden_act %r (SGLang supports silu only)" % out["hidden_act"])
    if out["use_bias"] or out["use_qkv_bias"]:
        raise NotImplementedError("use_bias / use_qkv_bias")
    if out["expert_capacity"] is not None:
        raise NotImplementedError("expert_capacity (SGLang's block routing) is not implemented here")
    sf = out["score_function"]
    bias = out["moe_router_enable_expert_bias"]
    if sf is not None and not ((sf == "softmax" and not bias) or (sf == "sigmoid" and bias)):
        raise ValueError("SGLang asserts (softmax, no expert bias) or (sigmoid, expert bias)")
    if (out["n_group"] or 0) > 0 or (out["topk_group"] or 0) > 0:
        assert out["n_group"] > 0 and 0 < out["topk_group"] <= out["n_group"]
    out["raw"] = cfg
    return out


class LLaDA2Reference:
    def __init__(self, cfg, tensors):
        self.cfg, self.t = cfg, {k: v.float() for k, v in tensors.items()}
        c = cfg
        self.sparse = [c["num_experts"] is not None and l >= c["first_k_dense_replace"]
                       for l in range(c["num_hidden_layers"])]
        self.check_names()

    @classmethod
    def load(cls, d):
        return cls(read_config(d), load_safetensors(d))

    def expected_shapes(self):
        """The tensor names and shapes a checkpoint must hold (per-expert layout)."""
        c = self.cfg
        H, hd, nh, kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
        s = {"model.word_embeddings.weight": [c["vocab_size"], H], "model.norm.weight": [H]}
        if not c["tie_word_embeddings"]:
            s["lm_head.weight"] = [c["vocab_size"], H]
        for l in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % l
            s[p + "input_layernorm.weight"] = [H]
            s[p + "post_attention_layernorm.weight"] = [H]
            s[p + "attention.query_key_value.weight"] = [(nh + 2 * kv) * hd, H]
            s[p + "attention.dense.weight"] = [H, nh * hd]
            if c["use_qk_norm"]:
                s[p + "attention.query_layernorm.weight"] = [hd]
                s[p + "attention.key_layernorm.weight"] = [hd]
            if not self.sparse[l]:
                I = c["intermediate_size"]
                s.update({p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
                          p + "mlp.down_proj.weight": [H, I]})
                continue
            E, Im = c["num_experts"], c["moe_intermediate_size"]
            s[p + "mlp.gate.weight"] = [E, H]
            if c["moe_router_enable_expert_bias"]:
                s[p + "mlp.gate.expert_bias"] = [E]
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                s.update({q + "gate_proj.weight": [Im, H], q + "up_proj.weight": [Im, H],
                          q + "down_proj.weight": [H, Im]})
            if c["moe_shared_intermediate"]:
                Is = c["moe_shared_intermediate"]
                q = p + "mlp.shared_experts."
                s.update({q + "gate_proj.weight": [Is, H], q + "up_proj.weight": [Is, H],
                          q + "down_proj.weight": [H, Is]})
        return s

    def check_names(self):
        check_layout(self.expected_shapes(), self.t, self.cfg["tie_word_embeddings"])   # SGLang skips a tied lm_head

    # --- pieces ---

    def rope(self, x, pos):
        """NeoX-style rotary on the first rotary_dim dims of each head (halves rotated against each other); the
        rest pass through. A method so that make_fixtures.py's Variant can swap it."""
        return rope_neox(x, pos, self.cfg["rope_theta"], self.cfg["rotary_dim"])

    def attention(self, l, x, pos, mask):
        c, t = self.cfg, self.t
        p = "model.layers.%d.attention." % l
        T = x.shape[0]
        nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        qkv = x @ t[p + "query_key_value.weight"].T
        q, k, v = qkv.split([nh * hd, kv * hd, kv * hd], dim=-1)
        q, k, v = q.view(T, nh, hd), k.view(T, kv, hd), v.view(T, kv, hd)
        if c["use_qk_norm"]:
            q = rms_norm(q, t[p + "query_layernorm.weight"], c["rms_norm_eps"])
            k = rms_norm(k, t[p + "key_layernorm.weight"], c["rms_norm_eps"])
        q, k = self.rope(q, pos), self.rope(k, pos)
        rep = nh // kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5
        s = s.masked_fill(~mask[None], float("-inf"))
        o = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(T, nh * hd)
        return o @ t[p + "dense.weight"].T

    def route(self, l, x):
        """The router of sparse layer l (SGLang LLaDA2MoeSparseMoeBlock + TopK, biased_grouped_topk_impl)."""
        c, t = self.cfg, self.t
        p = "model.layers.%d.mlp.gate." % l
        logits = x.float() @ t[p + "weight"].float().T                       # router in fp32 (router_dtype fp32)
        E, K = c["num_experts"], c["num_experts_per_tok"]
        sf = c["score_function"] or "softmax"
        scores = logits.sigmoid() if sf == "sigmoid" else logits.softmax(-1)
        bias = t.get(p + "expert_bias")
        choice = scores + bias[None, :] if bias is not None else scores      # the bias only picks the experts
        G = c["n_group"] or 1
        TG = c["topk_group"] or 1
        grouped = choice.view(-1, G, E // G)
        if bias is not None or G == 1:
            group_scores = grouped.topk(min(2, E // G), dim=-1).values.sum(-1)   # sum of the top-2 per group
        else:
            group_scores = grouped.max(-1).values                            # grouped_topk without bias: max
        group_ids = group_scores.topk(TG, dim=-1).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, group_ids, True)
        keep = keep[:, :, None].expand_as(grouped).reshape(-1, E)
        masked = choice.masked_fill(~keep, float("-inf"))
        ids = masked.topk(K, dim=-1).indices                                  # highest first
        w = scores.gather(1, ids)                                             # weights from the unbiased scores
        if c["norm_topk_prob"]:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return {"logits": logits, "scores": scores, "choice": choice, "group_scores": group_scores,
                "group_ids": group_ids, "ids": ids, "weights": w}

    def moe(self, l, x):
        c, t = self.cfg, self.t
        p = "model.layers.%d.mlp." % l
        r = self.route(l, x)
        out = torch.zeros_like(x)
        for k in range(r["ids"].shape[1]):
            for e in r["ids"][:, k].unique().tolist():
                rows = r["ids"][:, k] == e
                q = p + "experts.%d." % e
                y = swiglu(x[rows], t[q + "gate_proj.weight"], t[q + "up_proj.weight"], t[q + "down_proj.weight"])
                out[rows] += r["weights"][rows, k:k + 1] * y
        out = out * c["routed_scaling_factor"]                                # scales the routed sum only
        if c["moe_shared_intermediate"]:
            q = p + "shared_experts."
            out = out + swiglu(x, t[q + "gate_proj.weight"], t[q + "up_proj.weight"], t[q + "down_proj.weight"])
        return out, r

    @torch.no_grad()
    def forward(self, ids, mask, positions=None):
        c, t = self.cfg, self.t
        ids = torch.as_tensor(ids, dtype=torch.long)
        T = ids.shape[0]
        mask = torch.as_tensor(mask, dtype=torch.bool)
        assert mask.shape == (T, T)
        pos = torch.arange(T) if positions is None else torch.as_tensor(positions)
        h = t["model.word_embeddings.weight"][ids]
        eps = c["rms_norm_eps"]
        routers = {}
        for l in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % l
            h = h + self.attention(l, rms_norm(h, t[p + "input_layernorm.weight"], eps), pos, mask)
            x = rms_norm(h, t[p + "post_attention_layernorm.weight"], eps)
            if self.sparse[l]:
                y, routers[l] = self.moe(l, x)
            else:
                y = swiglu(x, t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"], t[p + "mlp.down_proj.weight"])
            h = h + y
        h = rms_norm(h, t["model.norm.weight"], eps)
        head = t["model.word_embeddings.weight"] if c["tie_word_embeddings"] else t["lm_head.weight"]
        if c["norm_head"]:
            head = torch.nn.functional.normalize(head, dim=0, p=2, eps=1e-7)
        return {"logits": h @ head.T, "router": routers}


# ------------------------------------------------------------------------------------------------------------
# Decoding: diffusers LLaDA2Pipeline + BlockRefinementScheduler, greedy (sampling_method "greedy" or temperature 0),
# batch 1, no padding, no chat template.


def transfer_schedule(block_length, steps):
    base, rem = divmod(block_length, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


@torch.no_grad()
def refine_generate(model, prompt_ids, *, mask_token_id, gen_length, block_length, num_inference_steps,
                    threshold, editing_threshold=None, max_post_steps=16, minimal_topk=1, eos_token_id=None,
                    eos_early_stop=True, attention="block_causal"):
    """Returns (sequence [gen_length], steps): one dict per forward (global step) with block, step_idx, the window's
    block logits, sampled tokens / probabilities, transfer and editing masks and the canvas after the step.
    `attention`: how the model sees the window x[:, :block_end] ("block_causal" of block_length, or "full")."""
    prompt_ids = [int(i) for i in prompt_ids]
    P = len(prompt_ids)
    steps = min(num_inference_steps, gen_length // minimal_topk)
    sched = transfer_schedule(block_length, steps)
    num_blocks = (P + gen_length + block_length - 1) // block_length
    total = num_blocks * block_length
    x = torch.full((total,), mask_token_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt_ids)
    editing = editing_threshold is not None and editing_threshold > 0.0
    finished = False
    out_steps = []
    for blk in range(P // block_length, num_blocks):
        end = (blk + 1) * block_length
        start = end - block_length
        prompt_in_block = torch.arange(start, end) < P
        post_steps, step_idx = 0, 0
        while True:
            tokens = x[start:end].clone()
            active = tokens == mask_token_id
            masks_remaining = bool(active.any())
            if not masks_remaining:
                post_steps += 1
            m = block_causal_mask(end, block_length) if attention == "block_causal" else full_mask(end)
            logits = model.forward(x[:end], m)["logits"][start:end]
            probs = torch.softmax(logits.float(), dim=-1)
            sampled = logits.argmax(-1)
            sp = probs.gather(-1, sampled[:, None])[:, 0]
            transfer = torch.zeros(block_length, dtype=torch.bool)
            if masks_remaining:
                n = sched[min(step_idx, len(sched) - 1)]
                conf = torch.where(active, sp, torch.full_like(sp, -math.inf))
                high = conf > threshold
                if int(high.sum()) >= n:
                    transfer = high
                else:
                    k = min(n, int(active.sum()))
                    if k > 0:
                        transfer[torch.topk(conf, k=k).indices] = True
            edit = torch.zeros(block_length, dtype=torch.bool)
            if editing:
                editable = ~active & ~prompt_in_block
                edit = editable & (sp > float(editing_threshold)) & (sampled != tokens)
            final = transfer | edit
            if eos_early_stop and finished:
                final = torch.zeros_like(final)
            x[start:end] = torch.where(final, sampled, tokens)
            if eos_early_stop and eos_token_id is not None and not finished:
                if bool((sampled[final] == eos_token_id).any()):
                    e = (x[:end] == eos_token_id).nonzero()
                    if len(e):
                        e = int(e[0, 0])
                        if e >= P and bool((x[P:e] != mask_token_id).all()):
                            finished = True
            out_steps.append({"block": blk, "step_idx": step_idx, "logits": logits, "sampled": sampled,
                              "probs": sp, "transfer": transfer, "edit": edit, "canvas": x[:total].clone(),
                              "masks_remaining": masks_remaining, "schedule_n": sched[min(step_idx, len(sched) - 1)]})
            if masks_remaining:
                step_idx += 1
            # check_block_should_continue
            if finished:
                break
            if not masks_remaining and (not editing or not bool(edit.any()) or post_steps > max_post_steps):
                break
            if masks_remaining and step_idx >= steps:
                break
        if eos_early_stop and finished:
            break
    return x[P:P + gen_length].clone(), out_steps


# ------------------------------------------------------------------------------------------------------------
# Re-checking a fixture


def verify_fixture(d, verbose=True, tol=1e-4):
    """Recomputes every recorded forward / router choice / decoding run of fixture d. Returns (errors, report)."""
    errors, report = [], {}
    z = np.load(os.path.join(d, "trace.npz"))
    meta = json.load(open(os.path.join(d, "trace.json")))
    m = LLaDA2Reference.load(d)

    def close(name, want, got):
        diff = float(np.abs(np.asarray(want, np.float64) - np.asarray(got, np.float64)).max())
        report[name] = max(report.get(name, 0.0), diff)
        if diff > tol:
            errors.append("%s: max |diff| %.3g > %g" % (name, diff, tol))

    for f in meta["forwards"]:
        ids = z[f["ids"]]
        T = len(ids)
        mask = {"block_causal": block_causal_mask(T, f.get("block_size", 1)), "causal": causal_mask(T),
                "full": full_mask(T)}[f["mask"]]
        out = m.forward(torch.from_numpy(ids), mask)
        close("forward_logits", z[f["logits"]], out["logits"].numpy())
        if f.get("router_ids"):
            got_ids = np.stack([out["router"][l]["ids"].numpy() for l in sorted(out["router"])])
            if not np.array_equal(got_ids, z[f["router_ids"]]):
                errors.append("%s: router expert ids differ" % f["router_ids"])
            got_w = np.stack([out["router"][l]["weights"].numpy() for l in sorted(out["router"])])
            close("router_weights", z[f["router_weights"]], got_w)
            got_l = np.stack([out["router"][l]["logits"].numpy() for l in sorted(out["router"])])
            close("router_logits", z[f["router_logits"]], got_l)
    for run in meta.get("runs", []):
        s = run["settings"]
        seq, steps = refine_generate(m, z["prompt_ids"], mask_token_id=meta["mask_token_id"],
                                     eos_token_id=meta["eos_token_id"], **s)
        k = run["name"]
        if not np.array_equal(seq.numpy(), z[k + "_sequence"]):
            errors.append("%s: generated sequence differs" % k)
        canv = np.stack([st["canvas"].numpy() for st in steps])
        if canv.shape != z[k + "_canvas"].shape or not np.array_equal(canv, z[k + "_canvas"]):
            errors.append("%s: canvases differ" % k)
        else:
            close("run_step_probs", z[k + "_probs"], np.stack([st["probs"].numpy() for st in steps]))
            if not np.array_equal(np.stack([st["sampled"].numpy() for st in steps]), z[k + "_sampled"]):
                errors.append("%s: sampled tokens differ" % k)
            if k + "_block_logits" in z.files:
                close("run_block_logits", z[k + "_block_logits"], np.stack([st["logits"].numpy() for st in steps]))
    if verbose:
        print("%s: %s %s" % (d, "FAILED" if errors else "OK", {k: float("%.3g" % v) for k, v in report.items()}))
        for e in errors:
            print("  " + e)
    return errors, report


if __name__ == "__main__":
    bad = 0
    for d in sys.argv[1:] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "llada2_tiny")]:
        bad += bool(verify_fixture(d)[0])
    sys.exit(1 if bad else 0)
