"""The cuda backend against the cpu backend, as cases that travel: every tiny checkpoint compiled
for every target, each run by `dlm-run` on the cpu and on a CUDA device (emulated or real) with
the same arguments, and the device's output held to the cpu's.

Two phases, so that the device can be on another machine:
  * prepare(dlmc, dlm_run, out) makes the checkpoints, compiles the artifacts and records the
    cpu's outputs (output ids, forwards, first-forward logits) under `out`, with `manifest.json`
    describing every case. It needs dlmc, the checkpoint scripts (torch) and numpy.
  * check(out, dlm_run, device) runs each case on the device and compares it with the recorded
    cpu outputs. It needs only dlm-run, numpy and what prepare wrote.
check_cuda_emu_matches_cpu.py runs both in one go (ctest); scripts/gpu-kit runs prepare into the
GPU kit and scripts/gpu-check runs check from it on a real GPU (docs/gpu-check.md).

The cases (all at f32 device precision unless said otherwise):
  * SETTINGS on every model of MODELS (low-confidence greedy / Gumbel / threshold / hierarchical /
    credit, entropy-bound; cache none, prefix and, for low-confidence, dual and its vicinity
    refresh, and iteration smoothing, for which these artifacts are compiled with --smoothing):
    output_ids and
    forwards identical, first logits within LOGITS_TOLERANCE of the cpu's (relative to the
    largest cpu logit). GRAPH_SETTING also runs eagerly (DLM_CUDA_GRAPHS=0): graph replays and
    eager forwards must give identical ids and logits.
  * 8-bit and 4-bit projection weights (narrow): qwen3 with --weights int8, dream with --weights
    int4 and llada's FP8 E4M3 checkpoint stay narrow on the device, widened to f32 before each GEMM (the FP8 one as on compute
    capability 8.0, which has no FP8 GEMM); NARROW_SETTINGS held to the cpu as above. 8-bit
    experts: DiffusionGemma's tiny_f32_swa with --weights int8, and with --weights int4 in groups
    of 4 and --quantize-embeddings (the device widens its experts and its table at load), its seed5
    setting held to the cpu as above.
  * bf16 device precision (BF16_MODELS): first logits within BF16_LOGITS of the cpu's.
  * The FP8 GEMM (compute capability 9.0): the demo model's FP8 checkpoint, within FP8_GEMM_LOGITS
    of the cpu and with its greedy ids; on the emulated device the logits must differ from 8.0's
    widened weights (the FP8 GEMM provably ran).
  * The device block loop (DLM_CUDA_DEVICE_LOOP=require: a block it cannot run is an error) on
    artifacts compiled for the settings' policy and block length: DEVICE_LOOP_SETTINGS must give
    the cpu's output_ids and forwards (and logits where they dump them).
  * DiffusionGemma (the transformers fixtures of tests/reference/diffusion_gemma/fixtures) from
    its recorded prompt with DIFFUSION_GEMMA_SETTINGS, as SETTINGS.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from logits_agreement import first_logits_problems

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MAKE_MODELS = os.path.join(ROOT, "tests", "models", "make_tiny_models.py")
MAKE_FP8 = os.path.join(ROOT, "tests", "models", "make_fp8_checkpoint.py")
DEMO = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")
DIFFUSION_GEMMA_DIR = os.path.join(ROOT, "tests", "reference", "diffusion_gemma", "fixtures")
MANIFEST = "manifest.json"

MODELS = ["llada", "llada_tied", "llada_sharded", "dream", "qwen3", "llama"]
PROMPT_IDS = "5,17,42,99,7,3,250"
COMMON = ["--prompt-ids", PROMPT_IDS, "--gen-length", "32", "--block-length", "8"]
LOGITS_TOLERANCE = 1e-4
F32 = ["--target", "all", "--precision", "f32"]

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
    # dInfer's vicinity refresh: wider window forwards over the dual cache.
    "vicinity_gumbel": ["--steps", "16", "--temperature", "0.8", "--seed", "8", "--cache", "dual",
                        "--knob", "prefix_look=3", "--knob", "after_look=5"],
    # A warmup of full forwards first (a block whose steps' forwards differ runs on the host).
    "vicinity_warmup_threshold": ["--steps", "32", "--threshold", "0.5", "--seed", "9", "--cache",
                                  "dual", "--knob", "prefix_look=16", "--knob", "after_look=40",
                                  "--knob", "warmup_steps=3"],
    # dInfer's iteration smoothing: the function `smooth` reads the last forward's logits of every
    # row (its soft embedding on the masked rows, at a weight the graph reads from the device).
    "smoothing_threshold": ["--steps", "32", "--threshold", "0.5", "--knob", "smoothing=0.3"],
    "smoothing_gumbel": ["--steps", "16", "--temperature", "0.8", "--seed", "10", "--knob",
                         "smoothing=0.3", "--knob", "smoothing_init=0.2", "--knob",
                         "smoothing_growth=0.05"],
    # With the prefix cache: the block's later steps read the kept rows from a later position
    # than their first fed one's (input_at).
    "smoothing_prefix_threshold": ["--steps", "32", "--threshold", "0.5", "--cache", "prefix",
                                   "--knob", "smoothing=0.3"],
    "entropy_bound": ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "3"],
    "entropy_bound_prefix": ["--policy", "entropy-bound", "--max-steps", "12", "--seed", "4",
                             "--cache", "prefix"],
}
# Compared graph against eager.
GRAPH_SETTING = "gumbel_prefix"
# The settings the artifacts with 8-bit weights run.
NARROW_SETTINGS = ["greedy", GRAPH_SETTING]
# The FP8 GEMM's first logits against the cpu's widened FP8 weights with f32 activations, relative
# to the largest cpu logit: the E4M3 rounding of the activations (3 mantissa bits). Measured on
# the demo model: 6.3e-2 (3.5e-2 in norm); greedy ids identical.
FP8_GEMM_LOGITS = 0.1
FP8_GEMM_SETTINGS = ["--prompt", "When we speak of free software", "--gen-length", "32",
                     "--block-length", "16", "--steps", "32"]

# bf16 on the device (llada's bf16 checkpoint as it is, dream's f32 one with --weights bf16):
# the device computes in bf16, the cpu in f32 over the same weights, so only the first logits are
# held, within BF16_LOGITS of the largest cpu logit; the ids may part at near-ties and are
# reported, not compared. Measured on the emulated device: 6.4e-3 (llada), 8.4e-3 (dream).
BF16_MODELS = {"llada": [], "dream": ["--weights", "bf16"]}
BF16_SETTINGS = ["greedy", "gumbel_prefix"]
BF16_LOGITS = 0.02

DIFFUSION_GEMMA_FIXTURES = ["tiny_f32_swa", "tiny_bf16"]
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
    # Vicinity refresh: windows clipped at the sequence's start and end, and inside it.
    "loop_vicinity_threshold": (
        "threshold", ["--steps", "32", "--threshold", "0.5", "--seed", "9", "--cache", "dual",
                      "--knob", "prefix_look=12", "--knob", "after_look=5"], {}),
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


# The checked build's selection (ASan + UBSan make every run several times slower): each code
# path of the cases above once (every model, every cache, each sampler family, graphs against
# eager, the device loop's chunks, dumps and dual cache, 8-bit and bf16 weights, DiffusionGemma).
# The plain build runs every case.
CHECKED_BUILD_CASES = [
    "llada greedy", "llada_tied gumbel_prefix", "llada_sharded threshold_prefix",
    "dream greedy_dual", "qwen3 hierarchical_depth3_prefix", "qwen3 entropy_bound_prefix",
    "llama credit_hierarchical_gumbel", "llada loop_dual_dump",
    "dream loop_gumbel_dual_chunk1_eager", "dream loop_threshold_gumbel_prefix",
    "dream loop_entropy_bound_converging_dump", "qwen3_int8 greedy", "llada_fp8 gumbel_prefix",
    "dream_bf16 greedy", "tiny_f32_swa seed5", "llada loop_vicinity_threshold",
    "tiny_f32_swa_int8 seed5", "dream_int4 greedy",
]


# A dlm-run of a tiny case that takes longer than this has hung (the longest emulated one takes
# about 15 s on 2 cores).
CASE_TIMEOUT = 300.0


def run_process(cmd, timeout=None, env=None):
    """(exit status, stdout, stderr). Past `timeout` seconds the command and everything it started
    (compute-sanitizer's child, say) are killed, and the status is 124."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return 124, out, err + f"\n(killed after {timeout:.0f} s)"


def run_dlm(dlm_run, artifact, device, args, dump, env=None, timeout=CASE_TIMEOUT):
    """dlm-run's --json output and its wall seconds; a RuntimeError naming the command when it
    fails or runs past `timeout`."""
    cmd = [dlm_run, artifact, *args, "--device", device, "--json", "--threads", "2"]
    if dump:
        cmd += ["--dump-logits", dump]
    start = time.monotonic()
    rc, out, err = run_process(cmd, timeout, env)
    seconds = time.monotonic() - start
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {rc}: {err.strip()}")
    return json.loads(out), seconds


def missing_cuda_driver(dlm_run, artifact, env=None):
    """Why `dlm-run --device cuda` cannot run here (no driver, no cuBLASLt, no device), or None."""
    rc, _, err = run_process([dlm_run, artifact, "--device", "cuda", "--prompt-ids", "1",
                              "--gen-length", "8", "--block-length", "8", "--steps", "8"],
                             120, env)
    for marker in ("CUDA driver not available", "cuBLASLt not available",
                   "the CUDA driver sees no device"):
        if rc != 0 and marker in err:
            return err.strip()
    return None


# --- the plan: artifacts (checkpoint + dlmc flags) and cases (artifact + dlm-run arguments) -------

def _case(label, artifact, args, *, env=None, dump=True, eager=False, compare="exact",
          tolerance=LOGITS_TOLERANCE):
    """compare: "exact" (ids, forwards, logits within `tolerance`), "ids" (ids and forwards only,
    logits too when dumped), "fp8_gemm" (ids, logits within `tolerance`, and on the emulated
    device logits unlike 8.0's) or "bf16" (logits within `tolerance` only)."""
    return {"label": label, "artifact": artifact, "args": args, "env": env or {}, "dump": dump,
            "eager": eager, "compare": compare, "tolerance": tolerance}


def plan(models, loop_models, diffusion_gemma_fixtures, labels=None):
    """The artifacts ({name: {"checkpoint": spec, "flags": [...]}}) and the cases, in order. A
    checkpoint spec is ("tiny", model), ("fp8", model), ("demo_fp8",) or ("dir", path). `labels`
    (None: all) keeps only those cases, and the artifacts they run; a label that names no case is
    a ValueError."""
    artifacts, cases = _whole_plan(models, loop_models, diffusion_gemma_fixtures)
    if labels is None:
        return artifacts, cases
    unknown = sorted(set(labels) - {case["label"] for case in cases})
    if unknown:
        raise ValueError(f"no such case: {', '.join(unknown)}")
    cases = [case for case in cases if case["label"] in set(labels)]
    used = {case["artifact"] for case in cases}
    return {name: a for name, a in artifacts.items() if name in used}, cases


def _whole_plan(models, loop_models, diffusion_gemma_fixtures):
    artifacts, cases = {}, []
    for model in models:
        artifacts[model] = {"checkpoint": ("tiny", model), "flags": [*F32, "--smoothing"]}
        for name, setting in SETTINGS.items():
            cases.append(_case(f"{model} {name}", model, [*COMMON, *setting],
                               eager=name == GRAPH_SETTING))
        if model not in loop_models:
            continue
        for name, options in DEVICE_LOOP_ARTIFACTS.items():
            artifacts[f"{model}.loop_{name}"] = {"checkpoint": ("tiny", model),
                                                 "flags": [*F32, *options]}
        for name, (artifact, setting, extra) in DEVICE_LOOP_SETTINGS.items():
            extra = dict(extra)
            dump = extra.pop("dump", False)
            cases.append(_case(f"{model} {name}", f"{model}.loop_{artifact}",
                               [*COMMON, *setting], env=dict(DLM_CUDA_DEVICE_LOOP="require",
                                                             **extra),
                               dump=dump, compare="ids"))
    narrow = {}
    if "qwen3" in models:
        narrow["qwen3_int8"] = ({"checkpoint": ("tiny", "qwen3"),
                                 "flags": ["--target", "all", "--weights", "int8"]}, {})
    if "dream" in models:
        narrow["dream_int4"] = ({"checkpoint": ("tiny", "dream"),
                                 "flags": ["--target", "all", "--weights", "int4"]}, {})
    if "llada" in models:
        narrow["llada_fp8"] = ({"checkpoint": ("fp8", "llada"), "flags": ["--target", "all"]},
                               {"DLM_EMU_COMPUTE_CAPABILITY": "80"})
    for name, (artifact, env) in narrow.items():
        artifacts[name] = artifact
        for setting in NARROW_SETTINGS:
            cases.append(_case(f"{name} {setting}", name, [*COMMON, *SETTINGS[setting]], env=env,
                               eager=setting == GRAPH_SETTING))
    for model, flags in BF16_MODELS.items():
        if model not in models:
            continue
        artifacts[f"{model}_bf16"] = {"checkpoint": ("tiny", model),
                                      "flags": ["--target", "all", *flags]}
        for setting in BF16_SETTINGS:
            cases.append(_case(f"{model}_bf16 {setting}", f"{model}_bf16",
                               [*COMMON, *SETTINGS[setting]], compare="bf16",
                               tolerance=BF16_LOGITS))
    artifacts["demo_fp8"] = {"checkpoint": ("demo_fp8",),
                             "flags": ["--target", "all", *FP8_GEMM_SETTINGS[2:]]}
    cases.append(_case("demo_fp8 fp8_gemm", "demo_fp8", FP8_GEMM_SETTINGS, compare="fp8_gemm",
                       tolerance=FP8_GEMM_LOGITS))
    for fixture in diffusion_gemma_fixtures:
        name = f"dg_{fixture}"
        artifacts[name] = {"checkpoint": ("dir", os.path.join(DIFFUSION_GEMMA_DIR, fixture)),
                           "flags": F32}
        for setting_name, setting in DIFFUSION_GEMMA_SETTINGS.items():
            cases.append(_case(f"{fixture} {setting_name}", name,
                               ["--prompt-ids", "@replay", *setting],
                               eager=setting_name == DIFFUSION_GEMMA_GRAPH_SETTING))
    if "tiny_f32_swa" in diffusion_gemma_fixtures:
        # 8-bit experts: the device holds them widened to its precision, the cpu multiplies
        # their tiles.
        artifacts["dg_int8"] = {
            "checkpoint": ("dir", os.path.join(DIFFUSION_GEMMA_DIR, "tiny_f32_swa")),
            "flags": ["--target", "all", "--weights", "int8"]}
        cases.append(_case("tiny_f32_swa_int8 seed5", "dg_int8",
                           ["--prompt-ids", "@replay", *DIFFUSION_GEMMA_SETTINGS["seed5"]]))
        # 4-bit experts, projections and (tied) embedding table, which the soft embedding reads
        # too, in groups of 4 (a divisor of every input width: 56, 48, 12, 64 and 128).
        artifacts["dg_int4"] = {
            "checkpoint": ("dir", os.path.join(DIFFUSION_GEMMA_DIR, "tiny_f32_swa")),
            "flags": ["--target", "all", "--weights", "int4", "--weight-group-size", "4",
                      "--quantize-embeddings"]}
        cases.append(_case("tiny_f32_swa_int4 seed5", "dg_int4",
                           ["--prompt-ids", "@replay", *DIFFUSION_GEMMA_SETTINGS["seed5"]]))
    return artifacts, cases


# --- prepare: checkpoints, artifacts, the cpu's outputs ------------------------------------------

def _checkpoint(spec, work, made):
    """The checkpoint directory of `spec`, made in `work` on first use."""
    kind = spec[0]
    if kind == "tiny":
        return os.path.join(work, "ckpt", spec[1])
    if kind == "dir":
        return spec[1]
    source = DEMO if kind == "demo_fp8" else os.path.join(work, "ckpt", spec[1])
    name = "demo_fp8" if kind == "demo_fp8" else f"{spec[1]}_fp8"
    ckpt = os.path.join(work, name)
    if name not in made:
        subprocess.run([sys.executable, MAKE_FP8, source, ckpt,
                        os.path.join(work, name + "_dequantized")], check=True,
                       stdout=subprocess.DEVNULL)
        made.add(name)
    return ckpt


def _replay_prompt(ckpt):
    import numpy as np
    return ",".join(str(int(t)) for t in
                    np.load(os.path.join(ckpt, "replay", "prompt_ids.npy")).reshape(-1))


def probe_artifact(dlmc, model, work):
    """The tiny `model` compiled as the cases compile it, in `work`: enough to ask whether a
    device can run at all before compiling everything."""
    subprocess.run([sys.executable, MAKE_MODELS, os.path.join(work, "ckpt"), "--only", model],
                   check=True, stdout=subprocess.DEVNULL)
    artifact = os.path.join(work, model + ".dlm")
    subprocess.run([dlmc, "compile", os.path.join(work, "ckpt", model), "-o", artifact, *F32],
                   check=True, capture_output=True)
    return artifact


def prepare(dlmc, dlm_run, out, models=MODELS, loop_models=DEVICE_LOOP_MODELS,
            diffusion_gemma_fixtures=DIFFUSION_GEMMA_FIXTURES, work=None, labels=None):
    """Compiles the plan's artifacts into `out` and records the cpu's outputs there (refs/), with
    manifest.json. Checkpoints are made in `work` (default: out/work, removed afterwards).
    Returns the failures (an artifact dlmc refused, a cpu run that failed): their cases are left
    out of the manifest."""
    artifacts, cases = plan(models, loop_models, diffusion_gemma_fixtures, labels)
    own_work = work is None
    work = work or os.path.join(out, "work")
    os.makedirs(os.path.join(out, "refs"), exist_ok=True)
    failures, made, compiled = [], set(), {}
    try:
        tiny = sorted({a["checkpoint"][1] for a in artifacts.values()
                       if a["checkpoint"][0] in ("tiny", "fp8")})
        if tiny:
            subprocess.run([sys.executable, MAKE_MODELS, os.path.join(work, "ckpt"), "--only",
                            ",".join(tiny)], check=True, stdout=subprocess.DEVNULL)
        for name, artifact in artifacts.items():
            ckpt = _checkpoint(artifact["checkpoint"], work, made)
            path = os.path.join(out, name + ".dlm")
            proc = subprocess.run([dlmc, "compile", ckpt, "-o", path, *artifact["flags"]],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                failures.append(f"{name}: dlmc compile failed: {proc.stderr.strip()}")
                continue
            compiled[name] = ckpt
        recorded = []
        for case in cases:
            if case["artifact"] not in compiled:
                continue
            if "@replay" in case["args"]:
                prompt = _replay_prompt(compiled[case["artifact"]])
                case["args"] = [prompt if a == "@replay" else a for a in case["args"]]
            stem = case["label"].replace(" ", ".")
            dump = os.path.join("refs", stem + ".cpu.npy") if case["dump"] else None
            try:
                cpu, _ = run_dlm(dlm_run, os.path.join(out, case["artifact"] + ".dlm"), "cpu",
                                 case["args"], dump and os.path.join(out, dump))
            except (RuntimeError, ValueError, OSError) as e:
                failures.append(f"{case['label']}: the cpu run failed: {e}")
                continue
            case["cpu"] = {"output_ids": cpu["output_ids"], "forwards": cpu["forwards"]}
            case["cpu_logits"] = dump
            recorded.append(case)
        with open(os.path.join(out, MANIFEST), "w") as f:
            json.dump({"artifacts": {n: {"flags": a["flags"]} for n, a in artifacts.items()
                                     if n in compiled},
                       "cases": recorded}, f, indent=1)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    return failures


# --- check: the device against the recorded cpu outputs -------------------------------------------

def _compare(ours, case, our_logits, out, what):
    cpu = case["cpu"]
    keys = {"fp8_gemm": ("output_ids",), "bf16": ()}.get(case["compare"],
                                                        ("output_ids", "forwards"))
    problems = [f"{key}: {what} {ours[key]!r} != cpu {cpu[key]!r}" for key in keys
                if ours[key] != cpu[key]]
    if our_logits and case["cpu_logits"]:
        problems += first_logits_problems(our_logits, os.path.join(out, case["cpu_logits"]),
                                          case["tolerance"], "cpu")
    return problems


def _bf16_note(ours, case, our_logits, out):
    """How far a bf16 device run is from the cpu: the first logits' relative error and how many
    ids agree."""
    import numpy as np
    a, b = np.load(our_logits), np.load(os.path.join(out, case["cpu_logits"]))
    err = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) if a.shape == b.shape else -1
    cpu_ids = case["cpu"]["output_ids"]
    same = sum(x == y for x, y in zip(ours["output_ids"], cpu_ids))
    return f"first logits {err:.1e} from the cpu's, {same} of {len(cpu_ids)} ids the same"


def on_real_gpu(case, device):
    """The case as a real GPU holds it: a case that asks the emulated device for compute
    capability 8.0 (no FP8 GEMM: widened FP8 weights) gets the FP8 GEMM on a real 9.0 device, so
    its first logits are held within FP8_GEMM_LOGITS and its ids reported, not compared."""
    if device != "cuda" or "DLM_EMU_COMPUTE_CAPABILITY" not in case["env"]:
        return case
    return dict(case, compare="bf16", tolerance=FP8_GEMM_LOGITS)


def check_case(case, out, dlm_run, device, env, scratch, timeout=CASE_TIMEOUT):
    """Runs one case on `device`, each dlm-run killed past `timeout` seconds: (problems, device
    seconds, device runs, note)."""
    case = on_real_gpu(case, device)
    stem = os.path.join(scratch, case["label"].replace(" ", "."))
    artifact = os.path.join(out, case["artifact"] + ".dlm")
    case_env = dict(env, **case["env"])
    dump = stem + ".device.npy" if case["dump"] else None
    seconds_total, runs, note = 0.0, 0, ""
    try:
        ours, seconds = run_dlm(dlm_run, artifact, device, case["args"], dump, case_env,
                                timeout)
        seconds_total, runs = seconds, 1
        problems = _compare(ours, case, dump, out, device)
        if case["compare"] == "bf16":
            note = _bf16_note(ours, case, dump, out)
        if case["eager"]:
            eager_dump = stem + ".eager.npy"
            eager, seconds = run_dlm(dlm_run, artifact, device, case["args"], eager_dump,
                                     dict(case_env, DLM_CUDA_GRAPHS="0"), timeout)
            seconds_total += seconds
            runs += 1
            problems += _compare(eager, case, eager_dump, out, f"{device} eager")
            import numpy as np
            if not np.array_equal(np.load(eager_dump), np.load(dump)):
                problems.append("graph and eager first logits differ")
        if case["compare"] == "fp8_gemm" and device == "cuda-emu":
            # The FP8 GEMM ran: a device without one (8.0: widened weights, f32 activations)
            # gives other logits.
            widened_dump = stem + ".widened.npy"
            _, seconds = run_dlm(dlm_run, artifact, device, case["args"], widened_dump,
                                 dict(case_env, DLM_EMU_COMPUTE_CAPABILITY="80"), timeout)
            seconds_total += seconds
            runs += 1
            if not first_logits_problems(dump, widened_dump, 1e-3, "8.0"):
                problems.append("the logits at 9.0 are those of 8.0's widened weights: "
                                "no FP8 GEMM ran")
    except (RuntimeError, ValueError, OSError) as e:
        problems = [str(e)]
    return problems, seconds_total, runs, note


def load_manifest(out):
    with open(os.path.join(out, MANIFEST)) as f:
        return json.load(f)


def check(out, dlm_run, device, env, scratch, on_result=None, deadline=None, cases=None, jobs=1):
    """Every case of out/manifest.json on `device`. on_result(case, problems, seconds, note) is
    called as each finishes; cases not started by `deadline` (time.monotonic()) are reported as
    not run. `cases` narrows the manifest's cases; `jobs` cases run at once (a real GPU takes
    several processes; the emulated device has the machine's cores to itself). Returns (results in
    the manifest's order, device seconds, device runs): results are (label, problems, seconds,
    note) with problems None for a case not run."""
    cases = load_manifest(out)["cases"] if cases is None else cases
    lock = threading.Lock()

    def one(case):
        if deadline is not None and time.monotonic() > deadline:
            return (case["label"], None, 0.0, ""), 0
        # A run that hangs is killed, at the latest a little past the deadline.
        timeout = CASE_TIMEOUT if deadline is None else \
            max(20.0, min(CASE_TIMEOUT, deadline - time.monotonic() + 20.0))
        problems, seconds, runs, note = check_case(case, out, dlm_run, device, env, scratch,
                                                   timeout)
        if on_result:
            with lock:
                on_result(case, problems, seconds, note)
        return (case["label"], problems, seconds, note), runs

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = list(pool.map(one, cases))
    results = [result for result, _ in done]
    return (results, sum(result[2] for result in results), sum(runs for _, runs in done))


def report_line(label, problems, cpu, seconds, device, note=""):
    """One line per case: ok with the cpu run's forwards and ids and the device seconds, FAILED, or
    not run (the time box ran out); then the note, if any."""
    if problems is None:
        return f"{label:40s} not run (time box)"
    if problems:
        return f"{label:40s} FAILED" + (f"  ({note})" if note else "")
    return (f"{label:40s} ok  forwards {cpu['forwards']}, {len(cpu['output_ids'])} ids, "
            f"{device} {seconds:.1f} s" + (f"; {note}" if note else ""))
