#!/usr/bin/env python3
"""DFlash speculative-decoding oracle fixtures: a tiny random Qwen3 target (transformers' Qwen3ForCausalLM) and tiny
DFlash drafters made by the authors' own package (PyPI `dflash==0.1.0`, class `dflash.model.DFlashDraftModel`), and
traces of `dflash.model.dflash_generate` (greedy, CPU) instrumented round by round.

Run with the reference venv (torch 2.15.0, transformers 5.23.x, dflash 0.1.0 installed with --no-deps; see README.md):

    OMP_NUM_THREADS=1 /work/refvenv/bin/python tests/reference/dflash/make_fixtures.py            # (re)write fixtures/
    OMP_NUM_THREADS=1 /work/refvenv/bin/python tests/reference/dflash/make_fixtures.py --check    # regenerate to a temp dir, compare

It
  1. builds the target (seeded random weights, bf16 storage), saves it with a word-level tokenizer whose specials are
     <pad> 0, <unk> 3, <eos> (chosen by a dry run), <mask> 255 (the drafters' mask_token_id);
  2. builds the drafters with DFlashDraftModel(config):
       dflash_explicit: dflash_config.target_layer_ids = [0, 3, 6] (6 = the target's last layer), block_size 4 in
                        dflash_config, 2 full-attention layers, weights *trained* for a few hundred Adam steps on the
                        target's own greedy continuations (so that drafts are sometimes accepted);
       dflash_default:  no target_layer_ids (the package's build_target_layer_ids(7, 3) = [1, 2, 4], which needs
                        Python's round-half-to-even), block_size 4 as a top-level config field only, 3 layers of which
                        the first two are sliding_attention (window 6, hence causal) and the last full_attention,
                        random weights;
  3. reloads everything from disk (float32 compute) and runs dflash_generate(..., temperature=0, return_stats=False)
     with forward hooks on the target and the drafter (and a wrapper around dflash.model._crop_to and
     DFlashDraftModel.compute_logits): per round the anchor/start, block ids and positions, draft logits and ids,
     verify logits, acceptance length, bonus, produced tokens, context features (raw and after fc+hidden_norm),
     cache lengths; plus transformers' plain greedy generate() (must be equal) and dflash_generate(block_size=1);
  4. re-checks everything with the independent plain-PyTorch dflash_reference.py (no transformers, no dflash) and
     refuses fixtures that it does not reproduce, that are degenerate or decided by rounding noise.

Files: fixtures/target/ (config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json), fixtures/<drafter>/ (config.json, model.safetensors, trace.npz, trace.json),
fixtures/MANIFEST.json.
"""

import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

import transformers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

import dflash
import dflash.model as dfm
from dflash.model import DFlashDraftModel, build_target_layer_ids, dflash_generate, extract_context_feature

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import dflash_reference  # noqa: E402
import fixture_tools  # noqa: E402
from fixture_tools import (check_report, chmod_files, f32, i64, parse_args, randomize_llama,  # noqa: E402
                           reference_check, save_trace, setup, sha256, word_level_tokenizer, write_json)

FIXTURES = os.path.join(HERE, "fixtures")
MADE_BY = "tests/reference/dflash/make_fixtures.py"
TORCH_VERSION = "2.15.0"
TRANSFORMERS_SERIES = "5.23."
DFLASH_VERSION = "0.1.0"

PAD, UNK, MASK = 0, 3, 255
V = 256
STORE_DTYPE = torch.bfloat16          # checkpoints are stored in bf16 (like the published drafters); compute is fp32

TARGET = {
    "name": "target",
    "seed": 2026,
    "config": dict(vocab_size=V, hidden_size=64, intermediate_size=48, num_hidden_layers=7, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, rope_theta=1000000.0, rms_norm_eps=1e-6,
                   tie_word_embeddings=True, max_position_embeddings=512, pad_token_id=PAD, bos_token_id=None),
    "logit_gain": 0.5,
    "branch_gain": 5.0,
    "qk_gain": 2.0,
}

