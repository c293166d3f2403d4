#!/usr/bin/env python3
"""Export a tiny checkpoint (from make_tiny_models.py) to ONNX, as Hugging Face optimum lays it out.

    python tests/models/export_onnx.py CHECKPOINT_DIR OUT_DIR [--opset 17] [--check-reference]

OUT_DIR receives model.onnx plus the checkpoint's config.json and tokenizer.json (the facts ONNX
does not carry: vocabulary, mask and eos ids, architecture).

The model is a plain torch.nn.Module written here from the architecture (LLaDA: OLMo names under
model.transformer; Llama: Hugging Face names under model.layers), not the transformers classes.
Its parameters are registered under exactly the checkpoint's tensor names, so the ONNX
initializers carry those names and dlmc's ONNX import can be compared with its safetensors import
weight for weight.  The graph is what dlm's raising patterns expect from torch.onnx:

  * batchless int32 inputs input_ids [seq] and position_ids [seq] (dynamic seq), logits [seq, V];
  * linear layers as MatMul(x, Transpose(W)) with W the [out, in] initializer: constant folding is
    off so that weights keep their names and layout; --constant-folding (torch.onnx.export's own
    default) stores W^T under a new name instead (MatMul(x, onnx::MatMul_N));
  * RMSNorm as Pow -> ReduceMean -> Add eps -> Sqrt -> Div(1, .) -> Mul -> Mul weight;
  * NeoX RoPE from cos/sin tables (buffers rotary.cos / rotary.sin, [max_positions, head_dim])
    gathered by position and combined with rotate_half (Slice, Neg, Concat);
  * attention heads-first with GQA by Unsqueeze -> Tile -> Reshape, q.k^T / sqrt(head_dim), a
    causal mask (Llama) as Where(position_j > position_i, -inf, scores), Softmax, MatMul v;
  * SiLU-gated MLP (x * Sigmoid(x)), LM head MatMul sliced to vocab_size.

bf16 checkpoints are exported in f32 (ONNX weights and activations are f32 here).
"""

import argparse
import json
import math
import os
import shutil
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))


def load_checkpoint(ckpt_dir):
    """All tensors of the checkpoint (single file or sharded) as f32, keyed by stored name."""
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        for key, value in load_file(os.path.join(ckpt_dir, name)).items():
            tensors[key] = value.to(torch.float32)
    return tensors


class Architecture:
    """Sizes and tensor names of one checkpoint, normalised to one Llama-like layout."""

    def __init__(self, config):
        arch = (config.get("architectures") or ["?"])[0]
        self.name = arch
        if arch == "LLaDAModelLM":
            self.hidden = config["d_model"]
            self.n_heads = config["n_heads"]
            self.n_kv = config.get("n_kv_heads") or self.n_heads
            self.n_layers = config["n_layers"]
            self.head_dim = self.hidden // self.n_heads
            self.tied = bool(config.get("weight_tying", False))
            self.causal = False
            self.max_positions = config.get("max_sequence_length", 4096)
            self.eps = config.get("rms_norm_eps", 1e-5)
            self.top = {"embed": "model.transformer.wte.weight",
                        "final_norm": "model.transformer.ln_f.weight",
                        "lm_head": "model.transformer.ff_out.weight"}
            self.prefix = "model.transformer.blocks.{}."
            self.roles = {"attn_norm": "attn_norm.weight", "q": "q_proj.weight",
                          "k": "k_proj.weight", "v": "v_proj.weight", "o": "attn_out.weight",
                          "mlp_norm": "ff_norm.weight", "gate": "ff_proj.weight",
                          "up": "up_proj.weight", "down": "ff_out.weight"}
        elif arch == "LlamaForCausalLM":
            if config.get("attention_bias") or config.get("mlp_bias") or config.get("rope_scaling"):
                raise SystemExit("export_onnx: Llama with biases or rope_scaling is not covered")
            self.hidden = config["hidden_size"]
            self.n_heads = config["num_attention_heads"]
            self.n_kv = config.get("num_key_value_heads") or self.n_heads
            self.n_layers = config["num_hidden_layers"]
            self.head_dim = config.get("head_dim") or self.hidden // self.n_heads
            self.tied = bool(config.get("tie_word_embeddings", False))
            self.causal = True
            self.max_positions = config.get("max_position_embeddings", 4096)
            self.eps = config.get("rms_norm_eps", 1e-6)
            self.top = {"embed": "model.embed_tokens.weight", "final_norm": "model.norm.weight",
                        "lm_head": "lm_head.weight"}
            self.prefix = "model.layers.{}."
            self.roles = {"attn_norm": "input_layernorm.weight", "q": "self_attn.q_proj.weight",
                          "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
                          "o": "self_attn.o_proj.weight",
                          "mlp_norm": "post_attention_layernorm.weight",
                          "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
                          "down": "mlp.down_proj.weight"}
        else:
            raise SystemExit(f"export_onnx: architecture {arch!r} is not covered "
                             "(LLaDAModelLM, LlamaForCausalLM)")
        self.vocab = config["vocab_size"]
        self.theta = float(config.get("rope_theta", 10000.0))

    def layer(self, i, role):
        return self.prefix.format(i) + self.roles[role]


