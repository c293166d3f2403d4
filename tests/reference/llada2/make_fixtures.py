#!/usr/bin/env python3
"""LLaDA2.x (`LLaDA2MoeModelLM`, model_type `llada2_moe`) oracle fixture: a tiny random checkpoint laid out as
published ones (config.json field names, model.safetensors tensor names, per-expert tensors, float32) and traces
of llada2_reference.py's forward and of diffusers' `LLaDA2Pipeline` greedy decoding driving it.

    /work/refvenv/bin/python tests/reference/llada2/make_fixtures.py            # (re)write fixtures/
    /work/refvenv/bin/python tests/reference/llada2/make_fixtures.py --check    # regenerate to a temp dir, compare
    ... [--sglang-wheel PATH]   # also cross-check the router against SGLang's own biased_grouped_topk_impl,
                                # read from the wheel (`pip download --no-deps sglang==0.5.23`); recorded in trace.json

No transformers / SGLang class implements LLaDA2 (see README.md), so the checkpoint is written directly (seeded
random tensors) and traced with the plain-PyTorch reference; the decoding runs are diffusers 0.42.1's own
`LLaDA2Pipeline` + `BlockRefinementScheduler` with the reference wrapped as the model (block-causal attention over
the window the pipeline passes), re-checked step by step against llada2_reference.refine_generate. Refuses a
fixture whose router choices (group or expert) are within 1e-3 of a tie, whose greedy argmax margin is below 1e-2,
or whose threshold / top-k / editing decisions are within 1e-3, at any token of any recorded forward or step.
"""

import ast
import json
import math
import os
import sys
import zipfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import llada2_reference as ref  # noqa: E402
import fixture_tools  # noqa: E402
from fixture_tools import (draw_prompt, f32, i64, refuse_if_fragile, replay_arrays, seeded_draws,  # noqa: E402
                           write_checkpoint, write_fixture_files)
from torch_blocks import rope_interleaved  # noqa: E402

FIXTURES = os.path.join(HERE, "fixtures")
MADE_BY = "tests/reference/llada2/make_fixtures.py"
DIFFUSERS_VERSION = "0.42.1"
ROUTER_MIN_GAP = 1e-3
GREEDY_MIN_MARGIN = 1e-2
DECISION_MIN_GAP = 1e-3

SPEC = {
    "name": "llada2_tiny",
    "seed": 17,
    "gains": {"qk": 1.5, "branch": 1.0, "router": 1.5, "expert_bias": 0.3, "logit": 0.6, "mask_row": 0.05},
    "config": {
        "architectures": ["LLaDA2MoeModelLM"],
        "model_type": "llada2_moe",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "partial_rotary_factor": 0.5,
        "rotary_dim": 8,
        "rope_theta": 600000.0,
        "rope_scaling": None,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "use_qk_norm": True,
        "use_qkv_bias": False,
        "use_bias": False,
        "norm_head": False,
        "tie_word_embeddings": False,
        "embedding_dropout": 0.0,
        "attention_dropout": 0.0,
        "output_dropout": 0.0,
        "first_k_dense_replace": 1,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "num_shared_experts": 1,
        "moe_intermediate_size": 16,
        "moe_shared_expert_intermediate_size": 24,
        "n_group": 4,
        "topk_group": 2,
        "routed_scaling_factor": 2.5,
        "score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "router_dtype": "fp32",
        "norm_topk_prob": True,
        "output_router_logits": False,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "float32",
        "use_cache": False,
    },
    "special": {"<pad>": 0, "<eos>": 1, "<unk>": 3, "<|mask|>": 255},
    "mask_token": "<|mask|>",
    "prompt_len": 11,
    "block_length": 8,
    "gen_length": 21,
    "runs": [
        {"name": "greedy", "settings": dict(gen_length=21, block_length=8, num_inference_steps=4, threshold=0.7,
                                             editing_threshold=None, max_post_steps=16, minimal_topk=1)},
        {"name": "editing", "settings": dict(gen_length=21, block_length=8, num_inference_steps=4, threshold=0.7,
                                              editing_threshold=0.5, max_post_steps=4, minimal_topk=1)},
    ],
}


# ------------------------------------------------------------------------------------------------------------
# Checkpoint


