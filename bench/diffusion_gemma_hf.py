#!/usr/bin/env python3
"""transformers' own DiffusionGemma on the CPU: the baseline of bench/diffusion_gemma_cpu.py.

Runs in the reference venv (torch 2.15 + transformers 5.23; tests/reference/diffusion_gemma/README.md
says how to make it), not the repo .venv:

    /work/refvenv/bin/python bench/diffusion_gemma_hf.py check DIR
    /work/refvenv/bin/python bench/diffusion_gemma_hf.py generate DIR --prompt-ids 7,8,9 [--threads N]
    /work/refvenv/bin/python bench/diffusion_gemma_hf.py serve DIR [--threads N]

check: `from_pretrained(DIR)` must report no missing, unexpected or mismatched weights; every stored
  tensor must equal the loaded parameter (the encoder's text weights tied to the decoder's, its own
  layer scalars); one prefill + one decoder forward must give finite logits; prints logit and
  entropy statistics and the expert load of layer 0.
generate: one `DiffusionGemmaForBlockDiffusion.generate(prompt)` with the checkpoint's
  generation_config.json (overrides: --max-new-tokens, --max-denoising-steps), torch seeded with
  --seed; prints one JSON object.
serve: loads once, then reads one JSON request per stdin line ({"prompt_ids": [...], "seed": N,
  "max_new_tokens": N?, "max_denoising_steps": N?}) and writes one JSON line per request.

The JSON: prompt_ids, output_ids (prompt excluded, up to and including the first EOS, like
dlm-run --json), forwards (decoder forward passes), encoder_passes, canvases, steps_per_canvas,
seconds (wall time of generate() alone: model loading excluded), threads, versions.
Defaults pinned as transformers picks them: attn_implementation="sdpa",
experts_implementation="grouped_mm", dtype = the checkpoint's.
"""
import argparse
import json
import math
import os
import sys
import time


def load(path, threads):
    import torch
    from transformers import DiffusionGemmaForBlockDiffusion
    torch.set_num_threads(threads)
    with open(os.path.join(path, "config.json")) as f:
        dtype = getattr(torch, json.load(f).get("dtype", "float32"))
    model, info = DiffusionGemmaForBlockDiffusion.from_pretrained(
        path, dtype=dtype, attn_implementation="sdpa", experts_implementation="grouped_mm",
        output_loading_info=True)
    return model.eval(), info


class Counter:
    """Counts decoder forwards (model.forward calls) and encoder passes during generate()."""

    def __init__(self, model):
        self.model, self.forwards, self.encoder = model, 0, 0
        orig = model.forward

        def forward(*args, **kw):
            if kw.get("decoder_input_ids") is not None:
                self.forwards += 1
            return orig(*args, **kw)
        model.forward = forward

        def hook(*_):
            self.encoder += 1
        model.model.encoder.register_forward_hook(hook)


