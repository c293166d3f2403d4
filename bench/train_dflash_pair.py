#!/usr/bin/env python3
"""Train an autoregressive Qwen3 target and a DFlash block-diffusion drafter for it (issue 13).

    nice -n 19 .venv/bin/python bench/train_dflash_pair.py [--out bench/models/dflash_pair]
        [--target-steps N] [--draft-steps N] [--threads 2] [--seed 1234]

Corpus and tokenizer are the demo model's (tests/models/demo/train_demo_model.py, imported):
the first 10 kB of /usr/share/common-licenses/GPL-3 as paragraphs, one stream of
<BOS> paragraph <EOS>, and the byte-level BPE trained on them (945 ids; <|mdm_mask|> is the
drafter's mask token).  Linear layers and the attention matmuls of training run through oneDNN
(the demo's mkldnn_linear wrappers), because the Debian torch links the reference BLAS.

1. Target: a Qwen3ForCausalLM written in plain PyTorch with transformers' Qwen3 math (RMSNorm
   eps 1e-6 computed in f32, per-head q_norm / k_norm before RoPE, half-rotation RoPE,
   GQA, SiLU-gated MLP, untied LM head): hidden 512, 8 layers, 8 query / 4 KV heads of 64,
   MLP 1536, vocab 945, ~26M parameters (~105 MB in f32: far larger than the 32 MB L3, so a
   one-token decode step is bound by weight traffic).  Next-token cross-entropy on random
   256-token windows of the stream, until it knows the text nearly by heart.
   Saved in the Hugging Face layout (config.json, model.safetensors f32, tokenizer.json,
   generation_config.json).
2. Data: the target decodes greedily (KV cache) from many prompts cut from the corpus (half
   start at a paragraph's BOS, half anywhere), to 160 tokens each; the hidden states after its
   target_layer_ids layers are kept for every position.
3. Drafter (DFlash, docs/design/speculative-decoding.md): 2 Qwen3-style layers of the target's width, fc
   [512, 3*512] over the concatenated target features of layers target_layer_ids = [1, 3, 5]
   (the authors' build_target_layer_ids(8, 3)), hidden_norm, norm; embedding and LM head are the
   target's (frozen, not saved).  A block is [anchor, MASK x (B-1)], B = 8, at positions
   anchor..anchor+B-1; it attends without a causal mask to the context features of every
   position before the anchor and to the whole block.  Training packs K blocks per sequence
   into one forward (a mask gives each block exactly the context it has at inference) and
   takes the cross-entropy of block positions 1..B-1 against the target's greedy tokens.
   Saved in the DFlash checkpoint format (config.json with architectures
   ["DFlashDraftModel"], num_target_layers, block_size, dflash_config; model.safetensors f32
   with the draft-only tensor names).
4. Check: on prompts cut from the corpus (every paragraph's BOS + first 8 tokens, up to 96 new
   tokens, EOS stops), plain-PyTorch greedy speculative decoding (draft -> verify -> accept the
   matching prefix + bonus, KV crop as in dflash_generate) must give exactly the target's greedy
   output; the mean acceptance length (tokens committed per verify, bonus included) is printed
   and written to training_log.json with the loss curves and wall times.

Fixed seeds and a fixed number of steps: deterministic for a given machine and --threads.
The weights are not committed; the bench runs this script.  One thread by default: on the
shared 2-core machine, two OpenMP threads of a niced process spin-wait behind other jobs and
were 6x slower per step than one.  Reference run (--threads 1, nice 19, load 1.3-4.4): target
506 s (loss 0.049), greedy data 103 s, drafter 358 s, check 92 s, 18 min in all; mean
acceptance length 4.16 over the 36 paragraphs, speculative output = target greedy on all 36.
"""

import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "models", "demo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))

import train_demo_model as demo  # noqa: E402  corpus, special tokens, oneDNN linear / bmm
from train_tokenizer import train_bpe_tokenizer  # noqa: E402

