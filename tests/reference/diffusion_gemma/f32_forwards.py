#!/usr/bin/env python3
"""The standalone decoder forwards of a bf16 fixture recomputed in float32 by dg_reference.py.

transformers computes a bf16 checkpoint in bf16 throughout; dlm computes in float32 over the bf16
weights. Their logits then differ by bf16 rounding (a few percent on the tiny bf16 fixture), which
is no check of dlm's arithmetic. This script gives the float32 reading of the same checkpoint —
the bf16 weights widened, every operation in float32, the model's own constants (the embedding
scale rounded to bf16, as transformers defines it) kept — so that
tests/runtime/e2e/DiffusionGemmaForwardTest can hold dlm to 1e-4 of it, and to transformers within
the bf16 rounding this reference itself shows. Writes replay/fwd_raw_nosc_f32.npy and
replay/fwd_raw_sc_f32.npy (float32, [C, V]) and replay/step_raw_logits_f32.npy (float32, [steps, C,
V]: every decoder forward of the recorded run, chained as the test chains them) next to the
fixture's other replay arrays. Any torch
>= 1.13 (the repo .venv):

    .venv/bin/python tests/reference/diffusion_gemma/f32_forwards.py tests/reference/diffusion_gemma/fixtures/tiny_bf16
    .venv/bin/python tests/reference/diffusion_gemma/f32_forwards.py --check tests/reference/diffusion_gemma/fixtures/tiny_bf16
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dg_reference  # noqa: E402


def f32_forwards(fixture):
    m = dg_reference.Model(fixture)
    m.w = {name: tensor.float() for name, tensor in m.w.items()}
    m.dtype = torch.float32
    m.embed_scale = m.embed_scale.float()  # the bf16-rounded sqrt(H) the model multiplies by
    t = np.load(os.path.join(fixture, "trace.npz"))
    prompt = torch.from_numpy(t["prompt_ids"]).long()
    P, C = prompt.shape[0], m.c.canvas_length
    cache = m.new_cache()
    m.encode(cache, prompt, torch.arange(P))
    canvas = torch.from_numpy(t["fwd_canvas"]).long()
    pos = torch.arange(P, P + C)
    raw0 = m.decode(cache, canvas, pos)
    raw1 = m.decode(cache, canvas, pos, sc_logits=torch.from_numpy(t["fwd_sc_logits"]).float())
    steps = trace_steps(m, t, prompt)
    return {"fwd_raw_nosc_f32": raw0.float().numpy(), "fwd_raw_sc_f32": raw1.float().numpy(),
            "step_raw_logits_f32": steps,
            "transformers": (t["fwd_raw_nosc"], t["fwd_raw_sc"], t["step_raw_logits"])}


def trace_steps(m, t, prompt):
    """Every decoder forward of the recorded generate() run, as DiffusionGemmaForwardTest chains
    them: the prompt encoded, each finished canvas committed (encoded) before the next, each step's
    recorded decoder input, self-conditioned on the previous step's recorded logits / T in float32
    (none on a canvas's first step)."""
    P, C = prompt.shape[0], m.c.canvas_length
    raw, canvas_of = t["step_raw_logits"], t["step_canvas"]
    cache = m.new_cache()
    m.encode(cache, prompt, torch.arange(P))
    out, canvas = [], 0
    for s in range(raw.shape[0]):
        k = int(canvas_of[s])
        first = s == 0 or k != canvas
        if k != canvas:
            m.encode(cache, torch.from_numpy(t["committed"][canvas]).long(),
                     torch.arange(P + canvas * C, P + k * C))
            canvas = k
        sc = None
        if not first:
            sc = torch.from_numpy(raw[s - 1]) / torch.tensor(float(t["step_temperature"][s - 1]),
                                                             dtype=torch.float32)
        ids = torch.from_numpy(t["step_decoder_input_ids"][s]).long()
        out.append(m.decode(cache, ids, torch.arange(P + k * C, P + (k + 1) * C), sc_logits=sc)
                   .float().numpy())
    return np.stack(out)


def relative(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixtures", nargs="+")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    bad = 0
    for fixture in args.fixtures:
        out = f32_forwards(fixture)
        nosc, sc, steps = out.pop("transformers")
        print("%s: float32 reading vs transformers (bf16): relative error %.3g without, %.3g with "
              "self-conditioning; over the %d steps of the trace at most %.3g" %
              (fixture, relative(out["fwd_raw_nosc_f32"], nosc),
               relative(out["fwd_raw_sc_f32"], sc), steps.shape[0],
               max(relative(a, b) for a, b in zip(out["step_raw_logits_f32"], steps))))
        for name, array in out.items():
            path = os.path.join(fixture, "replay", name + ".npy")
            if args.check:
                if not os.path.exists(path) or relative(np.load(path), array) > 1e-6:
                    print("%s: differs" % path)
                    bad += 1
                continue
            np.save(path, array.astype("<f4"), allow_pickle=False)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