DRAFTERS = [
    {
        "name": "dflash_explicit",
        "seed": 77,
        "prompt_seed": 5,
        "prompt_len": 8,
        "max_new_tokens": 24,
        "config": dict(num_hidden_layers=2, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, rope_theta=1000000.0, rms_norm_eps=1e-6),
        "top_level": {"num_target_layers": 7},
        "dflash_config": {"target_layer_ids": [0, 3, 6], "block_size": 4, "mask_token_id": MASK},
        "expect_layer_ids": [0, 3, 6],
        "train": dict(steps=600, lr=3e-3, n_seq=96, new_tokens=40),
        "eos": "dry_run",
    },
    {
        "name": "dflash_default",
        "seed": 91,
        "prompt_seed": 11,
        "prompt_len": 8,
        "max_new_tokens": 24,
        "config": dict(num_hidden_layers=3, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=True,
                       sliding_window=6, max_window_layers=0,
                       layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
        "top_level": {"num_target_layers": 7, "block_size": 4},
        "dflash_config": {"mask_token_id": MASK},
        "expect_layer_ids": [1, 2, 4],
        "train": None,
        "eos": "absent",   # the target's EOS must not occur: the run ends on max_new_tokens (truncated last blocks)
    },
]

GREEDY_MIN_MARGIN = 1e-2   # target: top-1 minus top-2 at every verify position that decides a token
DRAFT_MIN_MARGIN = 1e-3    # drafter: top-1 minus top-2 at every draft position
MIN_DISTINCT = 6
DETAIL_ROUNDS = 3          # draft logits / hidden kept for the first rounds and the last one


# ------------------------------------------------------------------------------------------------------------
# Helpers


def margin_of(logits):
    t = torch.topk(logits.float(), 2, dim=-1).values
    return t[..., 0] - t[..., 1]


# ------------------------------------------------------------------------------------------------------------
# Building


def make_tokenizer(eos):
    special = {"<pad>": PAD, "<unk>": UNK, "<eos>": eos, "<mask>": MASK}
    return word_level_tokenizer(V, special, mask_token="<mask>"), special


def prompt_ids(seed, n):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V - 1, (1, n), generator=g)


def load_target(path):
    return Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()


def load_draft(path):
    return DFlashDraftModel.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()


def save_target(model, path, eos):
    model.config.eos_token_id = eos
    model.generation_config = GenerationConfig(do_sample=False, eos_token_id=eos, pad_token_id=PAD,
                                               bos_token_id=None)
    model.to(STORE_DTYPE).save_pretrained(path)
    model.float()
    tok, special = make_tokenizer(eos)
    tok.save_pretrained(path)
    return special


def draft_config(spec, target_cfg):
    cfg = Qwen3Config(vocab_size=V, hidden_size=target_cfg.hidden_size, max_position_embeddings=512,
                      tie_word_embeddings=False, **spec["config"])
    for k, v in spec["top_level"].items():
        setattr(cfg, k, v)
    cfg.dflash_config = dict(spec["dflash_config"])
    cfg.architectures = ["DFlashDraftModel"]
    return cfg


# ------------------------------------------------------------------------------------------------------------
# Training the explicit-ids drafter on the target's own greedy continuations (so that drafts get accepted)


