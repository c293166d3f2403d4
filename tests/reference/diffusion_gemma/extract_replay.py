#!/usr/bin/env python3
"""Extracts from a fixture's trace.npz the arrays the C++ replay test reads, as plain .npy files.

tests/runtime/program/DiffusionGemmaReplayTest.cpp replays transformers' generate() loop through the
diffusion-gemma decode program, and tests/runtime/cpu/DiffusionGemmaForwardTest.cpp checks the
model's forwards; neither may need Python (or zip) at run time, so this writes
fixtures/<name>/replay/<array>.npy, each a version-1.0 .npy of a little-endian int32, uint8 (for bools) or
float32 array (the bf16 fixture's raw logits too: its recorded logits are float32 values that are not all
bfloat16, and the replay makes its decisions from exactly those). Any numpy; run with the repo venv:

    .venv/bin/python tests/reference/diffusion_gemma/extract_replay.py tests/reference/diffusion_gemma/fixtures/*/
    .venv/bin/python tests/reference/diffusion_gemma/extract_replay.py --check tests/reference/diffusion_gemma/fixtures/*/

--check compares the existing files with what would be written instead of writing.
"""

import argparse
import os
import sys

import numpy as np

# name in trace.npz -> dtype written
ARRAYS = {
    "prompt_ids": "<i4",
    "canvas_init": "<i4",
    "committed": "<i4",
    "sequences": "<i4",
    "step_canvas": "<i4",
    "step_n": "<i4",
    "step_temperature": "<f4",
    "step_raw_logits": "<f4",
    "step_decoder_input_ids": "<i4",
    "step_sampled": "<i4",
    "step_argmax": "<i4",
    "step_entropy": "<f4",
    "step_accept": "|u1",
    "step_renoised": "<i4",
    "step_stop": "|u1",
    # The standalone forwards (prefill, then the decoder without and with self-conditioning),
    # which tests/runtime/cpu/DiffusionGemmaForwardTest compares dlm's forwards with.
    "fwd_canvas": "<i4",
    "fwd_raw_nosc": "<f4",
    "fwd_sc_logits": "<f4",
    "fwd_raw_sc": "<f4",
}


def convert(name, array):
    dtype = np.dtype(ARRAYS[name])
    out = array.astype(dtype)
    if not np.array_equal(out.astype(array.dtype), array):
        raise SystemExit("%s does not fit %s" % (name, dtype))
    return out


def extract(fixture, check):
    trace = np.load(os.path.join(fixture, "trace.npz"))
    out_dir = os.path.join(fixture, "replay")
    os.makedirs(out_dir, exist_ok=True)
    mismatches = 0
    for name in ARRAYS:
        array = convert(name, trace[name])
        path = os.path.join(out_dir, name + ".npy")
        if check:
            if not os.path.exists(path) or not np.array_equal(np.load(path), array) or \
                    np.load(path).dtype != array.dtype:
                print("%s: differs" % path)
                mismatches += 1
            continue
        np.save(path, array, allow_pickle=False)
    return mismatches


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixtures", nargs="+", help="fixture directories (fixtures/<name>/)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    mismatches = sum(extract(fixture, args.check) for fixture in args.fixtures)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
