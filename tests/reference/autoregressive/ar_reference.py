#!/usr/bin/env python3
"""Independent plain-PyTorch Llama / Qwen3 / Qwen2 / SDAR / Qwen3-MoE causal LM and autoregressive decoding checks.

Reads a checkpoint directory (config.json + model.safetensors as `save_pretrained` writes them) and runs the
causal forward written from the architecture (RMSNorm, RoPE with rope_theta, GQA attention, Qwen3's per-head
q_norm / k_norm before RoPE, Qwen2's q/k/v biases, SiLU-gated MLP, tied or untied head; SDARForCausalLM, I-DLM's
class, is Qwen3's weights and math; Qwen3MoeForCausalLM is Qwen3's attention with a top-k routed mixture of
SiLU-gated experts in its sparse layers, read from the per-expert tensor names of published Qwen3-MoE
checkpoints), in float32, without importing transformers. Needs torch (>= 1.13), numpy and safetensors only, so
it also runs in the repository's .venv.

    python ar_reference.py FIXTURE_DIR [FIXTURE_DIR ...]

re-checks fixtures made by make_fixtures.py:
  - the prompt forward's logits [P, V] and generate's first-step logits, within LOGIT_TOL;
  - greedy: one full forward over prompt + generated tokens reproduces every recorded step's logits (generate
    ran KV-cached), every token is the argmax (exactly), and the run stopped where the EOS / max-token rule says;
  - sampled: the same for the step logits; transformers' warpers (temperature, then top-k, then top-p, as listed
    in trace.json's hf_logits_processors) re-applied to the recorded logits give the recorded scores (same
    -inf mask exactly, finite values within 1e-5 relative), and every drawn token is inside the kept set;
  - a mask_token_id in config.json (SDAR) is the tokenizer's mask token and in no prompt or generated run;
  - Qwen3-MoE: the file holds exactly the tensors the architecture names (per-expert experts.{e}.gate_proj /
    up_proj / down_proj and the router mlp.gate in sparse layers, mlp.gate_proj / up_proj / down_proj in dense
    ones); over prompt + greedy tokens the router logits match trace.npz's (LOGIT_TOL), the chosen experts are
    the same (exactly), and the k-th and (k+1)-th router probabilities are apart by more than ROUTER_MIN_GAP (the
    top-k choice is not decided by rounding noise).
"""

import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from llama_torch import Dims, apply_rope, attend, causal_stack, linear, mlp, rms_norm, rope  # noqa: E402

LOGIT_TOL = 1e-4           # absolute, on float32 logits (the first-step tolerance)
SCORE_RTOL = 1e-5          # warped scores recomputed from the recorded logits
ROUTER_MIN_GAP = 1e-3      # MoE: k-th minus (k+1)-th largest router probability, every token and sparse layer

FAMILIES = {"LlamaForCausalLM": dict(qk_norm=False, qkv_bias=False),
            "Qwen3ForCausalLM": dict(qk_norm=True, qkv_bias=False),
            "Qwen2ForCausalLM": dict(qk_norm=False, qkv_bias=True),
            "SDARForCausalLM": dict(qk_norm=True, qkv_bias=False),  # I-DLM: Qwen3 + mask_token_id
            "Qwen3MoeForCausalLM": dict(qk_norm=True, qkv_bias=False, moe=True)}


