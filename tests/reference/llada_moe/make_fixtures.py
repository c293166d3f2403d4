#!/usr/bin/env python3
"""LLaDA-MoE (`LLaDAMoEModelLM`, config.json model_type "llada") oracle fixture: a tiny random checkpoint laid out
as published ones (config.json field names, model.safetensors tensor names, per-expert tensors, float32) and
traces of llada_moe_reference.py's forward and of dlm's LLaDA low-confidence reference
(tests/reference/samplers.py low_confidence, greedy) driving it.

    /work/refvenv/bin/python tests/reference/llada_moe/make_fixtures.py            # (re)write fixtures/
    /work/refvenv/bin/python tests/reference/llada_moe/make_fixtures.py --check    # regenerate to a temp dir, compare
    ... [--hf-modeling DIR --hf-site DIR]   # also run the Hugging Face remote modeling code (README.md) on the
                                            # fixture, recorded in trace.json as hf_crosscheck

The checkpoint is written directly (seeded random tensors) and traced with the plain-PyTorch reference. Refuses a
fixture whose router top-K choice is within 1e-3 of a tie (K-th minus (K+1)-th softmax score), whose greedy argmax
margin is below 1e-2 where the argmax decides a token, whose low-confidence top-k choice is within 1e-3 of a tie,
or whose decoding output has fewer than 6 distinct tokens, at any token of any recorded forward or step.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import llada_moe_reference as ref  # noqa: E402
import fixture_tools  # noqa: E402
from fixture_tools import (draw_prompt, f32, i64, refuse_if_fragile, replay_arrays, seeded_draws,  # noqa: E402
                           write_checkpoint, write_fixture_files, write_json)
from torch_blocks import rope_interleaved  # noqa: E402

FIXTURES = os.path.join(HERE, "fixtures")
MADE_BY = "tests/reference/llada_moe/make_fixtures.py"
ROUTER_MIN_GAP = 1e-3
GREEDY_MIN_MARGIN = 1e-2
TOPK_MIN_GAP = 1e-3
GAP_LIMITS = [("router", ROUTER_MIN_GAP), ("greedy_margin", GREEDY_MIN_MARGIN), ("topk_rank", TOPK_MIN_GAP)]

SPEC = {
    "name": "llada_moe_tiny",
    "seed": 37,
    "gains": {"qk": 2.5, "branch": 1.0, "router": 1.5, "logit": 0.6, "mask_row": 0.05},
    "config": {
        "architectures": ["LLaDAMoEModelLM"],
        "model_type": "llada",
        "auto_map": {"AutoConfig": "configuration_lladamoe.LLaDAConfig",
                     "AutoModel": "modeling_lladamoe.LLaDAMoEModelLM"},
        "vocab_size": 256,
        "hidden_size": 64,
        "dense_intermediate_size": 64,
        "expert_intermediate_size": 16,
        "shared_expert_intermediate_size": 24,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 512,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-5,
        "use_cache": False,
        "pad_token_id": 0,
        "bos_token_id": None,
        "eos_token_id": 252,
        "tie_word_embeddings": False,
        "rope_theta": 50000.0,
        "partial_rotary_factor": 0.5,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "clip_qkv": None,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.01,
        "norm_topk_prob": False,
        "qk_layernorm": True,
        "moe_layer_freq": [0, 1, 1],
        "moe_router_enable_expert_bias": False,
        "moe_router_score_function": "softmax",
        "routed_scaling_factor": 1,
        "torch_dtype": "float32",
    },
    "special": {"<pad>": 0, "<unk>": 3, "<eos>": 252, "<|mask|>": 255},
    "mask_token": "<|mask|>",
    "prompt_len": 11,
    "runs": [
        {"name": "greedy", "settings": dict(gen_length=16, block_length=8, steps=4, threshold=None,
                                             temperature=0.0, cache="none")},
    ],
}


# ------------------------------------------------------------------------------------------------------------
# Checkpoint


def make_tensors(spec):
    """Seeded random tensors under the published names (per-expert layout), float32."""
    c, g_ = spec["config"], spec["gains"]
    normal, uniform = seeded_draws(spec["seed"])
    H, nh, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = H // nh

    def mlp(prefix, I):
        t[prefix + "gate_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
        t[prefix + "up_proj.weight"] = normal([I, H], 1 / math.sqrt(H))
        t[prefix + "down_proj.weight"] = normal([H, I], g_["branch"] / math.sqrt(I))

    t = {"model.embed_tokens.weight": normal([c["vocab_size"], H], 1.0)}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = uniform([H], 0.5, 1.5)
        t[p + "self_attn.q_proj.weight"] = normal([nh * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.k_proj.weight"] = normal([kv * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.v_proj.weight"] = normal([kv * hd, H], 1 / math.sqrt(H))
        t[p + "self_attn.o_proj.weight"] = normal([H, H], g_["branch"] / math.sqrt(H))
        t[p + "self_attn.q_norm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "self_attn.k_norm.weight"] = uniform([hd], 0.5 * g_["qk"], 1.5 * g_["qk"])
        t[p + "post_attention_layernorm.weight"] = uniform([H], 0.5, 1.5)
        if c["moe_layer_freq"][l] == 0:
            mlp(p + "mlp.", c["dense_intermediate_size"])
            continue
        t[p + "mlp.gate.weight"] = normal([c["num_experts"], H], g_["router"] / math.sqrt(H))
        for e in range(c["num_experts"]):
            mlp(p + "mlp.experts.%d." % e, c["expert_intermediate_size"])
        mlp(p + "shared_expert.", c["shared_expert_intermediate_size"])
    t["model.norm.weight"] = uniform([H], 0.5, 1.5) * g_["logit"]
    head = normal([c["vocab_size"], H], 1.0)
    head[spec["special"][spec["mask_token"]]] *= g_["mask_row"]   # the mask token is never a likely prediction
    t["lm_head.weight"] = head
    return {k: v.contiguous() for k, v in t.items()}


# ------------------------------------------------------------------------------------------------------------
# Gaps and variants


def router_gap(out, K):
    """Smallest K-th minus (K+1)-th router choice score over all tokens and MoE layers of one forward."""
    gap = math.inf
    for r in out["router"].values():
        cs = r["choice"].sort(-1, descending=True).values
        gap = min(gap, float((cs[:, K - 1] - cs[:, K]).min()))
    return gap


class Variant(ref.LLaDAMoEReference):
    """The reference with one deliberate deviation (to record how much each rule matters)."""

    def __init__(self, base, what):
        self.cfg, self.t, self.sparse, self.what = dict(base.cfg), base.t, base.sparse, what
        if what == "full_rotary":
            self.cfg["rotary_dim"] = self.cfg["head_dim"]
        if what == "no_shared_expert":
            self.cfg["shared_expert_intermediate_size"] = None
        if what == "no_qk_norm":
            self.cfg["qk_layernorm"] = False

    def route(self, l, x):
        r = super().route(l, x)
        K = self.cfg["num_experts_per_tok"]
        if self.what == "renormalize":            # norm_topk_prob honoured
            r["weights"] = r["weights"] / r["weights"].sum(-1, keepdim=True)
        if self.what == "sigmoid_scores":         # moe_router_score_function "sigmoid" honoured
            s = r["logits"].sigmoid()
            r["weights"], r["ids"] = s.topk(K, dim=-1)
        if self.what == "softmax_after_topk":     # Mixtral/Qwen3-MoE-style: softmax over the chosen logits
            v, i = r["logits"].topk(K, dim=-1)
            r["weights"], r["ids"] = v.softmax(-1), i
        return r

    def attention(self, l, x, pos, mask):
        if self.what == "causal_attention":
            mask = mask & ref.causal_mask(x.shape[0])
        if self.what != "gqa_tiled":
            return super().attention(l, x, pos, mask)
        c, t = self.cfg, self.t               # query head h uses kv head h % kv (instead of h // (nh / kv))
        p = "model.layers.%d.self_attn." % l
        T = x.shape[0]
        nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        q = ref.rms_norm((x @ t[p + "q_proj.weight"].T).view(T, nh, hd), t[p + "q_norm.weight"], c["rms_norm_eps"])
        k = ref.rms_norm((x @ t[p + "k_proj.weight"].T).view(T, kv, hd), t[p + "k_norm.weight"], c["rms_norm_eps"])
        v = (x @ t[p + "v_proj.weight"].T).view(T, kv, hd)
        q, k = self.rope(q, pos), self.rope(k, pos)
        k, v = k.repeat(1, nh // kv, 1), v.repeat(1, nh // kv, 1)
        s = (torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5).masked_fill(~mask[None], float("-inf"))
        return torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(T, nh * hd) @ t[p + "o_proj.weight"].T

    def rope(self, x, pos):
        if self.what != "rope_interleaved":
            return super().rope(x, pos)
        return rope_interleaved(x, pos, float(self.cfg["rope_theta"]), self.cfg["rotary_dim"])


VARIANTS = ["full_rotary", "rope_interleaved", "renormalize", "sigmoid_scores", "softmax_after_topk",
            "no_shared_expert", "no_qk_norm", "gqa_tiled", "causal_attention"]


# ------------------------------------------------------------------------------------------------------------
# The fixture


class Fixture:
    """What one fixture accumulates: the model, tokenizer, prompt, trace arrays, recorded forwards, gaps."""

    def __init__(self, spec, model, tok, prompt, prompt_text):
        self.spec, self.model, self.tok, self.prompt, self.prompt_text = spec, model, tok, prompt, prompt_text
        self.mask_id = spec["special"][spec["mask_token"]]
        self.eos = spec["config"]["eos_token_id"]
        self.K = spec["config"]["num_experts_per_tok"]
        self.trace = {"prompt_ids": i64(prompt)}
        self.forwards = []
        self.gaps = {name: math.inf for name, _ in GAP_LIMITS}
        self.problems = []
        self.routed_outs = []

    def lower_gap(self, name, value):
        self.gaps[name] = min(self.gaps[name], value)

    def record_forward(self, name, ids, mask_kind, router=True):
        T = len(ids)
        mask = {"full": ref.full_mask(T), "causal": ref.causal_mask(T)}[mask_kind]
        out = self.model.forward(torch.tensor(ids), mask)
        self.trace[name + "_ids"] = i64(ids)
        self.trace[name + "_logits"] = f32(out["logits"])
        entry = {"ids": name + "_ids", "logits": name + "_logits", "mask": mask_kind}
        if router:
            layers = sorted(out["router"])
            self.trace[name + "_router_logits"] = np.stack([f32(out["router"][l]["logits"]) for l in layers])
            self.trace[name + "_router_ids"] = np.stack([i64(out["router"][l]["ids"]) for l in layers])
            self.trace[name + "_router_weights"] = np.stack([f32(out["router"][l]["weights"]) for l in layers])
            entry.update(router_logits=name + "_router_logits", router_ids=name + "_router_ids",
                         router_weights=name + "_router_weights", moe_layers=layers)
            self.lower_gap("router", router_gap(out, self.K))
            self.routed_outs.append(out)
        self.forwards.append(entry)
        return out


def analyse_run(fx, run, res, calls):
    """Per forward of a low-confidence run: the block, the candidates (masked positions of the block), which were
    committed (the next forward's input, or the final canvas, differs there), the greedy margin (top-1 minus top-2
    logit, mask column excluded, at the committed positions) and the top-k boundary (the n-th minus (n+1)-th
    confidence among the candidates when the schedule commits n of more); every forward's router gap."""
    s = run["settings"]
    P, B = len(fx.prompt), s["block_length"]
    final = np.array(fx.prompt + res["output_ids"] + [fx.eos] * (P + s["gen_length"] - P - len(res["output_ids"])))
    steps = []
    for j, (ids, out) in enumerate(calls):
        fx.lower_gap("router", router_gap(out, fx.K))
        fx.routed_outs.append(out)
        x = ids.numpy()
        after = calls[j + 1][0].numpy() if j + 1 < len(calls) else final
        blk = next(b for b in range(s["gen_length"] // B) if (x[P + b * B: P + (b + 1) * B] == fx.mask_id).any())
        bs = P + blk * B
        cand = bs + np.nonzero(x[bs:bs + B] == fx.mask_id)[0]
        committed = cand[after[cand] != fx.mask_id]
        lg = out["logits"].numpy().astype(np.float64)
        z = lg.copy()
        z[:, fx.mask_id] = -np.inf
        top2 = np.sort(z[committed], axis=-1)[:, -2:]
        margins = top2[:, 1] - top2[:, 0]
        fx.lower_gap("greedy_margin", float(margins.min()))
        x0 = z[cand].argmax(-1)
        p = np.exp(lg[cand] - lg[cand].max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        conf = p[np.arange(len(cand)), x0]
        n = len(committed)
        if len(cand) > n:
            cs = np.sort(conf)[::-1]
            fx.lower_gap("topk_rank", float(cs[n - 1] - cs[n]))
        if not np.array_equal(after[committed], x0[np.isin(cand, committed)]):
            fx.problems.append("%s: step %d committed something other than the argmax" % (run["name"], j))
        if (x0 == fx.mask_id).any():
            fx.problems.append("%s: mask token decoded" % run["name"])
        steps.append({"block": blk, "candidates": cand.tolist(), "committed": committed.tolist(),
                      "tokens": after[committed].tolist(), "min_margin": float("%.4g" % margins.min())})
    return steps


def record_run(fx, run):
    res, calls = ref.low_confidence_run(fx.model, fx.prompt, fx.mask_id, fx.eos, **run["settings"])
    steps = analyse_run(fx, run, res, calls)
    k = run["name"]
    fx.trace[k + "_forward_ids"] = np.stack([i64(ids) for ids, _ in calls])
    fx.trace[k + "_output_ids"] = i64(res["output_ids"])
    return {"name": k, "sampler": "tests/reference/samplers.py low_confidence (dlm's `low-confidence` program)",
            "settings": run["settings"], "forwards": res["forwards"], "output_ids": res["output_ids"],
            "distinct_tokens": len(set(res["output_ids"])), "eos_produced": fx.eos in res["output_ids"],
            "text": fx.tok.decode(res["output_ids"]), "steps": steps}


def variant_sensitivity(fx, what, run):
    v = Variant(fx.model, what)
    d_logits, changed = 0.0, 0
    for f in fx.forwards:
        if not f.get("router_ids"):
            continue
        ids = torch.from_numpy(fx.trace[f["ids"]])
        out = v.forward(ids, ref.full_mask(len(ids)))
        d_logits = max(d_logits, float(np.abs(out["logits"].numpy() - fx.trace[f["logits"]]).max()))
        got = np.stack([out["router"][l]["ids"].sort(-1).values.numpy() for l in sorted(out["router"])])
        changed += int((got != np.sort(fx.trace[f["router_ids"]], -1)).any(-1).sum())
    res, _ = ref.low_confidence_run(v, fx.prompt, fx.mask_id, fx.eos, **run["settings"])
    return {"logits_max_abs_diff": float("%.3g" % d_logits), "tokens_with_other_experts": changed,
            "greedy_output_differs": res["output_ids"] != [int(i) for i in fx.trace[run["name"] + "_output_ids"]]}


# --- the Hugging Face remote code, optional ---

HF_SCRIPT = r'''
import json, sys, numpy as np, torch
from safetensors.torch import load_file
from lladamoe_hf.configuration_lladamoe import LLaDAMoEConfig
from lladamoe_hf.modeling_lladamoe import LLaDAMoEModelLM
import transformers
d, impl = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
cfg = json.load(open(d + "/config.json"))
cfg = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "auto_map", "torch_dtype")}
config = LLaDAMoEConfig(**cfg, attn_implementation=impl)
model = LLaDAMoEModelLM(config).float().eval()
missing, unexpected = model.load_state_dict(load_file(d + "/model.safetensors"), strict=True)
z = np.load(d + "/trace.npz")
out = {"transformers": transformers.__version__, "attn_implementation": model.config._attn_implementation,
       "state_dict_keys": len(model.state_dict())}
for name in json.loads(sys.argv[3]):
    with torch.no_grad():
        lg = model(input_ids=torch.from_numpy(z[name + "_ids"])[None]).logits[0].numpy()
    out[name] = float(np.abs(lg.astype(np.float64) - z[name + "_logits"]).max())
print(json.dumps(out))
'''


def hf_crosscheck(d, modeling_dir, site_dir, names):
    """Runs the remote modeling code (configuration_lladamoe.py / modeling_lladamoe.py in modeling_dir, imported as
    the package `lladamoe_hf`, transformers 4.46.x from site_dir) on the fixture's checkpoint (load_state_dict
    strict: the tensor names must be the model's own), eager and SDPA attention, no attention mask; returns the
    max |logits difference| per recorded full-mask forward."""
    import shutil
    import tempfile
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "lladamoe_hf")
        os.makedirs(pkg)
        for f in ("configuration_lladamoe.py", "modeling_lladamoe.py"):
            shutil.copy(os.path.join(modeling_dir, f), pkg)
        open(os.path.join(pkg, "__init__.py"), "w").close()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([site_dir, tmp]), OMP_NUM_THREADS="1")
        for impl in ("eager", "sdpa"):
            r = subprocess.run([sys.executable, "-c", HF_SCRIPT, d, impl, json.dumps(names)], env=env,
                               capture_output=True, text=True)
            if r.returncode:
                raise SystemExit("hf cross-check failed:\n" + r.stderr[-3000:])
            results[impl] = json.loads(r.stdout.strip().splitlines()[-1])
    return results


# --- assembling, writing ---


def assemble_meta(spec, fx, runs, sens):
    c, m = fx.model.cfg, fx.model
    experts_used = {str(l): sorted({int(e) for o in fx.routed_outs for e in o["router"][l]["ids"].flatten()})
                    for l, s_ in enumerate(m.sparse) if s_}
    return {
        "made_by": MADE_BY,
        "versions": fixture_tools.versions(),
        "architecture": "LLaDAMoEModelLM",
        "seed": spec["seed"], "gains": spec["gains"],
        "config": spec["config"],
        "derived": {"head_dim": c["head_dim"], "rotary_dim": c["rotary_dim"],
                    "moe_layers": [l for l, s_ in enumerate(m.sparse) if s_],
                    "dense_layers": [l for l, s_ in enumerate(m.sparse) if not s_],
                    "attention": "bidirectional (full mask) in every recorded forward but prompt_causal"},
        "special_tokens": spec["special"], "mask_token": spec["mask_token"], "mask_token_id": fx.mask_id,
        "eos_token_id": fx.eos, "prompt_text": fx.prompt_text, "prompt_ids": fx.prompt,
        "forwards": fx.forwards,
        "runs": runs,
        "min_gaps": {k: float("%.4g" % v) if v != math.inf else None for k, v in fx.gaps.items()},
        "gap_limits": dict(GAP_LIMITS),
        "experts_used": experts_used,
        "sensitivity": sens,
    }


# The arrays the C++ tests may read, as plain .npy in replay/ (no Python or zip needed). name -> dtype written.
REPLAY = {"prompt_ids": "<i4", "window_ids": "<i4", "window_logits": "<f4", "greedy_output_ids": "<i4",
          "greedy_forward_ids": "<i4"}


def replay_and_settings(trace, runs):
    """REPLAY's arrays and greedy_settings (the greedy run's gen_length, block_length, steps)."""
    s = runs[0]["settings"]
    return dict(replay_arrays(trace, REPLAY),
                greedy_settings=np.array([s["gen_length"], s["block_length"], s["steps"]], dtype="<i4"))


def make_fixture(spec, d, hf=None):
    torch.manual_seed(0)
    tok = write_checkpoint(d, spec, make_tensors(spec))
    m = ref.LLaDAMoEReference.load(d)
    prompt, text = draw_prompt(spec, tok, m.cfg["vocab_size"])
    fx = Fixture(spec, m, tok, prompt, text)
    run_spec = spec["runs"][0]
    window = prompt + [fx.mask_id] * run_spec["settings"]["gen_length"]   # the run's first forward
    fx.record_forward("window", window, "full")
    fx.record_forward("prompt_causal", prompt, "causal", router=False)
    runs = [record_run(fx, run) for run in spec["runs"]]
    final = prompt + [int(i) for i in fx.trace["greedy_output_ids"]]
    fx.record_forward("final", final, "full")
    if not np.array_equal(fx.trace["window_ids"], fx.trace["greedy_forward_ids"][0]):
        raise SystemExit("the run's first forward is not the window")
    sens = {what: variant_sensitivity(fx, what, run_spec) for what in VARIANTS}
    refuse_if_fragile(fx.problems, fx.gaps, GAP_LIMITS, runs)
    meta = assemble_meta(spec, fx, runs, sens)
    write_fixture_files(d, spec["name"], fx.trace, meta, replay_and_settings(fx.trace, runs), ref.verify_fixture)
    if hf:   # after the fixture is written: the remote code runs on its files
        meta["hf_crosscheck"] = {"source": "github:ZHZisZZ/dllm ca176752 dllm/pipelines/llada/models/"
                                           "{configuration,modeling}_lladamoe.py, transformers 4.46.2",
                                 "logits_max_abs_diff": hf_crosscheck(d, hf[0], hf[1], ["window", "final"])}
        write_json(os.path.join(d, "trace.json"), meta)
    return meta


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", default=FIXTURES)
    ap.add_argument("--hf-modeling", help="folder with configuration_lladamoe.py and modeling_lladamoe.py")
    ap.add_argument("--hf-site", help="folder with transformers 4.46.x (pip install --target)")
    args = ap.parse_args()
    hf = (args.hf_modeling, args.hf_site) if args.hf_modeling else None
    torch.set_num_threads(1)
    fixture_tools.setup("2.15", "5.23.")
    if args.check:
        return fixture_tools.check_one_fixture(
            FIXTURES, SPEC["name"], lambda d: make_fixture(SPEC, d, hf),
            json_keys=("config", "prompt_ids", "runs", "forwards", "mask_token_id", "min_gaps"))
    os.makedirs(args.out, exist_ok=True)
    meta = make_fixture(SPEC, os.path.join(args.out, SPEC["name"]), hf)
    print(json.dumps({"runs": [{k: r[k] for k in ("name", "output_ids", "forwards", "distinct_tokens")}
                               for r in meta["runs"]],
                      "min_gaps": meta["min_gaps"], "sensitivity": meta["sensitivity"],
                      "reference_check": meta["reference_check"], "hf_crosscheck": meta.get("hf_crosscheck")},
                     indent=1))
    fixture_tools.write_manifest(args.out, MADE_BY)
    return 0


if __name__ == "__main__":
    sys.exit(main())
