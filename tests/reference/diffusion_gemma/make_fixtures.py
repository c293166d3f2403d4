#!/usr/bin/env python3
"""DiffusionGemma oracle fixtures: tiny random checkpoints made by transformers' own class, and traces.

Run with the reference venv (torch 2.15.0, transformers 5.23.x; see README.md):

    /work/refvenv/bin/python tests/reference/diffusion_gemma/make_fixtures.py            # (re)write fixtures/
    /work/refvenv/bin/python tests/reference/diffusion_gemma/make_fixtures.py --check    # regenerate to a temp dir, compare

For every spec in SPECS it
  1. builds a `DiffusionGemmaForBlockDiffusion` from a tiny config (tiny vision tower, MoE, global_head_dim, ...),
     overwrites every text parameter with seeded random values (norm weights, router scales, per-expert scales,
     encoder and decoder layer scalars all differ from their init values), and `save_pretrained`s it in the
     spec's dtype together with a tiny word-level tokenizer and a generation_config.json;
  2. reloads it with `from_pretrained` (so the trace is of what is on disk) and records, with torch's RNG seeded:
     - the standalone forwards: prompt prefill (encoder), then one decoder forward over a fixed canvas without
       self-conditioning (`fwd_raw_nosc`) and over the same canvas with self-conditioning from the first one's
       processed logits (`fwd_raw_sc`);
     - a trace of `model.generate` (the library's own loop, instrumented by wrapping its pieces): every encoder
       call (prefill and commits), every denoising step's inputs, temperature, raw and processed logits,
       sampled tokens, argmax, entropies, accept mask, renoised canvas, stop decision, and per canvas the
       committed (argmax) and finalized (EOS-padded) canvas and the output sequence;
  3. re-checks the recorded trace with the independent plain-PyTorch reference dg_reference.py.

Files per fixture (fixtures/<name>/): config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, trace.npz (arrays), trace.json (metadata, small arrays, hashes). fixtures/MANIFEST.json
lists the sha256 of every file.
"""

import copy
import math
import os
import shutil
import sys

import numpy as np
import torch

import transformers
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
from transformers.cache_utils import DynamicCache
from transformers.models.diffusion_gemma import generation_diffusion_gemma as gen

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import dg_reference  # noqa: E402
import extract_replay  # noqa: E402
import fixture_tools  # noqa: E402
from fixture_tools import (arr_sha, chmod_files, f32, i64, parse_args, reference_check, run_per_fixture,  # noqa: E402
                           save_trace, setup, word_level_tokenizer, write_json)

FIXTURES = os.path.join(HERE, "fixtures")
MADE_BY = "tests/reference/diffusion_gemma/make_fixtures.py"
TORCH_VERSION = "2.15.0"
TRANSFORMERS_SERIES = "5.23."

VISION = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=2, head_dim=8, position_embedding_size=16,
              patch_size=4, pooling_kernel_size=1)