def train_drafter(draft, target, spec):
    tr = spec["train"]
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    B = draft.block_size
    P = spec["prompt_len"]
    # the fixture's own prompt is one of the training prompts (the drafter partly memorises the target's run)
    prompts = torch.cat([prompt_ids(spec["prompt_seed"], P),
                         torch.randint(4, V - 1, (tr["n_seq"] - 1, P), generator=g)])
    with torch.no_grad():
        seqs = target.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                               max_new_tokens=tr["new_tokens"], min_new_tokens=tr["new_tokens"], eos_token_id=None,
                               pad_token_id=PAD)
        hs = target(seqs, output_hidden_states=True, use_cache=False).hidden_states
        feats = extract_context_feature(hs, draft.target_layer_ids)          # [N, T, n_ids*H]
        embed = target.get_input_embeddings().weight
    head = dfm._output_head(target)
    T = seqs.shape[1]
    opt = torch.optim.Adam(draft.parameters(), lr=tr["lr"])
    draft.train()
    losses = []
    for step in range(tr["steps"]):
        a = int(torch.randint(P, T - B + 1, (1,), generator=g))
        block = torch.full((seqs.shape[0], B), MASK, dtype=torch.long)
        block[:, 0] = seqs[:, a]
        noise = F.embedding(block, embed)
        pos = torch.arange(a + B).unsqueeze(0)
        h = draft(target_hidden=feats[:, :a], noise_embedding=noise, position_ids=pos, past_key_values=None,
                  use_cache=False)[:, 1:]
        logits = draft.compute_logits(h, head)
        loss = F.cross_entropy(logits.reshape(-1, V), seqs[:, a + 1:a + B].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    draft.eval()
    return {"steps": tr["steps"], "optimizer": "Adam", "lr": tr["lr"], "sequences": tr["n_seq"],
            "prompt_len": P, "continuation_tokens": tr["new_tokens"],
            "loss_first": losses[0], "loss_last_50_mean": float(np.mean(losses[-50:]))}


# ------------------------------------------------------------------------------------------------------------
# Instrumented dflash_generate


class Recorder:
    """Forward hooks on the target / drafter (and wrappers around _crop_to, compute_logits); the package is not edited."""

    def __init__(self, target, draft):
        self.target, self.draft = target, draft
        self.tcalls, self.dcalls, self.crops, self.ctx_normed, self.dlogits = [], [], [], [], []
        self.draft_cache = None

    def __enter__(self):
        self.handles = [
            self.target.register_forward_hook(self.on_target, with_kwargs=True),
            self.draft.register_forward_hook(self.on_draft, with_kwargs=True),
            self.draft.hidden_norm.register_forward_hook(lambda m, a, o: self.ctx_normed.append(o[0].clone())),
        ]
        self.orig_crop = dfm._crop_to
        rec = self

        def crop(cache, length):
            before = cache.get_seq_length()
            rec.orig_crop(cache, length)
            rec.crops.append({"cache": "draft" if cache is rec.draft_cache else "target", "before": before,
                              "to": length, "after": cache.get_seq_length()})
        dfm._crop_to = crop
        orig_logits = self.draft.compute_logits

        def compute_logits(hidden, head):
            out = orig_logits(hidden, head)
            rec.dlogits.append((hidden[0].clone(), out[0].clone()))
            return out
        self.draft.compute_logits = compute_logits
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        dfm._crop_to = self.orig_crop
        del self.draft.compute_logits
        return False

    def on_target(self, module, args, kwargs, out):
        ids = args[0] if args else kwargs["input_ids"]
        self.tcalls.append({"ids": ids[0].clone(), "pos": kwargs["position_ids"][0].clone(),
                            "logits": out.logits[0].clone(),
                            "hs": None if out.hidden_states is None else [h[0].clone() for h in out.hidden_states],
                            "cache_after": kwargs["past_key_values"].get_seq_length()})

    def on_draft(self, module, args, kwargs, out):
        self.draft_cache = kwargs["past_key_values"]
        self.dcalls.append({"target_hidden": kwargs["target_hidden"][0].clone(),
                            "noise": kwargs["noise_embedding"][0].clone(),
                            "pos": kwargs["position_ids"][0].clone(), "out": out[0].clone(),
                            "cache_after": kwargs["past_key_values"].get_seq_length()})


def run_dflash(draft, target, prompt, max_new, stop):
    with Recorder(target, draft) as rec:
        out = dflash_generate(draft, target, prompt, max_new, stop, temperature=0.0, return_stats=False)
    return out[0], rec


def analyse(rec, out_ids, prompt, draft, stop):
    """Turns the hook records into per-round facts (and checks them against the package's own bookkeeping)."""
    P = prompt.shape[1]
    ids = draft.target_layer_ids
    pre = rec.tcalls[0]
    assert torch.equal(pre["ids"], prompt[0]) and torch.equal(pre["pos"], torch.arange(P))
    assert pre["logits"].shape[0] == 1, "prefill keeps only the last position's logits (logits_to_keep=1)"
    crops = list(rec.crops)
    c0 = crops.pop(0)
    assert c0["cache"] == "target" and c0["before"] == P and c0["after"] == P
    rounds = []
    start = P
    anchor = int(pre["logits"][-1].argmax())
    assert int(out_ids[P]) == anchor
    ctx_feat = extract_context_feature([h[None] for h in pre["hs"]], ids)[0]
    for r, (dc, tc) in enumerate(zip(rec.dcalls, rec.tcalls[1:])):
        vs = tc["ids"].shape[0]
        assert torch.equal(tc["pos"], torch.arange(start, start + vs)), (r, tc["pos"], start)
        assert int(tc["ids"][0]) == anchor
        n_ctx = dc["target_hidden"].shape[0]
        assert torch.equal(dc["target_hidden"], ctx_feat), "context = features of the previous round's tokens"
        assert torch.equal(dc["pos"], torch.arange(start - n_ctx, start + vs))
        cd = crops.pop(0)
        assert cd["cache"] == "draft" and cd["to"] == start and cd["before"] == start + vs and cd["after"] == start
        dh, dl = rec.dlogits[r]
        assert dl.shape[0] == vs - 1
        draft_ids = dl.argmax(-1)
        assert torch.equal(tc["ids"][1:], draft_ids)
        post = tc["logits"].argmax(-1)
        acc = int((draft_ids == post[:-1]).to(torch.int64).cumprod(0).sum())
        bonus = int(post[acc])
        produced = min(acc + 1, P + rec.max_new - start - 1)
        committed = tc["ids"][1:acc + 1].tolist() + [bonus]
        stopped = False
        if stop is not None:
            hit = [j for j, t in enumerate(committed[:produced]) if t in stop]
            if hit:
                produced, stopped = hit[0] + 1, True
        ct = crops.pop(0)
        assert ct["cache"] == "target" and ct["before"] == start + vs and ct["after"] == start + produced
        assert out_ids[start + 1:start + produced + 1].tolist() == committed[:produced]
        rounds.append({
            "round": r, "start": start, "anchor": anchor, "verify_size": vs,
            "block_ids": tc["ids"].tolist(), "block_positions": [start, start + vs - 1],
            "ctx_len": n_ctx, "ctx_positions": [start - n_ctx, start - 1],
            "draft_ids": draft_ids.tolist(), "posterior": post.tolist(), "acceptance_length": acc,
            "bonus": bonus, "produced": produced, "committed": committed[:produced], "stopped_on_eos": stopped,
            "draft_cache_len_after_forward": dc["cache_after"], "draft_cache_cropped_to": start,
            "target_cache_len_after_verify": tc["cache_after"], "target_cache_cropped_to": start + produced,
            "verify_margin_min": float(margin_of(tc["logits"][:acc + 1]).min()),
            "draft_margin_min": float(margin_of(dl).min()),
        })
        ctx_feat = extract_context_feature([h[None] for h in tc["hs"]], ids)[0][:produced]
        start += produced
        anchor = bonus if produced == acc + 1 else None
        if stopped:
            break
        if anchor is None:   # clipped by max_new_tokens: the loop must end here
            assert start + 1 >= P + rec.max_new
    assert not crops and len(rounds) == len(rec.dcalls) == len(rec.tcalls) - 1
    assert len(out_ids) == min(start + 1, P + rec.max_new)
    return rounds


# ------------------------------------------------------------------------------------------------------------
# Making the fixtures


def build_target(path):
    cfg = Qwen3Config(**dict(TARGET["config"], eos_token_id=None))
    model = Qwen3ForCausalLM(cfg)
    randomize_llama(model, TARGET["seed"], TARGET["branch_gain"], TARGET["qk_gain"], TARGET["logit_gain"],
                    final_norm="model.norm")
    with torch.no_grad():  # an untrained-looking <mask> row (tied head): the target never predicts the mask token
        model.model.embed_tokens.weight[MASK].mul_(0.05)
    save_target(model, path, None)
    return load_target(path)


def build_draft(spec, target, path):
    cfg = draft_config(spec, target.config)
    torch.manual_seed(spec["seed"])
    draft = DFlashDraftModel(cfg)
    assert draft.target_layer_ids == spec["expect_layer_ids"], draft.target_layer_ids
    randomize_llama(draft, spec["seed"], branch_gain=1.0, final_norm="norm")
    training = None
    if spec["train"]:
        training = train_drafter(draft, target, spec)
    draft.to(STORE_DTYPE).save_pretrained(path)
    return training


def choose_eos(draft, target, prompt, max_new):
    """EOS = a token accepted from a draft (not the block's last accepted one if possible), new so far."""
    out, rec = run_dflash(draft, target, prompt, max_new, None)
    rec.max_new = max_new
    rounds = analyse(rec, out, prompt, draft, None)
    P = prompt.shape[1]
    seq = out.tolist()
    best = None
    for rd in rounds:
        if rd["acceptance_length"] < 1 or rd["start"] - P < 8:
            continue
        for j in range(rd["acceptance_length"]):
            t = rd["draft_ids"][j]
            pos = rd["start"] + 1 + j
            if t in (PAD, UNK, MASK) or t in seq[:pos]:
                continue
            score = (j < rd["acceptance_length"] - 1, rd["start"])
            if best is None or score > best[0]:
                best = (score, t)
            break
    if best is None:
        raise SystemExit("no EOS candidate among accepted drafts: %s" % [r["acceptance_length"] for r in rounds])
    return best[1]


@torch.no_grad()
def trace_fixture(spec, target, target_dir, draft_dir, eos, special):
    draft = load_draft(draft_dir)
    P, max_new = spec["prompt_len"], spec["max_new_tokens"]
    prompt = prompt_ids(spec["prompt_seed"], P)
    tok = PreTrainedTokenizerFast.from_pretrained(target_dir)
    prompt_text = tok.decode(prompt[0])
    assert tok(prompt_text)["input_ids"] == prompt[0].tolist()
    stop = [eos]  # as benchmark.stop_token_ids(target, tokenizer)
    out, rec = run_dflash(draft, target, prompt, max_new, stop)
    rec.max_new = max_new
    rounds = analyse(rec, out, prompt, draft, stop)
    new = out[P:]

    # plain greedy generate of the target, and the benchmark's block_size=1 baseline
    g = target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new,
                        return_dict_in_generate=True, output_logits=True)
    greedy_new = g.sequences[0, P:]
    greedy_margin = float(margin_of(torch.stack([x[0] for x in g.logits])).min())
    base = dflash_generate(draft, target, prompt, max_new, stop, temperature=0.0, block_size=1)[0, P:]

    errors = []
    if not torch.equal(new, greedy_new):
        errors.append("dflash output %s != target greedy %s" % (new.tolist(), greedy_new.tolist()))
    if not torch.equal(base, greedy_new):
        errors.append("block_size=1 output differs from greedy")
    vm = min(r["verify_margin_min"] for r in rounds)
    dm = min(r["draft_margin_min"] for r in rounds)
    if min(vm, greedy_margin) < GREEDY_MIN_MARGIN:
        errors.append("target margin %.3g / %.3g too small" % (vm, greedy_margin))
    if dm < DRAFT_MIN_MARGIN:
        errors.append("draft margin %.3g too small" % dm)
    if len(set(new.tolist())) < MIN_DISTINCT:
        errors.append("degenerate output %s" % new.tolist())
    if MASK in new.tolist():
        errors.append("the target produced the mask token")
    stopped = bool(rounds and rounds[-1]["stopped_on_eos"])
    if spec["eos"] == "dry_run" and not stopped:
        errors.append("run should stop at EOS")
    if spec["eos"] == "absent" and (stopped or len(new) != max_new):
        errors.append("run should end on max_new_tokens")
    if spec["train"] and max(r["acceptance_length"] for r in rounds) < 2:
        errors.append("trained drafter: no round accepted 2+ drafts")
    if errors:
        raise SystemExit("%s: %s" % (spec["name"], "; ".join(errors)))

    # arrays
    pre = rec.tcalls[0]
    ctx_raw = torch.cat([d["target_hidden"] for d in rec.dcalls])
    ctx_norm = torch.cat(rec.ctx_normed)
    ctx_off = np.cumsum([0] + [d["target_hidden"].shape[0] for d in rec.dcalls]).astype(np.int64)
    B = draft.block_size
    R = len(rounds)
    block = np.full((R, B), -1, np.int64)
    vlog = np.full((R, B, V), np.nan, np.float32)
    for r, tc in enumerate(rec.tcalls[1:]):
        vs = tc["ids"].shape[0]
        block[r, :vs] = i64(tc["ids"])
        vlog[r, :vs] = f32(tc["logits"])
    detail = sorted(set(list(range(min(DETAIL_ROUNDS, R))) + [R - 1]))
    dlog = np.full((len(detail), B - 1, V), np.nan, np.float32)
    dhid = np.full((len(detail), B - 1, draft.config.hidden_size), np.nan, np.float32)
    for k, r in enumerate(detail):
        h, l = rec.dlogits[r]
        dlog[k, :l.shape[0]] = f32(l)
        dhid[k, :h.shape[0]] = f32(h)
    trace = {
        "prompt_ids": i64(prompt[0]),
        "output_ids": i64(out),
        "new_ids": i64(new),
        "greedy_new_ids": i64(greedy_new),
        "prefill_last_logits": f32(pre["logits"][-1]),
        "prefill_hidden_states": np.stack([f32(h) for h in pre["hs"]]),
        "round_start": np.array([r["start"] for r in rounds], np.int64),
        "round_verify_size": np.array([r["verify_size"] for r in rounds], np.int64),
        "round_block_ids": block,
        "round_acceptance_length": np.array([r["acceptance_length"] for r in rounds], np.int64),
        "round_bonus": np.array([r["bonus"] for r in rounds], np.int64),
        "round_produced": np.array([r["produced"] for r in rounds], np.int64),
        "round_verify_logits": vlog,
        "ctx_features": f32(ctx_raw),
        "ctx_features_normed": f32(ctx_norm),
        "ctx_offsets": ctx_off,
        "detail_rounds": np.array(detail, np.int64),
        "detail_draft_logits": dlog,
        "detail_draft_hidden": dhid,
    }
    # which hidden state index l means (checked here, documented in README)
    hs = pre["hs"]
    Lt = target.config.num_hidden_layers
    emb_ok = torch.equal(hs[0], target.get_input_embeddings().weight[prompt[0]])
    layer_out = {}

    def grab(i):
        return lambda m, a, o: layer_out.__setitem__(i, (o[0] if isinstance(o, tuple) else o)[0].clone())
    hooks = [layer.register_forward_hook(grab(i)) for i, layer in enumerate(target.model.layers)]
    target(prompt, use_cache=False)
    for h in hooks:
        h.remove()
    hs_semantics = {
        "hidden_states_0_is_embeddings": emb_ok,
        "hidden_states_l_plus_1_equals_layer_l_output": {
            str(l): bool(torch.equal(hs[l + 1], layer_out[l])) for l in range(Lt)},
        "hidden_states_L_equals_final_norm_of_last_layer": bool(
            torch.allclose(hs[Lt], target.model.norm(layer_out[Lt - 1]), atol=1e-6, rtol=0)),
    }
    cfg = draft.config
    meta = {
        "fixture": spec["name"],
        "made_by": MADE_BY,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "dflash": DFLASH_VERSION, "numpy": np.__version__},
        "target_dir": "../target",
        "drafter": {
            "class": "dflash.model.DFlashDraftModel", "num_hidden_layers": cfg.num_hidden_layers,
            "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
            "head_dim": cfg.head_dim, "rope_parameters": cfg.rope_parameters, "rms_norm_eps": cfg.rms_norm_eps,
            "layer_types": cfg.layer_types, "sliding_window": cfg.sliding_window,
            "attention_is_causal_per_layer": [l.self_attn.is_causal for l in draft.layers],
            "sliding_window_per_layer": [l.self_attn.sliding_window for l in draft.layers],
            "num_target_layers": cfg.num_target_layers, "dflash_config": cfg.dflash_config,
            "target_layer_ids": list(draft.target_layer_ids),
            "target_layer_ids_source": "dflash_config" if "target_layer_ids" in cfg.dflash_config
            else "build_target_layer_ids(num_target_layers=%d, num_draft_layers=%d)" % (
                cfg.num_target_layers, cfg.num_hidden_layers),
            "block_size": draft.block_size, "mask_token_id": draft.mask_token_id,
            "storage_dtype": "bfloat16", "compute_dtype": "float32",
        },
        "training": spec.get("_training"),
        "hf_impl": {"attn_implementation": "sdpa", "device": "cpu", "torch_threads": 1},
        "special_tokens": special,
        "eos_token_id": eos,
        "stop_token_ids": stop,
        "prompt_text": prompt_text,
        "prompt_ids": prompt[0].tolist(),
        "max_new_tokens": max_new,
        "temperature": 0.0,
        "call": "dflash_generate(draft, target, prompt_ids, max_new_tokens, stop_token_ids=[eos], temperature=0.0, "
                "return_stats=False)",
        "new_ids": new.tolist(),
        "num_new_tokens": len(new),
        "stop_reason": "eos" if stopped else "max_new_tokens",
        "target_greedy_new_ids": greedy_new.tolist(),
        "dflash_equals_target_greedy": bool(torch.equal(new, greedy_new)),
        "block_size_1_equals_target_greedy": bool(torch.equal(base, greedy_new)),
        "acceptance_lengths_benchmark": [r["produced"] for r in rounds],
        "mean_acceptance_length": float(np.mean([r["produced"] for r in rounds])),
        "accepted_drafts_per_round": [r["acceptance_length"] for r in rounds],
        "num_rounds": R,
        "min_verify_margin": vm, "min_draft_margin": dm, "min_target_greedy_margin": greedy_margin,
        "distinct_new_tokens": len(set(new.tolist())),
        "hidden_state_semantics": hs_semantics,
        "rounds": rounds,
        "text": tok.decode(new),
    }
    return trace, meta


