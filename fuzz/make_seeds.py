#!/usr/bin/env python3
"""Write the binary seeds of the artifact, safetensors and onnx fuzz targets (too big to commit).

    python fuzz/make_seeds.py OUT_DIR --dlmc PATH/TO/dlmc

Everything comes from the tiny test checkpoints (tests/models/make_tiny_models.py), so the seeds
are the files the importer and the runtime really meet, only small:

  OUT_DIR/artifact/     llada.dlm (low-confidence, chat template), qwen3.dlm (autoregressive),
                        diffusion_gemma.dlm (experts, sliding window; the committed tiny fixture),
                        each compiled with a few tokens per generation, and qwen3.dlmp (qwen3's
                        weights as a parameter file, dlmc compile --parameters external)
  OUT_DIR/safetensors/  llada's model.safetensors, a file of every dtype with metadata, a scalar
                        and an empty tensor, an empty file
  OUT_DIR/onnx/         llada's torch.onnx export (fuzz/fixtures/tiny_llada is its config.json and
                        tokenizer.json), the same with its weights in external data (graph only),
                        the LLaDA exports of tests/models/onnx_exports with their weights, and
                        small graphs of single ops
  OUT_DIR/onnx-data/    weights.bin, the external data: the onnx target copies this directory
                        beside its input when DLM_FUZZ_ONNX_DATA names it (fuzz/run-corpus does)
  OUT_DIR/regressions/  inputs of fixed bugs too big to commit, made from the seeds (fuzz/run-corpus
                        runs them with fuzz/regressions/): artifact/llada_nan_q.dlm

OUT_DIR/.complete marks a finished run; fuzz/run-corpus makes the seeds only when it is missing.
Needs torch, safetensors, numpy and onnx (the repository's .venv has them).
"""

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args):
    subprocess.run([str(a) for a in args], check=True, stdout=subprocess.DEVNULL)


def make_models(work):
    models = os.path.join(work, "models")
    run(sys.executable, os.path.join(ROOT, "tests/models/make_tiny_models.py"), models,
        "--only", "llada,qwen3")
    # The onnx target's fixed companions must be this llada's, or no seed gets past the checks.
    for name in ("config.json", "tokenizer.json"):
        if not filecmp.cmp(os.path.join(models, "llada", name),
                           os.path.join(ROOT, "fuzz/fixtures/tiny_llada", name), shallow=False):
            sys.exit(f"fuzz/fixtures/tiny_llada/{name} differs from make_tiny_models.py's llada: "
                     "copy the new one there")
    return models


def make_artifacts(dlmc, models, work, out):
    os.makedirs(out, exist_ok=True)
    # llada with a chat template, so the runtime's chat path has something to parse.
    llada = os.path.join(work, "llada_chat")
    shutil.copytree(os.path.join(models, "llada"), llada)
    templates = os.path.join(ROOT, "tests/reference/chat_templates/templates")
    shutil.copyfile(os.path.join(templates, "llada_style.jinja"),
                    os.path.join(llada, "chat_template.jinja"))
    with open(os.path.join(llada, "tokenizer_config.json"), "w") as config:
        config.write('{"bos_token": "<|startoftext|>", "eos_token": "<|eot_id|>"}\n')
    short = ["--unroll", "1", "--gen-length", "4", "--block-length", "4"]
    run(dlmc, "compile", llada, "-o", os.path.join(out, "llada.dlm"), *short, "--steps", "4")
    run(dlmc, "compile", os.path.join(models, "qwen3"), "-o", os.path.join(out, "qwen3.dlm"),
        *short, "--policy", "autoregressive,low-confidence")
    run(dlmc, "compile", os.path.join(ROOT, "tests/reference/diffusion_gemma/fixtures/tiny_bf16"),
        "-o", os.path.join(out, "diffusion_gemma.dlm"), "--unroll", "1")
    # The parameter file only: its artifact would name it by a path the fuzzer's scratch lacks.
    run(dlmc, "compile", os.path.join(models, "qwen3"), "-o", os.path.join(work, "qwen3.dlm"),
        *short, "--policy", "autoregressive", "--parameters", "external",
        "--parameter-file", os.path.join(out, "qwen3.dlmp"))


# A NaN of each weight dtype dlmc writes, as little-endian bytes.
NAN_BYTES = {"f32": b"\x00\x00\xc0\x7f", "bf16": b"\xc0\x7f", "f16": b"\x00\x7e"}