SPECS = [
    {
        # float32; sliding window 6 < prompt 11 + canvas 8; 5 layers S,S,F,S,F; full layers with their own
        # head_dim and kv-head count. Canvas 0 runs to the step cap, canvas 1 converges by the stable-and-confident
        # rule and holds EOS (a token chosen by a dry run), so generation stops there and the tail after EOS is
        # padded.
        "name": "tiny_f32_swa",
        "dtype": "float32",
        "seed": 1234,
        "text_config": dict(
            vocab_size=256, hidden_size=56, intermediate_size=48, num_hidden_layers=5,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            global_head_dim=32, num_global_key_value_heads=1,
            layer_types=["sliding_attention", "sliding_attention", "full_attention",
                         "sliding_attention", "full_attention"],
            sliding_window=6, num_experts=4, top_k_experts=2, moe_intermediate_size=12,
            max_position_embeddings=512, pad_token_id=0, bos_token_id=2, eos_token_id=1),
        "canvas_length": 8,
        "logit_gain": 1.5,
        "branch_gain": 0.35,
        "sc_gain": 3.0,
        "prompt_len": 11,
        "max_new_tokens": 24,
        "eos": "dry_run",
        "eos_canvas": 1,
        "generation": dict(max_denoising_steps=16, t_min=0.4, t_max=0.8, stability_threshold=1,
                           confidence_threshold=0.005, entropy_bound=0.1),
    },
    {
        # bfloat16 storage and compute; the real checkpoint's use_bidirectional_attention="vision"; full layers
        # keep num_key_value_heads (no num_global_key_value_heads); partial_rotary_factor 0.5; top-3 of 6
        # experts; hidden 80 so that sqrt(H) = 8.944 rounds to 8.9375 in bf16. Both canvases converge by the
        # rule; stops on max_new_tokens.
        "name": "tiny_bf16",
        "dtype": "bfloat16",
        "seed": 4321,
        "text_config": dict(
            vocab_size=288, hidden_size=80, intermediate_size=64, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            sliding_window=12, num_experts=6, top_k_experts=3, moe_intermediate_size=16,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                   "rope_theta": 1000000.0}},
            use_bidirectional_attention="vision",
            max_position_embeddings=512, pad_token_id=0, bos_token_id=2, eos_token_id=1),
        "canvas_length": 8,
        "logit_gain": 1.25,
        "branch_gain": 0.5,
        "sc_gain": 3.0,
        "prompt_len": 9,
        "max_new_tokens": 16,
        "eos": 1,
        "generation": dict(max_denoising_steps=12, t_min=0.4, t_max=0.8, stability_threshold=1,
                           confidence_threshold=0.005, entropy_bound=0.1),
    },
]


# ------------------------------------------------------------------------------------------------------------
# Building


def tiny_config(spec):
    return DiffusionGemmaConfig(text_config=copy.deepcopy(spec["text_config"]), vision_config=dict(VISION),
                                canvas_length=spec["canvas_length"])


@torch.no_grad()
def randomize(model, spec):
    """Seeded random values for every text parameter and buffer (not the init defaults)."""
    g = torch.Generator().manual_seed(spec["seed"])
    tc = model.config.text_config
    H = tc.hidden_size

    def normal(t, std):
        t.copy_(torch.randn(t.shape, generator=g) * std)

    def uniform(t, lo, hi):
        t.copy_(lo + (hi - lo) * torch.rand(t.shape, generator=g))

    dec = model.model.decoder
    normal(dec.embed_tokens.weight, 1.0)
    for name, p in dec.named_parameters():
        if name == "embed_tokens.weight":
            continue
        if name.endswith("post_attention_layernorm.weight") or name.endswith("post_feedforward_layernorm.weight"):
            # the layer branches' output norms: small, so the residual stream (the canvas token) dominates and
            # the tiny model is near-copying, confident enough for the loop to converge, and not chaotic
            uniform(p, 0.5 * spec["branch_gain"], 1.5 * spec["branch_gain"])
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight") \
                or ".post_feedforward_layernorm_" in name or ".pre_feedforward_layernorm_" in name:
            uniform(p, 0.5, 1.5)
        elif name.endswith("router.scale") or name.endswith("router.per_expert_scale"):
            uniform(p, 0.5, 1.5)
        elif name.endswith("router.proj.weight"):
            normal(p, 3.0)  # router logits ~ N(0, 9): decisive top-k, so rounding rarely flips an expert
        elif name.endswith("experts.gate_up_proj"):
            normal(p, 1.0 / math.sqrt(p.shape[-1]))
        elif name.endswith("experts.down_proj"):
            normal(p, 1.0 / math.sqrt(p.shape[-1]))
        elif name == "self_conditioning.down_proj.weight":
            normal(p, spec["sc_gain"] / math.sqrt(p.shape[1]))
        elif name.endswith(".weight") and p.dim() == 2:
            normal(p, 1.0 / math.sqrt(p.shape[1]))
        else:
            raise AssertionError("unhandled decoder parameter " + name)
    # the final norm sets how peaked the logits are (tied head): scale it so the loop can converge
    dec.norm.weight.mul_(spec["logit_gain"])
    for layer in dec.layers:
        uniform(layer.layer_scalar, 0.6, 1.2)
    # the encoder's own (untied) layer scalars: different values from the decoder's
    for layer in model.model.encoder.language_model.layers:
        uniform(layer.layer_scalar, 0.6, 1.2)
    # everything else of the text encoder is tied to the decoder: make sure
    enc = model.model.encoder.language_model
    assert enc.embed_tokens.weight is dec.embed_tokens.weight and model.lm_head.weight is dec.embed_tokens.weight
    assert enc.layers[0].experts.gate_up_proj is dec.layers[0].experts.gate_up_proj
    assert enc.layers[0].router.per_expert_scale is dec.layers[0].router.per_expert_scale


