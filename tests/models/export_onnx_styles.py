#!/usr/bin/env python3
"""Export tiny checkpoints to ONNX the way users do (issue 17), not the way dlm's raising patterns
were written for (tests/models/export_onnx.py): each fixture is a directory with model.onnx, the
checkpoint's config.json and tokenizer.json, and export.json (exporter, opset, style).

    /work/refvenv/bin/python tests/models/export_onnx_styles.py TINY_DIR OUT_DIR [--only NAME,...]
        [--survey DLMC]

TINY_DIR is make_tiny_models.py's output (llada, llama, qwen3). Runs in the reference venv (torch
2.15 with onnx and onnxscript, transformers 5.23: ../shared/TOOLCHAIN.md), not in CI.

Styles of a plain module written from the architecture (as people write them, not shaped for dlm):
  * `inline`: input_ids [1, T] int64 (batch dimension, dynamic T); positions from torch.arange(T)
    and RoPE computed in the graph (inv_freq, outer product, cat, cos, sin); GQA by
    repeat_interleave; RMSNorm as pow / mean / rsqrt; heads by view + transpose; a causal mask
    built in the graph (torch.triu) for causal models;
  * `buffers`: RoPE from cos / sin buffers sliced to T; GQA by expand + reshape; masked_fill with
    a boolean mask for causal models.
Exporters: torch.onnx.export's TorchScript exporter (dynamo=False) at opsets 14, 17 and 18, and the
dynamo exporter (dynamo=True) at its default opset. And transformers' own LlamaForCausalLM and
Qwen3ForCausalLM (from_pretrained on the tiny checkpoints) with input_ids, attention_mask and
position_ids inputs as Optimum lays them out, use_cache=False, through both exporters.

--survey DLMC runs `DLMC import` on every fixture and prints what it says (the first line).

The fixtures committed under tests/models/onnx_exports/ are these exports with their weights taken
out (--strip-weights): each weight initializer's bytes are dropped and weights.json names the
checkpoint tensor it holds (transposed where the exporter folded a transpose), so that
attach_onnx_weights.py rebuilds the export from the tiny checkpoint CI regenerates.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export_onnx import Architecture, load_checkpoint, register  # noqa: E402


class Qwen3Architecture(Architecture):
    """Qwen3: Llama's layout plus q / k norms over each head."""

    def __init__(self, config):
        super().__init__(dict(config, architectures=["LlamaForCausalLM"]))
        self.name = "Qwen3ForCausalLM"
        self.roles = dict(self.roles, q_norm="self_attn.q_norm.weight",
                          k_norm="self_attn.k_norm.weight")


def architecture(config):
    if (config.get("architectures") or ["?"])[0] == "Qwen3ForCausalLM":
        return Qwen3Architecture(config)
    return Architecture(config)


