#!/usr/bin/env python3
"""Independent plain-PyTorch (float32) reference for SDAR block-diffusion checkpoints (`SDARForCausalLM`,
model_type `sdar`) and for SDAR's published block-diffusion decoding loop (`block_diffusion_generate`), greedy.

Written from the public definitions recorded in README.md: SDAR's own remote code (github JetAstra/SDAR,
`training/model/SDAR-4B-Chat/{modeling_sdar,configuration_sdar}.py`, `generate.py`,
`evaluation/opencompass/opencompass/models/huggingface_bd3.py`) and SGLang 0.5.23 (`sglang/srt/models/sdar.py`,
`sglang/srt/dllm/`). Imports neither transformers, sglang nor SDAR's code: torch, numpy, safetensors and
../torch_blocks.py only.

    python sdar_reference.py fixtures/sdar_tiny        # re-checks a fixture's trace.npz / trace.json

API:
    m = SDARReference.load(checkpoint_dir)
    out = m.forward(ids, mask)                    # ids [T] int64; mask [T, T] bool (True = may attend)
    out["logits"] [T, V]
    block_causal_mask(T, B), causal_mask(T), full_mask(T)
    block_diffusion_generate(m, prompt_ids, ...)  # SDAR's loop, greedy (argmax, confidence = softmax prob)
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

# Config fields and their defaults. Defaults are SDARConfig.__init__'s (configuration_sdar.py; a Qwen3-style
# config class); REQUIRED marks what the reference (and an importer) should not guess: the shapes, and the two
# block-diffusion fields, which SDARConfig does not declare (they reach the config only through config.json
# kwargs; modeling_sdar.py reads `config.block_size` / `config.mask_token_id` in training only).
CONFIG_FIELDS = {
    "vocab_size": REQUIRED, "hidden_size": REQUIRED, "intermediate_size": REQUIRED,
    "num_hidden_layers": REQUIRED, "num_attention_heads": REQUIRED, "num_key_value_heads": REQUIRED,
    "head_dim": None, "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "use_sliding_window": False,
    "sliding_window": 4096, "max_window_layers": 28, "max_position_embeddings": 32768,
    "block_size": REQUIRED, "mask_token_id": REQUIRED,
}


# ------------------------------------------------------------------------------------------------------------
# Model


def read_config(d):
    cfg, out = read_config_fields(d, CONFIG_FIELDS)
    # head_dim: `getattr(config, "head_dim", hidden_size // num_attention_heads)` (modeling_sdar SDARAttention);
    # SGLang sdar.py alike. A null head_dim would break both; the reference takes it as the quotient.
    out["head_dim"] = out["head_dim"] or out["hidden_size"] // out["num_attention_heads"]
    rp = cfg.get("rope_parameters")   # transformers-5-style configs
    if rp is not None:
        out["rope_theta"] = rp.get("rope_theta", out["rope_theta"])
        if rp.get("rope_type", "default") != "default":
            raise NotImplementedError("rope_type %r" % rp.get("rope_type"))
    elif out["rope_scaling"] is not None:
        raise NotImplementedError("rope_scaling %r" % out["rope_scaling"])
    if out["hidden_act"] != "silu":
        raise NotImplementedError("hidden_act %r" % out["hidden_act"])
    if out["attention_bias"]:
        raise NotImplementedError("attention_bias")
    if out["use_sliding_window"]:
        raise NotImplementedError("use_sliding_window")
    if out["num_attention_heads"] % out["num_key_value_heads"]:
        raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
    out["raw"] = cfg
    return out


class SDARReference:
    def __init__(self, cfg, tensors):
        self.cfg, self.t = cfg, {k: v.float() for k, v in tensors.items()}
        self.check_names()

    @classmethod
    def load(cls, d):
        return cls(read_config(d), load_safetensors(d))

    def expected_shapes(self):
        """The tensor names and shapes a checkpoint must hold (Qwen3's names)."""
        c = self.cfg
        H, hd, nh, kv, I = (c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"],
                            c["intermediate_size"])
        s = {"model.embed_tokens.weight": [c["vocab_size"], H], "model.norm.weight": [H]}
        if not c["tie_word_embeddings"]:
            s["lm_head.weight"] = [c["vocab_size"], H]
        for l in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % l
            s.update({
                p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
                p + "self_attn.q_proj.weight": [nh * hd, H], p + "self_attn.k_proj.weight": [kv * hd, H],
                p + "self_attn.v_proj.weight": [kv * hd, H], p + "self_attn.o_proj.weight": [H, nh * hd],
                p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
                p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H], p + "mlp.down_proj.weight": [H, I],
            })
        return s

    def check_names(self):
        # tied: embed_tokens is the head, a lm_head.weight in the file is not read
        check_layout(self.expected_shapes(), self.t, self.cfg["tie_word_embeddings"])

    # --- pieces ---

    def rope(self, x, pos):
        """NeoX-style (rotate_half) rotary over the whole head. A method so that make_fixtures.py's Variant can swap
        it."""
        return rope_neox(x, pos, self.cfg["rope_theta"])

    def attention(self, l, x, pos, mask):
        c, t = self.cfg, self.t
        p = "model.layers.%d.self_attn." % l
        T = x.shape[0]
        nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        q = (x @ t[p + "q_proj.weight"].T).view(T, nh, hd)
        k = (x @ t[p + "k_proj.weight"].T).view(T, kv, hd)
        v = (x @ t[p + "v_proj.weight"].T).view(T, kv, hd)
        q = rms_norm(q, t[p + "q_norm.weight"], c["rms_norm_eps"])      # QK norm per head, before RoPE
        k = rms_norm(k, t[p + "k_norm.weight"], c["rms_norm_eps"])
        q, k = self.rope(q, pos), self.rope(k, pos)
        rep = nh // kv                                                   # GQA: q head h uses kv head h // rep
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5
        s = s.masked_fill(~mask[None], float("-inf"))
        o = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(T, nh * hd)
        return o @ t[p + "o_proj.weight"].T

    def mlp(self, l, x):
        """The layer's SwiGLU MLP (a method so that SDAR-MoE's reference can route it)."""
        p = "model.layers.%d.mlp." % l
        return swiglu(x, self.t[p + "gate_proj.weight"], self.t[p + "up_proj.weight"], self.t[p + "down_proj.weight"])

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
        for l in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % l
            h = h + self.attention(l, rms_norm(h, t[p + "input_layernorm.weight"], eps), pos, mask)
            h = h + self.mlp(l, rms_norm(h, t[p + "post_attention_layernorm.weight"], eps))
        h = rms_norm(h, t["model.norm.weight"], eps)
        head = t["model.embed_tokens.weight"] if c["tie_word_embeddings"] else t["lm_head.weight"]
        return {"logits": h @ head.T}


