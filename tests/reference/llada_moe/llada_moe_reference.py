#!/usr/bin/env python3
"""Independent plain-PyTorch (float32) reference for LLaDA-MoE checkpoints (`LLaDAMoEModelLM`,
inclusionAI/LLaDA-MoE-7B-A1B-Base / -Instruct; config.json `model_type` "llada").

Written from the public definitions recorded in README.md: the Hugging Face remote code as copied in
github:ZHZisZZ/dllm `dllm/pipelines/llada/models/{configuration,modeling}_lladamoe.py` (LLaDAMoEConfig,
LLaDAMoEAttention, LLaDAMoESparseMoeBlock, LLaDAMoEDecoderLayer, LLaDAMoEModel, LLaDAMoEModelLM) and
github:inclusionAI/dInfer `tools/modeling_fused_lladamoe.py`; llama.cpp's `conversion/llada.py`
(`LLaDAMoEModel`) and `src/models/llada-moe.cpp` for the tensor layout and graph. Imports neither transformers nor
any of those files: torch, numpy, safetensors and ../torch_blocks.py only.

    python llada_moe_reference.py fixtures/llada_moe_tiny        # re-checks a fixture's trace.npz / trace.json

API:
    m = LLaDAMoEReference.load(checkpoint_dir)
    out = m.forward(ids, mask)                  # ids [T] int64; mask [T, T] bool (True = may attend)
    out["logits"] [T, V]; out["router"][l] = {"logits", "scores", "choice", "ids", "weights"} per MoE layer l
    full_mask(T) (what the published model does: bidirectional), causal_mask(T)
"""

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_blocks import (REQUIRED, causal_mask, check_layout, full_mask, load_safetensors,  # noqa: E402
                          read_config_fields, rms_norm, rope_neox, swiglu)

# config.json fields the remote code reads, with the remote config class's default where that default is usable.
# REQUIRED: the class's default is a placeholder (-1 / [] / None) that cannot give a working model (e.g.
# partial_rotary_factor -1 would rotate no dimension at all), so the reference refuses a config without it.
CONFIG_FIELDS = {
    "vocab_size": REQUIRED, "hidden_size": REQUIRED, "num_hidden_layers": REQUIRED,
    "num_attention_heads": REQUIRED, "num_key_value_heads": None,       # None -> num_attention_heads
    "expert_intermediate_size": REQUIRED, "num_experts": REQUIRED, "num_experts_per_tok": REQUIRED,
    "moe_layer_freq": REQUIRED, "rope_theta": REQUIRED, "partial_rotary_factor": REQUIRED,
    "qk_layernorm": REQUIRED,
    "dense_intermediate_size": None,          # read only when moe_layer_freq has a 0
    "shared_expert_intermediate_size": REQUIRED,   # null = no shared expert (the class default -1 would crash)
    "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 4096, "rope_scaling": None,
    "attention_bias": False, "clip_qkv": None, "tie_word_embeddings": False,
    "moe_router_enable_expert_bias": None,
    # read by nothing in the forward (recorded for the importer's benefit): norm_topk_prob (the MoE block
    # hard-codes False), moe_router_score_function (softmax always), routed_scaling_factor, router_num_group,
    # router_topk_group, router_aux_loss_coef (training only)
}


# ------------------------------------------------------------------------------------------------------------
# Model


def read_config(d):
    cfg, out = read_config_fields(d, CONFIG_FIELDS, " (the remote config class's default is a placeholder)")
    if out["num_key_value_heads"] is None:
        out["num_key_value_heads"] = out["num_attention_heads"]
    H, nh = out["hidden_size"], out["num_attention_heads"]
    if H % nh:
        raise ValueError("hidden_size must be divisible by num_attention_heads")
    # head_dim is hidden_size // num_attention_heads (LLaDAMoEAttention; o_proj is [H, H]); a config.json
    # `head_dim` is not read by the attention
    out["head_dim"] = H // nh
    if "head_dim" in cfg and cfg["head_dim"] not in (None, out["head_dim"]):
        raise NotImplementedError("head_dim %r != hidden_size // num_attention_heads" % cfg["head_dim"])
    # transformers' default RoPE init: dim = int(head_dim * partial_rotary_factor), inv_freq over arange(0, dim, 2)
    out["rotary_dim"] = int(out["head_dim"] * out["partial_rotary_factor"])
    if out["rotary_dim"] <= 0 or out["rotary_dim"] % 2:
        raise NotImplementedError("rotary_dim %d" % out["rotary_dim"])
    if out["rope_scaling"] is not None:
        raise NotImplementedError("rope_scaling %r" % out["rope_scaling"])
    if out["hidden_act"] != "silu":
        raise NotImplementedError("hidden_act %r" % out["hidden_act"])
    if out["attention_bias"] or out["clip_qkv"] is not None:
        raise NotImplementedError("attention_bias / clip_qkv")
    if len(out["moe_layer_freq"]) != out["num_hidden_layers"]:
        raise ValueError("moe_layer_freq has %d entries for %d layers" % (len(out["moe_layer_freq"]),
                                                                         out["num_hidden_layers"]))
    if 0 in out["moe_layer_freq"] and not out["dense_intermediate_size"]:
        raise ValueError("a dense layer needs dense_intermediate_size")
    out["raw"] = cfg
    return out