def make_tokenizer(vocab_size, special):
    """Word-level tokenizer: id i is 'w<i>' except the special tokens; prepends <bos> like Gemma's."""
    return word_level_tokenizer(vocab_size, special, bos=special["<bos>"])


def generation_config_dict(spec, eos):
    g = spec["generation"]
    return dict(max_new_tokens=spec["max_new_tokens"], max_denoising_steps=g["max_denoising_steps"],
                t_min=g["t_min"], t_max=g["t_max"], stability_threshold=g["stability_threshold"],
                confidence_threshold=g["confidence_threshold"],
                sampler_config=gen.EntropyBoundSamplerConfig(entropy_bound=g["entropy_bound"]),
                bos_token_id=spec["text_config"]["bos_token_id"], pad_token_id=spec["text_config"]["pad_token_id"],
                eos_token_id=eos)


def prompt_ids(spec):
    """bos + fixed pseudo-random word ids (not special)."""
    g = torch.Generator().manual_seed(spec["seed"] + 7)
    V = spec["text_config"]["vocab_size"]
    words = torch.randint(4, V, (spec["prompt_len"] - 1,), generator=g)
    return torch.cat([torch.tensor([spec["text_config"]["bos_token_id"]]), words]).unsqueeze(0)


# ------------------------------------------------------------------------------------------------------------
# Recording generate()


