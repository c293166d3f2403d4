"""What the end-to-end checks of dlm against committed reference fixtures share
(check_autoregressive_matches_transformers.py, check_dflash_matches_reference.py): compiling a fixture
for a device, and main(): the tools' flags, exit code 77 when one is not built, every fixture on the
cpu (and on cuda-emu with --cuda-emu) in one scratch folder."""

import argparse
import os
import subprocess
import tempfile


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