def make_tensors(spec):
    """Seeded random tensors under the published names (per-expert layout), float32."""
    c, g_ = spec["config"], spec["gains"]
    normal, uniform = seeded_draws(spec["seed"])
    H, hd, nh, kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]

    t = {"model.word_embeddings.weight": normal([c["vocab_size"], H], 1.0)}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = uniform([H], 0.5, 1.5)
        t[p + "attention.query_key_value.weight"] = normal([(nh + 2 * kv) * hd, H], 1 / math.sqrt(H))
        t[p + "attention.query_layernorm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "attention.key_layernorm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "attention.dense.weight"] = normal([H, nh * hd], g_["branch"] / math.sqrt(nh * hd))
        t[p + "post_attention_layernorm.weight"] = uniform([H], 0.5, 1.5)
        if l < c["first_k_dense_replace"]:
            I = c["intermediate_size"]
            t[p + "mlp.gate_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
            t[p + "mlp.up_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
            t[p + "mlp.down_proj.weight"] = normal([H, I], g_["branch"] / math.sqrt(I))
            continue
        E, Im = c["num_experts"], c["moe_intermediate_size"]
        t[p + "mlp.gate.weight"] = normal([E, H], g_["router"] / math.sqrt(H))
        t[p + "mlp.gate.expert_bias"] = normal([E], g_["expert_bias"])
        for e in range(E):
            q = p + "mlp.experts.%d." % e
            t[q + "gate_proj.weight"] = normal([Im, H], 1 / math.sqrt(H))
            t[q + "up_proj.weight"] = normal([Im, H], 1 / math.sqrt(H))
            t[q + "down_proj.weight"] = normal([H, Im], g_["branch"] / math.sqrt(Im))
        Is = c["moe_shared_expert_intermediate_size"] * c["num_shared_experts"]
        q = p + "mlp.shared_experts."
        t[q + "gate_proj.weight"] = normal([Is, H], 1 / math.sqrt(H))
        t[q + "up_proj.weight"] = normal([Is, H], 1 / math.sqrt(H))
        t[q + "down_proj.weight"] = normal([H, Is], g_["branch"] / math.sqrt(Is))
    t["model.norm.weight"] = uniform([H], 0.5, 1.5) * g_["logit"]
    head = normal([c["vocab_size"], H], 1.0)
    head[spec["special"][spec["mask_token"]]] *= g_["mask_row"]   # the mask token is never the argmax
    t["lm_head.weight"] = head
    return {k: v.contiguous() for k, v in t.items()}


# ------------------------------------------------------------------------------------------------------------
# Gaps and variants


def router_gaps(out, cfg):
    """Smallest topk_group-th minus next group score and K-th minus (K+1)-th allowed choice score, over all tokens
    and sparse layers of one forward."""
    K, TG = cfg["num_experts_per_tok"], cfg["topk_group"]
    gg, eg = math.inf, math.inf
    for r in out["router"].values():
        gs = r["group_scores"].sort(-1, descending=True).values
        if gs.shape[1] > TG:
            gg = min(gg, float((gs[:, TG - 1] - gs[:, TG]).min()))
        E = r["choice"].shape[1]
        keep = torch.zeros_like(r["group_scores"], dtype=torch.bool).scatter_(1, r["group_ids"], True)
        keep = keep[:, :, None].expand(-1, -1, E // keep.shape[1]).reshape(-1, E)
        cs = r["choice"].masked_fill(~keep, -math.inf).sort(-1, descending=True).values
        eg = min(eg, float((cs[:, K - 1] - cs[:, K]).min()))
    return gg, eg


class Variant(ref.LLaDA2Reference):
    """The reference with one deliberate deviation (to record how much each rule matters)."""

    def __init__(self, base, what):
        self.cfg, self.t, self.sparse, self.what = dict(base.cfg), base.t, base.sparse, what
        if what == "no_group_limit":
            self.cfg["n_group"], self.cfg["topk_group"] = 1, 1
        if what == "no_routed_scaling":
            self.cfg["routed_scaling_factor"] = 1.0
        if what == "no_renormalize":
            self.cfg["norm_topk_prob"] = False
        if what == "full_rotary":
            self.cfg["rotary_dim"] = self.cfg["head_dim"]

    def route(self, l, x):
        r = super().route(l, x)
        c = self.cfg
        E, K, G, TG = c["num_experts"], c["num_experts_per_tok"], c["n_group"], c["topk_group"]
        bias = self.t["model.layers.%d.mlp.gate.expert_bias" % l]
        if self.what in ("group_max", "group_sum_all", "bias_not_in_choice"):
            choice = r["scores"] if self.what == "bias_not_in_choice" else r["choice"]
            grouped = choice.view(-1, G, E // G)
            gs = {"group_max": grouped.max(-1).values, "group_sum_all": grouped.sum(-1)}.get(
                self.what, grouped.topk(2, dim=-1).values.sum(-1))
            keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gs.topk(TG, dim=-1).indices, True)
            keep = keep[:, :, None].expand_as(grouped).reshape(-1, E)
            r["ids"] = choice.masked_fill(~keep, -math.inf).topk(K, dim=-1).indices
            w = r["scores"].gather(1, r["ids"])
            r["weights"] = w / (w.sum(-1, keepdim=True) + 1e-20)
        if self.what == "bias_in_weights":
            w = r["choice"].gather(1, r["ids"])
            r["weights"] = w / (w.sum(-1, keepdim=True) + 1e-20)
        return r

    def rope(self, x, pos):
        if self.what != "rope_interleaved":
            return super().rope(x, pos)
        return rope_interleaved(x, pos, self.cfg["rope_theta"], self.cfg["rotary_dim"])


VARIANTS = ["no_group_limit", "group_max", "group_sum_all", "bias_not_in_choice", "bias_in_weights",
            "no_renormalize", "no_routed_scaling", "rope_interleaved", "full_rotary"]


# ------------------------------------------------------------------------------------------------------------
# SGLang cross-check (optional): its own biased_grouped_topk_impl, read from the wheel


def sglang_router(wheel):
    src = zipfile.ZipFile(wheel).read("sglang/srt/layers/moe/topk.py").decode()
    fn = next(n for n in ast.parse(src).body
              if isinstance(n, ast.FunctionDef) and n.name == "biased_grouped_topk_impl")
    fn.decorator_list = []
    ns = {"torch": torch, "Optional": __import__("typing").Optional, "_RENORMALIZE_SUM_EPSILON": 1e-20,
          "fused_shared_expert_weight": None}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "sglang_topk", "exec"), ns)
    return ns["biased_grouped_topk_impl"]


def crosscheck_sglang(wheel, model, forwards_out):
    impl = sglang_router(wheel)
    c = model.cfg
    worst = 0.0
    for out in forwards_out:
        for l, r in out["router"].items():
            bias = model.t["model.layers.%d.mlp.gate.expert_bias" % l]
            w, ids = impl(r["logits"], r["logits"], bias, c["num_experts_per_tok"], c["norm_topk_prob"],
                          c["n_group"], c["topk_group"], 0, c["routed_scaling_factor"], False)
            o1, o2 = ids.long().sort(-1), r["ids"].sort(-1)
            if not torch.equal(o1.values, o2.values):
                raise SystemExit("SGLang's biased_grouped_topk_impl chooses other experts (layer %d)" % l)
            worst = max(worst, float((w.gather(1, o1.indices) - r["weights"].gather(1, o2.indices)).abs().max()))
    return worst


# ------------------------------------------------------------------------------------------------------------
# diffusers


class PipelineModel(torch.nn.Module):
    """What LLaDA2Pipeline calls: model(x, attention_mask=[B, T] (1 = real token), position_ids) -> .logits. The
    window is attended block-causally (blocks of block_length from position 0), as SGLang decodes."""

    def __init__(self, model, block_length):
        super().__init__()
        self.m, self.block = model, block_length
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)   # gives the pipeline a device
        self.calls = []

    @property
    def device(self):   # DiffusionPipeline.device reads component.device
        return self.anchor.device

    def forward(self, x, attention_mask=None, position_ids=None):
        from types import SimpleNamespace
        assert x.shape[0] == 1 and bool(attention_mask.all())
        assert torch.equal(position_ids[0], torch.arange(x.shape[1]))
        T = x.shape[1]
        out = self.m.forward(x[0], ref.block_causal_mask(T, self.block))
        self.calls.append(out)
        return SimpleNamespace(logits=out["logits"][None])


