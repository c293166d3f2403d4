"""Plain-PyTorch pieces of a Llama / Qwen2 / Qwen3 decoder, shared by the independent references
autoregressive/ar_reference.py and dflash/dflash_reference.py: a config's dimensions, RMSNorm, default RoPE, GQA
attention under a boolean mask, the SiLU-gated MLP, a decoder layer and the causal stack, in float32 on the
tensor names save_pretrained writes. Needs torch (>= 1.13) only, no transformers: it runs in the repository's
.venv as well as in the reference venv. The references import it by putting this folder on sys.path.
"""

import torch
import torch.nn.functional as F


class Dims:
    """The decoder dimensions of a config.json (as a dict): H, L, nH, nKV, hd, eps, theta."""

    def __init__(self, c):
        self.H = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.nH = c["num_attention_heads"]
        self.nKV = c.get("num_key_value_heads") or self.nH
        self.hd = c.get("head_dim") or self.H // self.nH
        self.eps = c.get("rms_norm_eps", 1e-6)
        # transformers 5 writes rope_parameters {rope_type, rope_theta}; 4.x wrote rope_theta (+ rope_scaling)
        rp = c.get("rope_parameters") or {"rope_type": "default", "rope_theta": c.get("rope_theta", 10000.0)}
        if (rp.get("rope_type") or rp.get("type", "default")) != "default" or c.get("rope_scaling"):
            raise ValueError("only default RoPE: %s" % rp)
        self.theta = float(rp["rope_theta"])


def rms_norm(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(pos, hd, theta):
    """cos, sin [T, 1, hd] of positions pos [T] (default RoPE, halves rotated)."""
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    f = pos.float()[:, None] * inv[None, :]
    e = torch.cat((f, f), dim=-1)
    return e.cos()[:, None, :], e.sin()[:, None, :]


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def attend(q, k, v, mask, nH, nKV, hd):
    """q [Tq, nH, hd], k/v [Tk, nKV, hd] (query head j uses kv head j // (nH / nKV)), mask [Tq, Tk] bool
    (True = visible). Returns [Tq, nH * hd]."""
    rep = nH // nKV
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * hd ** -0.5
    s = s.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hts,shd->thd", torch.softmax(s, dim=-1), v).reshape(q.shape[0], nH * hd)


def linear(x, w, name, bias=False):
    """x @ w[name.weight]^T (+ w[name.bias] when bias and the checkpoint has one)."""
    return F.linear(x, w[name + ".weight"], w.get(name + ".bias") if bias else None)


def mlp(h, w, p):
    """The SiLU-gated MLP of layer prefix p ('model.layers.0.')."""
    return linear(F.silu(linear(h, w, p + "mlp.gate_proj")) * linear(h, w, p + "mlp.up_proj"), w, p + "mlp.down_proj")


def decoder_layer(x, w, p, d, cos, sin, mask, qk_norm=True, qkv_bias=False, o_bias=False):
    """One pre-norm decoder layer (prefix p) over x [T, H]: attention (q/k/v biases and Qwen3's per-head q_norm /
    k_norm before RoPE as asked) under mask [T, T], then the MLP."""
    T = x.shape[0]
    h = rms_norm(x, w[p + "input_layernorm.weight"], d.eps)
    q = linear(h, w, p + "self_attn.q_proj", qkv_bias).view(T, d.nH, d.hd)
    k = linear(h, w, p + "self_attn.k_proj", qkv_bias).view(T, d.nKV, d.hd)
    v = linear(h, w, p + "self_attn.v_proj", qkv_bias).view(T, d.nKV, d.hd)
    if qk_norm:
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], d.eps)
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], d.eps)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    x = x + linear(attend(q, k, v, mask, d.nH, d.nKV, d.hd), w, p + "self_attn.o_proj", o_bias)
    h = rms_norm(x, w[p + "post_attention_layernorm.weight"], d.eps)
    return x + mlp(h, w, p)


def causal_stack(w, d, ids, **layer_kw):
    """The causal decoder over ids [T] at positions 0..T-1: (every layer's output, the last one final-normed)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    T = ids.shape[0]
    cos, sin = rope(torch.arange(T), d.hd, d.theta)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["model.embed_tokens.weight"][ids]
    outs = []
    for i in range(d.L):
        x = decoder_layer(x, w, "model.layers.%d." % i, d, cos, sin, causal, **layer_kw)
        outs.append(x)
    return outs, rms_norm(x, w["model.norm.weight"], d.eps)