class UserTransformer(torch.nn.Module):
    """forward(input_ids [1, T] int64) -> logits [1, T, vocab_size] f32."""

    def __init__(self, arch, tensors, style):
        super().__init__()
        self.arch, self.style = arch, style
        for name, tensor in tensors.items():
            register(self, name, tensor)
        if style == "buffers":
            inv_freq = 1.0 / (arch.theta ** (torch.arange(0, arch.head_dim, 2).float() /
                                             arch.head_dim))
            angles = torch.outer(torch.arange(arch.max_positions).float(), inv_freq)
            angles = torch.cat([angles, angles], dim=-1)
            register(self, "rope_cache.cos", angles.cos(), buffer=True)
            register(self, "rope_cache.sin", angles.sin(), buffer=True)

    def w(self, name):
        return self.get_parameter(name)

    def rms_norm(self, x, weight):
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.arch.eps) * weight

    def rotary(self, length):
        a = self.arch
        if self.style == "buffers":
            return self.rope_cache.cos[:length], self.rope_cache.sin[:length]
        positions = torch.arange(length, dtype=torch.float32)
        inv_freq = 1.0 / (a.theta ** (torch.arange(0, a.head_dim, 2, dtype=torch.float32) /
                                      a.head_dim))
        freqs = positions[:, None] * inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)

    def repeat_kv(self, x):
        a = self.arch
        rep = a.n_heads // a.n_kv
        if rep == 1:
            return x
        if self.style == "inline":
            return x.repeat_interleave(rep, dim=1)
        b, kv, t, d = x.shape
        return x[:, :, None, :, :].expand(b, kv, rep, t, d).reshape(b, kv * rep, t, d)

    def forward(self, input_ids):
        a = self.arch
        b, t = input_ids.shape
        x = F.embedding(input_ids, self.w(a.top["embed"]))
        cos, sin = self.rotary(t)
        for i in range(a.n_layers):
            p = lambda role: self.w(a.layer(i, role))  # noqa: E731
            h = self.rms_norm(x, p("attn_norm"))
            q = F.linear(h, p("q")).view(b, t, a.n_heads, a.head_dim)
            k = F.linear(h, p("k")).view(b, t, a.n_kv, a.head_dim)
            v = F.linear(h, p("v")).view(b, t, a.n_kv, a.head_dim)
            if "q_norm" in a.roles:
                q, k = self.rms_norm(q, p("q_norm")), self.rms_norm(k, p("k_norm"))
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            k, v = self.repeat_kv(k), self.repeat_kv(v)
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(a.head_dim)
            if a.causal:
                if self.style == "inline":
                    scores = scores + torch.triu(
                        torch.full((t, t), float("-inf")), diagonal=1)
                else:
                    future = torch.ones(t, t, dtype=torch.bool).triu(1)
                    scores = scores.masked_fill(future, float("-inf"))
            attended = torch.matmul(torch.softmax(scores, dim=-1), v)
            attended = attended.transpose(1, 2).reshape(b, t, a.n_heads * a.head_dim)
            x = x + F.linear(attended, p("o"))
            h = self.rms_norm(x, p("mlp_norm"))
            x = x + F.linear(F.silu(F.linear(h, p("gate"))) * F.linear(h, p("up")), p("down"))
        h = self.rms_norm(x, self.w(a.top["final_norm"]))
        head = self.w(a.top["embed"] if a.tied else a.top["lm_head"])
        return F.linear(h, head)[..., :a.vocab]


def export_plain(checkpoint, out, style, exporter, opset):
    with open(os.path.join(checkpoint, "config.json")) as f:
        config = json.load(f)
    model = UserTransformer(architecture(config), load_checkpoint(checkpoint), style).eval()
    ids = torch.tensor([[3, 1, 4, 1, 5]], dtype=torch.int64)
    path = os.path.join(out, "model.onnx")
    with torch.no_grad():
        if exporter == "dynamo":
            torch.onnx.export(model, (ids,), path, input_names=["input_ids"],
                              output_names=["logits"], dynamo=True, external_data=False,
                              dynamic_shapes={"input_ids": {1: torch.export.Dim("seq")}})
        else:
            torch.onnx.export(model, (ids,), path, input_names=["input_ids"],
                              output_names=["logits"], dynamo=False, opset_version=opset,
                              dynamic_axes={"input_ids": {1: "seq"}, "logits": {1: "seq"}})


def export_transformers(checkpoint, out, exporter):
    import transformers
    with open(os.path.join(checkpoint, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    model = getattr(transformers, arch).from_pretrained(checkpoint, attn_implementation="eager")
    model.eval()
    ids = torch.tensor([[3, 1, 4, 1, 5]], dtype=torch.int64)
    mask = torch.ones_like(ids)
    positions = torch.arange(5, dtype=torch.int64)[None]

    class Logits(torch.nn.Module):  # no cache in, logits out: Optimum's "without past" layout
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids, use_cache=False).logits

    names = ["input_ids", "attention_mask", "position_ids"]
    with torch.no_grad():
        if exporter == "dynamo":
            batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
            torch.onnx.export(Logits(model), (ids, mask, positions),
                              os.path.join(out, "model.onnx"), input_names=names,
                              output_names=["logits"], dynamo=True, external_data=False,
                              dynamic_shapes={n: {0: batch, 1: seq} for n in names})
        else:
            torch.onnx.export(Logits(model), (ids, mask, positions),
                              os.path.join(out, "model.onnx"), input_names=names,
                              output_names=["logits"], dynamo=False, opset_version=17,
                              dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                                            names + ["logits"]})