def run_diffusers(model, tok, prompt_ids, s, eos_token_id):
    from diffusers import BlockRefinementScheduler, LLaDA2Pipeline
    wrapper = PipelineModel(model, s["block_length"])
    pipe = LLaDA2Pipeline(model=wrapper, scheduler=BlockRefinementScheduler(), tokenizer=tok)
    pipe.set_progress_bar_config(disable=True)
    steps = []

    def cb(p, global_step, step_idx, kw):
        steps.append({k: v.clone() if torch.is_tensor(v) else v for k, v in kw.items()})
        return {}

    out = pipe(input_ids=torch.tensor([prompt_ids]), use_chat_template=False, temperature=0.0,
               sampling_method="greedy", output_type="seq", eos_token_id=eos_token_id,
               callback_on_step_end=cb,
               callback_on_step_end_tensor_inputs=["block_x", "transfer_index", "editing_transfer_index",
                                                   "sampled_tokens", "sampled_probs"], **s)
    return out.sequences[0], steps, wrapper.calls


# ------------------------------------------------------------------------------------------------------------
# Making


# Each smallest gap make_fixture measures, and the bound it must exceed (the order is min_gaps' key order).
GAP_LIMITS = (("router_group", ROUTER_MIN_GAP), ("router_expert", ROUTER_MIN_GAP),
              ("greedy_margin", GREEDY_MIN_MARGIN), ("threshold", DECISION_MIN_GAP),
              ("topk_rank", DECISION_MIN_GAP), ("editing_threshold", DECISION_MIN_GAP))


