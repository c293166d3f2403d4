#!/usr/bin/env python3
"""Rebuild a complete ONNX export from a committed fixture (tests/models/onnx_exports/NAME) and the
tiny checkpoint its weights came from.

    python tests/models/attach_onnx_weights.py FIXTURE_DIR CHECKPOINT_DIR OUT_DIR

The fixtures are exports made by export_onnx_styles.py in the reference venv (torch 2.15), which
CI does not have. Their weights are the tiny checkpoints' (make_tiny_models.py, seeded, so CI
regenerates them bit for bit): a fixture stores its graph and every other tensor, and weights.json
says which checkpoint tensor each weight initializer holds, transposed or not (an exporter that
constant-folds a linear layer stores Wᵀ). OUT_DIR gets model.onnx, config.json and tokenizer.json.
"""

import json
import os
import shutil
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export_onnx import load_checkpoint  # noqa: E402


def main(argv=None):
    fixture, checkpoint, out = (argv or sys.argv[1:])[:3]
    model = onnx.load(os.path.join(fixture, "model.onnx"))
    with open(os.path.join(fixture, "weights.json")) as f:
        recipe = json.load(f)
    tensors = load_checkpoint(checkpoint)
    initializers = {t.name: t for t in model.graph.initializer}
    for name, source in recipe.items():
        values = tensors[source["tensor"]].numpy()
        if source["transposed"]:
            values = values.T
        target = initializers[name]
        if list(target.dims) != list(values.shape):
            sys.exit(f"{fixture}: initializer {name} is {list(target.dims)}, but checkpoint tensor "
                     f"{source['tensor']} gives {list(values.shape)}")
        target.raw_data = np.ascontiguousarray(values, dtype="<f4").tobytes()
    os.makedirs(out, exist_ok=True)
    onnx.save(model, os.path.join(out, "model.onnx"))
    for companion in ("config.json", "tokenizer.json"):
        shutil.copyfile(os.path.join(checkpoint, companion), os.path.join(out, companion))


if __name__ == "__main__":
    main()
