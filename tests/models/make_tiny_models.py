#!/usr/bin/env python3
"""Write the tiny random test checkpoints (the source of truth for test models).

    python tests/models/make_tiny_models.py OUT_DIR [--only NAME[,NAME...]]

Each model goes to OUT_DIR/NAME/ in the real on-disk Hugging Face layout:
config.json, model.safetensors (or model-0000k-of-00002.safetensors + model.safetensors.index.json),
tokenizer.json (byte-level BPE, vocab ~512, from tests/models/train_tokenizer.py) and
generation_config.json where the family ships one.  OUT_DIR/MANIFEST.json lists every model
written (merged with an existing manifest when --only is used).

Weights come from numpy's PCG64 generator with a fixed seed per model, so the files are
byte-identical from run to run and machine to machine.  Weight scales are chosen so that the
logits are spread out (std ~3): greedy decoding is then not decided by rounding noise.

Models:
  llada          LLaDAModelLM, GQA 4q/2kv, untied LM head, embedding_size padded > vocab_size, bf16
  llada_tied     LLaDAModelLM, MHA, weight_tying=true (no model.transformer.ff_out), f32
  llada_sharded  the weights of `llada` (bf16 values) stored as f32 in 2 shards + index
  dream          DreamModel (Qwen2 names, q/k/v biases), bidirectional, logit shift,
                 vocab_size padded above the tokenizer's size (like Qwen2), f32
  qwen3          Qwen3ForCausalLM, q_norm/k_norm, head_dim 32 != hidden/heads, tied, f32, causal
  llama          LlamaForCausalLM, GQA, untied, f32, causal
  llada_moe      LLaDAMoEModelLM config under other names than the published ones (intermediate_size,
                 moe_intermediate_size): the importer must name the field it misses
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TOKENIZER_VOCAB = 512

LLADA_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|mask|>"]


def round_up_above(n, m=64):
    """Smallest multiple of m strictly greater than n."""
    return (n // m + 1) * m


class Init:
    """Deterministic weight factory."""

    def __init__(self, seed):
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def normal(self, shape, std):
        return torch.from_numpy((self.rng.standard_normal(shape) * std).astype(np.float32))

    def linear(self, out_f, in_f):
        return self.normal((out_f, in_f), 1.0 / np.sqrt(in_f))

    def norm(self, n):
        return 1.0 + self.normal((n,), 0.1)

    def bias(self, n):
        return self.normal((n,), 0.1)


# ---------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------

_TOKENIZER_CACHE = {}


def write_tokenizer(out_dir, style, specials):
    """tokenizer.json via train_bpe_tokenizer; returns the tokenizers.Tokenizer."""
    from tokenizers import Tokenizer
    from train_tokenizer import train_bpe_tokenizer

    path = os.path.join(out_dir, "tokenizer.json")
    ck = (style, tuple(specials))
    if ck in _TOKENIZER_CACHE:
        shutil.copyfile(_TOKENIZER_CACHE[ck], path)
    else:
        train_bpe_tokenizer(path, vocab_size=TOKENIZER_VOCAB, special_tokens=list(specials),
                            style=style)
        _TOKENIZER_CACHE[ck] = path
    return Tokenizer.from_file(path)


def token_id(tok, s):
    i = tok.token_to_id(s)
    if i is None:
        raise RuntimeError(f"tokenizer has no {s!r}")
    return i


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------

def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def cast(tensors, dtype):
    return {k: v.to(dtype).contiguous() for k, v in tensors.items()}


def save_weights(out_dir, tensors, shards=1):
    """model.safetensors, or `shards` files + model.safetensors.index.json. Returns file names."""
    meta = {"format": "pt"}
    if shards == 1:
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata=meta)
        return ["model.safetensors"]
    names = list(tensors.keys())
    per = (len(names) + shards - 1) // shards
    weight_map, files, total = {}, [], 0
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        save_file(part, os.path.join(out_dir, fn), metadata=meta)
        for n, t in part.items():
            weight_map[n] = fn
            total += t.numel() * t.element_size()
        files.append(fn)
    write_json(os.path.join(out_dir, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    return files + ["model.safetensors.index.json"]


def dtype_name(dtype):
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]


# ---------------------------------------------------------------------------------------------
# families
# ---------------------------------------------------------------------------------------------

def llada_weights(init, d, n_heads, n_kv, n_layers, mlp, emb_size, tied):
    hd = d // n_heads
    t = {"model.transformer.wte.weight": init.normal((emb_size, d), 0.4 if tied else 0.5)}
    for i in range(n_layers):
        p = f"model.transformer.blocks.{i}."
        t[p + "attn_norm.weight"] = init.norm(d)
        t[p + "q_proj.weight"] = init.linear(n_heads * hd, d)
        t[p + "k_proj.weight"] = init.linear(n_kv * hd, d)
        t[p + "v_proj.weight"] = init.linear(n_kv * hd, d)
        t[p + "attn_out.weight"] = init.linear(d, n_heads * hd)
        t[p + "ff_norm.weight"] = init.norm(d)
        t[p + "ff_proj.weight"] = init.linear(mlp, d)
        t[p + "up_proj.weight"] = init.linear(mlp, d)
        t[p + "ff_out.weight"] = init.linear(d, mlp)
    t["model.transformer.ln_f.weight"] = init.norm(d)
    if not tied:
        t["model.transformer.ff_out.weight"] = init.normal((emb_size, d), 0.4)
    return t


def llada_config(tok, specials, d, n_heads, n_kv, n_layers, mlp, tied, dtype):
    vocab = tok.get_vocab_size()
    emb = round_up_above(vocab)
    bos, eos, eot, mask = (token_id(tok, s) for s in specials)
    cfg = {
        "architectures": ["LLaDAModelLM"],
        "model_type": "llada",
        "activation_type": "silu",
        "alibi": False,
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "block_type": "llama",
        "d_model": d,
        "embedding_dropout": 0.0,
        "embedding_size": emb,
        "eos_token_id": eos,
        "include_bias": False,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "max_sequence_length": 512,
        "mask_token_id": mask,
        "mlp_hidden_size": mlp,
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "n_layers": n_layers,
        "pad_token_id": eos,
        "bos_token_id": bos,
        "rms_norm_eps": 1e-5,
        "rope": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "torch_dtype": dtype_name(dtype),
        "use_cache": False,
        "vocab_size": vocab,
        "weight_tying": tied,
    }
    gen = {"_from_model_config": True, "bos_token_id": bos, "eos_token_id": eos,
           "pad_token_id": eos}
    return cfg, gen, {"eot_token_id": eot}


def make_llada(out, name, seed, n_kv, tied, dtype, shards=1, round_through=None):
    tok = write_tokenizer(out, "llama3", LLADA_SPECIALS)
    d, nh, nl, mlp = 64, 4, 2, 128
    cfg, gen, extra = llada_config(tok, LLADA_SPECIALS, d, nh, n_kv, nl, mlp, tied, dtype)
    weights = llada_weights(Init(seed), d, nh, n_kv, nl, mlp, cfg["embedding_size"], tied)
    if round_through is not None:  # e.g. bf16 values stored as f32
        weights = cast(weights, round_through)
    weights = cast(weights, dtype)
    files = save_weights(out, weights, shards)
    write_json(os.path.join(out, "config.json"), cfg)
    write_json(os.path.join(out, "generation_config.json"), gen)
    return weights, {
        "architecture": "LLaDAModelLM", "model_type": "llada", "family": "llada",
        "dtype": dtype_name(dtype), "files": files + ["config.json", "generation_config.json",
                                                      "tokenizer.json"],
        "sharded": shards > 1, "tied": tied, "attention": "bidirectional", "logit_shift": False,
        "hidden": d, "n_layers": nl, "n_heads": nh, "n_kv_heads": n_kv, "head_dim": d // nh,
        "intermediate": mlp, "vocab_size": cfg["vocab_size"],
        "embedding_size": cfg["embedding_size"], "logits_width": cfg["vocab_size"],
        "tokenizer_vocab": tok.get_vocab_size(),
        "mask_token_id": cfg["mask_token_id"], "eos_token_id": cfg["eos_token_id"],
        "bos_token_id": cfg["bos_token_id"], **extra,
        "rope_theta": cfg["rope_theta"], "rms_norm_eps": cfg["rms_norm_eps"],
        "supported": True,
    }


def qwen_like_weights(init, d, nh, nkv, hd, nl, inter, vocab, tied, bias, qk_norm):
    t = {"model.embed_tokens.weight": init.normal((vocab, d), 0.4 if tied else 0.5)}
    for i in range(nl):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = init.norm(d)
        t[p + "self_attn.q_proj.weight"] = init.linear(nh * hd, d)
        t[p + "self_attn.k_proj.weight"] = init.linear(nkv * hd, d)
        t[p + "self_attn.v_proj.weight"] = init.linear(nkv * hd, d)
        if bias:
            t[p + "self_attn.q_proj.bias"] = init.bias(nh * hd)
            t[p + "self_attn.k_proj.bias"] = init.bias(nkv * hd)
            t[p + "self_attn.v_proj.bias"] = init.bias(nkv * hd)
        if qk_norm:
            t[p + "self_attn.q_norm.weight"] = init.norm(hd)
            t[p + "self_attn.k_norm.weight"] = init.norm(hd)
        t[p + "self_attn.o_proj.weight"] = init.linear(d, nh * hd)
        t[p + "post_attention_layernorm.weight"] = init.norm(d)
        t[p + "mlp.gate_proj.weight"] = init.linear(inter, d)
        t[p + "mlp.up_proj.weight"] = init.linear(inter, d)
        t[p + "mlp.down_proj.weight"] = init.linear(d, inter)
    t["model.norm.weight"] = init.norm(d)
    if not tied:
        t["lm_head.weight"] = init.normal((vocab, d), 0.4)
    return t


def make_dream(out, name, seed):
    tok = write_tokenizer(out, "qwen2", QWEN_SPECIALS)
    endoftext, im_start, im_end, mask = (token_id(tok, s) for s in QWEN_SPECIALS)
    d, nh, nkv, nl, inter = 64, 4, 2, 2, 160
    vocab = round_up_above(tok.get_vocab_size())  # Qwen2 pads vocab_size above the tokenizer
    cfg = {
        "architectures": ["DreamModel"],
        "model_type": "Dream",
        "attention_dropout": 0.0,
        "bos_token_id": endoftext,
        "eos_token_id": endoftext,
        "hidden_act": "silu",
        "hidden_size": d,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "mask_token_id": mask,
        "max_position_embeddings": 512,
        "max_window_layers": nl,
        "num_attention_heads": nh,
        "num_hidden_layers": nl,
        "num_key_value_heads": nkv,
        "pad_token_id": endoftext,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }
    gen = {"_from_model_config": True, "bos_token_id": endoftext, "eos_token_id": endoftext,
           "pad_token_id": endoftext, "mask_token_id": mask, "steps": 512, "eps": 1e-3,
           "alg": "origin", "alg_temp": None, "temperature": 0.0, "top_p": None, "top_k": None}
    w = qwen_like_weights(Init(seed), d, nh, nkv, d // nh, nl, inter, vocab, False, True, False)
    files = save_weights(out, w)
    write_json(os.path.join(out, "config.json"), cfg)
    write_json(os.path.join(out, "generation_config.json"), gen)
    return w, {
        "architecture": "DreamModel", "model_type": "Dream", "family": "dream", "dtype": "float32",
        "files": files + ["config.json", "generation_config.json", "tokenizer.json"],
        "sharded": False, "tied": False, "attention": "bidirectional", "logit_shift": True,
        "qkv_bias": True, "hidden": d, "n_layers": nl, "n_heads": nh, "n_kv_heads": nkv,
        "head_dim": d // nh, "intermediate": inter, "vocab_size": vocab,
        "embedding_size": vocab, "logits_width": vocab, "tokenizer_vocab": tok.get_vocab_size(),
        "mask_token_id": mask, "eos_token_id": endoftext, "bos_token_id": endoftext,
        "im_end_token_id": im_end, "rope_theta": cfg["rope_theta"],
        "rms_norm_eps": cfg["rms_norm_eps"], "supported": True,
    }


def make_qwen3(out, name, seed):
    tok = write_tokenizer(out, "qwen2", QWEN_SPECIALS)
    endoftext, im_start, im_end, mask = (token_id(tok, s) for s in QWEN_SPECIALS)
    d, nh, nkv, hd, nl, inter = 64, 4, 2, 32, 2, 128
    vocab = tok.get_vocab_size()
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": endoftext,
        "eos_token_id": endoftext,
        "head_dim": hd,
        "hidden_act": "silu",
        "hidden_size": d,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "mask_token_id": mask,
        "max_position_embeddings": 512,
        "max_window_layers": nl,
        "num_attention_heads": nh,
        "num_hidden_layers": nl,
        "num_key_value_heads": nkv,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }
    gen = {"bos_token_id": endoftext, "eos_token_id": [im_end, endoftext], "pad_token_id": endoftext,
           "do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    w = qwen_like_weights(Init(seed), d, nh, nkv, hd, nl, inter, vocab, True, False, True)
    files = save_weights(out, w)
    write_json(os.path.join(out, "config.json"), cfg)
    write_json(os.path.join(out, "generation_config.json"), gen)
    return w, {
        "architecture": "Qwen3ForCausalLM", "model_type": "qwen3", "family": "qwen3",
        "dtype": "float32", "files": files + ["config.json", "generation_config.json",
                                              "tokenizer.json"],
        "sharded": False, "tied": True, "attention": "causal", "logit_shift": False,
        "qk_norm": True, "hidden": d, "n_layers": nl, "n_heads": nh, "n_kv_heads": nkv,
        "head_dim": hd, "intermediate": inter, "vocab_size": vocab, "embedding_size": vocab,
        "logits_width": vocab, "tokenizer_vocab": tok.get_vocab_size(), "mask_token_id": mask,
        "eos_token_id": endoftext, "bos_token_id": endoftext, "im_end_token_id": im_end,
        "rope_theta": cfg["rope_theta"], "rms_norm_eps": cfg["rms_norm_eps"], "supported": True,
    }


def make_llama(out, name, seed):
    tok = write_tokenizer(out, "llama3", LLAMA_SPECIALS)
    bos, eos, eot, mask = (token_id(tok, s) for s in LLAMA_SPECIALS)
    d, nh, nkv, nl, inter = 64, 4, 2, 2, 128
    vocab = tok.get_vocab_size()
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "head_dim": d // nh,
        "hidden_act": "silu",
        "hidden_size": d,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "mask_token_id": mask,
        "max_position_embeddings": 512,
        "mlp_bias": False,
        "num_attention_heads": nh,
        "num_hidden_layers": nl,
        "num_key_value_heads": nkv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-5,
        "rope_scaling": None,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab,
    }
    gen = {"bos_token_id": bos, "eos_token_id": [eos, eot], "do_sample": True,
           "temperature": 0.6, "top_p": 0.9}
    w = qwen_like_weights(Init(seed), d, nh, nkv, d // nh, nl, inter, vocab, False, False, False)
    files = save_weights(out, w)
    write_json(os.path.join(out, "config.json"), cfg)
    write_json(os.path.join(out, "generation_config.json"), gen)
    return w, {
        "architecture": "LlamaForCausalLM", "model_type": "llama", "family": "llama",
        "dtype": "float32", "files": files + ["config.json", "generation_config.json",
                                              "tokenizer.json"],
        "sharded": False, "tied": False, "attention": "causal", "logit_shift": False,
        "hidden": d, "n_layers": nl, "n_heads": nh, "n_kv_heads": nkv, "head_dim": d // nh,
        "intermediate": inter, "vocab_size": vocab, "embedding_size": vocab,
        "logits_width": vocab, "tokenizer_vocab": tok.get_vocab_size(), "mask_token_id": mask,
        "eos_token_id": eos, "bos_token_id": bos, "eot_token_id": eot,
        "rope_theta": cfg["rope_theta"], "rms_norm_eps": cfg["rms_norm_eps"], "supported": True,
    }


def make_llada_moe(out, name, seed):
    tok = write_tokenizer(out, "llama3", LLADA_SPECIALS)
    bos, eos, eot, mask = (token_id(tok, s) for s in LLADA_SPECIALS)
    d, nh, nl, inter, moe_inter, ne, k = 64, 4, 1, 128, 32, 4, 2
    vocab = tok.get_vocab_size()
    cfg = {
        "architectures": ["LLaDAMoEModelLM"],
        "model_type": "lladamoe",
        "hidden_size": d,
        "intermediate_size": inter,
        "moe_intermediate_size": moe_inter,
        "num_experts": ne,
        "num_experts_per_tok": k,
        "num_hidden_layers": nl,
        "num_attention_heads": nh,
        "num_key_value_heads": nh,
        "qk_layernorm": True,
        "rms_norm_eps": 1e-5,
        "rope_theta": 50000.0,
        "max_position_embeddings": 512,
        "vocab_size": vocab,
        "mask_token_id": mask,
        "eos_token_id": eos,
        "pad_token_id": eos,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    init = Init(seed)
    hd = d // nh
    w = {"model.embed_tokens.weight": init.normal((vocab, d), 0.5)}
    p = "model.layers.0."
    w[p + "input_layernorm.weight"] = init.norm(d)
    for n_ in ("q", "k", "v", "o"):
        w[p + f"self_attn.{n_}_proj.weight"] = init.linear(d, d)
    w[p + "self_attn.q_norm.weight"] = init.norm(hd)
    w[p + "self_attn.k_norm.weight"] = init.norm(hd)
    w[p + "post_attention_layernorm.weight"] = init.norm(d)
    w[p + "mlp.gate.weight"] = init.linear(ne, d)
    for e in range(ne):
        w[p + f"mlp.experts.{e}.gate_proj.weight"] = init.linear(moe_inter, d)
        w[p + f"mlp.experts.{e}.up_proj.weight"] = init.linear(moe_inter, d)
        w[p + f"mlp.experts.{e}.down_proj.weight"] = init.linear(d, moe_inter)
    w["model.norm.weight"] = init.norm(d)
    w["lm_head.weight"] = init.normal((vocab, d), 0.4)
    files = save_weights(out, w)
    write_json(os.path.join(out, "config.json"), cfg)
    return w, {
        "architecture": "LLaDAMoEModelLM", "model_type": "lladamoe", "family": "llada_moe",
        "dtype": "float32", "files": files + ["config.json", "tokenizer.json"],
        "sharded": False, "supported": False,
        "note": "not the published field names: importers must name the field they miss",
        "vocab_size": vocab, "mask_token_id": mask, "eos_token_id": eos,
    }


ALL = ["llada", "llada_tied", "llada_sharded", "dream", "qwen3", "llama", "llada_moe"]


def build(out_root, names):
    os.makedirs(out_root, exist_ok=True)
    manifest_path = os.path.join(out_root, "MANIFEST.json")
    manifest = {"generator": "tests/models/make_tiny_models.py", "models": {}}
    if os.path.exists(manifest_path):
        try:
            with open(manifest_path) as f:
                old = json.load(f)
            manifest["models"].update(old.get("models", {}))
        except (ValueError, OSError):
            pass
    for name in names:
        out = os.path.join(out_root, name)
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.makedirs(out)
        if name == "llada":
            _, info = make_llada(out, name, 1001, n_kv=2, tied=False, dtype=torch.bfloat16)
        elif name == "llada_tied":
            _, info = make_llada(out, name, 1002, n_kv=4, tied=True, dtype=torch.float32)
        elif name == "llada_sharded":
            # the weights of `llada` (same seed, bf16-rounded values) stored as f32 in 2 shards
            _, info = make_llada(out, name, 1001, n_kv=2, tied=False, dtype=torch.float32,
                                 shards=2, round_through=torch.bfloat16)
            info["same_weights_as"] = "llada"
        elif name == "dream":
            _, info = make_dream(out, name, 1004)
        elif name == "qwen3":
            _, info = make_qwen3(out, name, 1005)
        elif name == "llama":
            _, info = make_llama(out, name, 1006)
        elif name == "llada_moe":
            _, info = make_llada_moe(out, name, 1007)
        else:
            raise SystemExit(f"unknown model {name!r}; choose from {', '.join(ALL)}")
        for f in os.listdir(out):  # safetensors writes 0600 files
            os.chmod(os.path.join(out, f), 0o644)
        info["bytes"] = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        manifest["models"][name] = info
    manifest["models"] = {k: manifest["models"][k] for k in ALL if k in manifest["models"]}
    write_json(manifest_path, manifest)
    return manifest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--only", default=None,
                    help="comma-separated subset of: " + ", ".join(ALL))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    names = ALL if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    for n in names:
        if n not in ALL:
            ap.error(f"unknown model {n!r}; choose from {', '.join(ALL)}")
    m = build(args.out_dir, names)
    for n in names:
        info = m["models"][n]
        print(f"{n:14s} {info['architecture']:18s} {info['dtype']:9s} {info['bytes']:8d} bytes")


if __name__ == "__main__":
    main()