class Fixture:
    """One fixture in the making: the model, tokenizer and prompt it is traced with, and what is recorded on the
    way: the trace arrays (in the order they are written), the forwards' descriptions, the outputs of the forwards
    whose routing is recorded, the smallest decision gaps seen and the problems found."""

    def __init__(self, spec, model, tok, prompt, prompt_text):
        self.model, self.tok, self.prompt, self.prompt_text = model, tok, prompt, prompt_text
        self.block = spec["block_length"]
        self.mask_id = spec["special"][spec["mask_token"]]
        self.eos = spec["config"]["eos_token_id"]
        self.trace = {"prompt_ids": i64(prompt)}
        self.forwards, self.routed_outs, self.problems = [], [], []
        self.gaps = {name: math.inf for name, _ in GAP_LIMITS}

    def lower_gap(self, name, value):
        self.gaps[name] = min(self.gaps[name], value)

    def note_router(self, out):
        group_gap, expert_gap = router_gaps(out, self.model.cfg)
        self.lower_gap("router_group", group_gap)
        self.lower_gap("router_expert", expert_gap)

    def record_forward(self, name, ids, mask_kind, block=None, router=True):
        """Runs the reference on ids and records its logits, and with router=True its routing (whose gaps count)."""
        T = len(ids)
        mask = {"block_causal": ref.block_causal_mask(T, block or 1), "full": ref.full_mask(T),
                "causal": ref.causal_mask(T)}[mask_kind]
        out = self.model.forward(torch.tensor(ids), mask)
        self.trace[name + "_ids"] = i64(ids)
        self.trace[name + "_logits"] = f32(out["logits"])
        f = {"name": name, "ids": name + "_ids", "logits": name + "_logits", "mask": mask_kind}
        if block:
            f["block_size"] = block
        if router:
            self.record_routing(name, out, f)
        self.forwards.append(f)
        return out

    def record_routing(self, name, out, forward):
        layers = sorted(out["router"])
        for field, as_array in (("logits", f32), ("ids", i64), ("weights", f32)):
            self.trace["%s_router_%s" % (name, field)] = as_array(
                torch.stack([out["router"][l][field] for l in layers]))
        forward.update(router_logits=name + "_router_logits", router_ids=name + "_router_ids",
                       router_weights=name + "_router_weights", sparse_layers=layers)
        self.note_router(out)
        self.routed_outs.append(out)


# --- decoding: diffusers' pipeline, re-checked by refine_generate ---


