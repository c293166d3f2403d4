#!/usr/bin/env python3
"""End to end on the emulated CUDA device (or a real one): the cases of device_cases.py (every
tiny checkpoint compiled by dlmc for every target, decoded by `dlm-run` with each setting) must
generate on `--device cuda-emu` (`--device cuda` with --device cuda) what `--device cpu` generates
from the same artifact. device_cases.py says what each case holds to; this runs its two phases,
prepare (compile, record the cpu's outputs) and check (the device against them), in one go.

    check_cuda_emu_matches_cpu.py --dlmc build/bin/dlmc --dlm-run build/bin/dlm-run
                                  [--device cuda-emu|cuda] [--models llada,dream] [--keep DIR]
                                  [--cases checked-build|LABEL,LABEL]

With --device cuda on a machine without a CUDA driver the check is skipped (exit status 77) with
the runtime's "CUDA driver not available" message. The emulated runs are timed and the totals
printed. --cases checked-build runs device_cases.CHECKED_BUILD_CASES only (the checked build: every
code path once, its runs being several times slower under the sanitizers). Emulated kernels are compiled once into DLM_EMU_CACHE_DIR (set by the caller, or a
directory of the work tree). Exit status 77 (ctest: skipped) when numpy is missing.
"""

import argparse
import os
import shutil
import sys
import tempfile

import device_cases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlmc", required=True)
    ap.add_argument("--dlm-run", required=True)
    ap.add_argument("--models", default=",".join(device_cases.MODELS))
    ap.add_argument("--device-loop-models", default=",".join(device_cases.DEVICE_LOOP_MODELS))
    ap.add_argument("--diffusion-gemma-fixtures",
                    default=",".join(device_cases.DIFFUSION_GEMMA_FIXTURES),
                    help="DiffusionGemma fixtures to check (empty: none)")
    ap.add_argument("--keep", default=None, help="work in this directory and keep it")
    ap.add_argument("--device", default="cuda-emu", choices=["cuda-emu", "cuda"],
                    help="the device compared with the cpu (cuda: a real GPU; skipped without one)")
    ap.add_argument("--cases", default="",
                    help="only these cases: labels (commas), or checked-build (empty: all)")
    args = ap.parse_args(argv)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("skipped: needs numpy", file=sys.stderr)
        return 77

    split = lambda text: [m for m in text.split(",") if m]  # noqa: E731
    models, loop_models = split(args.models), split(args.device_loop_models)
    unknown = [m for m in loop_models if m not in models]
    if unknown:
        ap.error(f"--device-loop-models {','.join(unknown)} not in --models")
    labels = (device_cases.CHECKED_BUILD_CASES if args.cases == "checked-build"
              else split(args.cases) or None)
    try:
        device_cases.plan(models, loop_models, split(args.diffusion_gemma_fixtures), labels)
    except ValueError as e:
        ap.error(f"--cases: {e}")
    work = args.keep or tempfile.mkdtemp(prefix="dlm-cuda-emu-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("DLM_EMU_CACHE_DIR", os.path.join(work, "emu-cache"))
    cases_dir = os.path.join(work, "cases")
    try:
        if args.device == "cuda":
            # One model first: without a GPU the rest need not be compiled.
            reason = device_cases.missing_cuda_driver(
                args.dlm_run, device_cases.probe_artifact(args.dlmc, models[0],
                                                          os.path.join(work, "probe")))
            if reason:
                print(f"skipped: {reason}", file=sys.stderr)
                return 77
        failures = device_cases.prepare(args.dlmc, args.dlm_run, cases_dir, models, loop_models,
                                        split(args.diffusion_gemma_fixtures),
                                        work=os.path.join(work, "checkpoints"), labels=labels)

        def on_result(case, problems, seconds, note):
            print(device_cases.report_line(case["label"], problems, case["cpu"], seconds,
                                           args.device, note), flush=True)
            failures.extend(f"{case['label']}: {p}" for p in problems)

        _, seconds, runs = device_cases.check(cases_dir, args.dlm_run, args.device, env,
                                              work, on_result)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{args.device} runs: {runs}, {seconds:.1f} s in total")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