class Config(Dims):
    def __init__(self, path):
        with open(os.path.join(path, "config.json")) as f:
            c = json.load(f)
        arch = c["architectures"][0]
        if arch not in FAMILIES:
            raise ValueError("unsupported architecture " + arch)
        super().__init__(c)   # H, L, nH, nKV, hd, eps, theta (default RoPE only)
        self.arch = arch
        self.fam = FAMILIES[arch]
        self.V = c["vocab_size"]
        self.tied = c.get("tie_word_embeddings", False)
        assert c.get("hidden_act", "silu") == "silu", c.get("hidden_act")
        if self.fam["qkv_bias"] is False and c.get("attention_bias"):
            self.fam = dict(self.fam, qkv_bias=True, o_bias=True)
        assert not c.get("mlp_bias"), "mlp_bias not modelled"
        if c.get("use_sliding_window"):
            raise ValueError("sliding window not modelled")
        self.moe_layers = []
        if self.fam.get("moe"):
            # transformers 5 writes the expert count as num_local_experts (Qwen3MoeConfig's attribute_map);
            # published Qwen3-MoE configs (transformers 4.x) spell it num_experts
            n = [c[k] for k in ("num_experts", "num_local_experts") if k in c]
            if not n or len(set(n)) != 1:
                raise ValueError("expert count: num_experts %s, num_local_experts %s"
                                 % (c.get("num_experts"), c.get("num_local_experts")))
            self.E, self.top_k = n[0], c["num_experts_per_tok"]
            self.moe_inter, self.inter = c["moe_intermediate_size"], c["intermediate_size"]
            self.norm_topk = c.get("norm_topk_prob", False)
            step, dense = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
            # Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers or (layer + 1) % step != 0
            self.moe_layers = [i for i in range(self.L)
                               if i not in dense and self.E > 0 and (i + 1) % step == 0]