def decode_and_crosscheck(fx, run):
    """One decoding run by diffusers' pipeline, refused unless refine_generate agrees step by step; returns the
    sequence, refine_generate's steps and the pipeline's forwards."""
    s, k = run["settings"], run["name"]
    seq, dsteps, calls = run_diffusers(fx.model, fx.tok, fx.prompt, s, fx.eos)
    rseq, rsteps = ref.refine_generate(fx.model, fx.prompt, mask_token_id=fx.mask_id, eos_token_id=fx.eos, **s)
    if not torch.equal(seq, rseq) or len(dsteps) != len(rsteps):
        raise SystemExit("%s: diffusers and refine_generate disagree (%s vs %s)" % (k, seq.tolist(), rseq.tolist()))
    for a, b in zip(dsteps, rsteps):
        end = (b["block"] + 1) * fx.block
        if not (torch.equal(a["block_x"][0], b["canvas"][:end]) and torch.equal(a["sampled_tokens"][0], b["sampled"])
                and torch.equal(a["transfer_index"][0], b["transfer"])
                and torch.equal(a["editing_transfer_index"][0], b["edit"])):
            raise SystemExit("%s: step-by-step mismatch with diffusers at block %d" % (k, b["block"]))
        if float((a["sampled_probs"][0] - b["probs"]).abs().max()) > 1e-6:
            raise SystemExit("%s: sampled probabilities differ" % k)
    return seq, rsteps, calls


def argmax_decides(fx, s, st):
    """Where a step's argmax decides a token: where it is committed or edited, and, with editing, wherever an
    editable position's confidence passes editing_threshold (token changed or not); elsewhere only the confidence
    (the max probability, continuous in the logits) is used."""
    decides = st["transfer"] | st["edit"]
    if s["editing_threshold"]:
        decides = decides | ((torch.arange(st["block"] * fx.block, (st["block"] + 1) * fx.block) >= len(fx.prompt))
                             & (st["probs"] > s["editing_threshold"]))
    return decides


def note_greedy_margins(fx, run, steps):
    """The smallest top-1 minus top-2 logit wherever the argmax decides; a decoded mask token is a problem."""
    for st in steps:
        decides = argmax_decides(fx, run["settings"], st)
        if bool(decides.any()):
            lg = st["logits"].sort(-1, descending=True).values
            fx.lower_gap("greedy_margin", float((lg[:, 0] - lg[:, 1])[decides].min()))
        if bool((st["sampled"][decides] == fx.mask_id).any()):
            fx.problems.append("%s: mask token decoded" % run["name"])


def block_before_step(fx, prev, st):
    """The step's block as it stood before the step: the previous step's canvas when that worked on the same block,
    else the prompt (where the block overlaps it) followed by masks."""
    start, end = st["block"] * fx.block, (st["block"] + 1) * fx.block
    if prev is not None and prev["block"] == st["block"]:
        return prev["canvas"][start:end]
    if start < len(fx.prompt):
        return torch.tensor(fx.prompt + [fx.mask_id] * (end - len(fx.prompt)))[start:end]
    return torch.full((fx.block,), fx.mask_id)


def note_commit_gaps(fx, s, st, active):
    """How close the still-masked positions' confidences come to threshold, and, where top-k fills up the
    schedule, how close the n-th and (n+1)-th confidences are."""
    pa = st["probs"][active]
    fx.lower_gap("threshold", float((pa - s["threshold"]).abs().min()))
    n = st["schedule_n"]
    if int((pa > s["threshold"]).sum()) < n and int(active.sum()) > n:
        ps = pa.sort(descending=True).values
        fx.lower_gap("topk_rank", float(ps[n - 1] - ps[n]))


def note_editing_gap(fx, s, st, before, active):
    """How close the confidences of decoded generated tokens that would change come to editing_threshold."""
    start, end = st["block"] * fx.block, (st["block"] + 1) * fx.block
    editable = ~active & (torch.arange(start, end) >= len(fx.prompt)) & (st["sampled"] != before)
    if bool(editable.any()):
        fx.lower_gap("editing_threshold", float((st["probs"][editable] - s["editing_threshold"]).abs().min()))


def note_decision_gaps(fx, s, steps):
    """The threshold, top-k and editing decisions' gaps at every step of a run."""
    prev = None
    for st in steps:
        before = block_before_step(fx, prev, st)
        active = before == fx.mask_id
        if st["masks_remaining"]:
            note_commit_gaps(fx, s, st, active)
        if s["editing_threshold"]:
            note_editing_gap(fx, s, st, before, active)
        prev = st