# ------------------------------------------------------------------------------------------------------------
# Decoding: SDAR generate.py `block_diffusion_generate` (same loop in huggingface_bd3.py), batch 1, greedy:
# token = argmax, confidence = its softmax probability at temperature 1 (what huggingface_bd3.py's
# `sample_with_temperature_topk_topp` gives with temperature 1, top_k 1: the multinomial draw from a one-hot
# distribution is the argmax, and the probability is taken from the unfiltered softmax).


def get_num_transfer_tokens(block_length, steps):
    base, rem = divmod(block_length, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


@torch.no_grad()
def block_diffusion_generate(model, prompt_ids, *, mask_id, gen_length, block_length, denoising_steps,
                             remasking_strategy, confidence_threshold=None, stop_ids=None,
                             attention="block_causal"):
    """Returns (x [num_blocks * block_length] with the prompt, steps, forwards): `steps` one dict per denoising
    forward (block, step, the block's logits, argmax tokens, probabilities, transfer mask, schedule n, canvas
    after the step, whether top-k chose a non-mask position); `forwards` lists every model call in order
    ("prefill", "denoise", "store") with its query range. The block's logits are the rows [start, end) of a
    forward of x[:end] under the block-causal mask (what the cached forward of generate.py computes: the cache
    holds earlier blocks' K/V from their `store_kv` forward over final tokens). `attention` "full" attends
    x[:end] fully instead (sensitivity only)."""
    prompt_ids = [int(i) for i in prompt_ids]
    P, B = len(prompt_ids), block_length
    num_blocks = (P + gen_length + B - 1) // B
    total = num_blocks * B
    x = torch.full((total,), mask_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt_ids)
    prefill_blocks = P // B
    forwards = []
    if prefill_blocks > 0:
        forwards.append(("prefill", 0, prefill_blocks * B))
    sched = get_num_transfer_tokens(B, denoising_steps)
    out_steps = []
    for blk in range(prefill_blocks, num_blocks):
        start, end = blk * B, (blk + 1) * B
        for step in range(denoising_steps + 1):
            cur = x[start:end]
            mask_index = cur == mask_id
            if not bool(mask_index.any()):
                forwards.append(("store", start, end))
                break
            forwards.append(("denoise", start, end))
            m = block_causal_mask(end, B) if attention == "block_causal" else full_mask(end)
            logits = model.forward(x[:end], m)["logits"][start:end]
            x0 = logits.argmax(-1)
            x0_p = torch.softmax(logits.float(), dim=-1).gather(-1, x0[:, None])[:, 0]
            n = sched[step]
            transfer = torch.zeros(B, dtype=torch.bool)
            if remasking_strategy == "sequential":
                first = int(mask_index.nonzero()[0, 0])
                transfer[first:first + n] = True
            elif remasking_strategy in ("low_confidence_static", "low_confidence_dynamic"):
                conf = torch.where(mask_index, x0_p, torch.full_like(x0_p, -math.inf))
                high = conf > confidence_threshold if remasking_strategy == "low_confidence_dynamic" else None
                if high is not None and int(high.sum()) >= n:
                    transfer = high
                elif n > 0:
                    transfer[torch.topk(conf, n).indices] = True
            else:
                raise ValueError("remasking_strategy %r" % remasking_strategy)
            # generate.py writes x0 wherever transfer is set; top-k may pick a non-mask position (confidence
            # -inf) when fewer masks than n remain: flagged (huggingface_bd3.py keeps the old token there)
            overwrote = bool((transfer & ~mask_index).any())
            x[start:end] = torch.where(transfer, x0, cur)
            out_steps.append({"block": blk, "step": step, "logits": logits, "sampled": x0, "probs": x0_p,
                              "mask_before": mask_index, "transfer": transfer, "schedule_n": n,
                              "canvas": x.clone(), "overwrote_unmasked": overwrote})
        if stop_ids and any(bool((x[P:] == s).any()) for s in stop_ids):
            break
    return x, out_steps, forwards


# ------------------------------------------------------------------------------------------------------------
# Re-checking a fixture


def verify_fixture(d, verbose=True, tol=1e-4):
    """Recomputes every recorded forward and decoding run of fixture d. Returns (errors, report)."""
    errors, report = [], {}
    z = np.load(os.path.join(d, "trace.npz"))
    meta = json.load(open(os.path.join(d, "trace.json")))
    m = SDARReference.load(d)

    def close(name, want, got):
        want = np.asarray(want, np.float64)
        diff = float(np.abs(want - np.asarray(got, np.float64)).max())
        report[name] = max(report.get(name, 0.0), diff)
        if diff > tol * max(1.0, float(np.abs(want).max())):   # relative to the largest value, as --check
            errors.append("%s: max |diff| %.3g > %g relative" % (name, diff, tol))

    for f in meta["forwards"]:
        ids = z[f["ids"]]
        T = len(ids)
        mask = {"block_causal": block_causal_mask(T, f.get("block_size", 1)), "causal": causal_mask(T),
                "full": full_mask(T)}[f["mask"]]
        close("forward_logits", z[f["logits"]], m.forward(torch.from_numpy(ids), mask)["logits"].numpy())
    for run in meta.get("runs", []):
        k = run["name"]
        x, steps, forwards = block_diffusion_generate(m, z["prompt_ids"], mask_id=meta["mask_token_id"],
                                                      **run["settings"])
        if not np.array_equal(x.numpy()[len(z["prompt_ids"]):], z[k + "_sequence"]):
            errors.append("%s: generated sequence differs" % k)
        if len(forwards) != run["forwards"]:
            errors.append("%s: %d forwards, recorded %d" % (k, len(forwards), run["forwards"]))
        canv = np.stack([st["canvas"].numpy() for st in steps])
        if canv.shape != z[k + "_canvas"].shape or not np.array_equal(canv, z[k + "_canvas"]):
            errors.append("%s: canvases differ" % k)
            continue
        close("run_step_probs", z[k + "_probs"], np.stack([st["probs"].numpy() for st in steps]))
        if not np.array_equal(np.stack([st["sampled"].numpy() for st in steps]), z[k + "_sampled"]):
            errors.append("%s: sampled tokens differ" % k)
        if not np.array_equal(np.stack([st["transfer"].numpy() for st in steps]), z[k + "_transfer"]):
            errors.append("%s: transfer masks differ" % k)
    if verbose:
        print("%s: %s %s" % (d, "FAILED" if errors else "OK", {k: float("%.3g" % v) for k, v in report.items()}))
        for e in errors:
            print("  " + e)
    return errors, report


if __name__ == "__main__":
    bad = 0
    for d in sys.argv[1:] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "sdar_tiny")]:
        bad += bool(verify_fixture(d)[0])
    sys.exit(1 if bad else 0)
