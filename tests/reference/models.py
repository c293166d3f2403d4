"""Independent plain-PyTorch forwards for the architectures dlm imports.

Written from the papers (docs/design/ summarises them), not from any model repository.  Reads the
Hugging Face checkpoint directory (config.json + model.safetensors or a sharded
model.safetensors.index.json) directly and computes everything in float32:

  * weights are upcast to float32 (bf16 checkpoints included);
  * RMSNorm  y = x * rsqrt(mean(x^2) + eps) * w   (fp32, weight used as-is, not 1+w);
  * NeoX RoPE: rotate_half, pairs (j, j + d/2), inv_freq[i] = theta^(-2i/d), positions 0..L-1
    (or P..P+n-1 for a KV-cached or window forward);
  * GQA by repeating each KV head n_heads/n_kv_heads times; attention scale 1/sqrt(head_dim);
  * attention mask per architecture: LLaDA and Dream bidirectional, Qwen3 and Llama causal;
  * gated MLP  down(SiLU(gate x) * up x);
  * final norm, LM head (tied to the embedding when the config says so);
  * logits width = vocab_size.  LLaDA pads its embedding / LM head to `embedding_size`
    (> vocab_size); the extra rows are never real tokens and their logit columns are dropped,
    so every consumer sees exactly vocab_size columns;
  * Dream: logit shift, token i is predicted from position i-1, position 0 keeps its own row
    (SPECS §6).  Causal models (Qwen3, Llama) return the plain Hugging Face logits
    (row i predicts token i+1); no shift is applied for them.

Architectures: LLaDAModelLM (model_type llada), DreamModel (Dream), Qwen3ForCausalLM,
LlamaForCausalLM.  Anything else raises UnsupportedArchitecture.
"""

import json
import math
import os

import torch

from safetensors import safe_open