def record_run_arrays(fx, k, seq, steps):
    fx.trace[k + "_sequence"] = i64(seq)
    fx.trace[k + "_canvas"] = i64(torch.stack([st["canvas"] for st in steps]))
    fx.trace[k + "_sampled"] = i64(torch.stack([st["sampled"] for st in steps]))
    fx.trace[k + "_probs"] = f32(torch.stack([st["probs"] for st in steps]))
    fx.trace[k + "_transfer"] = np.stack([st["transfer"].numpy() for st in steps])
    fx.trace[k + "_edit"] = np.stack([st["edit"].numpy() for st in steps])
    fx.trace[k + "_block"] = i64([st["block"] for st in steps])
    fx.trace[k + "_step_idx"] = i64([st["step_idx"] for st in steps])


def summarise_run(fx, run, seq, steps):
    """trace.json's entry for one run: its settings, its sequence and how it got there."""
    s = run["settings"]
    return {"name": run["name"], "settings": s, "forwards": len(steps), "sequence": seq.tolist(),
            "distinct_tokens": len(set(seq.tolist())),
            "steps_per_block": {str(b): sum(1 for st in steps if st["block"] == b)
                                for b in sorted({st["block"] for st in steps})},
            "threshold_commits": int(sum(int((st["transfer"] & (st["probs"] > s["threshold"])).sum())
                                         for st in steps)),
            "topk_commits": int(sum(int((st["transfer"] & ~(st["probs"] > s["threshold"])).sum())
                                    for st in steps)),
            "edits": int(sum(int(st["edit"].sum()) for st in steps)),
            "eos_produced": fx.eos in seq.tolist(),
            "text": fx.tok.decode(seq.tolist())}


def record_run(fx, run):
    """Decodes one run, cross-checked; records its gaps, problems and arrays; returns its summary."""
    seq, steps, calls = decode_and_crosscheck(fx, run)
    for out in calls:
        fx.note_router(out)
    note_greedy_margins(fx, run, steps)
    note_decision_gaps(fx, run["settings"], steps)
    record_run_arrays(fx, run["name"], seq, steps)
    return summarise_run(fx, run, seq, steps)


# --- how much each rule matters ---


def variant_sensitivity(fx, what):
    """How far Variant(what) moves the routed forwards' logits, and at how many tokens it picks other experts."""
    v = Variant(fx.model, what)
    d_logits, changed = 0.0, 0
    for f in fx.forwards:
        if not f.get("router_ids"):
            continue
        ids = torch.from_numpy(fx.trace[f["ids"]])
        out = v.forward(ids, ref.block_causal_mask(len(ids), fx.block))
        d_logits = max(d_logits, float(np.abs(out["logits"].numpy() - fx.trace[f["logits"]]).max()))
        got = np.stack([out["router"][l]["ids"].sort(-1).values.numpy() for l in sorted(out["router"])])
        changed += int((got != np.sort(fx.trace[f["router_ids"]], -1)).any(-1).sum())
    return {"logits_max_abs_diff": float("%.3g" % d_logits), "tokens_with_other_experts": changed}


def sensitivity(fx, greedy_settings):
    """Each Variant's effect, and that of attending the window fully (what a model ignoring block-causality would
    do) on the window's logits and on the greedy run."""
    full_seq, _ = ref.refine_generate(fx.model, fx.prompt, mask_token_id=fx.mask_id, eos_token_id=fx.eos,
                                      attention="full", **greedy_settings)
    sens = {what: variant_sensitivity(fx, what) for what in VARIANTS}
    trace = fx.trace
    sens["full_window_attention"] = {
        "logits_max_abs_diff": float("%.3g" % np.abs(trace["window_full_logits"] - trace["window_logits"]).max()),
        "greedy_sequence_differs": bool(not torch.equal(full_seq, torch.from_numpy(trace["greedy_sequence"])))}
    return sens


# --- refusing, assembling, writing ---


