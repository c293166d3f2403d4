#!/usr/bin/env python3
"""Program and parameters apart, end to end: a tiny checkpoint compiled whole and compiled with
`--parameters external` (a small .dlm and a .dlmp beside it) must generate the same tokens, with
the same first logits bit for bit, on every device checked (--device cpu; with --cuda-emu also the
emulated CUDA device, both artifacts compiled with --target all --precision f32). The second
compile of each device's artifact reuses the first's parameter file (dlmc must say it left it as
it was), so the run also checks an artifact compiled against a parameter file it did not write.

    check_parameter_file.py --dlmc build/bin/dlmc --dlm-run build/bin/dlm-run [--cuda-emu]

Greedy, one prompt, two tiny models. Emulated kernels are cached in DLM_EMU_CACHE_DIR (set by
the caller). Exit status 77 when a tool or numpy is missing.
"""

import json
import os
import subprocess
import sys

from e2e_tools import check_fixtures, compile_artifact, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MAKE_MODELS = os.path.join(ROOT, "tests", "models", "make_tiny_models.py")
MODELS = ["llada", "qwen3"]
PROMPT = "a b c"
SETTINGS = ["--gen-length", "16", "--block-length", "8", "--steps", "16"]
NOT_REWRITTEN = "already holds these"


def checkpoint(scratch, model):
    """The tiny checkpoint `model`, made once per run in `scratch`."""
    models = os.path.join(scratch, "ckpt")
    if not os.path.isdir(models):
        subprocess.run([sys.executable, MAKE_MODELS, models, "--only", ",".join(MODELS)],
                       check=True, stdout=subprocess.DEVNULL)
    return os.path.join(models, model)


def compile_both(dlmc, ckpt, whole, split, device):
    """Compiles the whole artifact and the split one, the latter twice (the second compile must
    leave the parameter file as the first wrote it); the problems, if any."""
    done = compile_artifact(dlmc, [ckpt, *SETTINGS], whole, device)
    if done.returncode:
        return [f"dlmc compile (whole) failed: {done.stderr.strip()}"]
    external = [ckpt, *SETTINGS, "--parameters", "external"]
    for attempt in ("first", "second"):
        done = compile_artifact(dlmc, external, split, device)
        if done.returncode:
            return [f"dlmc compile --parameters external ({attempt}) failed: {done.stderr.strip()}"]
    if NOT_REWRITTEN not in done.stdout:
        return [f"the second compile rewrote the parameter file: {done.stdout.strip()}"]
    return []


def generate(dlm_run, artifact, device, dump):
    """Greedy generation from PROMPT on `device`: the output ids and the first forward's logits."""
    import numpy as np
    out = run([dlm_run, artifact, "--prompt", PROMPT, "--device", device, "--json",
               "--dump-logits", dump, "--threads", "1", *SETTINGS])
    return json.loads(out)["output_ids"], np.load(dump)


def compare(dlm_run, whole, split, device, stem):
    """What differs between the two artifacts' generations on `device`."""
    import numpy as np
    try:
        ids_whole, logits_whole = generate(dlm_run, whole, device, stem + ".whole.npy")
        ids_split, logits_split = generate(dlm_run, split, device, stem + ".split.npy")
    except RuntimeError as error:
        return [str(error)]
    problems = []
    if ids_split != ids_whole:
        problems.append(f"output_ids {ids_split} != the whole artifact's {ids_whole}")
    if not np.array_equal(logits_split, logits_whole):
        problems.append("the first logits differ from the whole artifact's")
    return problems


def check(model, dlmc, dlm_run, device, scratch):
    stem = os.path.join(scratch, f"{model}.{device}")
    whole, split = stem + ".whole.dlm", stem + ".split.dlm"
    problems = (compile_both(dlmc, checkpoint(scratch, model), whole, split, device)
                or compare(dlm_run, whole, split, device, stem))
    print(f"{model} on {device}: {'ok' if not problems else 'FAILED'}", flush=True)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return not problems


if __name__ == "__main__":
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("skipped: needs numpy")
        sys.exit(77)
    sys.exit(check_fixtures(sys.argv[1:], __doc__.split("\n")[0], MODELS, check))