def make_all(out_root, only=None):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tmp_root = out_root + ".tmp"
    shutil.rmtree(tmp_root, ignore_errors=True)
    os.makedirs(tmp_root)
    tdir = os.path.join(tmp_root, "target")
    target = build_target(tdir)
    # drafters; the EOS comes from a dry run of the explicit (trained) one
    eos = None
    for spec in DRAFTERS:
        spec["_training"] = build_draft(spec, target, os.path.join(tmp_root, spec["name"]))
        if spec["eos"] == "dry_run":
            eos = choose_eos(load_draft(os.path.join(tmp_root, spec["name"])), target,
                             prompt_ids(spec["prompt_seed"], spec["prompt_len"]), spec["max_new_tokens"])
    shutil.rmtree(tdir)
    special = save_target(target, tdir, eos)
    target = load_target(tdir)
    metas = {}
    for spec in DRAFTERS:
        d = os.path.join(tmp_root, spec["name"])
        trace, meta = trace_fixture(spec, target, tdir, d, eos, special)
        save_trace(d, trace, meta)
        meta["target_files"] = {f: sha256(os.path.join(tdir, f)) for f in sorted(os.listdir(tdir))}
        write_json(os.path.join(d, "trace.json"), meta)
        meta["reference_check"] = reference_check(spec["name"], dflash_reference.verify_fixture, d)
        meta["reference_tolerance"] = dflash_reference.TOL
        write_json(os.path.join(d, "trace.json"), meta)
        metas[spec["name"]] = meta
    chmod_files(tmp_root)
    return tmp_root, metas


