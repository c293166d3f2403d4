#!/usr/bin/env python3
"""An FP8 checkpoint in the compressed-tensors layout (how LLM Compressor publishes FP8-dynamic
models, DiffusionGemma's among them), made from a checkpoint directory, and beside it the same
model dequantized to float32, for a test that the two give the same logits.

    make_fp8_checkpoint.py SOURCE_DIR FP8_DIR DEQUANTIZED_DIR [--per-tensor]
                           [--experts fused|split [--per-expert]]

Every 2-D "....weight" tensor of a layer ("blocks.N" or "layers.N": the projections, per-expert
ones included) but the MoE routers ("mlp.gate.weight", "router.*", which FP8 recipes leave out)
becomes F8_E4M3 with a scale per output channel ("<name>_scale", [N, 1], float32; --per-tensor:
one scale, shape [1]): scale = max|w| / 448, the E4M3 code nearest to w / scale. --experts: the
fused 3-D expert stacks (DiffusionGemma's "experts.gate_up_proj" [E, 2I, H] and
"experts.down_proj" [E, H, I]) too, kept fused (F8_E4M3 [E, N, K] with "<name>_scale" [E, N, 1])
(--per-expert: "<name>_scale" [E, 1, 1]) or split per expert as 2-D projections
("experts.<e>.gate_proj.weight", "up_proj", "down_proj", each with its "weight_scale" [N, 1]);
without it they stay float32. config.json gains the quantization_config compressed-
tensors writes (weights: float, 8 bits, channel or tensor strategy; dynamic activations). The
dequantized copy holds code * scale in float32 for the same tensors, the rest as they were.
numpy only: E4M3 is encoded here by nearest-code search over the 256 codes.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np


def e4m3_values():
    """The float value of each of the 256 E4M3 ("e4m3fn") codes (NaN for S.1111.111)."""
    values = np.empty(256, dtype=np.float64)
    for code in range(256):
        e, m = (code >> 3) & 0xF, code & 0x7
        if e == 0xF and m == 0x7:
            v = np.nan
        elif e == 0:
            v = m / 8 * 2.0 ** -6
        else:
            v = (1 + m / 8) * 2.0 ** (e - 7)
        values[code] = -v if code & 0x80 else v
    return values


# Known points of the format (the OCP FP8 spec): the largest finite value, the smallest normal and
# the smallest subnormal.
assert e4m3_values()[0x7E] == 448 and e4m3_values()[0x08] == 2.0 ** -6
assert e4m3_values()[0x01] == 2.0 ** -9 and np.isnan(e4m3_values()[0x7F])


def to_e4m3(x):
    """float array (|x| <= 448) -> uint8 codes of the nearest E4M3 values."""
    values = e4m3_values()[:0x7F]  # the positive finite codes 0..126, increasing
    magnitude = np.abs(x)
    index = np.clip(np.searchsorted(values, magnitude), 1, len(values) - 1)
    below, above = values[index - 1], values[index]
    code = np.where(magnitude - below <= above - magnitude, index - 1, index).astype(np.uint8)
    return code | np.where(x < 0, np.uint8(0x80), np.uint8(0))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[start:end]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        else:
            sys.exit(f"{path}: tensor {name} has dtype {info['dtype']}; expected BF16 or F32")
        tensors[name] = a.reshape(info["shape"]).astype(np.float32)
    return tensors


def write_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype, bytes, shape)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        dtype, raw, shape = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def quantize_rows(w, per_tensor, per_expert=False):
    """w [..., N, K] -> (codes, scale, decoded): a scale per row ([..., N, 1]; per_tensor: [1];
    per_expert, w [E, N, K]: [E, 1, 1]), the E4M3 codes of w / scale and code * scale in float32.
    An all-zero row (or tensor) gets scale 1, so that w / scale stays defined."""
    if per_tensor:
        scale = np.full((1,), np.abs(w).max() / 448 or 1.0, dtype=np.float32)
        rows = scale.reshape((1,) * w.ndim)
    elif per_expert:
        largest = np.abs(w).max(axis=(1, 2), keepdims=True)
        scale = rows = np.where(largest > 0, largest / 448, 1.0).astype(np.float32)
    else:
        largest = np.abs(w).max(axis=-1, keepdims=True)
        scale = rows = np.where(largest > 0, largest / 448, 1.0).astype(np.float32)
    codes = to_e4m3(w / rows)
    decoded = (e4m3_values()[codes].astype(np.float32) * rows).astype("<f4")
    return codes, scale.astype("<f4"), decoded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("fp8")
    ap.add_argument("dequantized")
    ap.add_argument("--per-tensor", action="store_true")
    ap.add_argument("--static-input-scale", action="store_true",
                    help="also an input_scale per FP8 weight (an FP8 'static' scheme; dlm refuses it)")
    ap.add_argument("--experts", choices=("fused", "split"),
                    help="also the fused 3-D expert stacks, kept fused or split per expert")
    ap.add_argument("--per-expert", action="store_true",
                    help="fused expert stacks: one scale per expert ([E, 1, 1])")
    a = ap.parse_args()
    tensors = read_safetensors(os.path.join(a.source, "model.safetensors"))
    fp8, dequantized = {}, {}

    def quantized(name, w, per_expert=False):
        codes, scale, decoded = quantize_rows(w, a.per_tensor, per_expert)
        fp8[name] = ("F8_E4M3", codes.tobytes(), w.shape)
        fp8[name + "_scale"] = ("F32", scale.tobytes(), scale.shape)
        return decoded

    for name, w in tensors.items():
        f32 = np.ascontiguousarray(w, dtype="<f4")
        in_layer = ".blocks." in name or ".layers." in name
        router = name.endswith("mlp.gate.weight") or ".router." in name
        stack = w.ndim == 3 and in_layer and name.endswith(("experts.gate_up_proj", "experts.down_proj"))
        if w.ndim == 2 and in_layer and name.endswith(".weight") and not router:
            dequantized[name] = ("F32", quantized(name, w).tobytes(), w.shape)
            if a.static_input_scale:
                fp8[name[:-len("weight")] + "input_scale"] = (
                    "F32", np.ones((1,), dtype="<f4").tobytes(), (1,))
        elif stack and a.experts == "fused":
            dequantized[name] = ("F32", quantized(name, w, a.per_expert).tobytes(), w.shape)
        elif stack and a.experts == "split":
            # gate_up [E, 2I, H]: expert e's gate rows then its up rows.
            prefix, fused = name.rsplit(".", 1)
            parts = ["gate_proj", "up_proj"] if fused == "gate_up_proj" else ["down_proj"]
            decoded = []
            for e in range(w.shape[0]):
                for i, part in enumerate(np.split(w[e], len(parts))):
                    decoded.append(quantized(f"{prefix}.{e}.{parts[i]}.weight",
                                             np.ascontiguousarray(part)))
            values = np.concatenate(decoded).reshape(w.shape).astype("<f4")
            dequantized[name] = ("F32", values.tobytes(), w.shape)
        else:
            fp8[name] = ("F32", f32.tobytes(), w.shape)
            dequantized[name] = ("F32", f32.tobytes(), w.shape)
    for out, contents in ((a.fp8, fp8), (a.dequantized, dequantized)):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(a.source, out, ignore=shutil.ignore_patterns("model.safetensors*"))
        write_safetensors(os.path.join(out, "model.safetensors"), contents)
    with open(os.path.join(a.fp8, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
                        "strategy": "tensor" if a.per_tensor else "channel"},
            "input_activations": {"num_bits": 8, "type": "float", "symmetric": True,
                                  "dynamic": True, "strategy": "token"}}},
        "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*router.*"]}
    with open(os.path.join(a.fp8, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main()