class LLaDAMoEReference:
    def __init__(self, cfg, tensors):
        self.cfg, self.t = cfg, {k: v.float() for k, v in tensors.items()}
        # LLaDAMoEDecoderLayer: mlp_type 'dense' iff moe_layer_freq[layer] == 0
        self.sparse = [f != 0 for f in cfg["moe_layer_freq"]]
        self.check_names()

    @classmethod
    def load(cls, d):
        return cls(read_config(d), load_safetensors(d))

    def expected_shapes(self):
        """The tensor names and shapes a checkpoint must hold (the remote model's state_dict)."""
        c = self.cfg
        H, hd, nh, kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
        s = {"model.embed_tokens.weight": [c["vocab_size"], H], "model.norm.weight": [H]}
        if not c["tie_word_embeddings"]:
            s["lm_head.weight"] = [c["vocab_size"], H]
        for l in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % l
            s[p + "input_layernorm.weight"] = [H]
            s[p + "post_attention_layernorm.weight"] = [H]
            s[p + "self_attn.q_proj.weight"] = [nh * hd, H]
            s[p + "self_attn.k_proj.weight"] = [kv * hd, H]
            s[p + "self_attn.v_proj.weight"] = [kv * hd, H]
            s[p + "self_attn.o_proj.weight"] = [H, H]
            if c["qk_layernorm"]:
                s[p + "self_attn.q_norm.weight"] = [hd]
                s[p + "self_attn.k_norm.weight"] = [hd]
            if not self.sparse[l]:
                I = c["dense_intermediate_size"]
                s.update({p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
                          p + "mlp.down_proj.weight": [H, I]})
                continue
            E, Im = c["num_experts"], c["expert_intermediate_size"]
            s[p + "mlp.gate.weight"] = [E, H]
            if c["moe_router_enable_expert_bias"]:
                s[p + "mlp.expert_bias"] = [E]
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                s.update({q + "gate_proj.weight": [Im, H], q + "up_proj.weight": [Im, H],
                          q + "down_proj.weight": [H, Im]})
            if c["shared_expert_intermediate_size"] is not None:
                Is = c["shared_expert_intermediate_size"]
                q = p + "shared_expert."
                s.update({q + "gate_proj.weight": [Is, H], q + "up_proj.weight": [Is, H],
                          q + "down_proj.weight": [H, Is]})
        return s

    def check_names(self):
        check_layout(self.expected_shapes(), self.t, self.cfg["tie_word_embeddings"])

    # --- pieces ---

    def rope(self, x, pos):
        """NeoX-style (rotate_half) RoPE on the first rotary_dim dims of each head, the rest passed through
        (x: [T, heads, hd]); theta as a float, as transformers' default RoPE init. A method so that
        make_fixtures.py's Variant can swap it."""
        return rope_neox(x, pos, float(self.cfg["rope_theta"]), self.cfg["rotary_dim"])

    def attention(self, l, x, pos, mask):
        c, t = self.cfg, self.t
        p = "model.layers.%d.self_attn." % l
        T = x.shape[0]
        nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        q = (x @ t[p + "q_proj.weight"].T).view(T, nh, hd)
        k = (x @ t[p + "k_proj.weight"].T).view(T, kv, hd)
        v = (x @ t[p + "v_proj.weight"].T).view(T, kv, hd)
        if c["qk_layernorm"]:   # per head, over head_dim, before RoPE
            q = rms_norm(q, t[p + "q_norm.weight"], c["rms_norm_eps"])
            k = rms_norm(k, t[p + "k_norm.weight"], c["rms_norm_eps"])
        q, k = self.rope(q, pos), self.rope(k, pos)
        rep = nh // kv          # repeat_kv: query head h uses kv head h // rep
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5
        s = s.masked_fill(~mask[None], float("-inf"))
        o = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(T, nh * hd)
        return o @ t[p + "o_proj.weight"].T

    def route(self, l, x):
        """LLaDAMoESparseMoeBlock's router: softmax over all experts (float32), + expert_bias when present,
        top-K of that, the same values as the weights (no renormalisation: norm_topk_prob is hard-coded False;
        no routed_scaling_factor)."""
        c, t = self.cfg, self.t
        p = "model.layers.%d.mlp." % l
        logits = x.float() @ t[p + "gate.weight"].float().T
        scores = logits.softmax(-1)
        bias = t.get(p + "expert_bias")
        choice = scores + bias[None, :] if bias is not None else scores
        w, ids = choice.topk(c["num_experts_per_tok"], dim=-1)      # highest first
        return {"logits": logits, "scores": scores, "choice": choice, "ids": ids, "weights": w}

    def moe(self, l, x):
        c, t = self.cfg, self.t
        p = "model.layers.%d." % l
        r = self.route(l, x)
        out = torch.zeros_like(x)
        for k in range(r["ids"].shape[1]):
            for e in r["ids"][:, k].unique().tolist():
                rows = r["ids"][:, k] == e
                q = p + "mlp.experts.%d." % e
                y = swiglu(x[rows], t[q + "gate_proj.weight"], t[q + "up_proj.weight"], t[q + "down_proj.weight"])
                out[rows] += r["weights"][rows, k:k + 1] * y
        if c["shared_expert_intermediate_size"] is not None:   # the layer's shared_expert, unweighted, same input
            q = p + "shared_expert."
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
        h = t["model.embed_tokens.weight"][ids]
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
        head = t["model.embed_tokens.weight"] if c["tie_word_embeddings"] else t["lm_head.weight"]
        return {"logits": h @ head.T, "router": routers}


