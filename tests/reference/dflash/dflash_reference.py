#!/usr/bin/env python3
"""Independent plain-PyTorch re-implementation of DFlash greedy decoding (z-lab dflash 0.1.0 semantics), used to
check the fixtures made by make_fixtures.py. Needs torch (>= 1.13), numpy, safetensors; no transformers, no dflash.

    python dflash_reference.py fixtures/dflash_explicit fixtures/dflash_default

What it does, per fixture (the target checkpoint is ../target relative to the drafter directory):
  - a Qwen3 target forward (causal, RoPE, q/k norms, GQA) returning the logits and the per-layer outputs;
    feature of target layer id l = output of decoder layer l (= HF hidden_states[l + 1]); for l = L-1 this is
    HF's hidden_states[L], which transformers 5 replaces by the *final-normed* last hidden state, so the final
    norm is applied there;
  - the drafter without any KV cache: every round recomputes K/V of the whole context (positions 0..start-1) from
    the features of the committed tokens, plus the noise block [anchor, MASK x (vs-1)] at positions start..start+vs-1;
    queries only from the block; context rows go through fc -> hidden_norm but NOT through input_layernorm; full
    attention layers are non-causal (block sees the whole context and the whole block); sliding layers are causal
    with |q - k| < window;
  - the greedy verification (acceptance = leading run of draft == target argmax; bonus = target argmax after it),
    end-of-run clipping and EOS handling as in dflash_generate.
It compares draft ids / acceptance / bonus / outputs exactly and logits / features within TOL.
"""

import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from llama_torch import Dims, apply_rope, attend, causal_stack, linear, mlp, rms_norm, rope  # noqa: E402

TOL = 1e-4   # absolute, scaled by max(1, max|x|)