# ---- target (Qwen3ForCausalLM)
H, N_LAYERS, N_HEADS, N_KV, HEAD_DIM, MLP = 512, 8, 8, 4, 64, 1536
ROPE_THETA = 10000.0
NORM_EPS = 1e-6
SEQ = 256                      # training window = max_position_embeddings
T_BATCH = 4
T_LR, T_WARMUP, T_MIN_LR_FRAC, WD, CLIP = 1.5e-3, 20, 0.05, 0.01, 1.0
DEFAULT_TARGET_STEPS = 150

# ---- drafter (DFlashDraftModel)
D_LAYERS = 2
BLOCK = 8
TARGET_LAYER_IDS = [1, 3, 5]   # = dflash.model.build_target_layer_ids(8, 3)
DATA_LEN = 160                 # prompt + greedy continuation per training sequence
DATA_SEQS = 256
GEN_BATCH = 32
D_BATCH, D_ANCHORS = 8, 12     # sequences per step, blocks per sequence
D_LR, D_WARMUP, D_MIN_LR_FRAC = 1e-3, 30, 0.05
DEFAULT_DRAFT_STEPS = 400

# ---- check
PROMPT_TOKENS = 8              # BOS + the paragraph's first 8 tokens
MAX_NEW = 96


# ---------------------------------------------------------------------------------------------
# Qwen3 building blocks (parameter names = Hugging Face tensor names)
# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """Qwen3RMSNorm: weight * x * rsqrt(mean(x^2) + eps), in f32."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS))


def rope_cos_sin(pos):
    """pos: int64 [..., L] -> cos, sin [..., L, head_dim] (HF default RoPE, f32)."""
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))
    f = pos.float()[..., None] * inv
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, L, hd]; cos/sin [B or 1, L, hd]."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def attend(q, k, v, visible):
    """q [B, nH, Lq, hd], k/v [B, nKV, Lk, hd], visible bool broadcastable to [B, 1, Lq, Lk] or
    None (all visible). Scale head_dim^-0.5; query head j uses KV head j // (nH / nKV) (the
    heads sharing a KV head are stacked into one GEMM instead of repeating K and V)."""
    B, nH, Lq, hd = q.shape
    nKV, Lk = k.shape[1], k.shape[2]
    rep = nH // nKV
    qg = q.reshape(B * nKV, rep * Lq, hd)
    kg, vg = k.reshape(B * nKV, Lk, hd), v.reshape(B * nKV, Lk, hd)
    if torch.is_grad_enabled():
        s = demo.bmm_nt(qg, kg)
    else:
        s = qg @ kg.transpose(-1, -2)
    s = s.view(B, nKV, rep, Lq, Lk) * (HEAD_DIM ** -0.5)
    if visible is not None:
        s = s.masked_fill(~visible[:, :, None], float("-inf"))
    a = torch.softmax(s, dim=-1).view(B * nKV, rep * Lq, Lk)
    o = demo.bmm_nt(a, vg.transpose(-1, -2)) if torch.is_grad_enabled() else a @ vg
    return o.view(B, nH, Lq, hd).transpose(1, 2).reshape(B, Lq, nH * hd)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = demo.Linear(H, N_HEADS * HEAD_DIM)
        self.k_proj = demo.Linear(H, N_KV * HEAD_DIM)
        self.v_proj = demo.Linear(H, N_KV * HEAD_DIM)
        self.o_proj = demo.Linear(N_HEADS * HEAD_DIM, H)
        self.q_norm = RMSNorm(HEAD_DIM)
        self.k_norm = RMSNorm(HEAD_DIM)


class MLPBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = demo.Linear(H, MLP)
        self.up_proj = demo.Linear(H, MLP)
        self.down_proj = demo.Linear(MLP, H)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attention()
        self.mlp = MLPBlock()
        self.input_layernorm = RMSNorm(H)
        self.post_attention_layernorm = RMSNorm(H)


