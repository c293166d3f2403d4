"""What the end-to-end checks of dlm against committed reference fixtures share
(check_autoregressive_matches_transformers.py, check_dflash_matches_reference.py, the precision
checks): running a tool, a generation with its first logits, compiling a fixture
for a device, and main(): the tools' flags, exit code 77 when one is not built, every fixture on the
cpu (and on cuda-emu with --cuda-emu) in one scratch folder."""

import argparse
import json
import os
import subprocess
import tempfile


def run(cmd):
    """The command's stdout; a RuntimeError with its stderr when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {done.stderr.strip()}")
    return done.stdout


def generate_with_logits(dlm_run, artifact, prompt, dump):
    """`dlm-run ARTIFACT --prompt PROMPT` on one thread: its output ids, and its first forward's
    logits (dumped to `dump`) as float64."""
    import numpy as np
    out = run([dlm_run, artifact, "--prompt", prompt, "--json", "--dump-logits", dump,
               "--threads", "1"])
    return json.loads(out)["output_ids"], np.load(dump).astype(np.float64)


def compile_artifact(dlmc, inputs, artifact, device):
    """`dlmc compile INPUTS -o ARTIFACT`, for a device other than the cpu with --target all --precision
    f32; the finished process."""
    args = [dlmc, "compile"] + inputs + ["-o", artifact]
    if device != "cpu":
        args += ["--target", "all", "--precision", "f32"]
    return subprocess.run(args, capture_output=True, text=True)


def check_fixtures(argv, description, fixtures, check):
    """Parses --dlmc, --dlm-run, --cuda-emu from argv; check(fixture, dlmc, dlm_run, device, scratch)
    -> bool for every fixture and device. Returns 0 when all pass, 1 otherwise, 77 when a tool is
    missing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dlmc", required=True)
    parser.add_argument("--dlm-run", required=True)
    parser.add_argument("--cuda-emu", action="store_true", help="also on the emulated device")
    args = parser.parse_args(argv)
    for tool in (args.dlmc, args.dlm_run):
        if not os.access(tool, os.X_OK):
            print("skipped: %s is not built" % tool)
            return 77
    devices = ["cpu"] + (["cuda-emu"] if args.cuda_emu else [])
    ok = True
    with tempfile.TemporaryDirectory() as scratch:
        for fixture in fixtures:
            for device in devices:
                ok &= check(fixture, args.dlmc, args.dlm_run, device, scratch)
    return 0 if ok else 1
