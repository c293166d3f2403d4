#!/usr/bin/env python3
"""Independent plain-PyTorch Llama / Qwen3 / Qwen2 / SDAR causal LM and autoregressive decoding checks.

Reads a checkpoint directory (config.json + model.safetensors as `save_pretrained` writes them) and runs the
causal forward written from the architecture (RMSNorm, RoPE with rope_theta, GQA attention, Qwen3's per-head
q_norm / k_norm before RoPE, Qwen2's q/k/v biases, SiLU-gated MLP, tied or untied head; SDARForCausalLM, I-DLM's
class, is Qwen3's weights and math), in float32, without
importing transformers. Needs torch (>= 1.13), numpy and safetensors only, so it also runs in the repository's
.venv.

    python ar_reference.py FIXTURE_DIR [FIXTURE_DIR ...]

re-checks fixtures made by make_fixtures.py:
  - the prompt forward's logits [P, V] and generate's first-step logits, within LOGIT_TOL;
  - greedy: one full forward over prompt + generated tokens reproduces every recorded step's logits (generate
    ran KV-cached), every token is the argmax (exactly), and the run stopped where the EOS / max-token rule says;
  - sampled: the same for the step logits; transformers' warpers (temperature, then top-k, then top-p, as listed
    in trace.json's hf_logits_processors) re-applied to the recorded logits give the recorded scores (same
    -inf mask exactly, finite values within 1e-5 relative), and every drawn token is inside the kept set;
  - a mask_token_id in config.json (SDAR) is the tokenizer's mask token and in no prompt or generated run.
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
from llama_torch import Dims, causal_stack  # noqa: E402

LOGIT_TOL = 1e-4           # absolute, on float32 logits (the first-step tolerance)
SCORE_RTOL = 1e-5          # warped scores recomputed from the recorded logits

FAMILIES = {"LlamaForCausalLM": dict(qk_norm=False, qkv_bias=False),
            "Qwen3ForCausalLM": dict(qk_norm=True, qkv_bias=False),
            "Qwen2ForCausalLM": dict(qk_norm=False, qkv_bias=True),
            "SDARForCausalLM": dict(qk_norm=True, qkv_bias=False)}  # I-DLM: Qwen3 + mask_token_id


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


class Model:
    def __init__(self, path):
        self.c = Config(path)
        self.w = {k: v.float() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
        self.head = self.w["model.embed_tokens.weight"] if self.c.tied or "lm_head.weight" not in self.w \
            else self.w["lm_head.weight"]
        if not self.c.tied:
            assert "lm_head.weight" in self.w, "untied checkpoint without lm_head.weight"

    @torch.no_grad()
    def forward(self, ids):
        """ids: [T] int64, positions 0..T-1, causal. Returns float32 logits [T, V]."""
        fam = self.c.fam
        _, x = causal_stack(self.w, self.c, ids, qk_norm=fam["qk_norm"], qkv_bias=fam["qkv_bias"],
                            o_bias=fam.get("o_bias", False))
        return F.linear(x, self.head)


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