class Target(nn.Module):
    """Qwen3ForCausalLM, causal, optional KV cache (list of per-layer (k, v) after k_norm+RoPE)."""

    def __init__(self, vocab):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, H)
        self.model.layers = nn.ModuleList([Layer() for _ in range(N_LAYERS)])
        self.model.norm = RMSNorm(H)
        self.lm_head = demo.Linear(H, vocab)

    def forward(self, ids, pos0=0, cache=None, layer_ids=()):
        """ids [B, L] at positions pos0..pos0+L-1 (after the cache's pos0 entries).
        Returns logits [B, L, V] and the concatenated hidden states after layers layer_ids
        [B, L, len(layer_ids) * H] (None if no layer_ids)."""
        B, L = ids.shape
        pos = torch.arange(pos0, pos0 + L)
        cos, sin = rope_cos_sin(pos[None])
        kpos = torch.arange(pos0 + L)
        visible = (kpos[None, :] <= pos[:, None])[None, None]
        x = self.model.embed_tokens(ids)
        feats = []
        for i, layer in enumerate(self.model.layers):
            at = layer.self_attn
            h = layer.input_layernorm(x)
            q = at.q_norm(at.q_proj(h).view(B, L, N_HEADS, HEAD_DIM)).transpose(1, 2)
            k = at.k_norm(at.k_proj(h).view(B, L, N_KV, HEAD_DIM)).transpose(1, 2)
            v = at.v_proj(h).view(B, L, N_KV, HEAD_DIM).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if cache is not None:
                if cache[i] is not None:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
            x = x + at.o_proj(attend(q, k, v, visible))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            if i in layer_ids:
                feats.append(x)
        logits = self.lm_head(self.model.norm(x))
        return logits, (torch.cat(feats, dim=-1) if feats else None)


def crop(cache, n):
    for i, kv in enumerate(cache):
        if kv is not None:
            cache[i] = (kv[0][:, :, :n], kv[1][:, :, :n])


class Draft(nn.Module):
    """DFlashDraftModel (draft-only tensors: fc, hidden_norm, layers.*, norm)."""

    def __init__(self, n_feat):
        super().__init__()
        self.fc = demo.Linear(n_feat * H, H)
        self.hidden_norm = RMSNorm(H)
        self.layers = nn.ModuleList([Layer() for _ in range(D_LAYERS)])
        self.norm = RMSNorm(H)

    def forward(self, feats, noise, blk_pos, visible):
        """feats [B, T, n*H] target features at positions 0..T-1; noise [B, Q, H] embedded block
        tokens at positions blk_pos [B, Q]; visible [B, 1, Q, T+Q] or None. Returns norm(h)
        [B, Q, H]. Context K/V are projected from hidden_norm(fc(feats)) without a layer norm."""
        B, T, _ = feats.shape
        Q = noise.shape[1]
        ctx = self.hidden_norm(self.fc(feats))
        cq, sq = rope_cos_sin(blk_pos)
        ck, sk = rope_cos_sin(torch.cat([torch.arange(T)[None].expand(B, T), blk_pos], dim=1))
        h = noise
        for layer in self.layers:
            at = layer.self_attn
            hin = layer.input_layernorm(h)
            q = at.q_norm(at.q_proj(hin).view(B, Q, N_HEADS, HEAD_DIM)).transpose(1, 2)
            k = torch.cat([at.k_proj(ctx), at.k_proj(hin)], dim=1).view(B, T + Q, N_KV, HEAD_DIM)
            v = torch.cat([at.v_proj(ctx), at.v_proj(hin)], dim=1).view(B, T + Q, N_KV, HEAD_DIM)
            k = at.k_norm(k).transpose(1, 2)
            v = v.transpose(1, 2)
            q, k = apply_rope(q, cq, sq), apply_rope(k, ck, sk)
            h = h + at.o_proj(attend(q, k, v, visible))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)


