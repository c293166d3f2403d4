#!/usr/bin/env python3
"""Plain-PyTorch (float32) forward of SDAR's MoE variant (`SDARMoeForCausalLM`, SGLang 0.5.23 `sdar_moe.py`):
sdar_reference.py's dense SDAR (block-causal attention with QK norm, NeoX RoPE, GQA) with each layer's MLP
replaced by a Qwen3-MoE routed mixture of SiLU-gated experts. The cross-check of fixtures/sdar_moe_tiny, whose
oracle is transformers' Qwen3MoeForCausalLM under a 4-D block-causal mask (make_fixtures.py); this file is the
independent re-check (`verify_fixture`, sdar_reference.py's, with this model), and needs no transformers:
torch, numpy, safetensors and ../torch_blocks.py only, so it runs in the repo `.venv` too.

    python sdar_moe_reference.py fixtures/sdar_moe_tiny

MoE layer (sdar_moe.py `SDARMoeSparseMoeBlock`, every layer): router logits `x @ mlp.gate.weight^T` [T, E],
softmax over the E experts in float32, the top `num_experts_per_tok` probabilities, divided by their sum iff
`norm_topk_prob`; output = sum over the chosen experts e of weight_e · down_e(silu(gate_e(x)) · up_e(x)) with the
per-expert tensors `mlp.experts.{e}.{gate,up,down}_proj.weight` ([moe_intermediate_size, H] / [H, I]); no shared
expert, no bias. SGLang reads neither `decoder_sparse_step` nor `mlp_only_layers` (every layer sparse) where
transformers' Qwen3-MoE honours both: a config where they would disagree (a step other than 1, or dense layers
listed) is refused as ambiguous.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import sdar_reference as ref  # noqa: E402
from torch_blocks import load_safetensors, swiglu  # noqa: E402

# Read by sdar_moe.py (config.num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob: attribute
# reads, no defaults there; the defaults would be the unknown SDAR-MoE config class's), so none is guessed.
MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")


def read_config(d):
    cfg = ref.read_config(d)
    raw = cfg["raw"]
    for k in MOE_FIELDS:
        if k not in raw:
            raise ValueError("config.json lacks %r (SGLang's sdar_moe.py reads it)" % k)
        cfg[k] = raw[k]
    if raw.get("decoder_sparse_step", 1) != 1 or (raw.get("mlp_only_layers") or []):
        raise NotImplementedError("decoder_sparse_step %r / mlp_only_layers %r: SGLang's sdar_moe.py makes every "
                                  "layer sparse, transformers' Qwen3-MoE would not"
                                  % (raw.get("decoder_sparse_step"), raw.get("mlp_only_layers")))
    if not 0 < cfg["num_experts_per_tok"] <= cfg["num_experts"]:
        raise ValueError("num_experts_per_tok must be in [1, num_experts]")
    return cfg


class SDARMoeReference(ref.SDARReference):
    @classmethod
    def load(cls, d):
        return cls(read_config(d), load_safetensors(d))

    def expected_shapes(self):
        """sdar_reference.py's names with each layer's mlp.{gate,up,down}_proj replaced by the router
        mlp.gate.weight [E, H] and mlp.experts.{e}.{gate,up,down}_proj.weight (published Qwen3-MoE names)."""
        c = self.cfg
        H, E, I = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"]
        s = {k: v for k, v in super().expected_shapes().items()
             if not k.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"))}
        for l in range(c["num_hidden_layers"]):
            p = "model.layers.%d.mlp." % l
            s[p + "gate.weight"] = [E, H]
            for e in range(E):
                q = p + "experts.%d." % e
                s.update({q + "gate_proj.weight": [I, H], q + "up_proj.weight": [I, H], q + "down_proj.weight": [H, I]})
        return s

    def route(self, l, x):
        """(router logits [T, E], chosen experts [T, k] by descending probability, their weights [T, k])."""
        c = self.cfg
        logits = x @ self.t["model.layers.%d.mlp.gate.weight" % l].T
        probs = torch.softmax(logits.float(), dim=-1)
        wts, ids = torch.topk(probs, c["num_experts_per_tok"], dim=-1)
        if c["norm_topk_prob"]:
            wts = wts / wts.sum(-1, keepdim=True)
        return logits, ids, wts

    def mlp(self, l, x):
        """The routed experts in place of SDARReference's dense MLP."""
        _, ids, wts = self.route(l, x)
        out = torch.zeros_like(x)
        for e in range(self.cfg["num_experts"]):
            rows, slot = (ids == e).nonzero(as_tuple=True)   # a token chooses an expert at most once
            if rows.numel():
                q = "model.layers.%d.mlp.experts.%d." % (l, e)
                y = swiglu(x[rows], self.t[q + "gate_proj.weight"], self.t[q + "up_proj.weight"],
                           self.t[q + "down_proj.weight"])
                out[rows] += wts[rows, slot, None] * y
        return out


def verify_fixture(d, verbose=True, tol=1e-4):
    """sdar_reference.verify_fixture (every recorded forward and decoding run recomputed) with this model."""
    saved = ref.SDARReference
    ref.SDARReference = SDARMoeReference   # verify_fixture looks the class up when called
    try:
        return ref.verify_fixture(d, verbose, tol)
    finally:
        ref.SDARReference = saved


if __name__ == "__main__":
    bad = 0
    for d in sys.argv[1:] or [os.path.join(HERE, "fixtures", "sdar_moe_tiny")]:
        bad += bool(verify_fixture(d)[0])
    sys.exit(1 if bad else 0)