def register(root, dotted, tensor, buffer=False):
    """Registers `tensor` under the dotted name, creating the intermediate modules."""
    *path, leaf = dotted.split(".")
    module = root
    for part in path:
        if not hasattr(module, part):
            module.add_module(part, torch.nn.Module())
        module = getattr(module, part)
    if buffer:
        module.register_buffer(leaf, tensor)
    else:
        module.register_parameter(leaf, torch.nn.Parameter(tensor, requires_grad=False))


def rope_tables(max_positions, head_dim, theta):
    """cos, sin [max_positions, head_dim] of NeoX RoPE (computed in f64, stored in f32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(torch.float32), angles.sin().to(torch.float32)


class Transformer(torch.nn.Module):
    """forward(input_ids [S] i32, position_ids [S] i32) -> logits [S, vocab_size] f32."""

    def __init__(self, arch, tensors):
        super().__init__()
        self.arch = arch
        for name, tensor in tensors.items():
            register(self, name, tensor)
        cos, sin = rope_tables(arch.max_positions, arch.head_dim, arch.theta)
        register(self, "rotary.cos", cos, buffer=True)
        register(self, "rotary.sin", sin, buffer=True)

    def weight(self, name):
        return self.get_parameter(name)

    @staticmethod
    def linear(x, w):
        return torch.matmul(x, w.t())

    def rms_norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.arch.eps) * w

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def attention(self, q, k, v, positions):
        a = self.arch
        rep = a.n_heads // a.n_kv
        if rep > 1:  # query head h reads key/value head h // rep
            k = k.unsqueeze(2).repeat(1, 1, rep, 1).reshape(-1, a.n_heads, a.head_dim)
            v = v.unsqueeze(2).repeat(1, 1, rep, 1).reshape(-1, a.n_heads, a.head_dim)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, S, hd]
        scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(a.head_dim)
        if a.causal:
            future = positions.unsqueeze(0) > positions.unsqueeze(1)  # key after query
            scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v).transpose(0, 1)  # [S, heads, hd]

    def forward(self, input_ids, position_ids):
        a = self.arch
        x = F.embedding(input_ids, self.weight(a.top["embed"]))
        cos = F.embedding(position_ids, self.rotary.cos).unsqueeze(1)  # [S, 1, hd]
        sin = F.embedding(position_ids, self.rotary.sin).unsqueeze(1)
        for i in range(a.n_layers):
            w = lambda role: self.weight(a.layer(i, role))
            h = self.rms_norm(x, w("attn_norm"))
            q = self.linear(h, w("q")).reshape(-1, a.n_heads, a.head_dim)
            k = self.linear(h, w("k")).reshape(-1, a.n_kv, a.head_dim)
            v = self.linear(h, w("v")).reshape(-1, a.n_kv, a.head_dim)
            q = self.rope(q, cos, sin)
            k = self.rope(k, cos, sin)
            attended = self.attention(q, k, v, position_ids)
            x = x + self.linear(attended.reshape(-1, a.n_heads * a.head_dim), w("o"))
            h = self.rms_norm(x, w("mlp_norm"))
            gate = self.linear(h, w("gate"))
            x = x + self.linear(gate * torch.sigmoid(gate) * self.linear(h, w("up")), w("down"))
        h = self.rms_norm(x, self.weight(a.top["final_norm"]))
        head = self.weight(a.top["embed"] if a.tied else a.top["lm_head"])
        return self.linear(h, head)[:, :a.vocab]


def check_against_reference(model, ckpt_dir):
    """The module must compute what tests/reference/models.py computes from the checkpoint."""
    sys.path.insert(0, os.path.join(HERE, "..", "reference"))
    from models import Model  # independent plain-PyTorch forward

    reference = Model(ckpt_dir)
    ids = torch.arange(7, dtype=torch.int32) * 37 % model.arch.vocab
    with torch.no_grad():
        ours = model(ids, torch.arange(7, dtype=torch.int32))
    theirs = reference(ids.tolist())
    err = (ours - theirs).abs().max().item()
    if err > 1e-3:
        raise SystemExit(f"export_onnx: module differs from the reference by {err}")
    return err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out_dir")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--constant-folding", action="store_true",
                    help="torch.onnx.export's default: linear weights become W^T initializers "
                         "under new names (onnx::MatMul_N)")
    ap.add_argument("--check-reference", action="store_true",
                    help="compare the module's logits with tests/reference/models.py first")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    with open(os.path.join(args.checkpoint, "config.json")) as f:
        config = json.load(f)
    model = Transformer(Architecture(config), load_checkpoint(args.checkpoint)).eval()
    if args.check_reference:
        check_against_reference(model, args.checkpoint)

    os.makedirs(args.out_dir, exist_ok=True)
    ids = torch.tensor([3, 1, 4, 1, 5], dtype=torch.int32)
    positions = torch.arange(5, dtype=torch.int32)
    with torch.no_grad():
        torch.onnx.export(
            model, (ids, positions), os.path.join(args.out_dir, "model.onnx"),
            input_names=["input_ids", "position_ids"], output_names=["logits"],
            dynamic_axes={"input_ids": {0: "seq"}, "position_ids": {0: "seq"},
                          "logits": {0: "seq"}},
            opset_version=args.opset, do_constant_folding=args.constant_folding)
    for name in ("config.json", "tokenizer.json"):
        shutil.copyfile(os.path.join(args.checkpoint, name), os.path.join(args.out_dir, name))


if __name__ == "__main__":
    main()
