#!/usr/bin/env python3
"""Writes the arrays tests/runtime/sampling/TopKTopPReplayTest.cpp reads, from each fixture's
trace.npz, as plain .npy files (the C++ test reads no zip): replay/sample<k>_step_logits.npy (the
raw logits of every sampled step, float32 [steps, V]) and replay/sample<k>_step_scores.npy
(transformers' scores after its temperature, top-k and top-p warpers, -inf where a token was
removed). The runs' settings stay in trace.json. Any numpy (the repo .venv):

    .venv/bin/python tests/reference/autoregressive/extract_replay.py tests/reference/autoregressive/fixtures/*/
    .venv/bin/python tests/reference/autoregressive/extract_replay.py --check tests/reference/autoregressive/fixtures/*/
"""

import argparse
import json
import os
import sys

import numpy as np


def extract(fixture, check):
    trace = np.load(os.path.join(fixture, "trace.npz"))
    with open(os.path.join(fixture, "trace.json")) as f:
        runs = len(json.load(f)["sampled"])
    os.makedirs(os.path.join(fixture, "replay"), exist_ok=True)
    mismatches = 0
    for k in range(runs):
        for name in ("sample%d_step_logits" % k, "sample%d_step_scores" % k):
            array = trace[name].astype("<f4")
            path = os.path.join(fixture, "replay", name + ".npy")
            if check:
                if not os.path.exists(path) or not np.array_equal(np.load(path), array):
                    print("%s: differs" % path)
                    mismatches += 1
                continue
            np.save(path, array, allow_pickle=False)
    return mismatches


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixtures", nargs="+")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    return 1 if sum(extract(f, args.check) for f in args.fixtures) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