def init_weights(m, gen, n_layers):
    """Embedding N(0, 1); linear N(0, 1/fan_in), residual outputs (o_proj, down_proj) further
    scaled by 1/sqrt(2 n_layers); norms 1 (the demo model's initialisation)."""
    for name, p in m.named_parameters():
        if name.endswith("norm.weight"):
            continue
        std = 1.0 if name.endswith("embed_tokens.weight") else 1.0 / math.sqrt(p.shape[1])
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            std /= math.sqrt(2 * n_layers)
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=gen) * std)


def make_opt(model, lr):
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def lr_at(step, total, lr, warmup, min_frac):
    if step < warmup:
        return lr * (step + 1) / warmup
    prog = (step - warmup) / max(1, total - warmup)
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


# ---------------------------------------------------------------------------------------------
# decoding (plain PyTorch reference)
# ---------------------------------------------------------------------------------------------

@torch.no_grad()
def greedy_batch(target, prompts, total_len, layer_ids):
    """prompts [N, P] -> sequences [N, total_len] (prompt + greedy continuation, EOS not special)
    and the target features of positions 0..total_len-2 [N, total_len-1, n*H]."""
    cache = [None] * N_LAYERS
    logits, f = target(prompts, 0, cache, layer_ids)
    seq, feats = [prompts], [f]
    nxt = logits[:, -1].argmax(-1)
    n = prompts.shape[1]
    while True:
        seq.append(nxt[:, None])
        n += 1
        if n == total_len:
            break
        logits, f = target(nxt[:, None], n - 1, cache, layer_ids)
        feats.append(f)
        nxt = logits[:, -1].argmax(-1)
    return torch.cat(seq, dim=1), torch.cat(feats, dim=1)


@torch.no_grad()
def target_greedy(target, prompt, max_new, eos):
    cache = [None] * N_LAYERS
    logits, _ = target(torch.tensor([prompt]), 0, cache)
    out = []
    while True:
        t = int(logits[0, -1].argmax())
        out.append(t)
        if t == eos or len(out) == max_new:
            return out
        logits, _ = target(torch.tensor([[t]]), len(prompt) + len(out) - 1, cache)


@torch.no_grad()
def draft_block(draft, target, feats, anchor, start, size, mask_id):
    """One draft: block [anchor, MASK x (size-1)] at positions start..start+size-1, context =
    the target features of positions 0..start-1. Returns the size-1 draft tokens (T = 0)."""
    ids = torch.tensor([[anchor] + [mask_id] * (size - 1)])
    noise = target.model.embed_tokens(ids)
    pos = torch.arange(start, start + size)[None]
    h = draft(feats, noise, pos, None)[:, 1:]
    return target.lm_head(h)[0].argmax(-1).tolist()


@torch.no_grad()
def spec_greedy(target, draft, prompt, max_new, eos, mask_id, block):
    """DFlash greedy speculative decoding as dflash_generate (temperature 0): prefill, then
    draft -> verify -> accept the matching prefix + bonus, target KV cropped to the committed
    length, context += target features of the committed tokens. Returns (new tokens,
    acceptance lengths per verify)."""
    P = len(prompt)
    max_len = P + max_new
    cache = [None] * N_LAYERS
    logits, feats = target(torch.tensor([prompt]), 0, cache, TARGET_LAYER_IDS)
    out = list(prompt) + [int(logits[0, -1].argmax())]
    start, acc_lens = P, []
    stopped = out[start] == eos
    while start + 1 < max_len and not stopped:
        size = min(block, max_len - start)
        blk = [out[start]]
        if size > 1:
            blk += draft_block(draft, target, feats, out[start], start, size, mask_id)
        logits, f = target(torch.tensor([blk]), start, cache, TARGET_LAYER_IDS)
        post = logits[0].argmax(-1).tolist()
        acc = 0
        while acc < size - 1 and blk[acc + 1] == post[acc]:
            acc += 1
        del out[start:]
        out += blk[:acc + 1] + [post[acc]]
        produced = min(acc + 1, max_len - start - 1)
        for j in range(produced):
            if out[start + 1 + j] == eos:
                produced, stopped = j + 1, True
                break
        start += produced
        crop(cache, start)
        acc_lens.append(produced)
        feats = torch.cat([feats, f[:, :produced]], dim=1)
    return out[P:min(start + 1, max_len)], acc_lens


