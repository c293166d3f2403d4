#!/usr/bin/env python3
"""End to end on the CPU: every tiny checkpoint, compiled by dlmc and run by dlm-run, must
generate exactly what the independent PyTorch reference (tests/reference/generate.py) generates.

    check_generation_matches_reference.py --dlmc build/bin/dlmc --dlm-run build/bin/dlm-run
                                          [--models llada,dream] [--keep DIR]

For each model of tests/models/make_tiny_models.py that dlm supports and each decoding setting
below (low-confidence greedy / Gumbel / threshold / dInfer's hierarchical and credit decoding,
entropy-bound; cache none, prefix and, for low-confidence, dual with and without dInfer's vicinity
refresh, and dInfer's iteration smoothing, for which every artifact is compiled with --smoothing):
  * output_ids and forwards identical;
  * prompt_ids and text identical (text prompts go through both tokenizers);
  * first decoded forward's logits (--dump-logits) within 1e-3 of the reference, relative to the
    largest reference logit;
  * dlm-run --score (the output's left-to-right NLL) within 1e-3 nats of tests/reference/scoring.py.
Exit status 77 (ctest: skipped) when the Python packages the reference needs are missing.
"""

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

from logits_agreement import first_logits_problems

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
REFERENCE = os.path.join(ROOT, "tests", "reference")
MAKE_MODELS = os.path.join(ROOT, "tests", "models", "make_tiny_models.py")

MODELS = ["llada", "llada_tied", "llada_sharded", "dream", "qwen3", "llama"]
PROMPT_IDS = "5,17,42,99,7,3,250"
LOGITS_TOLERANCE = 1e-3
SCORE_TOLERANCE = 1e-3  # nats per token

