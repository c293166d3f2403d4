"""The pieces the plain-PyTorch references (llada2/, llada_moe/, sdar/ *_reference.py) share: attention masks,
RMSNorm, rotary embeddings, the SwiGLU MLP, and reading and checking a checkpoint folder.

torch and safetensors only, not fixture_tools.py (which imports transformers): ctest runs the references with
DLM_PYTHON (the repo .venv), which needs no transformers for them. The references put this folder on sys.path.
"""

import json
import os

import torch

REQUIRED = object()   # a config field with no usable default: a config.json without it is refused


# ------------------------------------------------------------------------------------------------------------
# Masks (True = the query row may attend to the key column)


def block_causal_mask(T, block):
    """Blocks [k*block, (k+1)*block) counted from position 0 (the prompt included): token i sees token j iff
    j // block <= i // block: every token of its own block and of all earlier blocks (SDAR generate.py's
    `block_diffusion_attention_mask`)."""
    b = torch.arange(T) // block
    return b[None, :] <= b[:, None]


def causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


def full_mask(T):
    return torch.ones(T, T, dtype=torch.bool)


# ------------------------------------------------------------------------------------------------------------
# Layers


def rms_norm(x, w, eps):
    """RMSNorm over the last dimension, in float32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_inv_freq(theta, rotary_dim):
    """inv_freq_i = theta^(-2i / rotary_dim), i < rotary_dim / 2, float32. theta is used as the caller passes it
    (int or float) so that each reference computes exactly what it always has."""
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))


def _rope_cos_sin(pos, theta, rotary_dim):
    """cos and sin of pos · inv_freq, shaped [T, 1, rotary_dim / 2] to broadcast over the heads."""
    f = pos.float()[:, None] * rope_inv_freq(theta, rotary_dim)[None, :]
    return f.cos()[:, None, :], f.sin()[:, None, :]


def rope_neox(x, pos, theta, rotary_dim=None):
    """NeoX-style (rotate_half) rotary on the first rotary_dim dims of each head (all of them when None), the rest
    passed through: halves x1 = x[:r/2], x2 = x[r/2:r] -> (x1·cos − x2·sin, x2·cos + x1·sin). x [T, heads, hd]."""
    r = x.shape[-1] if rotary_dim is None else rotary_dim
    cos, sin = _rope_cos_sin(pos, theta, r)
    x1, x2, rest = x[..., : r // 2], x[..., r // 2: r], x[..., r:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


def rope_interleaved(x, pos, theta, rotary_dim=None):
    """GPT-J-style rotary: pairs (x[2i], x[2i+1]) rotated instead of halves; the rule the fixtures' sensitivity
    entries measure the NeoX style against."""
    r = x.shape[-1] if rotary_dim is None else rotary_dim
    cos, sin = _rope_cos_sin(pos, theta, r)
    x1, x2 = x[..., 0:r:2], x[..., 1:r:2]
    rot = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([rot, x[..., r:]], dim=-1)


def swiglu(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


# ------------------------------------------------------------------------------------------------------------
# Checkpoint folders


def read_config_fields(d, fields, why_required=""):
    """config.json of folder d (the whole of it) and its `fields` (name -> default, or REQUIRED), each taken from
    config.json or else its default; a REQUIRED field missing is refused (why_required says why it has no
    default)."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    out = {}
    for k, default in fields.items():
        if k in cfg:
            out[k] = cfg[k]
        elif default is REQUIRED:
            raise ValueError("config.json lacks %r%s" % (k, why_required))
        else:
            out[k] = default
    return cfg, out


def load_safetensors(d):
    """d/model.safetensors as a name -> tensor dict (safetensors imported here: only loading needs it)."""
    from safetensors.torch import load_file
    return load_file(os.path.join(d, "model.safetensors"))


def check_layout(want, tensors, tied_head):
    """Refuses tensors whose names and shapes are not `want` (name -> shape). With a tied head, a lm_head.weight
    in the file does not count (the loaders skip it)."""
    got = {k: list(v.shape) for k, v in tensors.items()}
    if tied_head:
        got.pop("lm_head.weight", None)
    if want != got:
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        bad = sorted(k for k in want if k in got and want[k] != got[k])
        raise ValueError("checkpoint layout: missing %s extra %s wrong shape %s" % (missing[:5], extra[:5], bad[:5]))