class Recorder:
    """Wraps the pieces generate() calls, recording their inputs and outputs; restores them on exit."""

    def __init__(self, model):
        self.model = model
        self.enc, self.steps, self.cur = [], [], None

    def __enter__(self):
        rec, model = self, self.model
        self._saved = [(gen.LinearTemperatureScheduleLogitsProcessor, "__call__"),
                       (gen.EntropyBoundSampler, "accept_canvas"),
                       (gen.EntropyBoundSampler, "renoise_canvas"),
                       (gen.StableAndConfidentStoppingCriteria, "__call__")]
        self._saved = [(c, n, getattr(c, n)) for c, n in self._saved]
        orig_temp, orig_accept, orig_renoise, orig_stop = [s[2] for s in self._saved]

        def enc_hook(module, args, kwargs, out):
            rec.enc.append(dict(input_ids=kwargs["input_ids"][0].clone(),
                                position_ids=kwargs["position_ids"][0].clone(),
                                hidden=out.last_hidden_state[0].float().clone()))
        self._hook = model.model.encoder.register_forward_hook(enc_hook, with_kwargs=True)

        orig_forward = model.forward

        def forward(**kw):
            out = orig_forward(**kw)
            rec.cur = dict(decoder_input_ids=kw["decoder_input_ids"][0].clone(),
                           position_ids=kw["decoder_position_ids"][0].clone(),
                           sc_used=kw["self_conditioning_logits"] is not None,
                           raw_logits=out.logits[0].clone(), n_encoder_calls=len(rec.enc))
            rec.steps.append(rec.cur)
            return out
        model.forward = forward

        def temp_call(proc, input_ids, scores, cur_step):
            # same expression as LinearTemperatureScheduleLogitsProcessor.__call__, keeping the temperature
            temperature = proc.t_min + ((proc.t_max - proc.t_min) * (cur_step / proc.max_denoising_steps))
            out = scores / temperature
            assert torch.equal(out, orig_temp(proc, input_ids, scores, cur_step))
            rec.cur.update(cur_step=int(cur_step), temperature=temperature.clone(), processed=out[0].clone())
            return out

        def accept(sampler, current_canvas, denoiser_canvas, logits, cur_step):
            out = orig_accept(sampler, current_canvas, denoiser_canvas, logits, cur_step)
            assert torch.equal(logits[0], rec.cur["processed"])
            rec.cur.update(sampled=denoiser_canvas[0].clone(),
                           entropy=torch.distributions.Categorical(logits=logits).entropy()[0].clone(),
                           accept=sampler.accepted_token_mask[0].clone(), accepted=out[0].clone())
            return out

        def renoise(sampler, accepted_canvas, cur_step):
            out = orig_renoise(sampler, accepted_canvas, cur_step)
            rec.cur.update(renoised=out[0].clone())
            return out

        def stop(crit, argmax_canvas, logits, **kw):
            hist = None if crit.argmax_canvas_history is None else crit.argmax_canvas_history.clone()
            out = orig_stop(crit, argmax_canvas, logits, **kw)
            if crit.stability_threshold == 0:
                stable = True
            elif hist is None:
                stable = False  # history starts at -1
            else:
                stable = bool((hist == argmax_canvas[None]).all())
            H = torch.distributions.Categorical(logits=logits).entropy()
            mean = torch.mean(H, dim=-1)
            confident = bool(mean[0] < crit.confidence_threshold)
            assert bool(out[0]) == (stable and confident)
            rec.cur.update(argmax=argmax_canvas[0].clone(), stable=stable, confident=confident,
                           mean_entropy=float(mean[0]), stop=bool(out[0]))
            return out

        gen.LinearTemperatureScheduleLogitsProcessor.__call__ = temp_call
        gen.EntropyBoundSampler.accept_canvas = accept
        gen.EntropyBoundSampler.renoise_canvas = renoise
        gen.StableAndConfidentStoppingCriteria.__call__ = stop
        return self

    def __exit__(self, *exc):
        for c, n, f in self._saved:
            setattr(c, n, f)
        self._hook.remove()
        del self.model.forward
        return False


def run_generate(model, spec, prompt):
    torch.manual_seed(spec["seed"] + 100)
    with Recorder(model) as rec:
        out = model.generate(prompt)
    return out, rec


# ------------------------------------------------------------------------------------------------------------
# Making one fixture


@torch.no_grad()
def make_fixture(spec, out_dir):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dtype = getattr(torch, spec["dtype"])
    name = spec["name"]
    prompt = prompt_ids(spec)
    C = spec["canvas_length"]

    # 1. build, randomize, cast, save; reload (a model cast with .to(bf16) would also round the RoPE inv_freq
    #    buffers to bf16, from_pretrained(dtype=bf16) keeps them float32: always trace what from_pretrained gives)
    cfg = tiny_config(spec)
    model = DiffusionGemmaForBlockDiffusion(cfg)
    randomize(model, spec)
    model = model.to(dtype)
    tmp_dir = out_dir + ".tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    eos = spec["eos"]
    if eos == "dry_run":
        model.generation_config = gen.DiffusionGemmaGenerationConfig(**generation_config_dict(spec, None))
        model.save_pretrained(tmp_dir)
        eos = choose_eos(load(tmp_dir, dtype), spec, prompt)
    model.config.text_config.eos_token_id = eos
    model.generation_config = gen.DiffusionGemmaGenerationConfig(**generation_config_dict(spec, eos))
    shutil.rmtree(tmp_dir, ignore_errors=True)
    model.save_pretrained(tmp_dir)
    tc = spec["text_config"]
    special = {"<pad>": tc["pad_token_id"], "<bos>": tc["bos_token_id"], "<unk>": 3, "<eos>": eos}
    make_tokenizer(tc["vocab_size"], special).save_pretrained(tmp_dir)
    del model

    # 2. reload what is on disk and record
    model = load(tmp_dir, dtype)
    assert model.dtype == dtype
    trace, meta = record(model, spec, prompt, eos)
    meta["fixture"] = name
    meta["hf_impl"] = {"attn_implementation": model.config.text_config._attn_implementation,
                       "experts_implementation": model.config.text_config._experts_implementation}
    meta["alternative_impl_max_abs_diff"] = alternative_impl_diff(tmp_dir, dtype, prompt, trace)
    save_trace(tmp_dir, trace, meta)
    write_json(os.path.join(tmp_dir, "trace.json"), meta)

    # 3. independent re-check
    meta["reference_check"] = reference_check(name, dg_reference.verify_fixture, tmp_dir)
    write_json(os.path.join(tmp_dir, "trace.json"), meta)
    chmod_files(tmp_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp_dir, out_dir)
    # replay/: the arrays the C++ replay test reads (DiffusionGemmaReplayTest.cpp).
    extract_replay.extract(out_dir, check=False)
    return meta


