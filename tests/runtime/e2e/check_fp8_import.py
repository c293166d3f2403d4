#!/usr/bin/env python3
"""FP8 E4M3 checkpoints in the compressed-tensors layout (tests/models/make_fp8_checkpoint.py, per
output channel and per tensor) import, keep their weights FP8 in the artifact, and give the same
first-forward logits (relative error <= 1e-6) and greedy tokens as the same model dequantized to
float32, on the tiny LLaDA (bidirectional) and Qwen3 (causal) models; so does the FP8 checkpoint
compiled with --weights f32 (converted at compile time, its scales dropped). The CPU backend has no
FP8 GEMM: it widens FP8 weights tile by tile inside the GEMM.

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
PROMPTS = ["When we speak of free software", "hello there"]


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
        for model in ("llada", "qwen3"):
            for strategy in ("channel", "tensor"):
                base = os.path.join(work, f"{model}-{strategy}")
                fp8, dequantized = base + "-fp8", base + "-f32"
                run([sys.executable, os.path.join(MODELS, "make_fp8_checkpoint.py"),
                     os.path.join(work, "tiny", model), fp8, dequantized] +
                    (["--per-tensor"] if strategy == "tensor" else []))
                artifacts = {}
                for name, checkpoint, flags in (("fp8", fp8, []), ("f32", dequantized, []),
                                                ("fp8-widened", fp8, ["--weights", "f32"])):
                    artifacts[name] = f"{base}-{name}.dlm"
                    run([a.dlmc, "compile", checkpoint, "-o", artifacts[name]] + flags)
                stored = run([a.dlmc, "inspect", artifacts["fp8"]])
                if "fp8_e4m3" not in stored or ".scale  f32" not in stored:
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
                        good = error <= 1e-6 and ids[name] == ids["f32"]
                        ok &= good
                        print(f"{model} {strategy} prompt {i} {name}: logits relative error "
                              f"{error:.1e}, tokens {'same' if ids[name] == ids['f32'] else 'DIFFER'}"
                              + ("" if good else "  FAILS"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