def write_nan_weight(dlmc, artifact, weight, out):
    """`artifact` with every element of `weight` NaN: damage that opens (only the hashes see it)
    and generates. The weight's place comes from dlmc inspect:
    "  embed  bf16 [576, 64]  @94912"."""
    listing = subprocess.run([dlmc, "inspect", artifact], check=True, capture_output=True,
                             text=True).stdout
    for line in listing.splitlines():
        fields = line.split()
        if fields and fields[0] == weight:
            dtype, offset = fields[1], int(fields[-1].lstrip("@"))
            elements = int(np.prod([int(d) for d in line[line.index("[") + 1:
                                                         line.index("]")].split(",")]))
            data = bytearray(open(artifact, "rb").read())
            nan = NAN_BYTES[dtype] * elements
            data[offset:offset + len(nan)] = nan
            with open(out, "wb") as damaged:
                damaged.write(data)
            return
    sys.exit(f"dlmc inspect {artifact} lists no weight {weight!r}")


def make_artifact_regressions(dlmc, artifacts, out):
    # Attention scores of NaN went into exp, which converted NaN to an integer (found by fuzzing,
    # fixed in runtime/cpu/Elementwise.cpp).
    os.makedirs(out, exist_ok=True)
    write_nan_weight(dlmc, os.path.join(artifacts, "llada.dlm"), "layers.0.q",
                     os.path.join(out, "llada_nan_q.dlm"))


def make_safetensors(models, out):
    from safetensors.numpy import save_file

    os.makedirs(out, exist_ok=True)
    shutil.copyfile(os.path.join(models, "llada", "model.safetensors"),
                    os.path.join(out, "llada.safetensors"))
    dtypes = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float16, np.uint32, np.int32,
              np.float32, np.uint64, np.int64, np.float64]
    save_file({f"t.{np.dtype(d).name}": np.ones((2, 3), dtype=d) for d in dtypes},
              os.path.join(out, "dtypes.safetensors"), metadata={"format": "np"})
    save_file({"scalar": np.array(1.5, dtype=np.float32), "empty": np.zeros((0, 4), np.float32)},
              os.path.join(out, "shapes.safetensors"))
    save_file({}, os.path.join(out, "empty.safetensors"))


def make_onnx(models, work, out, data_out):
    import onnx
    from onnx import TensorProto, helper

    os.makedirs(out, exist_ok=True)
    os.makedirs(data_out, exist_ok=True)
    export = os.path.join(work, "onnx")
    run(sys.executable, os.path.join(ROOT, "tests/models/export_onnx.py"),
        os.path.join(models, "llada"), export)
    shutil.copyfile(os.path.join(export, "model.onnx"), os.path.join(out, "llada.onnx"))

    model = onnx.load(os.path.join(export, "model.onnx"))
    external = os.path.join(work, "external")
    os.makedirs(external)
    onnx.save_model(model, os.path.join(external, "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    shutil.copyfile(os.path.join(external, "model.onnx"), os.path.join(out, "llada_external.onnx"))
    shutil.copyfile(os.path.join(external, "weights.bin"), os.path.join(data_out, "weights.bin"))

    # The exports users make (tests/models/onnx_exports): shape bookkeeping, batch dimensions,
    # RoPE and masks computed in the graph, for the shape folding to be fuzzed from.
    exports = os.path.join(ROOT, "tests/models/onnx_exports")
    for name in sorted(os.listdir(exports)):
        if name.startswith("llada_"):
            rebuilt = os.path.join(work, "exports", name)
            run(sys.executable, os.path.join(ROOT, "tests/models/attach_onnx_weights.py"),
                os.path.join(exports, name), os.path.join(models, "llada"), rebuilt)
            shutil.copyfile(os.path.join(rebuilt, "model.onnx"),
                            os.path.join(out, f"export_{name}.onnx"))

    # One op each, for the mechanical translation's own checks without a whole model to mutate.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel())
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 2])
    for name, node in {
        "matmul": helper.make_node("MatMul", ["x", "w"], ["y"]),
        "transpose": helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0]),
        "reshape": helper.make_node("Reshape", ["x", "shape"], ["y"]),
        "softmax": helper.make_node("Softmax", ["x"], ["y"], axis=-1),
    }.items():
        graph = helper.make_graph([node], name, [x], [y], initializer=[w, shape])
        small = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.save_model(small, os.path.join(out, f"op_{name}.onnx"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--dlmc", required=True, help="dlmc to compile the artifact seeds with")
    args = parser.parse_args()
    out = os.path.abspath(args.out_dir)
    stamp = os.path.join(out, ".complete")
    if os.path.exists(stamp):
        os.remove(stamp)
    with tempfile.TemporaryDirectory(prefix="dlm-fuzz-seeds-") as work:
        models = make_models(work)
        make_artifacts(args.dlmc, models, work, os.path.join(out, "artifact"))
        make_artifact_regressions(args.dlmc, os.path.join(out, "artifact"),
                                  os.path.join(out, "regressions", "artifact"))
        make_safetensors(models, os.path.join(out, "safetensors"))
        make_onnx(models, work, os.path.join(out, "onnx"), os.path.join(out, "onnx-data"))
    open(stamp, "w").close()


if __name__ == "__main__":
    main()