# name -> arguments shared by dlm-run and generate.py
SETTINGS = {
    "greedy": ["--steps", "16"],
    "greedy_prefix": ["--steps", "16", "--cache", "prefix"],
    "gumbel": ["--steps", "16", "--temperature", "0.8", "--seed", "5"],
    "gumbel_prefix": ["--steps", "16", "--temperature", "0.8", "--seed", "6", "--cache", "prefix"],
    "threshold": ["--steps", "32", "--threshold", "0.9"],
    "threshold_prefix": ["--steps", "32", "--threshold", "0.9", "--cache", "prefix"],
    # The dual cache: a block's later steps feed only the block (Dream: from one position before
    # it) over the K/V of the whole sequence from its first step.
    "greedy_dual": ["--steps", "16", "--cache", "dual"],
    "gumbel_dual": ["--steps", "16", "--temperature", "0.8", "--seed", "7", "--cache", "dual"],
    "threshold_dual": ["--steps", "32", "--threshold", "0.9", "--cache", "dual"],
    "small_blocks_dual": ["--gen-length", "16", "--block-length", "4", "--steps", "8",
                          "--temperature", "0.6", "--seed", "2", "--cache", "dual"],
    # dInfer's vicinity refresh: the window reaches prefix_look before the block and after_look
    # past it (clipped to the sequence); a warmup of full forwards, the step after it one too.
    "vicinity_gumbel": ["--steps", "16", "--temperature", "0.8", "--seed", "8", "--cache", "dual",
                        "--knob", "prefix_look=3", "--knob", "after_look=5"],
    "vicinity_warmup_threshold": ["--steps", "32", "--threshold", "0.5", "--cache", "dual",
                                  "--knob", "prefix_look=16", "--knob", "after_look=40",
                                  "--knob", "warmup_steps=3"],
    # dInfer's iteration smoothing: masked positions' inputs add the expected embedding under the
    # last forward's distribution, and the threshold decays from 1 with the step.
    "smoothing_threshold": ["--steps", "32", "--threshold", "0.5", "--knob", "smoothing=0.3"],
    "smoothing_gumbel": ["--steps", "16", "--temperature", "0.8", "--seed", "10", "--knob",
                         "smoothing=0.3", "--knob", "smoothing_init=0.2", "--knob",
                         "smoothing_growth=0.05"],
    "smoothing_prefix_gumbel": ["--steps", "16", "--temperature", "0.8", "--seed", "11", "--cache",
                                "prefix", "--knob", "smoothing=0.3", "--knob",
                                "smoothing_init=0.2", "--knob", "smoothing_growth=0.05"],
    "smoothing_hierarchical_credit": ["--steps", "32", "--threshold", "0.6", "--low-threshold",
                                      "0.05", "--credit", "on", "--knob", "smoothing=0.25",
                                      "--knob", "threshold_decay=0.1"],
    # Fast-dLLM semantics: as many steps as the confidence needs, whatever --steps says; a cap
    # only when asked for.
    "threshold_any_steps": ["--steps", "8", "--threshold", "0.95", "--temperature", "0.5"],
    "threshold_step_cap": ["--steps", "8", "--threshold", "0.95", "--temperature", "0.5",
                           "--step-cap", "2"],
    "small_blocks": ["--gen-length", "16", "--block-length", "4", "--steps", "8"],
    # dInfer's hierarchical decoding (run maxima above --low-threshold), its paper's deeper
    # levels, and credit decoding; thresholds sized to the tiny models' confidences, so that
    # steps unmask several positions.
    "hierarchical": ["--steps", "32", "--low-threshold", "0.05"],
    "hierarchical_depth3": ["--steps", "32", "--threshold", "0.3", "--low-threshold", "0.05",
                            "--depth", "3", "--cache", "prefix"],
    "credit": ["--steps", "32", "--threshold", "0.3", "--credit", "on"],
    "credit_hierarchical_gumbel": ["--steps", "32", "--low-threshold", "0.02", "--depth", "2",
                                   "--credit", "on", "--credit-alpha", "1.5", "--credit-beta",
                                   "0.5", "--credit-gamma", "0.5", "--temperature", "0.5",
                                   "--seed", "3"],
    "entropy_bound": ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "3"],
    "entropy_bound_prefix": ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "4",
                             "--cache", "prefix"],
    # Every canvas converges by stability (the entropy test always passes) before the step cap.
    "entropy_bound_converge": ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "8",
                               "--confidence-threshold", "100"],
    "entropy_bound_stable2": ["--policy", "entropy-bound", "--max-steps", "16",
                              "--stability-threshold", "2", "--entropy-bound", "0.5",
                              "--t-min", "0.5", "--t-max", "1.0", "--seed", "9"],
}
TEXT_SETTINGS = {
    "text_greedy": ["--prompt", "The quick brown fox jumps", "--steps", "16"],
    "text_prefix_gumbel": ["--prompt", "Hello, world! 123", "--steps", "16", "--temperature",
                           "1.0", "--seed", "2", "--cache", "prefix"],
}
COMMON = ["--gen-length", "32", "--block-length", "8"]
# Settings searched per model for a seed that ends generation early at EOS (find_early_stop).
EARLY_STOP_POLICIES = {
    "eos_stop": ["--steps", "32", "--temperature", "5"],
    "eos_stop_prefix": ["--steps", "32", "--temperature", "5", "--cache", "prefix"],
    "eos_stop_dual": ["--steps", "32", "--temperature", "5", "--cache", "dual"],
    "eos_stop_entropy_bound": ["--policy", "entropy-bound", "--max-steps", "4", "--t-min", "5",
                               "--t-max", "8"],
}


def have_reference_packages():
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: the reference needs {e.name}", file=sys.stderr)
        return False
    return True


def run_reference(generate, ckpt, args, dump):
    """generate.py's main() in this process (one torch import for all runs)."""
    out = io.StringIO()
    argv = [ckpt, *args, "--json", "--dump-logits", dump]
    with contextlib.redirect_stdout(out):
        status = generate.main(argv)
    if status:
        raise RuntimeError(f"generate.py {' '.join(argv)} exited with {status}")
    return json.loads(out.getvalue())


def run_ours(dlm_run, artifact, args, dump):
    cmd = [dlm_run, artifact, *args, "--json", "--threads", "2", "--dump-logits", dump]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def compare(name, ours, ref, our_logits, ref_logits):
    problems = []
    for key in ("prompt_ids", "output_ids", "forwards", "text"):
        if ours[key] != ref[key]:
            problems.append(f"{key}: dlm {ours[key]!r} != reference {ref[key]!r}")
    return problems + first_logits_problems(our_logits, ref_logits, LOGITS_TOLERANCE, "reference")


