#!/usr/bin/env python3
"""End to end on the emulated CUDA device (or a real one): every tiny checkpoint, compiled by
dlmc for every target at f32 device precision, must generate with `dlm-run --device cuda-emu`
(`--device cuda` with --device cuda) exactly what `dlm-run --device cpu` generates from the same
artifact.

    check_cuda_emu_matches_cpu.py --dlmc build/bin/dlmc --dlm-run build/bin/dlm-run
                                  [--device cuda-emu|cuda] [--models llada,dream] [--keep DIR]

With --device cuda on a machine without a CUDA driver the check is skipped (exit status 77) with
the runtime's "CUDA driver not available" message.

For each model and each decoding setting below (low-confidence greedy / Gumbel / threshold /
hierarchical / credit, entropy-bound; cache none, prefix and, for low-confidence, dual):
  * output_ids and forwards identical;
  * the first decoded forward's logits (--dump-logits) within 1e-4 of the CPU's, relative to the
    largest CPU logit.
One setting per model also runs with CUDA graphs off (DLM_CUDA_GRAPHS=0): graph replays and eager
forwards must give identical ids and logits.

8-bit projection weights (check_narrow_weights): qwen3 compiled with --weights int8 and llada's
FP8 E4M3 checkpoint stay 8-bit on the device, widened to f32 before each GEMM; with NARROW_SETTINGS
they must match the cpu in the same way (the FP8 one on a device reporting compute capability
8.0, which has no FP8 GEMM). The FP8 GEMM itself (9.0, the default; check_fp8_gemm) runs the demo
model's FP8 checkpoint, within FP8_GEMM_LOGITS of the cpu and with its greedy ids.

Those artifacts carry decoding kernels for blocks of 32 (dlmc's default), so the runs above decode
from the host. The device block loop (a block's steps on the device, DLM_CUDA_DEVICE_LOOP) is
checked on artifacts compiled for the settings' policy and block length, for the models of
--device-loop-models: each DEVICE_LOOP_SETTINGS entry runs with DLM_CUDA_DEVICE_LOOP=require (a
block it cannot run is an error, so the loop provably ran) and must give the CPU's output_ids and
forwards; one runs with chunks of one step and graphs off, one with --dump-logits (the first
block then decodes on the host, the rest on the device). The emulated runs are timed and the totals printed.

DiffusionGemma (--diffusion-gemma-fixtures, the transformers fixtures of
tests/reference/diffusion_gemma/fixtures): each compiled with --target all --precision f32 and
decoded by its own program (the diffusion-gemma sampler on the host over the device's encode and
decode forwards) from its recorded prompt (replay/prompt_ids.npy) with the
DIFFUSION_GEMMA_SETTINGS: output_ids, forwards and the first logits as above, graphs on and (one
setting) off.
Emulated kernels are compiled once into DLM_EMU_CACHE_DIR (set by the caller, or a directory of
the work tree). Exit status 77 (ctest: skipped) when numpy is missing.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from logits_agreement import first_logits_problems

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MAKE_MODELS = os.path.join(ROOT, "tests", "models", "make_tiny_models.py")
MAKE_FP8 = os.path.join(ROOT, "tests", "models", "make_fp8_checkpoint.py")

MODELS = ["llada", "llada_tied", "llada_sharded", "dream", "qwen3", "llama"]
PROMPT_IDS = "5,17,42,99,7,3,250"
COMMON = ["--prompt-ids", PROMPT_IDS, "--gen-length", "32", "--block-length", "8"]
LOGITS_TOLERANCE = 1e-4

SETTINGS = {
    "greedy": ["--steps", "16"],
    "greedy_prefix": ["--steps", "16", "--cache", "prefix"],
    "gumbel": ["--steps", "16", "--temperature", "0.8", "--seed", "5"],
    "gumbel_prefix": ["--steps", "16", "--temperature", "0.8", "--seed", "6", "--cache", "prefix"],
    "threshold_prefix": ["--steps", "32", "--threshold", "0.9", "--cache", "prefix"],
    # dInfer's hierarchical and credit decoding (the host runs their steps, the device forwards).
    "hierarchical_depth3_prefix": ["--steps", "32", "--threshold", "0.3", "--low-threshold",
                                   "0.05", "--depth", "3", "--cache", "prefix"],
    "credit_hierarchical_gumbel": ["--steps", "32", "--low-threshold", "0.02", "--depth", "2",
                                   "--credit", "on", "--temperature", "0.5", "--seed", "3"],
    "greedy_dual": ["--steps", "16", "--cache", "dual"],
    "gumbel_dual": ["--steps", "16", "--temperature", "0.8", "--seed", "7", "--cache", "dual"],
    "entropy_bound": ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "3"],
    "entropy_bound_prefix": ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "4",
                             "--cache", "prefix"],
}
# Compared graph against eager on the emulated device.
GRAPH_SETTING = "gumbel_prefix"
# The settings the artifacts with 8-bit weights (check_narrow_weights) run.
NARROW_SETTINGS = ["greedy", GRAPH_SETTING]
# The FP8 GEMM's first logits against the cpu's widened FP8 weights with f32 activations, relative
# to the largest cpu logit: the E4M3 rounding of the activations (3 mantissa bits). Measured on
# the demo model: 6.3e-2 (3.5e-2 in norm); greedy ids identical.
FP8_GEMM_LOGITS = 0.1
DEMO = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")

DIFFUSION_GEMMA_FIXTURES = ["tiny_f32_swa", "tiny_bf16"]
DIFFUSION_GEMMA_DIR = os.path.join(ROOT, "tests", "reference", "diffusion_gemma", "fixtures")
# The checkpoint's generation_config knobs, and two variations of them.
DIFFUSION_GEMMA_SETTINGS = {
    "default": [],
    "seed5": ["--seed", "5"],
    "seed11_few_steps": ["--seed", "11", "--max-steps", "6", "--entropy-bound", "0.3"],
}
DIFFUSION_GEMMA_GRAPH_SETTING = "seed5"

DEVICE_LOOP_MODELS = ["llada", "dream"]
# The dlmc compile options each device-loop artifact needs (its decoding kernels).
DEVICE_LOOP_ARTIFACTS = {
    "fixed": ["--block-length", "8", "--gen-length", "32", "--steps", "16"],
    "threshold": ["--block-length", "8", "--gen-length", "32", "--steps", "32",
                  "--threshold", "0.9"],
    "entropy": ["--policy", "entropy-bound", "--block-length", "8", "--gen-length", "32"],
}
# name: (artifact, dlm-run arguments, extra environment)
DEVICE_LOOP_SETTINGS = {
    "loop_greedy": ("fixed", ["--steps", "16"], {}),
    "loop_greedy_prefix": ("fixed", ["--steps", "16", "--cache", "prefix"], {}),
    "loop_gumbel": ("fixed", ["--steps", "16", "--temperature", "0.8", "--seed", "5"], {}),
    "loop_gumbel_prefix_chunk1_eager": (
        "fixed", ["--steps", "16", "--temperature", "0.8", "--seed", "6", "--cache", "prefix"],
        {"DLM_CUDA_DEVICE_LOOP_CHUNK": "1", "DLM_CUDA_GRAPHS": "0"}),
    # The dual cache: a full forward keeping the whole sequence, then window forwards.
    "loop_greedy_dual": ("fixed", ["--steps", "16", "--cache", "dual"], {}),
    "loop_gumbel_dual_chunk1_eager": (
        "fixed", ["--steps", "16", "--temperature", "0.8", "--seed", "7", "--cache", "dual"],
        {"DLM_CUDA_DEVICE_LOOP_CHUNK": "1", "DLM_CUDA_GRAPHS": "0"}),
    "loop_threshold": ("threshold", ["--steps", "32", "--threshold", "0.9"], {}),
    # The step count does not decide a threshold block; an explicit cap does.
    "loop_threshold_few_steps": ("threshold", ["--steps", "8", "--threshold", "0.9"], {}),
    "loop_threshold_step_cap": ("threshold", ["--steps", "32", "--threshold", "0.95",
                                              "--temperature", "0.5", "--step-cap", "2"], {}),
    "loop_threshold_gumbel_prefix": (
        "threshold", ["--steps", "32", "--threshold", "0.5", "--temperature", "0.7", "--seed",
                      "9", "--cache", "prefix"], {}),
    "loop_threshold_gumbel_dual": (
        "threshold", ["--steps", "32", "--threshold", "0.5", "--temperature", "0.7", "--seed",
                      "9", "--cache", "dual"], {}),
    "loop_dual_dump": ("fixed", ["--steps", "16", "--temperature", "0.8", "--seed", "5",
                                 "--cache", "dual"], {"dump": True}),
    "loop_entropy_bound": ("entropy", ["--policy", "entropy-bound", "--max-steps", "12",
                                       "--seed", "3"], {}),
    "loop_entropy_bound_prefix": ("entropy", ["--policy", "entropy-bound", "--max-steps", "12",
                                              "--seed", "4", "--cache", "prefix"], {}),
    "loop_entropy_bound_uniform": (
        "entropy", ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "7", "--noise",
                    "uniform"], {}),
    # Converged once the argmax canvas is stable for a step (dream's canvases do before the cap).
    "loop_entropy_bound_stable_argmax": (
        "entropy", ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "3",
                    "--confidence-threshold", "6", "--stability-threshold", "1"], {}),
    "loop_entropy_bound_converging_dump": (
        "entropy", ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "3",
                    "--confidence-threshold", "6", "--stability-threshold", "0"], {"dump": True}),
}


def run(dlm_run, artifact, device, args, dump, env=None):
    cmd = [dlm_run, artifact, *args, "--device", device, "--json", "--threads", "2"]
    if dump:
        cmd += ["--dump-logits", dump]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout), seconds


def compare(ours, cpu, our_logits, cpu_logits, what):
    problems = []
    for key in ("output_ids", "forwards"):
        if ours[key] != cpu[key]:
            problems.append(f"{key}: {what} {ours[key]!r} != cpu {cpu[key]!r}")
    return problems + first_logits_problems(our_logits, cpu_logits, LOGITS_TOLERANCE, "cpu")


def missing_cuda_driver(dlm_run, artifact):
    """Why `dlm-run --device cuda` cannot run here (no driver, no cuBLASLt), or None."""
    proc = subprocess.run([dlm_run, artifact, "--device", "cuda", "--prompt-ids", "1",
                           "--gen-length", "8", "--block-length", "8", "--steps", "8"],
                          capture_output=True, text=True)
    for marker in ("CUDA driver not available", "cuBLASLt not available"):
        if proc.returncode != 0 and marker in proc.stderr:
            return proc.stderr.strip()
    return None


def check_fp8_gemm(args, work, env, failures):
    """The FP8 GEMM (compute capability 9.0, the emulated device's default): the trained demo
    model's FP8 checkpoint, its input rows quantized to E4M3 per row, against the cpu, which
    widens the FP8 weights and keeps f32 activations. Not bit-comparable: held to
    FP8_GEMM_LOGITS (relative to the largest cpu logit) and identical greedy ids. Returns
    (emulated seconds, emulated runs)."""
    ckpt = os.path.join(work, "demo_fp8")
    subprocess.run([sys.executable, MAKE_FP8, DEMO, ckpt, os.path.join(work, "demo_dequantized")],
                   check=True, stdout=subprocess.DEVNULL)
    artifact = os.path.join(work, "demo_fp8.dlm")
    settings = ["--gen-length", "32", "--block-length", "16", "--steps", "32"]
    proc = subprocess.run([args.dlmc, "compile", ckpt, "-o", artifact, "--target", "all",
                           *settings], capture_output=True, text=True)
    if proc.returncode != 0:
        failures.append(f"demo_fp8: dlmc compile failed: {proc.stderr.strip()}")
        return 0.0, 0
    label = "demo_fp8 fp8_gemm"
    seconds, runs, cpu = 0.0, 0, None
    arguments = ["--prompt", "When we speak of free software", *settings]
    cpu_dump, emu_dump, widened_dump = (os.path.join(work, f"demo_fp8.{kind}.npy")
                                        for kind in ("cpu", "emu", "widened"))
    try:
        cpu, _ = run(args.dlm_run, artifact, "cpu", arguments, cpu_dump)
        emu, seconds = run(args.dlm_run, artifact, args.device, arguments, emu_dump, env)
        runs = 1
        problems = first_logits_problems(emu_dump, cpu_dump, FP8_GEMM_LOGITS, "cpu")
        if emu["output_ids"] != cpu["output_ids"]:
            problems.append(f"output_ids: {emu['output_ids']!r} != cpu {cpu['output_ids']!r}")
        # The FP8 GEMM ran: a device without one (8.0: widened weights, f32 activations) gives
        # other logits.
        _, widened_seconds = run(args.dlm_run, artifact, args.device, arguments, widened_dump,
                                 dict(env, DLM_EMU_COMPUTE_CAPABILITY="80"))
        seconds += widened_seconds
        runs += 1
        if args.device == "cuda-emu" and not first_logits_problems(emu_dump, widened_dump, 1e-3,
                                                                   "8.0"):
            problems.append("the logits at 9.0 are those of 8.0's widened weights: no FP8 GEMM ran")
    except (RuntimeError, ValueError, OSError) as e:
        problems = [str(e)]
    report(label, problems, cpu, seconds, failures)
    return seconds, runs


def report(label, problems, cpu, seconds, failures):
    """One line per check: ok with the cpu run's forwards and ids and the emulated seconds, or
    FAILED, its problems added to `failures`."""
    status = "ok" if not problems else "FAILED"
    detail = f"forwards {cpu['forwards']}, {len(cpu['output_ids'])} ids, " \
        f"emulated {seconds:.1f} s" if not problems else ""
    print(f"{label:40s} {status}  {detail}", flush=True)
    failures += [f"{label}: {p}" for p in problems]


def check_setting(args, label, artifact, arguments, work, env, eager_env, failures):
    """dlm-run `arguments` on `artifact`: the device against the cpu, and with `eager_env` also
    eagerly (graphs off) against both; returns (emulated seconds, emulated runs)."""
    stem = os.path.join(work, label.replace(" ", "."))
    cpu_dump, emu_dump, eager_dump = stem + ".cpu.npy", stem + ".emu.npy", stem + ".eager.npy"
    seconds_total, runs, cpu = 0.0, 0, None
    try:
        cpu, _ = run(args.dlm_run, artifact, "cpu", arguments, cpu_dump)
        emu, seconds = run(args.dlm_run, artifact, args.device, arguments, emu_dump, env)
        seconds_total, runs = seconds, 1
        problems = compare(emu, cpu, emu_dump, cpu_dump, args.device)
        if eager_env is not None:
            eager, seconds = run(args.dlm_run, artifact, args.device, arguments, eager_dump,
                                 eager_env)
            seconds_total += seconds
            runs += 1
            problems += compare(eager, cpu, eager_dump, cpu_dump, f"{args.device} eager")
            import numpy as np
            if not np.array_equal(np.load(eager_dump), np.load(emu_dump)):
                problems.append("graph and eager first logits differ")
    except (RuntimeError, ValueError, OSError) as e:
        problems = [str(e)]
    report(label, problems, cpu, seconds_total, failures)
    return seconds_total, runs


def check_narrow_weights(args, models, work, env, eager_env, failures):
    """8-bit projection weights, kept 8-bit on the device and widened per GEMM: qwen3 compiled
    with --weights int8 and llada's FP8 E4M3 checkpoint (make_fp8_checkpoint.py). Both are f32
    checkpoints, so the device computes in f32 and must match the cpu as the plain artifacts do.
    The FP8 one runs as on a device without FP8 GEMMs (compute capability 8.0): widened too.
    Returns (emulated seconds, emulated runs)."""
    artifacts = {}
    if "qwen3" in models:
        artifacts["qwen3_int8"] = (os.path.join(work, "ckpt", "qwen3"), ["--weights", "int8"], env)
    if "llada" in models:
        fp8 = os.path.join(work, "llada_fp8")
        subprocess.run([sys.executable, MAKE_FP8, os.path.join(work, "ckpt", "llada"), fp8,
                        os.path.join(work, "llada_fp8_dequantized")], check=True,
                       stdout=subprocess.DEVNULL)
        artifacts["llada_fp8"] = (fp8, [], dict(env, DLM_EMU_COMPUTE_CAPABILITY="80"))
    seconds_total, runs = 0.0, 0
    for name, (ckpt, flags, device_env) in artifacts.items():
        artifact = os.path.join(work, name + ".dlm")
        proc = subprocess.run([args.dlmc, "compile", ckpt, "-o", artifact, "--target", "all",
                               *flags], capture_output=True, text=True)
        if proc.returncode != 0:
            failures.append(f"{name}: dlmc compile failed: {proc.stderr.strip()}")
            continue
        for setting_name in NARROW_SETTINGS:
            eager = dict(device_env, DLM_CUDA_GRAPHS="0")
            seconds, count = check_setting(
                args, f"{name} {setting_name}", artifact, [*COMMON, *SETTINGS[setting_name]], work,
                device_env, eager if setting_name == GRAPH_SETTING else None, failures)
            seconds_total += seconds
            runs += count
    return seconds_total, runs


def check_device_loop(args, model, ckpt, work, env, failures):
    """The DEVICE_LOOP_SETTINGS of one model; returns (emulated seconds, emulated runs)."""
    artifacts = {}
    for name, options in DEVICE_LOOP_ARTIFACTS.items():
        artifact = os.path.join(work, f"{model}.loop_{name}.dlm")
        proc = subprocess.run([args.dlmc, "compile", ckpt, "-o", artifact, "--target", "all",
                               "--precision", "f32", *options], capture_output=True, text=True)
        if proc.returncode != 0:
            failures.append(f"{model}: dlmc compile {' '.join(options)} failed: "
                            f"{proc.stderr.strip()}")
            continue
        artifacts[name] = artifact
    seconds_total, runs = 0.0, 0
    for name, (artifact_name, setting, extra) in DEVICE_LOOP_SETTINGS.items():
        label = f"{model} {name}"
        if artifact_name not in artifacts:
            continue
        artifact = artifacts[artifact_name]
        extra = dict(extra)
        dump = extra.pop("dump", False)
        cpu_dump = os.path.join(work, f"{model}.{name}.cpu.npy") if dump else None
        emu_dump = os.path.join(work, f"{model}.{name}.emu.npy") if dump else None
        loop_env = dict(env, DLM_CUDA_DEVICE_LOOP="require", **extra)
        cpu, seconds = None, 0.0
        try:
            cpu, _ = run(args.dlm_run, artifact, "cpu", [*COMMON, *setting], cpu_dump)
            emu, seconds = run(args.dlm_run, artifact, args.device, [*COMMON, *setting],
                               emu_dump, loop_env)
            seconds_total += seconds
            runs += 1
            if dump:
                problems = compare(emu, cpu, emu_dump, cpu_dump, f"{args.device} device loop")
            else:
                problems = [f"{key}: device loop {emu[key]!r} != cpu {cpu[key]!r}"
                            for key in ("output_ids", "forwards") if emu[key] != cpu[key]]
        except (RuntimeError, ValueError, OSError) as e:
            problems = [str(e)]
        report(label, problems, cpu, seconds, failures)
    return seconds_total, runs


def check_diffusion_gemma(args, fixture, work, env, eager_env, failures):
    """DIFFUSION_GEMMA_SETTINGS on one fixture; returns (emulated seconds, emulated runs)."""
    import numpy as np
    ckpt = os.path.join(DIFFUSION_GEMMA_DIR, fixture)
    artifact = os.path.join(work, f"dg_{fixture}.dlm")
    proc = subprocess.run([args.dlmc, "compile", ckpt, "-o", artifact, "--target", "all",
                           "--precision", "f32"], capture_output=True, text=True)
    if proc.returncode != 0:
        failures.append(f"{fixture}: dlmc compile failed: {proc.stderr.strip()}")
        return 0.0, 0
    prompt = ",".join(str(int(t)) for t in
                      np.load(os.path.join(ckpt, "replay", "prompt_ids.npy")).reshape(-1))
    seconds_total, runs = 0.0, 0
    for name, setting in DIFFUSION_GEMMA_SETTINGS.items():
        seconds, count = check_setting(
            args, f"{fixture} {name}", artifact, ["--prompt-ids", prompt, *setting], work, env,
            eager_env if name == DIFFUSION_GEMMA_GRAPH_SETTING else None, failures)
        seconds_total += seconds
        runs += count
    return seconds_total, runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlmc", required=True)
    ap.add_argument("--dlm-run", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--device-loop-models", default=",".join(DEVICE_LOOP_MODELS))
    ap.add_argument("--diffusion-gemma-fixtures", default=",".join(DIFFUSION_GEMMA_FIXTURES),
                    help="DiffusionGemma fixtures to check (empty: none)")
    ap.add_argument("--keep", default=None, help="work in this directory and keep it")
    ap.add_argument("--device", default="cuda-emu", choices=["cuda-emu", "cuda"],
                    help="the device compared with the cpu (cuda: a real GPU; skipped without one)")
    args = ap.parse_args(argv)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("skipped: needs numpy", file=sys.stderr)
        return 77

    work = args.keep or tempfile.mkdtemp(prefix="dlm-cuda-emu-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("DLM_EMU_CACHE_DIR", os.path.join(work, "emu-cache"))
    eager_env = dict(env, DLM_CUDA_GRAPHS="0")
    models = [m for m in args.models.split(",") if m]
    loop_models = [m for m in args.device_loop_models.split(",") if m]
    unknown = [m for m in loop_models if m not in models]
    if unknown:
        ap.error(f"--device-loop-models {','.join(unknown)} not in --models")
    failures = []
    emulated_seconds = 0.0
    emulated_runs = 0
    try:
        subprocess.run([sys.executable, MAKE_MODELS, os.path.join(work, "ckpt"), "--only",
                        ",".join(models)], check=True, stdout=subprocess.DEVNULL)
        for model in models:
            ckpt = os.path.join(work, "ckpt", model)
            artifact = os.path.join(work, model + ".dlm")
            proc = subprocess.run([args.dlmc, "compile", ckpt, "-o", artifact, "--target", "all",
                                   "--precision", "f32"], capture_output=True, text=True)
            if proc.returncode != 0:
                failures.append(f"{model}: dlmc compile failed: {proc.stderr.strip()}")
                continue
            if args.device == "cuda" and model == models[0]:
                reason = missing_cuda_driver(args.dlm_run, artifact)
                if reason:
                    print(f"skipped: {reason}", file=sys.stderr)
                    return 77
            for name, setting in SETTINGS.items():
                seconds, runs = check_setting(args, f"{model} {name}", artifact,
                                              [*COMMON, *setting], work,
                                              env, eager_env if name == GRAPH_SETTING else None,
                                              failures)
                emulated_seconds += seconds
                emulated_runs += runs
            if model not in loop_models:
                continue
            seconds, runs = check_device_loop(args, model, ckpt, work, env, failures)
            emulated_seconds += seconds
            emulated_runs += runs
        seconds, runs = check_narrow_weights(args, models, work, env, eager_env, failures)
        emulated_seconds += seconds
        emulated_runs += runs
        seconds, runs = check_fp8_gemm(args, work, env, failures)
        emulated_seconds += seconds
        emulated_runs += runs
        for fixture in [f for f in args.diffusion_gemma_fixtures.split(",") if f]:
            seconds, runs = check_diffusion_gemma(args, fixture, work, env, eager_env, failures)
            emulated_seconds += seconds
            emulated_runs += runs
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"emulated runs: {emulated_runs}, {emulated_seconds:.1f} s in total")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
