#!/usr/bin/env python3
"""Every committed ONNX export (tests/models/onnx_exports) against the safetensors import of the
checkpoint it was exported from: the export imports, compiles, and its artifact's logits and
greedy tokens equal the checkpoint's.

    check_exports.py FIXTURES TINY_MODELS WORK

For each fixture: attach_onnx_weights.py rebuilds the export; `dlmc compile` it and the checkpoint
(--weights f32: the exports hold f32 weights) with the policy the model supports
(low-confidence for LLaDA; autoregressive, and low-confidence for its logits of every canvas row,
for the causal Llama and Qwen3); `dlm-run` both with the same prompt, dumping the logits. Prints one line per fixture; exits 1 if any
logits differ by more than 1e-4 (relative, Frobenius) or any token differs.
"""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
ATTACH = os.path.join(SOURCE, "tests", "models", "attach_onnx_weights.py")
CAUSAL = ("llama", "qwen3")


def run(*command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def compile_and_run(source, model, work, stem):
    """dlmc compile + dlm-run under each policy; returns ([logits], [stdout], compile report).
    Causal models also run low-confidence: its logits cover every row of the canvas."""
    artifact = os.path.join(work, stem + ".dlm")
    policies = ["autoregressive", "low-confidence"] if model in CAUSAL else ["low-confidence"]
    weights = [] if source.endswith(".onnx") else ["--weights", "f32"]
    report = run("dlmc", "compile", source, "-o", artifact, *weights, "--policy",
                 ",".join(policies))
    logits, texts = [], []
    for policy in policies:
        decode = (["--max-new-tokens", "12"] if policy == "autoregressive" else
                  ["--gen-length", "16", "--block-length", "8", "--steps", "8"])
        dump = os.path.join(work, f"{stem}.{policy}.npy")
        texts.append(run("dlm-run", artifact, "--policy", policy, "--prompt", "hello there",
                         *decode, "--dump-logits", dump))
        logits.append(np.load(dump))
    return logits, texts, report


def main(argv=None):
    fixtures, tiny, work = (argv or sys.argv[1:])[:3]
    os.makedirs(work, exist_ok=True)
    references = {}
    failed = False
    for name in sorted(os.listdir(fixtures)):
        with open(os.path.join(fixtures, name, "export.json")) as f:
            export = json.load(f)
        model = export["model"]
        if model not in references:
            references[model] = compile_and_run(os.path.join(tiny, model), model, work,
                                                "checkpoint_" + model)
        expected, expected_text, _ = references[model]
        rebuilt = os.path.join(work, name)
        run(sys.executable, ATTACH, os.path.join(fixtures, name), os.path.join(tiny, model),
            rebuilt)
        try:
            logits, text, report = compile_and_run(os.path.join(rebuilt, "model.onnx"), model,
                                                   work, name)
        except RuntimeError as error:
            print(f"{name} (opset {export['opset']}): FAILED: {error}")
            failed = True
            continue
        error = max(float(np.linalg.norm(a - b) / np.linalg.norm(b)) if a.shape == b.shape
                    else float("inf") for a, b in zip(logits, expected))
        same_tokens = text == expected_text
        recognised = next((line.split(": ", 2)[2] for line in report.splitlines()
                           if "the import recognised" in line), "nothing")
        ok = error <= 1e-4 and same_tokens
        failed |= not ok
        print(f"{name} (opset {export['opset']}): {'ok' if ok else 'MISMATCH'}: logits "
              f"{' and '.join(str(list(x.shape)) for x in logits)} relative error {error:.1e}, tokens "
              f"{'identical' if same_tokens else 'DIFFER'}; recognised: {recognised}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