def find_early_stop(dlm_run, artifact, eos, policy_args):
    """Arguments with the first seed (of 40) whose generation stops early at EOS, or None.

    Random tiny models rarely emit EOS; at a high temperature some seed does, which exercises the
    early stop (fill after the block, truncate the output, no further forwards) against the
    reference. The search is deterministic: the models and the counter RNG are fixed.
    """
    base = ["--prompt-ids", f"{eos},{eos},5,{eos}", "--gen-length", "64", "--block-length", "8",
            *policy_args]
    for seed in range(40):
        args = [*base, "--seed", str(seed)]
        proc = subprocess.run([dlm_run, artifact, *args, "--json"], capture_output=True, text=True)
        if proc.returncode == 0:
            out = json.loads(proc.stdout)["output_ids"]
            if len(out) < 64 and out and out[-1] == eos:
                return args
    return None


def check_streaming(dlm_run, artifact, args):
    """Without --json dlm-run streams the text block by block; it must add up to the JSON text
    (compared after the same lossy UTF-8 decoding: random models emit invalid byte sequences)."""
    streamed = subprocess.run([dlm_run, artifact, *args], capture_output=True)
    whole = subprocess.run([dlm_run, artifact, *args, "--json"], capture_output=True, text=True)
    if streamed.returncode or whole.returncode:
        return [f"dlm-run failed: {streamed.stderr!r} {whole.stderr!r}"]
    text = streamed.stdout.decode("utf-8", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    expected = json.loads(whole.stdout)["text"]
    return [] if text == expected else [f"streamed {text!r} != JSON text {expected!r}"]


def check_score(dlm_run, artifact, ckpt, args):
    """dlm-run --score reports the output's left-to-right NLL as tests/reference/scoring.py
    computes it for the same prompt and output."""
    import models
    import scoring
    proc = subprocess.run([dlm_run, artifact, *args, "--json", "--score"], capture_output=True,
                          text=True)
    if proc.returncode:
        return [f"dlm-run --score failed: {proc.stderr.strip()}"]
    ours = json.loads(proc.stdout)
    expected = scoring.left_to_right_nll(models.Model(ckpt), ours["prompt_ids"],
                                         ours["output_ids"])
    if abs(ours["output_nll"] - expected) > SCORE_TOLERANCE:
        return [f"output_nll {ours['output_nll']:.6f} != reference {expected:.6f}"]
    return []


def check_bad_arguments(dlm_run, artifact):
    """dlm-run refuses bad requests with a message and a non-zero exit status."""
    cases = [
        (["--prompt-ids", "1,2", "--gen-length", "30", "--block-length", "8"],
         "gen_length 30 is not a positive multiple of block_length 8"),
        (["--prompt-ids", "1,2", "--gen-length", "32", "--block-length", "8", "--steps", "6"],
         "steps 6 is not divisible by the number of blocks 4"),
        (["--prompt-ids", "1,2", "--cache", "triple"],
         "unknown cache mode 'triple' (expected none, prefix or dual)"),
        (["--prompt-ids", "1,2", "--policy", "entropy-bound", "--cache", "dual"],
         "the entropy-bound policy has no cache mode 'dual' (expected none or prefix)"),
        (["--prompt-ids", "1,2", "--policy", "magic"], "unknown policy 'magic'"),
        (["--prompt-ids", ",".join(["5"] * 600)], "prompt too long"),
        (["--prompt-ids", "1,x"], "--prompt-ids must be comma-separated integers"),
        (["--prompt-ids", ""], "empty prompt"),
        # Without a driver --device cuda names the missing driver; with one, what else is missing
        # (this artifact is compiled for the CPU only).
        (["--prompt-ids", "1", "--device", "cuda"],
         ("CUDA driver not available: libcuda.so.1", "cuBLASLt not available",
          "artifact has no CUDA kernels")),
        (["--prompt-ids", "1", "--device", "cuda-emu"],
         "artifact has no CUDA kernels; compile it with --target cuda or all"),
        (["--gen-length", "8"], "give --prompt TEXT, --prompt-ids 1,2,3 or --chat TEXT"),
    ]
    problems = []
    for args, message in cases:
        proc = subprocess.run([dlm_run, artifact, *args], capture_output=True, text=True)
        expected = message if isinstance(message, tuple) else (message,)
        if proc.returncode == 0 or not any(m in proc.stderr for m in expected):
            problems.append(f"dlm-run {' '.join(args)[:60]}: exit {proc.returncode}, stderr "
                            f"{proc.stderr.strip()[:200]!r}, expected {message!r}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlmc", required=True)
    ap.add_argument("--dlm-run", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--keep", default=None, help="work in this directory and keep it")
    args = ap.parse_args(argv)
    if not have_reference_packages():
        return 77
    sys.path.insert(0, REFERENCE)
    import generate  # noqa: E402
    import torch
    torch.set_num_threads(1)

    work = args.keep or tempfile.mkdtemp(prefix="dlm-e2e-")
    os.makedirs(work, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    failures = []
    early_stops = {}
    try:
        subprocess.run([sys.executable, MAKE_MODELS, os.path.join(work, "ckpt"), "--only",
                         ",".join(models)], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(work, "ckpt", "MANIFEST.json")) as f:
            manifest = json.load(f)
        for model in models:
            ckpt = os.path.join(work, "ckpt", model)
            artifact = os.path.join(work, model + ".dlm")
            proc = subprocess.run([args.dlmc, "compile", ckpt, "-o", artifact, "--smoothing"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                failures.append(f"{model}: dlmc compile failed: {proc.stderr.strip()}")
                continue
            settings = {k: ["--prompt-ids", PROMPT_IDS, *COMMON, *v] for k, v in SETTINGS.items()}
            settings.update({k: [*COMMON, *v] for k, v in TEXT_SETTINGS.items()})
            eos = manifest["models"][model]["eos_token_id"]
            for name, policy_args in EARLY_STOP_POLICIES.items():
                found = find_early_stop(args.dlm_run, artifact, eos, policy_args)
                if found is None:
                    print(f"{model + ' ' + name:40s} (no seed stops early at EOS {eos})")
                else:
                    settings[name] = found
                    early_stops[name] = early_stops.get(name, 0) + 1
            for name, setting in settings.items():
                ours_dump = os.path.join(work, f"{model}.{name}.dlm.npy")
                ref_dump = os.path.join(work, f"{model}.{name}.ref.npy")
                label = f"{model} {name}"
                try:
                    ours = run_ours(args.dlm_run, artifact, setting, ours_dump)
                    ref = run_reference(generate, ckpt, setting, ref_dump)
                    problems = compare(label, ours, ref, ours_dump, ref_dump)
                except (RuntimeError, ValueError, OSError) as e:
                    problems = [str(e)]
                status = "ok" if not problems else "FAILED"
                detail = f"forwards {ours['forwards']}, {len(ours['output_ids'])} ids" \
                    if not problems else ""
                print(f"{label:40s} {status}  {detail}")
                failures += [f"{label}: {p}" for p in problems]
            stream_args = [*COMMON, "--prompt", "Hello there", "--steps", "16", "--temperature",
                           "2", "--seed", "1"]
            failures += [f"{model} streaming: {p}"
                         for p in check_streaming(args.dlm_run, artifact, stream_args)]
            score_problems = check_score(args.dlm_run, artifact, ckpt, settings["gumbel"])
            print(f"{model + ' score':40s} {'ok' if not score_problems else 'FAILED'}")
            failures += [f"{model} score: {p}" for p in score_problems]
            if model == models[0]:
                failures += [f"{model} bad arguments: {p}"
                             for p in check_bad_arguments(args.dlm_run, artifact)]
        # Entropy-bound commits the argmax canvas, so EOS is rare on some models: the early stop of
        # each policy must be exercised on at least one model, not on each.
        for name in EARLY_STOP_POLICIES:
            if not early_stops.get(name):
                failures.append(f"no model stopped early at EOS under {name}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