class SamplerModel:
    """What tests/reference/samplers.py's low_confidence needs (cache "none"): vocab_size, mask_token_id,
    eos_token_id, logit_shift, embed, forward(ids) -> logits [T, V]; full bidirectional attention (the published
    model ignores / has no attention mask). Remembers every forward's ids and logits."""

    def __init__(self, model, mask_token_id, eos_token_id):
        self.m = model
        self.mask_token_id, self.eos_token_id = mask_token_id, eos_token_id
        self.vocab_size = model.cfg["vocab_size"]
        self.logit_shift = False
        self.embed = model.t["model.embed_tokens.weight"]
        self.calls = []

    def forward(self, ids, start=0, past_kv=None, return_kv=False, shift=None, embeds=None):
        assert start == 0 and past_kv is None and not return_kv and embeds is None, "cache 'none' only"
        ids = torch.as_tensor(ids, dtype=torch.long)
        out = self.m.forward(ids, full_mask(len(ids)))
        self.calls.append((ids.clone(), out))
        return out["logits"]


def low_confidence_run(model, prompt, mask_token_id, eos_token_id, **settings):
    """dlm's LLaDA low-confidence reference (tests/reference/samplers.py low_confidence) driving the model;
    returns (its result, the forwards' (ids, out))."""
    import samplers   # tests/reference/samplers.py (that folder is on sys.path: see the imports above)
    sm = SamplerModel(model, mask_token_id, eos_token_id)
    res = samplers.low_confidence(sm, prompt, **settings)
    return res, sm.calls


# ------------------------------------------------------------------------------------------------------------
# Re-checking a fixture


def verify_fixture(d, verbose=True, tol=1e-4):
    """Recomputes every recorded forward / router choice / decoding run of fixture d. Returns (errors, report)."""
    errors, report = [], {}
    z = np.load(os.path.join(d, "trace.npz"))
    meta = json.load(open(os.path.join(d, "trace.json")))
    m = LLaDAMoEReference.load(d)

    def close(name, want, got):
        diff = float(np.abs(np.asarray(want, np.float64) - np.asarray(got, np.float64)).max())
        report[name] = max(report.get(name, 0.0), diff)
        if diff > tol:
            errors.append("%s: max |diff| %.3g > %g" % (name, diff, tol))

    for f in meta["forwards"]:
        ids = z[f["ids"]]
        T = len(ids)
        mask = {"full": full_mask(T), "causal": causal_mask(T)}[f["mask"]]
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
        res, calls = low_confidence_run(m, [int(i) for i in z["prompt_ids"]], meta["mask_token_id"],
                                        meta["eos_token_id"], **run["settings"])
        k = run["name"]
        if res["output_ids"] != [int(i) for i in z[k + "_output_ids"]]:
            errors.append("%s: output ids differ" % k)
        canv = np.stack([ids.numpy() for ids, _ in calls])
        if canv.shape != z[k + "_forward_ids"].shape or not np.array_equal(canv, z[k + "_forward_ids"]):
            errors.append("%s: the forwards' inputs differ" % k)
    if verbose:
        print("%s: %s %s" % (d, "FAILED" if errors else "OK", {k: float("%.3g" % v) for k, v in report.items()}))
        for e in errors:
            print("  " + e)
    return errors, report


if __name__ == "__main__":
    bad = 0
    for d in sys.argv[1:] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "llada_moe_tiny")]:
        bad += bool(verify_fixture(d)[0])
    sys.exit(1 if bad else 0)