def load(path, dtype, attn="sdpa", experts="grouped_mm"):
    """from_pretrained with transformers' defaults (sdpa attention, grouped_mm experts) pinned explicitly."""
    return DiffusionGemmaForBlockDiffusion.from_pretrained(
        path, dtype=dtype, attn_implementation=attn, experts_implementation=experts).eval()


def choose_eos(model, spec, prompt):
    """EOS = a token of canvas `eos_canvas` (dry run without EOS), at an inner position, absent before it."""
    out, _ = run_generate(model, spec, prompt)
    P, C, k = prompt.shape[1], spec["canvas_length"], spec["eos_canvas"]
    seq = out.sequences[0].tolist()
    canvas = seq[P + k * C:P + (k + 1) * C]
    for j in range(2, C - 2):
        t = canvas[j]
        if t >= 4 and t not in seq[:P + k * C + j]:
            return t
    raise SystemExit("%s: no EOS candidate in canvas %d: %s" % (spec["name"], k, canvas))


def record(model, spec, prompt, eos):
    """Standalone forwards + the generate() trace, as numpy arrays and JSON metadata."""
    g = spec["generation"]
    S = g["max_denoising_steps"]
    C = spec["canvas_length"]
    P = prompt.shape[1]
    dtype = model.dtype
    tproc = gen.LinearTemperatureScheduleLogitsProcessor(g["t_min"], g["t_max"], S)
    trace = {"prompt_ids": i64(prompt[0])}

    # standalone: prefill, then decoder over a fixed canvas without and with self-conditioning
    canvas = torch.randint(0, spec["text_config"]["vocab_size"], (1, C),
                           generator=torch.Generator().manual_seed(spec["seed"] + 11))
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    out0 = model(input_ids=prompt, decoder_input_ids=canvas, past_key_values=cache)
    proc0 = tproc(prompt, out0.logits, torch.tensor(S, dtype=torch.int32))
    sc = proc0.to(dtype)
    out1 = model(decoder_input_ids=canvas, self_conditioning_logits=sc, past_key_values=cache)
    proc1 = tproc(prompt, out1.logits, torch.tensor(S - 1, dtype=torch.int32))
    assert cache.get_seq_length() == P  # the decoder wrote nothing
    trace.update(fwd_canvas=i64(canvas[0]), fwd_encoder_hidden=f32(out0.encoder_last_hidden_state[0]),
                 fwd_raw_nosc=f32(out0.logits[0]), fwd_processed_nosc=f32(proc0[0]),
                 fwd_sc_logits=f32(sc[0]), fwd_raw_sc=f32(out1.logits[0]), fwd_processed_sc=f32(proc1[0]))

    # generate()
    out, rec = run_generate(model, spec, prompt)
    steps = rec.steps
    n_can = len(rec.enc)
    # canvas index of each step = encoder calls made before it - 1
    step_canvas = np.array([s["n_encoder_calls"] - 1 for s in steps], dtype=np.int32)
    rows = [np.nonzero(step_canvas == k)[0] for k in range(n_can)]
    seq = out.sequences[0]
    committed = np.stack([i64(steps[r[-1]]["argmax"]) for r in rows])
    finalized = np.stack([i64(seq[P + k * C:P + (k + 1) * C]) for k in range(n_can)])
    st = lambda key, conv: np.stack([conv(s[key]) for s in steps])
    trace.update(
        step_canvas=step_canvas,
        step_n=np.concatenate([np.arange(len(r)) for r in rows]).astype(np.int32),
        step_cur_step=np.array([s["cur_step"] for s in steps], dtype=np.int32),
        step_temperature=np.array([float(s["temperature"]) for s in steps], dtype=np.float32),
        step_decoder_input_ids=st("decoder_input_ids", i64), step_position_ids=st("position_ids", i64),
        step_sc_used=np.array([s["sc_used"] for s in steps]),
        step_raw_logits=st("raw_logits", f32), step_processed_logits=st("processed", f32),
        step_sampled=st("sampled", i64), step_argmax=st("argmax", i64), step_entropy=st("entropy", f32),
        step_accept=st("accept", lambda t: t.numpy()), step_renoised=st("renoised", i64),
        step_stable=np.array([s["stable"] for s in steps]), step_confident=np.array([s["confident"] for s in steps]),
        step_mean_entropy=np.array([s["mean_entropy"] for s in steps], dtype=np.float32),
        step_stop=np.array([s["stop"] for s in steps]),
        canvas_init=np.stack([i64(steps[r[0]]["decoder_input_ids"]) for r in rows]),
        committed=committed, finalized=finalized, sequences=i64(seq))
    for k, e in enumerate(rec.enc):
        trace["enc%d_input_ids" % k] = i64(e["input_ids"])
        trace["enc%d_position_ids" % k] = i64(e["position_ids"])
        trace["enc%d_hidden" % k] = f32(e["hidden"])
    assert n_can == len(rows) and all(len(r) for r in rows)

    # f32: the independent reference lands within ~2e-4 on logits up to 30; bf16: kernel-order rounding alone
    # (eager vs sdpa/grouped_mm in transformers itself) moves first-step logits by ~2
    tol = {"float32": {"atol": 1e-3, "rtol": 0.0}, "bfloat16": {"atol": 4.0, "rtol": 0.0}}[spec["dtype"]]
    meta = {
        "what": "DiffusionGemma oracle: tiny DiffusionGemmaForBlockDiffusion checkpoint + generate() trace "
                "(tests/reference/diffusion_gemma/make_fixtures.py; semantics: docs/design/diffusion-gemma.md)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "dtype": spec["dtype"],
        "seeds": {"weights": spec["seed"], "prompt": spec["seed"] + 7, "fwd_canvas": spec["seed"] + 11,
                  "generate_manual_seed": spec["seed"] + 100},
        "canvas_length": C,
        "prompt_ids": prompt[0].tolist(),
        "generation": dict(g, eos_token_id=eos, pad_token_id=spec["text_config"]["pad_token_id"],
                           max_new_tokens=spec["max_new_tokens"]),
        "standalone_forward": {
            "T_nosc": float(np.float32(dg_reference.temperature(g["t_min"], g["t_max"], S, S))),
            "T_sc": float(np.float32(dg_reference.temperature(g["t_min"], g["t_max"], S - 1, S))),
            "note": "fwd_raw_nosc: encoder(prompt) then decoder(fwd_canvas) at positions P..P+C-1, no SC; "
                    "fwd_sc_logits = (fwd_raw_nosc / T(cur_step=S)).to(model dtype); fwd_raw_sc: decoder(fwd_canvas) "
                    "with that SC; processed = raw / T(cur_step) for cur_step S and S-1.",
        },
        "reference_tolerance": tol,
        "sequences": seq.tolist(),
        "num_canvases": n_can,
        "steps_per_canvas": [int(len(r)) for r in rows],
        "stop_reason": stop_reason(trace, eos, spec),
        "steps": [
            {"canvas": int(step_canvas[i]), "n": int(trace["step_n"][i]), "cur_step": s["cur_step"],
             "temperature": float(trace["step_temperature"][i]),
             "temperature_f32_hex": "0x%08x" % int(trace["step_temperature"][i:i + 1].view(np.uint32)[0]),
             "sc_used": s["sc_used"], "decoder_input_ids": s["decoder_input_ids"].tolist(),
             "sampled": s["sampled"].tolist(), "argmax": s["argmax"].tolist(),
             "entropy": [float("%.6g" % x) for x in s["entropy"].tolist()],
             "accept": [int(x) for x in s["accept"].tolist()], "renoised": s["renoised"].tolist(),
             "mean_entropy": s["mean_entropy"], "stable": s["stable"], "confident": s["confident"],
             "stop": s["stop"],
             "raw_logits_sha256_16": arr_sha(trace["step_raw_logits"][i]),
             "raw_logits_row0_first8": [float(x) for x in trace["step_raw_logits"][i][0][:8]]}
            for i, s in enumerate(steps)],
        "canvases": [{"encoder_input_ids": trace["enc%d_input_ids" % k].tolist(),
                      "encoder_position_ids": trace["enc%d_position_ids" % k].tolist(),
                      "committed": committed[k].tolist(), "finalized": finalized[k].tolist()}
                     for k in range(n_can)],
    }
    return trace, meta


