#!/usr/bin/env python3
"""FP8 E4M3 checkpoints in the compressed-tensors layout (tests/models/make_fp8_checkpoint.py, per
output channel and per tensor) import, keep their weights FP8 in the artifact, and give the same
first-forward logits (relative error <= 1e-6, 1e-5 with experts) and greedy tokens as the same
model dequantized to float32: the tiny LLaDA (bidirectional) and Qwen3 (causal) models,
LLaDA-MoE's reference fixture (its experts FP8 per expert, Qwen3-MoE's layout, stacked at import)
and DiffusionGemma's tiny_f32_swa fixture (its 3-D expert stacks FP8: fused, with scales per
channel, per expert or per tensor, and split per expert) and tiny_bf16 (a bf16 original); so does the FP8 checkpoint compiled with
--weights f32 (converted at compile time, its scales dropped); and the FP8 checkpoint stays within
the FP8 bound of the model it was quantized from. The CPU backend has no FP8 GEMM: it widens FP8
weights, experts included, tile by tile inside the GEMM.

    check_fp8_import.py --dlmc build/bin/dlmc --dlm-run build/bin/dlm-run
"""
import argparse
import os
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # the check needs numpy (the repo's .venv has it)
    np = None

from e2e_tools import generate_with_logits, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODELS = os.path.join(ROOT, "tests", "models")
LLADA_MOE = os.path.join(ROOT, "tests", "reference", "llada_moe", "fixtures", "llada_moe_tiny")
DIFFUSION_GEMMA = os.path.join(ROOT, "tests", "reference", "diffusion_gemma", "fixtures", "tiny_f32_swa")
DIFFUSION_GEMMA_BF16 = os.path.join(os.path.dirname(DIFFUSION_GEMMA), "tiny_bf16")
PROMPTS = ["When we speak of free software", "hello there"]
# FP8 E4M3 weights (3 mantissa bits) against their float original: check_weight_precision.py's bound
# for --weights fp8 (measured there: 3.2e-2 on the demo model, up to 7.7e-2 on random tiny ones,
# llada_moe's experts included; here llada_moe_tiny 8.8e-2 to 1.1e-1). DiffusionGemma's random
# tiny fixtures amplify any rounding: FP8 projections alone (its experts left float) already move
# their logits by 1.6e-1 to 1.7e-1 (int8 weights by 2.5e-2 to 4.6e-2), FP8 experts too by 1.3e-1
# to 2.6e-1; theirs is wider.
FP8_BOUNDS = {"diffusion_gemma": 3e-1, "diffusion_gemma_bf16": 3e-1}
FP8_BOUND = 1.5e-1
# The FP8 artifact against the dequantized one: the same values, the same arithmetic but for the
# experts' sum order (the CPU multiplies FP8 experts by tiles, float32 ones by oneDNN's sgemm).
SAME_BOUND, MOE_SAME_BOUND = 1e-6, 1e-5
MOE = {"llada_moe", "diffusion_gemma", "diffusion_gemma_bf16"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlmc", required=True)
    ap.add_argument("--dlm-run", required=True)
    a = ap.parse_args()
    for tool in (a.dlmc, a.dlm_run):
        if not os.access(tool, os.X_OK):
            print(f"skipped: {tool} is not built")
            return 77
    if np is None:
        print("skipped: numpy is not installed")
        return 77
    ok = True
    with tempfile.TemporaryDirectory() as work:
        run([sys.executable, os.path.join(MODELS, "make_tiny_models.py"), os.path.join(work, "tiny"),
             "--only", "llada,qwen3"])
        # (model, checkpoint, make_fp8_checkpoint.py flags): per channel and per tensor.
        checkpoints = {m: os.path.join(work, "tiny", m) for m in ("llada", "qwen3")}
        checkpoints["llada_moe"] = LLADA_MOE
        cases = [(m, c, flags) for m, c in checkpoints.items() for flags in ([], ["--per-tensor"])]
        cases += [("diffusion_gemma", DIFFUSION_GEMMA, ["--experts", "fused"]),
                  ("diffusion_gemma", DIFFUSION_GEMMA, ["--experts", "fused", "--per-tensor"]),
                  ("diffusion_gemma", DIFFUSION_GEMMA, ["--experts", "fused", "--per-expert"]),
                  ("diffusion_gemma", DIFFUSION_GEMMA, ["--experts", "split"]),
                  ("diffusion_gemma_bf16", DIFFUSION_GEMMA_BF16, ["--experts", "fused"])]
        for model, checkpoint, flags in cases:
            strategy = "-".join(["tensor" if f == "--per-tensor" else f.lstrip("-") for f in flags]
                                or ["channel"])
            base = os.path.join(work, f"{model}-{strategy}")
            fp8, dequantized = base + "-fp8", base + "-f32"
            run([sys.executable, os.path.join(MODELS, "make_fp8_checkpoint.py"), checkpoint, fp8,
                 dequantized] + flags)
            artifacts = {}
            for name, source, compile_flags in (("fp8", fp8, []), ("f32", dequantized, []),
                                                ("fp8-widened", fp8, ["--weights", "f32"]),
                                                ("original", checkpoint, [])):
                artifacts[name] = f"{base}-{name}.dlm"
                run([a.dlmc, "compile", source, "-o", artifacts[name]] + compile_flags)
            stored = run([a.dlmc, "inspect", artifacts["fp8"]])
            kept = "fp8_e4m3" in stored and ".scale  f32" in stored
            if model in MOE:
                kept &= "experts_gate_up  fp8_e4m3" in stored and "experts_down  fp8_e4m3" in stored
            if not kept:
                print(f"{model} {strategy}: the artifact does not keep FP8 weights with scales")
                ok = False
            for i, prompt in enumerate(PROMPTS):
                ids, logits = {}, {}
                for name, artifact in artifacts.items():
                    ids[name], logits[name] = generate_with_logits(
                        a.dlm_run, artifact, prompt, f"{base}-{name}-{i}.npy")
                for name in ("fp8", "fp8-widened"):
                    error = (np.linalg.norm(logits[name] - logits["f32"]) /
                             np.linalg.norm(logits["f32"]))
                    good = error <= (MOE_SAME_BOUND if model in MOE else SAME_BOUND) and \
                        ids[name] == ids["f32"]
                    ok &= good
                    print(f"{model} {strategy} prompt {i} {name}: logits relative error "
                          f"{error:.1e}, tokens {'same' if ids[name] == ids['f32'] else 'DIFFER'}"
                          + ("" if good else "  FAILS"))
                # The FP8 checkpoint against the model it was quantized from: within the FP8 bound.
                error = (np.linalg.norm(logits["fp8"] - logits["original"]) /
                         np.linalg.norm(logits["original"]))
                bound = FP8_BOUNDS.get(model, FP8_BOUND)
                ok &= error <= bound
                print(f"{model} {strategy} prompt {i} fp8 against the original: logits relative "
                      f"error {error:.1e}" + ("" if error <= bound else "  FAILS"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