def strip_weights(out, checkpoint):
    """Drops the bytes of every initializer that is a checkpoint tensor (or its transpose) and
    writes weights.json: initializer name -> {"tensor": checkpoint name, "transposed": bool}."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    path = os.path.join(out, "model.onnx")
    model = onnx.load(path)
    tensors = {name: t.numpy() for name, t in load_checkpoint(checkpoint).items()}
    recipe = {}
    for init in model.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT:
            continue
        values = numpy_helper.to_array(init)
        found = None
        for name, tensor in sorted(tensors.items(), key=lambda kv: kv[0] != init.name):
            if tensor.shape == values.shape and np.array_equal(tensor, values):
                found = (name, False)
            elif tensor.ndim == 2 and tensor.T.shape == values.shape and \
                    np.array_equal(tensor.T, values):
                found = (name, True)
            if found:
                break
        if not found:
            continue  # the exporter's own tensors (RoPE buffers, constants) stay
        recipe[init.name] = {"tensor": found[0], "transposed": found[1]}
        init.ClearField("float_data")
        init.raw_data = b""
    onnx.save(model, path)
    with open(os.path.join(out, "weights.json"), "w") as f:
        json.dump(recipe, f, indent=2, sort_keys=True)
        f.write("\n")


def fixtures():
    """name -> (model, kind, arguments)"""
    table = {}
    for model in ("llada", "llama", "qwen3"):
        for style in ("inline", "buffers"):
            for opset in (14, 17, 18):
                table[f"{model}_{style}_torchscript{opset}"] = (model, "plain",
                                                                (style, "torchscript", opset))
            table[f"{model}_{style}_dynamo"] = (model, "plain", (style, "dynamo", None))
    for model in ("llama", "qwen3"):
        table[f"{model}_transformers"] = (model, "transformers", ("torchscript",))
        table[f"{model}_transformers_dynamo"] = (model, "transformers", ("dynamo",))
    return table


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tiny")
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    ap.add_argument("--survey", help="dlmc to run `import` with on every fixture")
    ap.add_argument("--strip-weights", action="store_true",
                    help="write the fixture form: weights out, weights.json in")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    wanted = [n for n in a.only.split(",") if n]
    for name, (model, kind, args) in fixtures().items():
        if wanted and name not in wanted:
            continue
        checkpoint = os.path.join(a.tiny, model)
        out = os.path.join(a.out, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        try:
            if kind == "plain":
                export_plain(checkpoint, out, *args)
            else:
                export_transformers(checkpoint, out, *args)
        except Exception as e:  # an exporter that fails is a finding, not a crash
            print(f"{name}: export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            shutil.rmtree(out)
            continue
        for companion in ("config.json", "tokenizer.json"):
            shutil.copyfile(os.path.join(checkpoint, companion), os.path.join(out, companion))
        with open(os.path.join(out, "export.json"), "w") as f:
            import onnx
            written = onnx.load(os.path.join(out, "model.onnx"), load_external_data=False)
            opset = next(o.version for o in written.opset_import if o.domain in ("", "ai.onnx"))
            json.dump({"model": model, "kind": kind, "arguments": list(args), "opset": opset,
                       "producer": f"{written.producer_name} {written.producer_version}",
                       "torch": torch.__version__}, f, indent=2)
            f.write("\n")
        line = f"{name}: exported"
        if a.survey:
            done = subprocess.run([a.survey, "import", os.path.join(out, "model.onnx")],
                                  capture_output=True, text=True)
            said = (done.stderr.strip() or "ok").splitlines()[0]
            line += f"; dlmc import: {'ok' if done.returncode == 0 else said}"
        if a.strip_weights:
            strip_weights(out, checkpoint)
            for companion in ("config.json", "tokenizer.json"):
                os.remove(os.path.join(out, companion))
        print(line, flush=True)


if __name__ == "__main__":
    main()