# ---------------------------------------------------------------------------------------------


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "models", "dflash_pair"))
    ap.add_argument("--target-steps", type=int, default=DEFAULT_TARGET_STEPS)
    ap.add_argument("--draft-steps", type=int, default=DEFAULT_DRAFT_STEPS)
    ap.add_argument("--draft-seqs", type=int, default=DATA_SEQS,
                    help="greedy target sequences the drafter trains on")
    ap.add_argument("--corpus-chars", type=int, default=demo.DEFAULT_CORPUS_CHARS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    t0 = time.time()
    times = {}

    from tokenizers import Tokenizer

    paras = demo.corpus_paragraphs(a.corpus_chars)
    tmp = a.out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tdir, ddir = os.path.join(tmp, "target"), os.path.join(tmp, "draft")
    os.makedirs(tdir)
    os.makedirs(ddir)
    tok_path = os.path.join(tdir, "tokenizer.json")
    train_bpe_tokenizer(tok_path, vocab_size=demo.VOCAB, special_tokens=demo.SPECIALS,
                        style="llama3", corpus_texts=paras)
    tok = Tokenizer.from_file(tok_path)
    vocab = tok.get_vocab_size()
    bos, eos, _eot, mask_id = (tok.token_to_id(s) for s in demo.SPECIALS)
    para_ids = [tok.encode(p).ids + [eos] for p in paras]   # encode() adds BOS
    stream = torch.tensor([t for p in para_ids for t in p], dtype=torch.long)
    para_starts, n = [], 0             # stream offset of each paragraph's BOS
    for p in para_ids:
        para_starts.append(n)
        n += len(p)
    print(f"corpus: {len(paras)} paragraphs, {len(stream)} tokens, vocab {vocab}; "
          f"dnnl {demo.USE_DNNL}; threads {a.threads}", flush=True)

    # ---------------------------------------------------------------- 1. target
    gen = torch.Generator().manual_seed(a.seed)
    target = Target(vocab)
    init_weights(target, gen, N_LAYERS)
    n_target = sum(p.numel() for p in target.parameters())
    print(f"target: Qwen3 hidden {H}, {N_LAYERS} layers, {N_HEADS}/{N_KV} heads x {HEAD_DIM}, "
          f"mlp {MLP}: {n_target / 1e6:.2f}M parameters ({n_target * 4 / 1e6:.0f} MB f32); "
          f"{a.target_steps} steps of {T_BATCH}x{SEQ}", flush=True)
    opt = make_opt(target, T_LR)
    t_curve, run, run_n = [], 0.0, 0
    ts = time.time()
    for step in range(a.target_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.target_steps, T_LR, T_WARMUP, T_MIN_LR_FRAC)
        starts = torch.randint(0, len(stream) - SEQ - 1, (T_BATCH,), generator=gen)
        x = torch.stack([stream[s:s + SEQ + 1] for s in starts])
        logits, _ = target(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), CLIP)
        opt.step()
        run, run_n = run + float(loss), run_n + 1
        if (step + 1) % 25 == 0 or step == 0 or step + 1 == a.target_steps:
            t_curve.append({"step": step + 1, "loss": round(run / run_n, 4),
                            "seconds": round(time.time() - ts, 1)})
            print(f"target step {step + 1:5d}  loss {run / run_n:.4f}  "
                  f"{time.time() - ts:6.1f} s", flush=True)
            run, run_n = 0.0, 0
    times["target_train"] = time.time() - ts
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)

    # ---------------------------------------------------------------- 2. greedy data
    ts = time.time()
    seqs, feats, plens = [], [], []
    for j in range(0, a.draft_seqs, GEN_BATCH):   # one random prompt length per batch
        plen = int(torch.randint(2, 65, (1,), generator=gen))
        ps = []
        for i in range(j, min(j + GEN_BATCH, a.draft_seqs)):
            if i % 2 == 0:   # from a paragraph's BOS
                cand = [s for s in para_starts if s + plen <= len(stream)]
                s = cand[int(torch.randint(0, len(cand), (1,), generator=gen))]
            else:            # from anywhere
                s = int(torch.randint(0, len(stream) - plen, (1,), generator=gen))
            ps.append(stream[s:s + plen])
        sq, ft = greedy_batch(target, torch.stack(ps), DATA_LEN, TARGET_LAYER_IDS)
        seqs.append(sq)
        feats.append(ft)
        plens += [plen] * sq.shape[0]
    seqs, feats, plens = torch.cat(seqs), torch.cat(feats), torch.tensor(plens)
    times["draft_data"] = time.time() - ts
    print(f"draft data: {len(seqs)} greedy sequences of {DATA_LEN} tokens "
          f"(features {tuple(feats.shape)}), {times['draft_data']:.1f} s", flush=True)

    # ---------------------------------------------------------------- 3. drafter
    draft = Draft(len(TARGET_LAYER_IDS))
    init_weights(draft, gen, D_LAYERS)
    n_draft = sum(p.numel() for p in draft.parameters())
    print(f"draft: {D_LAYERS} layers, block {BLOCK}, target layers {TARGET_LAYER_IDS}: "
          f"{n_draft / 1e6:.2f}M parameters; {a.draft_steps} steps of {D_BATCH} sequences x "
          f"{D_ANCHORS} blocks", flush=True)
    opt = make_opt(draft, D_LR)
    d_curve, run, run_n, run_acc = [], 0.0, 0, 0.0
    ts = time.time()
    T = DATA_LEN - 1                      # context positions with features
    jj = torch.arange(BLOCK)
    for step in range(a.draft_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.draft_steps, D_LR, D_WARMUP, D_MIN_LR_FRAC)
        idx = torch.randint(0, len(seqs), (D_BATCH,), generator=gen)
        lo = plens[idx] - 1               # anchors: the prompt's last token onwards
        hi = DATA_LEN - BLOCK             # inclusive: the block's last target must exist
        u = torch.rand(D_BATCH, D_ANCHORS, generator=gen)
        anchors = lo[:, None] + (u * (hi - lo + 1)[:, None].float()).long()      # [B, K]
        pos = anchors[:, :, None] + jj                                           # [B, K, BLOCK]
        sq = seqs[idx]
        labels = torch.gather(sq, 1, pos.reshape(D_BATCH, -1)).view(D_BATCH, D_ANCHORS, BLOCK)
        ids = labels.clone()
        ids[:, :, 1:] = mask_id
        noise = target.model.embed_tokens(ids.view(D_BATCH, -1))
        Q = D_ANCHORS * BLOCK
        qa = anchors[:, :, None].expand(-1, -1, BLOCK).reshape(D_BATCH, Q)       # query's anchor
        ctx_vis = torch.arange(T)[None, None, :] < qa[:, :, None]                 # [B, Q, T]
        qb = torch.arange(Q) // BLOCK
        blk_vis = (qb[:, None] == qb[None, :])[None].expand(D_BATCH, -1, -1)      # [B, Q, Q]
        visible = torch.cat([ctx_vis, blk_vis], dim=2)[:, None]
        h = draft(feats[idx], noise, pos.view(D_BATCH, Q), visible)
        h = h.view(D_BATCH, D_ANCHORS, BLOCK, H)[:, :, 1:]
        logits = target.lm_head(h)
        y = labels[:, :, 1:]
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), CLIP)
        opt.step()
        run, run_n = run + float(loss), run_n + 1
        run_acc += float((logits.argmax(-1) == y).float().mean())
        if (step + 1) % 25 == 0 or step == 0 or step + 1 == a.draft_steps:
            d_curve.append({"step": step + 1, "loss": round(run / run_n, 4),
                            "token_accuracy": round(run_acc / run_n, 4),
                            "seconds": round(time.time() - ts, 1)})
            print(f"draft step {step + 1:5d}  loss {run / run_n:.4f}  "
                  f"acc {run_acc / run_n:.3f}  {time.time() - ts:6.1f} s", flush=True)
            run, run_n, run_acc = 0.0, 0, 0.0
    times["draft_train"] = time.time() - ts
    draft.eval()
    del feats

    # ---------------------------------------------------------------- 4. check
    ts = time.time()
    results, all_acc, n_same, n_memorised = [], [], 0, 0
    for pi, p in enumerate(para_ids):
        n_prompt = min(1 + PROMPT_TOKENS, len(p) - 2)
        prompt = p[:n_prompt]
        max_new = min(MAX_NEW, SEQ - n_prompt)
        ref = target_greedy(target, prompt, max_new, eos)
        got, acc = spec_greedy(target, draft, prompt, max_new, eos, mask_id, BLOCK)
        same = got == ref
        memorised = ref == p[n_prompt:n_prompt + len(ref)]
        n_same += same
        n_memorised += memorised
        all_acc += acc
        results.append({"paragraph": pi, "prompt_ids": prompt, "new_tokens": len(ref),
                        "same_as_target": same, "target_reproduces_corpus": memorised,
                        "verifies": len(acc),
                        "mean_acceptance": round(sum(acc) / max(1, len(acc)), 3)})
        print(f"  paragraph {pi:2d}: {len(ref):3d} tokens, {len(acc):3d} verifies, "
              f"acceptance {sum(acc) / max(1, len(acc)):.2f}, same {same}, memorised {memorised}",
              flush=True)
    mean_acc = sum(all_acc) / len(all_acc)
    times["check"] = time.time() - ts

    # one-token step vs B-token verify of the target (Python, oneDNN GEMMs), context 64
    with torch.no_grad():
        cache = [None] * N_LAYERS
        target(stream[None, :64], 0, cache)
        step_t = {}
        for L in (1, BLOCK):
            ids = stream[None, 64:64 + L]
            ws = []
            for _ in range(15):
                t1 = time.perf_counter()
                target(ids, 64, cache)
                ws.append(time.perf_counter() - t1)
                crop(cache, 64)
            step_t[L] = sorted(ws)[len(ws) // 2]

    # ---------------------------------------------------------------- write
    sd = {k: v.detach().contiguous() for k, v in target.state_dict().items()}
    save_file(sd, os.path.join(tdir, "model.safetensors"), metadata={"format": "pt"})
    layer_types = ["full_attention"] * N_LAYERS
    tcfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": bos,
        "eos_token_id": eos, "pad_token_id": eos, "head_dim": HEAD_DIM, "hidden_act": "silu",
        "hidden_size": H, "initializer_range": 0.02, "intermediate_size": MLP,
        "layer_types": layer_types, "max_position_embeddings": SEQ,
        "max_window_layers": N_LAYERS, "num_attention_heads": N_HEADS,
        "num_hidden_layers": N_LAYERS, "num_key_value_heads": N_KV, "rms_norm_eps": NORM_EPS,
        "rope_scaling": None, "rope_theta": ROPE_THETA, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
        "use_sliding_window": False, "vocab_size": vocab,
    }
    write_json(os.path.join(tdir, "config.json"), tcfg)
    # the saved target against the repository's independent Qwen3 reference
    # (tests/reference/autoregressive/ar_reference.py, written from the architecture)
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference", "autoregressive"))
    import ar_reference
    with torch.no_grad():
        ids = stream[:SEQ]
        ref_diff = float((ar_reference.Model(tdir).forward(ids) - target(ids[None])[0][0])
                         .abs().max())
    print(f"target vs tests/reference/autoregressive/ar_reference.py: max |logit diff| "
          f"{ref_diff:.3g}", flush=True)
    write_json(os.path.join(tdir, "generation_config.json"),
               {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": eos,
                "do_sample": False})

    dsd = {k: v.detach().contiguous() for k, v in draft.state_dict().items()}
    save_file(dsd, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
    dcfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "attention_bias": False, "attention_dropout": 0.0, "block_size": BLOCK,
        "bos_token_id": bos, "eos_token_id": eos,
        "dflash_config": {"block_size": BLOCK, "mask_token_id": mask_id,
                          "target_layer_ids": TARGET_LAYER_IDS},
        "head_dim": HEAD_DIM, "hidden_act": "silu", "hidden_size": H,
        "initializer_range": 0.02, "intermediate_size": MLP,
        "layer_types": ["full_attention"] * D_LAYERS, "max_position_embeddings": SEQ,
        "max_window_layers": D_LAYERS, "num_attention_heads": N_HEADS,
        "num_hidden_layers": D_LAYERS, "num_key_value_heads": N_KV, "num_target_layers": N_LAYERS,
        "rms_norm_eps": NORM_EPS, "rope_scaling": None, "rope_theta": ROPE_THETA,
        "sliding_window": None, "target_hidden_size": H, "tie_word_embeddings": False,
        "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False,
        "vocab_size": vocab,
    }
    write_json(os.path.join(ddir, "config.json"), dcfg)

    total = time.time() - t0
    log = {
        "command": "python bench/train_dflash_pair.py --target-steps %d --draft-steps %d "
                   "--draft-seqs %d --corpus-chars %d --threads %d --seed %d"
                   % (a.target_steps, a.draft_steps, a.draft_seqs, a.corpus_chars, a.threads,
                      a.seed),
        "corpus": "/usr/share/common-licenses/GPL-3", "corpus_chars": a.corpus_chars,
        "corpus_tokens": len(stream), "vocab": vocab, "mask_token_id": mask_id, "eos": eos,
        "target_parameters": n_target, "draft_parameters": n_draft,
        "block_size": BLOCK, "target_layer_ids": TARGET_LAYER_IDS,
        "seconds": {k: round(v, 1) for k, v in times.items()} | {"total": round(total, 1)},
        "check": {"prompts": len(results), "prompt": "BOS + first %d tokens of each paragraph"
                  % PROMPT_TOKENS, "max_new_tokens": MAX_NEW, "verifies": len(all_acc),
                  "tokens": sum(all_acc), "mean_acceptance_length": round(mean_acc, 4),
                  "spec_output_same_as_target_greedy": n_same,
                  "target_reproduces_corpus": n_memorised,
                  "acceptance_histogram": {str(k): all_acc.count(k)
                                           for k in range(1, BLOCK + 1)}},
        "target_vs_ar_reference_max_abs_logit_diff": ref_diff,
        "python_target_step_seconds": {"1_token": round(step_t[1], 5),
                                       "%d_tokens" % BLOCK: round(step_t[BLOCK], 5)},
        "target_loss_curve": t_curve, "draft_loss_curve": d_curve, "prompts": results,
    }
    write_json(os.path.join(tmp, "training_log.json"), log)
    for root, _, files in os.walk(tmp):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print(f"\ncheck: {len(results)} prompts, {sum(all_acc)} tokens in {len(all_acc)} verifies: "
          f"mean acceptance length {mean_acc:.3f} (bonus included); speculative output same as "
          f"target greedy: {n_same}/{len(results)}; target reproduces the corpus: "
          f"{n_memorised}/{len(results)}")
    print(f"python target forward, context 64: 1 token {step_t[1] * 1e3:.1f} ms, "
          f"{BLOCK} tokens {step_t[BLOCK] * 1e3:.1f} ms")
    print("wall seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items())
          + f", total {total:.0f}; wrote {a.out}")
    if n_same != len(results):
        sys.exit("speculative output differs from the target's greedy output")


if __name__ == "__main__":
    main()