class UnsupportedArchitecture(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# Checkpoint reading
# ----------------------------------------------------------------------------------------------

def load_config(ckpt_dir):
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        return json.load(f)


def load_tensors(ckpt_dir):
    """All tensors of the checkpoint as float32 torch tensors, keyed by their stored name."""
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        with safe_open(os.path.join(ckpt_dir, fn), framework="pt") as f:
            for name in f.keys():
                if name in out:
                    raise ValueError(f"tensor {name} stored twice")
                out[name] = f.get_tensor(name).to(torch.float32)
    return out


# ----------------------------------------------------------------------------------------------
# Architecture description, normalised to one Llama-like layout
# ----------------------------------------------------------------------------------------------

class Spec:
    """Normalised hyper-parameters."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return f"Spec({self.__dict__})"


def architecture_of(config):
    archs = config.get("architectures") or []
    return archs[0] if archs else config.get("model_type", "?")


def make_spec(config):
    arch = architecture_of(config)
    if arch == "LLaDAModelLM":
        if config.get("include_bias", False):
            raise UnsupportedArchitecture("LLaDA with include_bias=true is not covered")
        d = config["d_model"]
        nh = config["n_heads"]
        nkv = config.get("n_kv_heads") or nh
        return Spec(arch=arch, hidden=d, n_layers=config["n_layers"], n_heads=nh, n_kv_heads=nkv,
                    head_dim=d // nh, eps=config["rms_norm_eps"], theta=config["rope_theta"],
                    vocab_size=config["vocab_size"],
                    embedding_size=config.get("embedding_size") or config["vocab_size"],
                    tied=bool(config.get("weight_tying", False)), causal=False, logit_shift=False,
                    qkv_bias=False, qk_norm=False,
                    mask_token_id=config.get("mask_token_id"), eos_token_id=config.get("eos_token_id"))
    if arch in ("DreamModel", "Qwen3ForCausalLM", "LlamaForCausalLM"):
        d = config["hidden_size"]
        nh = config["num_attention_heads"]
        nkv = config.get("num_key_value_heads") or nh
        hd = config.get("head_dim") or d // nh
        is_dream = arch == "DreamModel"
        is_qwen3 = arch == "Qwen3ForCausalLM"
        if config.get("rope_scaling"):
            raise UnsupportedArchitecture("rope_scaling is not covered by the reference")
        if not is_dream and (config.get("attention_bias") or config.get("mlp_bias")):
            raise UnsupportedArchitecture(f"{arch} with biases is not covered")
        return Spec(arch=arch, hidden=d, n_layers=config["num_hidden_layers"], n_heads=nh,
                    n_kv_heads=nkv, head_dim=hd, eps=config["rms_norm_eps"],
                    theta=config.get("rope_theta", 10000.0), vocab_size=config["vocab_size"],
                    embedding_size=config["vocab_size"],
                    tied=bool(config.get("tie_word_embeddings", False)),
                    causal=not is_dream, logit_shift=is_dream,
                    qkv_bias=is_dream,
                    qk_norm=is_qwen3,
                    mask_token_id=config.get("mask_token_id"), eos_token_id=config.get("eos_token_id"))
    raise UnsupportedArchitecture(f"architecture {arch!r} is not supported by the reference")


def _layer_names(spec, i):
    """Stored tensor names of layer i in a fixed order of roles."""
    if spec.arch == "LLaDAModelLM":
        p = f"model.transformer.blocks.{i}."
        return dict(attn_norm=p + "attn_norm.weight", q=p + "q_proj.weight", k=p + "k_proj.weight",
                    v=p + "v_proj.weight", o=p + "attn_out.weight", ffn_norm=p + "ff_norm.weight",
                    gate=p + "ff_proj.weight", up=p + "up_proj.weight", down=p + "ff_out.weight")
    p = f"model.layers.{i}."
    names = dict(attn_norm=p + "input_layernorm.weight", q=p + "self_attn.q_proj.weight",
                 k=p + "self_attn.k_proj.weight", v=p + "self_attn.v_proj.weight",
                 o=p + "self_attn.o_proj.weight", ffn_norm=p + "post_attention_layernorm.weight",
                 gate=p + "mlp.gate_proj.weight", up=p + "mlp.up_proj.weight",
                 down=p + "mlp.down_proj.weight")
    if spec.qkv_bias:
        names.update(q_bias=p + "self_attn.q_proj.bias", k_bias=p + "self_attn.k_proj.bias",
                     v_bias=p + "self_attn.v_proj.bias")
    if spec.qk_norm:
        names.update(q_norm=p + "self_attn.q_norm.weight", k_norm=p + "self_attn.k_norm.weight")
    return names


def _top_names(spec):
    if spec.arch == "LLaDAModelLM":
        return dict(embed="model.transformer.wte.weight", norm="model.transformer.ln_f.weight",
                    lm_head=None if spec.tied else "model.transformer.ff_out.weight")
    return dict(embed="model.embed_tokens.weight", norm="model.norm.weight",
                lm_head=None if spec.tied else "lm_head.weight")


# ----------------------------------------------------------------------------------------------
# Math
# ----------------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    x = x.to(torch.float32)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_cos_sin(positions, head_dim, theta):
    """cos, sin [n, head_dim] for NeoX rotate_half RoPE."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(torch.float32), ang.sin().to(torch.float32)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    # x [heads, n, hd]
    return x * cos[None] + rotate_half(x) * sin[None]


class Model:
    """Reference forward.  `forward(ids)` -> logits [L, vocab_size] float32."""

    def __init__(self, ckpt_dir):
        self.dir = ckpt_dir
        self.config = load_config(ckpt_dir)
        self.spec = make_spec(self.config)
        t = load_tensors(ckpt_dir)
        s = self.spec
        top = _top_names(s)
        self.embed = t[top["embed"]]
        if self.embed.shape != (s.embedding_size, s.hidden):
            raise ValueError(f"embedding shape {tuple(self.embed.shape)} != "
                             f"({s.embedding_size}, {s.hidden})")
        self.norm = t[top["norm"]]
        self.lm_head = self.embed if s.tied else t[top["lm_head"]]
        self.layers = []
        for i in range(s.n_layers):
            self.layers.append({role: t[name] for role, name in _layer_names(s, i).items()})
        self.eps = s.eps

    # -- properties used by samplers
    @property
    def vocab_size(self):
        return self.spec.vocab_size

    @property
    def mask_token_id(self):
        return self.spec.mask_token_id

    @property
    def eos_token_id(self):
        e = self.spec.eos_token_id
        if isinstance(e, list):
            return e[0] if e else None
        return e

    @property
    def causal(self):
        return self.spec.causal

    @property
    def logit_shift(self):
        return self.spec.logit_shift

    def _attention(self, lw, h, positions, past, causal, future=None):
        s = self.spec
        n = h.shape[0]
        q = h @ lw["q"].T
        k = h @ lw["k"].T
        v = h @ lw["v"].T
        if "q_bias" in lw:
            q = q + lw["q_bias"]
            k = k + lw["k_bias"]
            v = v + lw["v_bias"]
        q = q.view(n, s.n_heads, s.head_dim).transpose(0, 1)        # [H, n, hd]
        k = k.view(n, s.n_kv_heads, s.head_dim).transpose(0, 1)     # [KV, n, hd]
        v = v.view(n, s.n_kv_heads, s.head_dim).transpose(0, 1)
        if "q_norm" in lw:
            q = rms_norm(q, lw["q_norm"], self.eps)
            k = rms_norm(k, lw["k_norm"], self.eps)
        cos, sin = rope_cos_sin(positions, s.head_dim, s.theta)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if past is not None:
            k = torch.cat([past[0], k], dim=1)
            v = torch.cat([past[1], v], dim=1)
        new_kv = (k, v)
        if future is not None:   # the cached K/V of the positions after the new tokens
            k = torch.cat([k, future[0]], dim=1)
            v = torch.cat([v, future[1]], dim=1)
        rep = s.n_heads // s.n_kv_heads
        kk = k.repeat_interleave(rep, dim=0)   # head h uses kv head h // rep
        vv = v.repeat_interleave(rep, dim=0)
        scores = (q @ kk.transpose(1, 2)) / math.sqrt(s.head_dim)   # [H, n, T]
        if causal:
            T = kk.shape[1]
            key_pos = torch.arange(T)
            allowed = key_pos[None, :] <= positions[:, None]
            scores = scores.masked_fill(~allowed[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = (probs @ vv).transpose(0, 1).reshape(n, s.n_heads * s.head_dim)
        return out @ lw["o"].T, new_kv

    def forward(self, ids, start=0, past_kv=None, return_kv=False, shift=None, embeds=None):
        """Logits for `ids` placed at positions start..start+n-1.

        past_kv: None or a list (one per layer) of (K, V) tensors [n_kv_heads, start, head_dim]
        holding the keys (after RoPE) and values of positions 0..start-1.  New tokens attend to
        the cache and to each other with the architecture's mask (bidirectional for LLaDA and
        Dream, causal for Qwen3/Llama).  With return_kv the per-layer (K, V) of positions
        0..start+n-1 are returned as well.

        shift: apply the Dream logit shift (default: the architecture's).  Within a cached
        forward the shift can only look inside the new tokens: row 0 of the chunk keeps its own
        logits, so a caller that needs the exact shifted row for position `start` feeds one
        position earlier (see samplers.py).

        embeds: the input embeddings [n, hidden] in place of the rows of `ids` (dInfer's
        inputs_embeds: iteration smoothing's).
        """
        s = self.spec
        ids = self._ids(ids)
        if past_kv is not None:
            if len(past_kv) != s.n_layers or past_kv[0][0].shape[1] != start:
                raise ValueError("past_kv does not match start")
        elif start != 0:
            raise ValueError("start > 0 needs past_kv")
        return self._layers(ids, start, past_kv, None, return_kv, shift, embeds)

    def forward_window(self, ids, start, cache_kv, shift=None):
        """Logits for `ids` placed at positions start..start+n-1 inside a cached sequence.

        cache_kv: a list (one per layer) of (K, V) tensors [n_kv_heads, T, head_dim] holding the
        keys (after RoPE) and values of every position 0..T-1 (start + n <= T), as
        forward(..., return_kv=True) over the whole sequence returns them.  For this forward the
        new tokens' own keys and values take the place of positions start..start+n-1: they
        attend to the cached K/V of [0, start) and [start+n, T) and to each other with the
        architecture's mask over absolute positions (the dual cache of Fast-dLLM and dInfer).
        cache_kv is not changed.  The logit shift looks only inside the new tokens, as in a
        cached forward.
        """
        s = self.spec
        ids = self._ids(ids)
        n = ids.shape[0]
        if len(cache_kv) != s.n_layers or start < 0 or start + n > cache_kv[0][0].shape[1]:
            raise ValueError("cache_kv does not hold the window's positions")
        past = [(k[:, :start], v[:, :start]) for k, v in cache_kv]
        future = [(k[:, start + n:], v[:, start + n:]) for k, v in cache_kv]
        return self._layers(ids, start, past, future, False, shift)

    def _ids(self, ids):
        ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
        if int(ids.min()) < 0 or int(ids.max()) >= self.spec.embedding_size:
            raise ValueError("token id out of range")
        return ids

    def _layers(self, ids, start, past_kv, future_kv, return_kv, shift, embeds=None):
        """The transformer over `ids` at positions start..; past_kv / future_kv: per-layer K/V of
        the positions before / after them (None: none)."""
        s = self.spec
        n = ids.shape[0]
        positions = torch.arange(start, start + n)
        h = self.embed[ids] if embeds is None else embeds
        kvs = []
        with torch.no_grad():
            for li, lw in enumerate(self.layers):
                a, kv = self._attention(lw, rms_norm(h, lw["attn_norm"], self.eps), positions,
                                        None if past_kv is None else past_kv[li], s.causal,
                                        None if future_kv is None else future_kv[li])
                kvs.append(kv)
                h = h + a
                x = rms_norm(h, lw["ffn_norm"], self.eps)
                g = x @ lw["gate"].T
                h = h + (torch.nn.functional.silu(g) * (x @ lw["up"].T)) @ lw["down"].T
            h = rms_norm(h, self.norm, self.eps)
            logits = h @ self.lm_head.T
            logits = logits[:, : s.vocab_size].contiguous()  # drop padded embedding rows
            if shift is None:
                shift = s.logit_shift
            if shift and n > 1:
                logits = torch.cat([logits[:1], logits[:-1]], dim=0)
        if return_kv:
            return logits, kvs
        return logits

    __call__ = forward


def truncate_kv(kvs, length):
    """Keep positions [0, length) of a per-layer KV list."""
    return [(k[:, :length].contiguous(), v[:, :length].contiguous()) for k, v in kvs]