class Model:
    def __init__(self, path):
        self.c = Config(path)
        self.w = {k: v.float() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
        self.head = self.w["model.embed_tokens.weight"] if self.c.tied or "lm_head.weight" not in self.w \
            else self.w["lm_head.weight"]
        if not self.c.tied:
            assert "lm_head.weight" in self.w, "untied checkpoint without lm_head.weight"
        if self.c.fam.get("moe"):
            check_moe_names(self.w, self.c)

    @torch.no_grad()
    def forward(self, ids, routing=None):
        """ids: [T] int64, positions 0..T-1, causal. Returns float32 logits [T, V]. MoE: when `routing` is a
        list, each sparse layer appends (router logits [T, E], chosen experts [T, k]) to it."""
        fam = self.c.fam
        if fam.get("moe"):
            return F.linear(moe_causal_stack(self.w, self.c, ids, routing), self.head)
        _, x = causal_stack(self.w, self.c, ids, qk_norm=fam["qk_norm"], qkv_bias=fam["qkv_bias"],
                            o_bias=fam.get("o_bias", False))
        return F.linear(x, self.head)


# ----------------------------------------------------------------------------------------------
# Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention; sparse layers route each token to top_k of E experts


def moe_tensor_names(c):
    """Every tensor a Qwen3-MoE checkpoint of config c has, as published checkpoints name them (per expert)."""
    names = {"model.embed_tokens.weight", "model.norm.weight"} | (set() if c.tied else {"lm_head.weight"})
    for i in range(c.L):
        p = "model.layers.%d." % i
        names |= {p + n for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                  "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                  "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight")}
        if i in c.moe_layers:
            names.add(p + "mlp.gate.weight")
            names |= {p + "mlp.experts.%d.%s.weight" % (e, n) for e in range(c.E)
                      for n in ("gate_proj", "up_proj", "down_proj")}
        else:
            names |= {p + "mlp.%s.weight" % n for n in ("gate_proj", "up_proj", "down_proj")}
    return names


def check_moe_names(w, c):
    """The file holds exactly the per-expert layout (no fused experts.gate_up_proj / experts.down_proj), shaped
    as config.json says."""
    want = moe_tensor_names(c)
    if set(w) != want:
        raise ValueError("Qwen3-MoE tensor names: missing %s, unexpected %s"
                         % (sorted(want - set(w))[:6], sorted(set(w) - want)[:6]))
    H, I, IM = c.H, c.moe_inter, c.inter
    for i in range(c.L):
        p = "model.layers.%d.mlp." % i
        shapes = ({p + "gate.weight": (c.E, H)} if i in c.moe_layers else {})
        for e in (range(c.E) if i in c.moe_layers else [None]):
            q, n = (p, IM) if e is None else (p + "experts.%d." % e, I)
            shapes.update({q + "gate_proj.weight": (n, H), q + "up_proj.weight": (n, H),
                           q + "down_proj.weight": (H, n)})
        for k, s in shapes.items():
            if tuple(w[k].shape) != s:
                raise ValueError("%s: shape %s, config says %s" % (k, tuple(w[k].shape), s))


def route(h, gate, top_k, norm_topk):
    """Router: logits = h @ gate^T (float32), softmax over experts, the top_k largest (ties to the lower expert
    id), renormalised to sum 1 when norm_topk. Returns (logits [T, E], chosen ids [T, k], weights [T, k])."""
    logits = h.float() @ gate.float().t()
    probs = torch.softmax(logits, dim=-1)
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices   # stable: equal -> lower id first
    ids = order[:, :top_k]
    wts = probs.gather(-1, ids)
    if norm_topk:
        wts = wts / wts.sum(-1, keepdim=True)
    return logits, ids, wts


def moe_mlp(h, w, p, c, routing=None):
    """Sum over the chosen experts e of weight · down_e(silu(gate_e(h)) · up_e(h)), token by token."""
    logits, ids, wts = route(h, w[p + "mlp.gate.weight"], c.top_k, c.norm_topk)
    if routing is not None:
        routing.append((logits, ids))
    out = torch.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(c.top_k):
            q = p + "mlp.experts.%d." % int(ids[t, j])
            x = h[t:t + 1]
            y = linear(F.silu(linear(x, w, q + "gate_proj")) * linear(x, w, q + "up_proj"), w, q + "down_proj")
            out[t] += wts[t, j] * y[0]
    return out


def moe_causal_stack(w, c, ids, routing=None):
    """Qwen3-MoE's causal decoder over ids [T]: per layer, Qwen3 attention (q/k norms before RoPE), then the
    dense SiLU MLP or the routed experts. Returns the final-normed hidden states [T, H]."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    T = ids.shape[0]
    cos, sin = rope(torch.arange(T), c.hd, c.theta)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["model.embed_tokens.weight"][ids]
    for i in range(c.L):
        p = "model.layers.%d." % i
        h = rms_norm(x, w[p + "input_layernorm.weight"], c.eps)
        q = rms_norm(linear(h, w, p + "self_attn.q_proj").view(T, c.nH, c.hd), w[p + "self_attn.q_norm.weight"],
                     c.eps)
        k = rms_norm(linear(h, w, p + "self_attn.k_proj").view(T, c.nKV, c.hd), w[p + "self_attn.k_norm.weight"],
                     c.eps)
        v = linear(h, w, p + "self_attn.v_proj").view(T, c.nKV, c.hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        x = x + linear(attend(q, k, v, causal, c.nH, c.nKV, c.hd), w, p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c.eps)
        x = x + (moe_mlp(h, w, p, c, routing) if i in c.moe_layers else mlp(h, w, p))
    return rms_norm(x, w["model.norm.weight"], c.eps)


def router_gap(logits, top_k):
    """Per token, the top_k-th minus the (top_k + 1)-th largest router probability."""
    p = torch.sort(torch.softmax(logits.float(), dim=-1), dim=-1, descending=True).values
    return p[:, top_k - 1] - p[:, top_k]


# ----------------------------------------------------------------------------------------------
# transformers' sampling warpers, re-implemented


def warp(logits, temperature, top_k, top_p, min_keep=1):
    """temperature (if != 1), top-k (if not None / 0), top-p (if < 1): the order generate applies them."""
    s = logits.clone()
    if temperature is not None and temperature != 1.0:
        s = s / temperature
    if top_k:
        k = min(max(top_k, min_keep), s.shape[-1])
        kth = torch.topk(s, k, dim=-1).values[..., -1:]
        s = s.masked_fill(s < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sl, si = torch.sort(s, descending=False, dim=-1)
        cum = sl.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - top_p)
        remove[..., -min_keep:] = False
        remove = remove.scatter(-1, si, remove)
        s = s.masked_fill(remove, float("-inf"))
    return s


def processors_from_settings(temperature, top_k, top_p):
    out = []
    if temperature is not None and temperature != 1.0:
        out.append(("TemperatureLogitsWarper", {"temperature": temperature}))
    if top_k:
        out.append(("TopKLogitsWarper", {"top_k": top_k}))
    if top_p is not None and top_p < 1.0:
        out.append(("TopPLogitsWarper", {"top_p": top_p}))
    return out


# ----------------------------------------------------------------------------------------------
# Checking


def _close(what, got, want, tol, errors, report):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        errors.append("%s: shape %s != %s" % (what, got.shape, want.shape))
        return
    d = float(np.abs(got - want).max())
    report[what] = max(report.get(what, 0.0), d)
    if d > tol:
        errors.append("%s: max |diff| %.3g > %.3g" % (what, d, tol))


def _same(what, got, want, errors):
    if not np.array_equal(np.asarray(got), np.asarray(want)):
        errors.append("%s: %s != %s" % (what, np.asarray(got).tolist(), np.asarray(want).tolist()))


def check_stop(what, new_ids, eos, max_new, errors):
    new_ids = list(new_ids)
    if eos is not None and eos in new_ids:
        if new_ids.index(eos) != len(new_ids) - 1:
            errors.append("%s: generation went on after EOS %d: %s" % (what, eos, new_ids))
    elif len(new_ids) != max_new:
        errors.append("%s: %d new tokens without EOS, max_new_tokens %d" % (what, len(new_ids), max_new))


def check_run(m, what, prompt, seq, new, step_logits, errors, report):
    """seq = prompt + new; the recorded (KV-cached) step logits vs one full forward over seq[:-1]."""
    P = len(prompt)
    _same(what + " sequence = prompt + new", seq, np.concatenate([prompt, new]), errors)
    full = m.forward(torch.from_numpy(seq[:-1].astype(np.int64)))
    _close(what + " step logits", full[P - 1:].numpy(), step_logits, LOGIT_TOL, errors, report)
    return full[P - 1:]


def verify_fixture(path, verbose=True):
    errors, report = [], {}
    m = Model(path)
    t = np.load(os.path.join(path, "trace.npz"))
    meta = json.load(open(os.path.join(path, "trace.json")))
    gen = json.load(open(os.path.join(path, "generation_config.json")))
    cfg = json.load(open(os.path.join(path, "config.json")))
    prompt = t["prompt_ids"]
    P, V = len(prompt), m.c.V
    _same("prompt_ids vs trace.json", prompt, meta["prompt_ids"], errors)
    eos = gen.get("eos_token_id")
    if cfg.get("eos_token_id") != eos or meta["eos_token_id"] != eos:
        errors.append("eos_token_id: config %s, generation_config %s, trace %s"
                      % (cfg.get("eos_token_id"), eos, meta["eos_token_id"]))

    # forward
    fwd = m.forward(torch.from_numpy(prompt))
    _close("prompt_logits", fwd.numpy(), t["prompt_logits"], LOGIT_TOL, errors, report)
    _close("first_step_logits", fwd[-1].numpy(), t["first_step_logits"], LOGIT_TOL, errors, report)

    # greedy
    max_new = gen["max_new_tokens"]
    if gen.get("do_sample"):
        errors.append("generation_config.json is not greedy")
    new = t["greedy_new_ids"]
    ref = check_run(m, "greedy", prompt, t["greedy_sequences"], new, t["greedy_step_logits"], errors, report)
    _same("greedy argmax of recorded logits", t["greedy_step_logits"].argmax(-1), new, errors)
    _same("greedy argmax of reference logits", ref.argmax(-1).numpy(), new, errors)
    _same("first_step_logits = greedy step 0", t["first_step_logits"], t["greedy_step_logits"][0], errors)
    check_stop("greedy", new.tolist(), eos, max_new, errors)
    _same("greedy new ids vs trace.json", new, meta["greedy"]["new_ids"], errors)
    top2 = np.sort(t["greedy_step_logits"], axis=-1)[:, -2:]
    report["greedy_min_margin"] = float((top2[:, 1] - top2[:, 0]).min())
    if m.c.fam.get("moe"):
        check_routing(m, t, meta, errors, report)

    # the mask token (SDAR): a special token of the tokenizer, never in a prompt or a generated run
    mask = cfg.get("mask_token_id")
    if mask is not None or meta.get("mask_token_id") is not None:
        tok = json.load(open(os.path.join(path, "tokenizer.json")))
        special = {a["id"]: a["content"] for a in tok.get("added_tokens", []) if a.get("special")}
        if meta.get("mask_token_id") != mask or mask not in special or not 0 <= mask < V:
            errors.append("mask_token_id: config %s, trace %s, tokenizer's special tokens %s"
                          % (mask, meta.get("mask_token_id"), special))
        runs = [prompt, t["greedy_sequences"]] + [t["sample%d_sequences" % k] for k in range(len(meta["sampled"]))]
        if any(mask in r.tolist() for r in runs):
            errors.append("the mask token %s is in the prompt or a generated run" % mask)

    # sampled
    for k, s in enumerate(meta["sampled"]):
        what = "sample%d" % k
        new = t[what + "_new_ids"]
        check_run(m, what, prompt, t[what + "_sequences"], new, t[what + "_step_logits"], errors, report)
        check_stop(what, new.tolist(), s["eos_token_id"], s["max_new_tokens"], errors)
        _same(what + " new ids vs trace.json", new, s["new_ids"], errors)
        want = processors_from_settings(s["temperature"], s["top_k"], s["top_p"])
        hf = s["hf_logits_processors"]
        if len(hf) != len(want) or not all(p["class"] == c and all(p.get(key) == v for key, v in d.items())
                                           for (c, d), p in zip(want, hf)):
            errors.append("%s: transformers ran processors %s, settings imply %s"
                          % (what, s["hf_logits_processors"], want))
        scores = t[what + "_step_scores"]
        w = warp(torch.from_numpy(t[what + "_step_logits"]), s["temperature"], s["top_k"], s["top_p"]).numpy()
        _same(what + " kept sets (finite scores)", np.isfinite(w), np.isfinite(scores), errors)
        fin = np.isfinite(scores) & np.isfinite(w)
        d = np.abs(w[fin].astype(np.float64) - scores[fin]) / np.maximum(1.0, np.abs(scores[fin]))
        report[what + "_scores_rel"] = float(d.max())
        if d.max() > SCORE_RTOL:
            errors.append("%s scores: max rel diff %.3g" % (what, d.max()))
        if not np.isfinite(scores[np.arange(len(new)), new]).all():
            errors.append("%s: a drawn token is outside the kept set" % what)
    if verbose:
        print("%s: %s %s" % (path, "OK" if not errors else "FAILED",
                             json.dumps({k: float("%.3g" % v) for k, v in report.items()})))
        for e in errors[:20]:
            print("  " + e)
    return errors, report


def check_routing(m, t, meta, errors, report):
    """Qwen3-MoE: one forward over prompt + greedy tokens; per sparse layer the router logits vs trace.npz's
    greedy_router_logits, the chosen experts vs greedy_expert_ids (exactly), and the k-th / (k+1)-th router
    probability gap above ROUTER_MIN_GAP everywhere."""
    c, routing = m.c, []
    m.forward(torch.from_numpy(t["greedy_sequences"].astype(np.int64)), routing)
    if [i for i in meta.get("moe", {}).get("moe_layers", [])] != c.moe_layers:
        errors.append("moe layers: trace.json %s, config.json gives %s" % (meta.get("moe", {}).get("moe_layers"),
                                                                            c.moe_layers))
    logits = torch.stack([r[0] for r in routing])          # [n_moe, T, E]
    ids = torch.stack([r[1] for r in routing])             # [n_moe, T, k]
    _close("greedy router logits", logits.numpy(), t["greedy_router_logits"], LOGIT_TOL, errors, report)
    # the order within the chosen set does not matter to the output; compare sorted ids
    _same("greedy chosen experts", ids.sort(-1).values.numpy(), np.sort(t["greedy_expert_ids"], -1), errors)
    gap = float(min(router_gap(lg, c.top_k).min() for lg in logits))
    report["router_min_gap"] = gap
    if gap <= ROUTER_MIN_GAP:
        errors.append("router: k-th / (k+1)-th probability gap %.3g <= %.3g" % (gap, ROUTER_MIN_GAP))


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    bad = 0
    for path in argv[1:]:
        errors, _ = verify_fixture(path)
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