def assemble_meta(spec, fx, runs, sens, sparse_layers):
    c, m = fx.model.cfg, fx.model
    experts_used = {str(l): sorted({int(e) for o in fx.routed_outs for e in o["router"][l]["ids"].flatten()})
                    for l in sparse_layers}
    return {
        "made_by": MADE_BY,
        "versions": fixture_tools.versions(diffusers=__import__("diffusers").__version__),
        "architecture": "LLaDA2MoeModelLM",
        "seed": spec["seed"], "gains": spec["gains"],
        "config": spec["config"],
        "derived": {"head_dim": c["head_dim"], "rotary_dim": c["rotary_dim"],
                    "shared_expert_intermediate": c["moe_shared_intermediate"],
                    "sparse_layers": [l for l, s_ in enumerate(m.sparse) if s_],
                    "group_size": c["num_experts"] // c["n_group"]},
        "special_tokens": spec["special"], "mask_token": spec["mask_token"], "mask_token_id": fx.mask_id,
        "eos_token_id": fx.eos, "prompt_text": fx.prompt_text, "prompt_ids": fx.prompt, "block_length": fx.block,
        "forwards": fx.forwards,
        "runs": runs,
        "min_gaps": {k: float("%.4g" % v) if v != math.inf else None for k, v in fx.gaps.items()},
        "experts_used": experts_used,
        "sensitivity": sens,
    }


def sglang_crosscheck_meta(wheel, fx, outs):
    return {"wheel": os.path.basename(wheel),
            "function": "sglang/srt/layers/moe/topk.py biased_grouped_topk_impl",
            "same_experts": True,
            "weights_max_abs_diff": float("%.3g" % crosscheck_sglang(wheel, fx.model, outs))}


def make_fixture(spec, d, sglang_wheel=None):
    torch.manual_seed(0)
    tok = write_checkpoint(d, spec, make_tensors(spec))
    m = ref.LLaDA2Reference.load(d)
    prompt, text = draw_prompt(spec, tok, m.cfg["vocab_size"])
    fx = Fixture(spec, m, tok, prompt, text)
    B = fx.block
    window = prompt + [fx.mask_id] * (2 * B - len(prompt))   # the pipeline's first window: prompt + masked block
    w_out = fx.record_forward("window", window, "block_causal", B)
    fx.record_forward("window_full", window, "full", router=False)
    fx.record_forward("prompt_causal", prompt, "causal", router=False)
    runs = [record_run(fx, run) for run in spec["runs"]]
    greedy_final = torch.tensor(fx.trace["greedy_canvas"][-1]).tolist()
    final = fx.record_forward("final_canvas", greedy_final, "block_causal", B)
    sens = sensitivity(fx, spec["runs"][0]["settings"])
    refuse_if_fragile(fx.problems, fx.gaps, GAP_LIMITS, runs)
    meta = assemble_meta(spec, fx, runs, sens, sorted(w_out["router"]))
    if sglang_wheel:   # the final canvas is among the routed outputs already; checking it twice changes nothing
        meta["sglang_crosscheck"] = sglang_crosscheck_meta(sglang_wheel, fx, fx.routed_outs + [final])
    write_fixture_files(d, spec["name"], fx.trace, meta, replay_arrays(fx.trace, REPLAY), ref.verify_fixture)
    return meta


# The arrays the C++ tests read (tests/runtime/e2e/LLaDA2ReferenceTest.cpp), as plain .npy in replay/:
# they may not need Python or zip at run time. name -> dtype written.
REPLAY = {"prompt_ids": "<i4", "window_ids": "<i4", "window_logits": "<f4", "final_canvas_ids": "<i4",
          "final_canvas_logits": "<f4", "greedy_canvas": "<i4", "greedy_sequence": "<i4",
          "editing_canvas": "<i4", "editing_sequence": "<i4"}


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", default=FIXTURES)
    ap.add_argument("--sglang-wheel")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fixture_tools.setup("2.15", "5.23.", diffusers=(DIFFUSERS_VERSION, __import__("diffusers").__version__))
    if args.check:
        return fixture_tools.check_one_fixture(
            FIXTURES, SPEC["name"], lambda d: make_fixture(SPEC, d, args.sglang_wheel),
            json_keys=("config", "prompt_ids", "runs", "forwards", "mask_token_id"))
    os.makedirs(args.out, exist_ok=True)
    meta = make_fixture(SPEC, os.path.join(args.out, SPEC["name"]), args.sglang_wheel)
    print(json.dumps({"runs": [{k: r[k] for k in ("name", "sequence", "forwards", "threshold_commits",
                                                    "topk_commits", "edits")} for r in meta["runs"]],
                      "min_gaps": meta["min_gaps"], "sensitivity": meta["sensitivity"]}, indent=1))
    fixture_tools.write_manifest(args.out, MADE_BY, {"diffusers": __import__("diffusers").__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main())