def generate(model, counter, prompt_ids, seed, overrides):
    import torch
    import transformers
    gc = model.generation_config
    C = model.config.canvas_length
    eos = gc.eos_token_id
    kw = {k: v for k, v in overrides.items() if v is not None}
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    counter.forwards = counter.encoder = 0
    torch.manual_seed(seed)
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        seconds = time.perf_counter() - t0
    seq = out.sequences[0].tolist() if hasattr(out, "sequences") else out[0].tolist()
    new = seq[len(prompt_ids):]
    canvases = len(new) // C
    eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    output = []
    for t in new:
        output.append(t)
        if t in eos_ids:
            break
    return {
        "prompt_ids": list(prompt_ids), "output_ids": output, "forwards": counter.forwards,
        "encoder_passes": counter.encoder, "canvases": canvases,
        "steps_per_canvas": counter.forwards / canvases if canvases else 0.0,
        "seconds": seconds, "threads": torch.get_num_threads(),
        "max_denoising_steps": kw.get("max_denoising_steps", gc.max_denoising_steps),
        "max_new_tokens": kw.get("max_new_tokens", gc.max_new_tokens),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def check(path, threads):
    import torch
    from safetensors import safe_open
    from transformers.cache_utils import DynamicCache
    model, info = load(path, threads)
    problems = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            problems.append(f"{key}: {sorted(info[key])[:10]}")
    state = model.state_dict()
    tc = model.config.text_config
    n = 0
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        for name in f.keys():
            n += 1
            want = f.get_tensor(name)
            if name not in state:
                problems.append(f"stored tensor {name} is not a model parameter")
            elif state[name].dtype != want.dtype or not torch.equal(state[name], want):
                problems.append(f"{name}: loaded value differs from the file")
            if name.startswith("model.decoder.") and "layer_scalar" not in name:
                enc = name.replace("model.decoder.", "model.encoder.language_model.")
                if enc in state and not torch.equal(state[enc], want):
                    problems.append(f"{enc} is not tied to {name}")
    if not torch.equal(model.lm_head.weight, model.model.decoder.embed_tokens.weight):
        problems.append("lm_head not tied to the embedding")
    print(f"{path}: {n} stored tensors; dtype {model.dtype}; attn {tc._attn_implementation}, "
          f"experts {tc._experts_implementation}")
    print(f"  layer_types {tc.layer_types}")
    # one prefill + one decoder forward over a random canvas
    g = torch.Generator().manual_seed(0)
    C = model.config.canvas_length
    prompt = torch.randint(0, tc.vocab_size, (1, 16), generator=g)
    canvas = torch.randint(0, tc.vocab_size, (1, C), generator=g)
    routes = []
    hook = model.model.decoder.layers[0].router.register_forward_hook(
        lambda m, a, out: routes.append(out))
    with torch.no_grad():
        cache = DynamicCache(config=model.config.get_text_config(decoder=True))
        out = model(input_ids=prompt, decoder_input_ids=canvas, past_key_values=cache)
    hook.remove()
    logits = out.logits[0].float()
    if not torch.isfinite(logits).all():
        problems.append("non-finite logits")
    z = logits / 0.8
    H = torch.distributions.Categorical(logits=z).entropy()
    p = torch.softmax(z, -1).max(-1).values
    print(f"  logits std {logits.std():.3f}, max |logit| {logits.abs().max():.2f}; at T 0.8: entropy "
          f"mean {H.mean():.3f} (min {H.min():.3f}, max {H.max():.3f}; log V = {math.log(tc.vocab_size):.3f}), "
          f"top probability mean {p.mean():.3f}")
    for r in routes[:1]:
        idx = [t for t in r if isinstance(t, torch.Tensor) and t.dtype in (torch.int64, torch.int32)]
        if idx:
            counts = torch.bincount(idx[0].flatten(), minlength=tc.num_experts)
            print(f"  layer 0 expert load over {idx[0].shape[0]} canvas tokens x top-{tc.top_k_experts}: "
                  f"{counts.tolist()}")
    for p_ in problems:
        print("PROBLEM: " + p_)
    print("check: " + ("FAILED" if problems else "OK"))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["check", "generate", "serve"])
    ap.add_argument("checkpoint")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt-ids")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int)
    ap.add_argument("--max-denoising-steps", type=int)
    a = ap.parse_args()
    import transformers
    transformers.logging.set_verbosity_error()
    if a.mode == "check":
        return check(a.checkpoint, a.threads)
    model, info = load(a.checkpoint, a.threads)
    counter = Counter(model)
    if a.mode == "generate":
        if not a.prompt_ids:
            ap.error("generate needs --prompt-ids")
        ids = [int(x) for x in a.prompt_ids.split(",") if x]
        r = generate(model, counter, ids, a.seed, {"max_new_tokens": a.max_new_tokens,
                                                   "max_denoising_steps": a.max_denoising_steps})
        print(json.dumps(r))
        return 0
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        r = generate(model, counter, req["prompt_ids"], req.get("seed", 0),
                     {"max_new_tokens": req.get("max_new_tokens"),
                      "max_denoising_steps": req.get("max_denoising_steps")})
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