# ------------------------------------------------------------------------------------------------------------
# Checking


def compare_dirs(want_dir, got_dir, errors):
    """The target checkpoint bit-identical; the trained drafter may round differently on another CPU: bf16-ulp
    noise in its weights is a warning. Arrays by fixture_tools.compare_arrays; trace.json's token/round facts."""
    fixture_tools.compare_dirs(want_dir, got_dir, errors, weights_tolerance=2e-2, json_keys=(
        "prompt_ids", "prompt_text", "eos_token_id", "special_tokens", "new_ids", "stop_reason",
        "acceptance_lengths_benchmark", "accepted_drafts_per_round", "drafter", "dflash_equals_target_greedy",
        "target_greedy_new_ids"))


def main():
    args = parse_args(__doc__)
    from importlib.metadata import version
    setup(TORCH_VERSION, TRANSFORMERS_SERIES, dflash=(DFLASH_VERSION, version("dflash")))
    if args.check:
        errors = []
        with tempfile.TemporaryDirectory() as tmp:
            got, _ = make_all(os.path.join(tmp, "fixtures"))
            for name in ["target"] + [s["name"] for s in DRAFTERS]:
                compare_dirs(os.path.join(FIXTURES, name), os.path.join(got, name), errors)
        return check_report(errors)
    got, metas = make_all(FIXTURES)
    shutil.rmtree(FIXTURES, ignore_errors=True)
    os.rename(got, FIXTURES)
    fixture_tools.write_manifest(FIXTURES, MADE_BY, {"dflash": DFLASH_VERSION})
    for name, m in metas.items():
        print("%s: ids %s, new %s (%s), acceptance %s (mean %.2f), == greedy %s, margins v %.3g d %.3g, ref %s"
              % (name, m["drafter"]["target_layer_ids"], m["new_ids"], m["stop_reason"],
                 m["acceptance_lengths_benchmark"], m["mean_acceptance_length"], m["dflash_equals_target_greedy"],
                 m["min_verify_margin"], m["min_draft_margin"], m["reference_check"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