def stop_reason(trace, eos, spec):
    if eos is not None and (trace["committed"][-1] == eos).any():
        return "eos in canvas %d" % (len(trace["committed"]) - 1)
    return "max_new_tokens (%d canvases)" % math.ceil(spec["max_new_tokens"] / spec["canvas_length"])


@torch.no_grad()
def alternative_impl_diff(path, dtype, prompt, trace):
    """Max |diff| of the standalone no-SC logits under eager attention + eager experts (for tolerances)."""
    m = load(path, dtype, attn="eager", experts="eager")
    cache = DynamicCache(config=m.config.get_text_config(decoder=True))
    out = m(input_ids=prompt, decoder_input_ids=torch.from_numpy(trace["fwd_canvas"])[None],
            past_key_values=cache)
    return float(np.abs(f32(out.logits[0]) - trace["fwd_raw_nosc"]).max())


# ------------------------------------------------------------------------------------------------------------
# Checking


def compare_replay(name, want, got, errors):
    """replay/ is derived from trace.npz (compared as such): the committed files must be what extract_replay.py
    makes from the committed trace."""
    if extract_replay.extract(os.path.dirname(want), check=True):
        errors.append("%s/replay is stale: rerun extract_replay.py" % name)


def compare_dirs(want_dir, got_dir, errors):
    """Checkpoints bit-identical; trace.npz by fixture_tools.compare_arrays; trace.json's decisions."""
    fixture_tools.compare_dirs(want_dir, got_dir, errors, handlers={"replay": compare_replay}, json_keys=(
        "sequences", "steps_per_canvas", "stop_reason", "generation", "prompt_ids", "files"))


def write_manifest(root):
    """MANIFEST.json: each fixture's files, replay/ after the others, without total_bytes (as first written)."""
    fixture_tools.write_manifest(root, MADE_BY, sort=False, total_bytes=False)


def summary(spec, meta):
    return ("%s: %d canvases, steps %s, stop: %s, sequences %s, reference check %s"
            % (spec["name"], meta["num_canvases"], meta["steps_per_canvas"], meta["stop_reason"], meta["sequences"],
               meta["reference_check"]))


def main():
    args = parse_args(__doc__, FIXTURES)
    setup(TORCH_VERSION, TRANSFORMERS_SERIES)
    return run_per_fixture(args, SPECS, FIXTURES, make_fixture, compare_dirs, summary, write_manifest)


if __name__ == "__main__":
    sys.exit(main())
