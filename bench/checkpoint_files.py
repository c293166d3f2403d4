"""What the bench's checkpoint scripts write, without torch: bf16 rounding, safetensors files laid
out as safetensors.torch.save_file lays them out, JSON, and where bench checkpoints live."""
import json
import os
import struct

import numpy as np


def bench_cache(name):
    """$DLM_BENCH_CACHE/name (DLM_BENCH_CACHE defaults to ~/.cache/dlm-bench): never the repo."""
    cache = os.environ.get("DLM_BENCH_CACHE", os.path.expanduser("~/.cache/dlm-bench"))
    return os.path.join(cache, name)


def to_bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even (finite inputs)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    """tensors: name -> float32 array, stored as bf16 or f32. Returns the data bytes."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        a = tensors[name]
        if dtype == "bf16":
            data, tag = to_bf16_bits(a).tobytes(), "BF16"
        else:
            data, tag = np.ascontiguousarray(a, dtype="<f4").tobytes(), "F32"
        header[name] = {"dtype": tag, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)
    return offset


def write_zero_safetensors(path, shapes, dtype):
    """shapes: name -> shape; a safetensors file whose tensors are all zeros, written as its header
    and a hole (the file is truncated to its size): a real model's shape in no disk and no time.
    Returns the data bytes."""
    itemsize, tag = (2, "BF16") if dtype == "bf16" else (4, "F32")
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(shapes):
        size = int(np.prod(shapes[name], dtype=np.int64)) * itemsize
        header[name] = {"dtype": tag, "shape": list(shapes[name]),
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)
    return offset


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
