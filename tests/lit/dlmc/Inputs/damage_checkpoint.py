"""Copies a checkpoint directory and applies one kind of damage, for dlmc's bad-input tests.

usage: damage_checkpoint.py SRC DST KIND
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def edit_config(dst: Path, **changes):
    config = json.loads((dst / "config.json").read_text())
    config.update(changes)
    (dst / "config.json").write_text(json.dumps(config, indent=2))


def edit_tensors(dst: Path, edit):
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})


def edit_header(weights: Path, edit):
    """Edits the safetensors header of `weights` in place (dtypes, shapes of the same byte size),
    for tensors torch 1.13 cannot load (F8_E4M3)."""
    data = bytearray(weights.read_bytes())
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_len])
    edit(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= header_len
    text += b" " * (header_len - len(text))
    data[8 : 8 + header_len] = text
    weights.write_bytes(bytes(data))


def main():
    src, dst, kind = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    if kind == "truncated-safetensors":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
    elif kind == "tensor-missing":
        edit_tensors(dst, lambda t: t.pop("model.transformer.blocks.1.up_proj.weight"))
    elif kind == "shape-mismatch":
        def shrink(t):
            t["model.transformer.blocks.0.q_proj.weight"] = torch.zeros(48, 64)
        edit_tensors(dst, shrink)
    elif kind == "fp8-tensor":
        def to_fp8(t):
            name = "model.transformer.blocks.0.k_proj.weight"
            t[name] = t[name].float().to(torch.uint8)
        edit_tensors(dst, to_fp8)
        # torch 1.13 has no float8 dtype: relabel the uint8 tensor as F8_E4M3 in the header.
        def relabel(header):
            header["model.transformer.blocks.0.k_proj.weight"]["dtype"] = "F8_E4M3"
        edit_header(weights, relabel)
    elif kind == "fp8-stack-scale-shape":
        # An FP8 expert stack [E, N, K] whose scale [E, N, 1] is laid out as [E, N / 2, 2].
        def reshape(header):
            for name, info in header.items():
                if name.endswith("experts.gate_up_proj_scale"):
                    e, n, _ = info["shape"]
                    info["shape"] = [e, n // 2, 2]
        edit_header(weights, reshape)
    elif kind == "unknown-architecture":
        edit_config(dst, architectures=["FooForCausalLM"])
    elif kind == "bad-config-field":
        edit_config(dst, n_heads="four")
    elif kind == "heads-mismatch":
        edit_config(dst, n_kv_heads=3)
    elif kind == "sliding-window":
        edit_config(dst, use_sliding_window=True, sliding_window=4)
    elif kind == "config-not-json":
        (dst / "config.json").write_text("{ not json")
    elif kind == "config-deep":
        # A million nested arrays: dump() or a recursive walk of it would overflow the stack.
        text = (dst / "config.json").read_text().rstrip()
        (dst / "config.json").write_text(text[:-1] + ', "x": ' + "[" * 10**6 + "]" * 10**6 + "}")
    elif kind == "huge-layers":
        edit_config(dst, n_layers=10**12)
    elif kind == "tokenizer-deep":
        text = (dst / "tokenizer.json").read_text().rstrip()
        (dst / "tokenizer.json").write_text(text[:-1] + ', "x": ' + "{\"a\":" * 10**5 + "1" + "}" * 10**5 + "}")
    elif kind == "config-missing":
        (dst / "config.json").unlink()
    elif kind == "tokenizer-unigram":
        tokenizer = json.loads((dst / "tokenizer.json").read_text())
        tokenizer["model"]["type"] = "Unigram"
        (dst / "tokenizer.json").write_text(json.dumps(tokenizer))
    elif kind == "fused-experts-missing":
        edit_tensors(dst, lambda t: t.pop("model.decoder.layers.0.experts.gate_up_proj"))
    elif kind == "moe-expert-missing":
        edit_tensors(dst, lambda t: t.pop("model.layers.2.mlp.experts.5.up_proj.weight"))
    elif kind == "moe-expert-dtype":
        def to_bf16(t):
            name = "model.layers.0.mlp.experts.3.down_proj.weight"
            t[name] = t[name].to(torch.bfloat16)
        edit_tensors(dst, to_bf16)
    elif kind == "moe-experts-disagree":
        edit_config(dst, num_experts=6)
    elif kind == "moe-dense-layer-out-of-range":
        edit_config(dst, mlp_only_layers=[1, 3])
    elif kind == "moe-top-k":
        edit_config(dst, num_experts_per_tok=9)
    elif kind == "sdar-no-block-size":
        config = json.loads((dst / "config.json").read_text())
        del config["block_size"]
        (dst / "config.json").write_text(json.dumps(config, indent=2))
    elif kind == "sdar-block-diffusion":
        edit_config(dst, block_size=4)
    elif kind == "sdar-moe-dense-layer":
        edit_config(dst, mlp_only_layers=[1])
    elif kind == "sdar-moe-bad-stop-id":
        config = json.loads((dst / "generation_config.json").read_text())
        config["eos_token_id"] = [2, 4096]
        (dst / "generation_config.json").write_text(json.dumps(config, indent=2))
    elif kind == "llada2-fused-qkv-shape":
        def shrink_qkv(t):
            name = "model.layers.1.attention.query_key_value.weight"
            t[name] = t[name][:-16].contiguous()
        edit_tensors(dst, shrink_qkv)
    elif kind == "llada2-block-size":
        edit_config(dst, block_size=16)
    elif kind == "llada2-expert-capacity":
        edit_config(dst, expert_capacity=4)
    elif kind == "llada2-indel":
        edit_config(dst, delete_token_id=250, split_token_id=251)
    elif kind == "llada2-softmax-with-bias":
        edit_config(dst, score_function="softmax")
    elif kind == "llada2-no-mask-token":
        tokenizer_config = json.loads((dst / "tokenizer_config.json").read_text())
        del tokenizer_config["mask_token"]
        (dst / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    elif kind == "llada2-missing-field":
        config = json.loads((dst / "config.json").read_text())
        del config["first_k_dense_replace"]
        (dst / "config.json").write_text(json.dumps(config, indent=2))
    elif kind == "tokenizer-not-json":
        (dst / "tokenizer.json").write_text("[[[")
    else:
        sys.exit(f"unknown damage kind {kind}")


if __name__ == "__main__":
    main()