class Target:
    def __init__(self, path):
        self.cfg = json.load(open(os.path.join(path, "config.json")))
        self.d = Dims(self.cfg)
        assert not self.cfg.get("attention_bias")
        self.w = {k: v.float() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
        self.embed = self.w["model.embed_tokens.weight"]
        self.head = self.w.get("lm_head.weight", self.embed) if not self.cfg.get("tie_word_embeddings") else self.embed

    @torch.no_grad()
    def forward(self, ids):
        """Causal forward of ids at positions 0..T-1: (logits [T, V], feats [L, T, H]); feats[l] = layer l output,
        the last one final-normed (as HF hidden_states[L])."""
        feats, x = causal_stack(self.w, self.d, ids)   # Qwen3: q/k norms, no biases
        feats[-1] = x
        return x @ self.head.T, torch.stack(feats)


def build_target_layer_ids(num_target_layers, num_draft_layers):
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    # Python's round(): half to even (round(2.5) == 2)
    return [int(np.round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


class Drafter:
    def __init__(self, path):
        c = self.cfg = json.load(open(os.path.join(path, "config.json")))
        self.d = Dims(c)
        assert not c.get("attention_bias")
        self.w = {k: v.float() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
        dc = c.get("dflash_config") or {}

        def val(name, default=None):
            return dc.get(name, c.get(name, default))
        self.layer_ids = val("target_layer_ids") or build_target_layer_ids(c["num_target_layers"], self.d.L)
        self.block_size = int(val("block_size", 16))
        self.mask = val("mask_token_id")
        self.emb_scale = float(val("input_embedding_scale", 1.0))
        self.out_mult = float(val("output_multiplier", 1.0))
        self.softcap = val("final_logit_softcapping")
        types = c.get("layer_types") or ["full_attention"] * self.d.L
        causal = c.get("is_causal")
        self.causal = [t == "sliding_attention" if causal is None else bool(causal) for t in types]
        self.window = [c.get("sliding_window") if t == "sliding_attention" else None for t in types]

    def ctx(self, feats):
        return rms_norm(feats @ self.w["fc.weight"].T, self.w["hidden_norm.weight"], self.d.eps)

    @torch.no_grad()
    def forward(self, feats, noise, start):
        """feats [n_ctx, n_ids*H] for positions start-n_ctx..start-1; noise [vs, H] for positions start..start+vs-1.
        Returns the normed hidden of all vs block positions."""
        d, w = self.d, self.w
        n, vs = feats.shape[0], noise.shape[0]
        ctx = self.ctx(feats)
        pos = torch.arange(start - n, start + vs)
        cos, sin = rope(pos, d.hd, d.theta)
        qpos, kpos = pos[n:][:, None], pos[None, :]
        h = noise
        for i in range(d.L):
            p = "layers.%d." % i
            x = rms_norm(h, w[p + "input_layernorm.weight"], d.eps)             # block only
            kv_in = torch.cat([ctx, x])                                          # ctx is not layer-normed
            q = rms_norm(linear(x, w, p + "self_attn.q_proj").view(vs, d.nH, d.hd), w[p + "self_attn.q_norm.weight"], d.eps)
            k = rms_norm(linear(kv_in, w, p + "self_attn.k_proj").view(n + vs, d.nKV, d.hd), w[p + "self_attn.k_norm.weight"], d.eps)
            v = linear(kv_in, w, p + "self_attn.v_proj").view(n + vs, d.nKV, d.hd)
            q = apply_rope(q, cos[n:], sin[n:])
            k = apply_rope(k, cos, sin)
            mask = torch.ones(vs, n + vs, dtype=torch.bool)
            if self.causal[i]:
                mask &= kpos <= qpos
            if self.window[i] is not None:
                mask &= qpos - kpos < self.window[i]
                if not self.causal[i]:
                    mask &= kpos - qpos < self.window[i]
            h = h + linear(attend(q, k, v, mask, d.nH, d.nKV, d.hd), w, p + "self_attn.o_proj")
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], d.eps)
            h = h + mlp(x, w, p)
        return rms_norm(h, w["norm.weight"], d.eps)

    def logits(self, hidden, head):
        lg = hidden @ head.T * self.out_mult
        if self.softcap is not None and float(self.softcap) > 0:
            lg = torch.tanh(lg / float(self.softcap)) * float(self.softcap)
        return lg


@torch.no_grad()
def generate(target, drafter, prompt, max_new, stop):
    """Greedy DFlash decoding with full recomputation (no caches). Returns (output ids, rounds, per-round tensors)."""
    P = len(prompt)
    max_len = P + max_new
    logits, feats = target.forward(prompt)
    out = list(prompt) + [int(logits[-1].argmax())]
    sel = lambda fe: torch.cat([fe[l] for l in drafter.layer_ids], dim=-1)   # noqa: E731
    ctx_feats = sel(feats)                       # features of committed positions 0..start-1
    start = P
    rounds, tensors = [], []
    stopped = stop is not None and out[start] in stop
    while start + 1 < max_len and not stopped:
        vs = min(drafter.block_size, max_len - start)
        block = [out[start]] + [drafter.mask] * (vs - 1)
        noise = target.embed[torch.tensor(block)] * drafter.emb_scale
        dh = drafter.forward(ctx_feats[:start], noise, start)[1:]
        dl = drafter.logits(dh, target.head)
        block[1:] = dl.argmax(-1).tolist()
        vlog, vfeat = target.forward(out[:start] + block)
        vlog = vlog[start:]
        post = vlog.argmax(-1).tolist()
        acc = 0
        while acc < vs - 1 and block[1 + acc] == post[acc]:
            acc += 1
        bonus = post[acc]
        committed = block[1:acc + 1] + [bonus]
        produced = min(acc + 1, max_len - start - 1)
        if stop is not None:
            hit = [j for j, t in enumerate(committed[:produced]) if t in stop]
            if hit:
                produced, stopped = hit[0] + 1, True
        out = out[:start + 1] + committed[:produced]
        ctx_feats = torch.cat([ctx_feats[:start], sel(vfeat)[start:start + produced]])
        rounds.append({"start": start, "verify_size": vs, "block_ids": block, "acceptance_length": acc,
                       "bonus": bonus, "produced": produced})
        tensors.append({"draft_logits": dl, "draft_hidden": dh, "verify_logits": vlog})
        start += produced
    return out[:min(start + 1, max_len)], rounds, tensors, ctx_feats


def _close(what, got, want, errors, report):
    got = torch.as_tensor(np.asarray(got, dtype=np.float32))
    want = torch.as_tensor(np.asarray(want, dtype=np.float32))
    if got.shape != want.shape:
        errors.append("%s: shape %s != %s" % (what, tuple(got.shape), tuple(want.shape)))
        return
    d = float((got - want).abs().max()) if got.numel() else 0.0
    report[what] = max(report.get(what, 0.0), d)
    if d > TOL * max(1.0, float(want.abs().max())):
        errors.append("%s: max |diff| %.3g" % (what, d))


def verify_fixture(path, verbose=True):
    meta = json.load(open(os.path.join(path, "trace.json")))
    tr = np.load(os.path.join(path, "trace.npz"))
    target = Target(os.path.join(path, meta.get("target_dir", "../target")))
    drafter = Drafter(path)
    errors, report = [], {}
    if drafter.layer_ids != meta["drafter"]["target_layer_ids"]:
        errors.append("target_layer_ids %s != %s" % (drafter.layer_ids, meta["drafter"]["target_layer_ids"]))
    prompt = tr["prompt_ids"].tolist()
    out, rounds, tensors, ctx_feats = generate(target, drafter, prompt, meta["max_new_tokens"], meta["stop_token_ids"])
    if out != tr["output_ids"].tolist():
        errors.append("output %s != recorded %s" % (out[len(prompt):], tr["new_ids"].tolist()))
    if tr["greedy_new_ids"].tolist() != tr["new_ids"].tolist():
        errors.append("recorded dflash output != recorded target greedy")
    # plain greedy with the reference target
    seq = list(prompt)
    for _ in range(meta["max_new_tokens"]):
        seq.append(int(target.forward(seq)[0][-1].argmax()))
        if seq[-1] in meta["stop_token_ids"]:
            break
    if seq[len(prompt):] != tr["new_ids"].tolist():
        errors.append("reference greedy %s != recorded output" % seq[len(prompt):])
    keys = ("start", "verify_size", "acceptance_length", "bonus", "produced")
    got_rounds = [{k: r[k] for k in keys} for r in rounds]
    want_rounds = [{k: r[k] for k in keys} for r in meta["rounds"]]
    if got_rounds != want_rounds:
        errors.append("rounds differ: %s vs %s" % (got_rounds[:4], want_rounds[:4]))
    for r, (rd, ts) in enumerate(zip(rounds, tensors)):
        vs = rd["verify_size"]
        if r >= len(meta["rounds"]):
            break
        if rd["block_ids"] != meta["rounds"][r]["block_ids"]:
            errors.append("round %d: block %s != %s" % (r, rd["block_ids"], meta["rounds"][r]["block_ids"]))
        _close("verify_logits", ts["verify_logits"], tr["round_verify_logits"][r, :vs], errors, report)
    for k, r in enumerate(tr["detail_rounds"].tolist()):
        if r < len(tensors):
            n = tensors[r]["draft_logits"].shape[0]
            _close("draft_logits", tensors[r]["draft_logits"], tr["detail_draft_logits"][k, :n], errors, report)
            _close("draft_hidden", tensors[r]["draft_hidden"], tr["detail_draft_hidden"][k, :n], errors, report)
    # context features: all rows fed to the drafter, in order, = features of positions 0..last start-1
    n = tr["ctx_features"].shape[0]
    _close("ctx_features", ctx_feats[:n], tr["ctx_features"], errors, report)
    _close("ctx_features_normed", drafter.ctx(torch.as_tensor(tr["ctx_features"])), tr["ctx_features_normed"],
           errors, report)
    _, pf = target.forward(prompt)
    _close("prefill_hidden_states[1:]", pf, tr["prefill_hidden_states"][1:], errors, report)
    _close("prefill_hidden_states[0]", target.embed[torch.tensor(prompt)], tr["prefill_hidden_states"][0], errors, report)
    if verbose:
        print("%s: %s; %s" % (path, "OK" if not errors else "FAILED", {k: "%.2g" % v for k, v in report.items()}))
        for e in errors:
            print("  " + e)
    return errors, report


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    bad = 0
    for p in argv:
        errors, _ = verify_fixture(p)
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
