#!/usr/bin/env python3
"""Train the bundled demo model: a tiny LLaDA-architecture masked-diffusion LM.

    python tests/models/demo/train_demo_model.py [--out tests/models/demo/checkpoint]
                                                 [--steps N] [--corpus-chars N] [--threads 1]

Corpus: the GNU GPL version 3 text every Debian machine ships
(/usr/share/common-licenses/GPL-3), split into paragraphs, whitespace normalised, deduplicated,
one token stream of <BOS> paragraph <EOS>; by default only its first 10 kB (the preamble and
sections 0-4, ~2700 tokens).  The corpus is small on purpose: on one CPU thread the budget is a
few million tokens, enough for a 1M-parameter model to learn this text nearly by heart, so that
it is confident enough to decode many tokens per forward; not enough for a broad corpus.
Tokenizer: byte-level BPE (vocab 1024, LLaDA special tokens) from tests/models/train_tokenizer.py,
trained on the same paragraphs.
Objective (LLaDA pre-training): per sequence t ~ U(0,1], p = (1 - eps) t + eps, every token
masked independently with probability p, cross-entropy on the masked positions weighted by 1/p,
summed and divided by batch*length.  t is stratified over the batch (t_i = (i + u)/B, one u per
step): the same objective in expectation, much less gradient noise at this batch size.
Fixed seeds, one thread, a fixed number of steps: the result does not depend on the machine's
speed.  Linear layers and attention matmuls run through oneDNN (mkldnn_linear), because the
Debian torch build uses the reference BLAS.

Output (LLaDA on-disk format, same as the `llada` tiny test model): config.json,
generation_config.json, model.safetensors (bf16), tokenizer.json, plus training_log.json with
the loss curve and the sample generations printed at the end (reference low-confidence
sampler from tests/reference/ run on the saved checkpoint).
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(MODELS))
sys.path.insert(0, MODELS)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"]

# model / training hyper-parameters (head_dim 32, GQA 2:1)
VOCAB = 1024
D, N_HEADS, N_KV, N_LAYERS, MLP = 128, 4, 2, 4, 384
SEQ, BATCH = 128, 12
LR, WARMUP, MIN_LR_FRAC, WD, CLIP = 1.5e-3, 40, 0.1, 0.01, 1.0
EPS = 1e-3
ROPE_THETA = 10000.0
NORM_EPS = 1e-5
CORPUS = ["GPL-3"]
# The preamble and sections 0-4 of the licence (about 2700 tokens), trained until the model knows
# them nearly by heart: a model that confident unmasks many positions per forward under a
# confidence threshold, which is what the demo shows.  The whole licence (35 kB) in the same
# budget gives a model too unsure of itself to decode in parallel without losing quality.
DEFAULT_STEPS = 4000
DEFAULT_CORPUS_CHARS = 10000

PROMPTS = [
    "You may copy and distribute",
    "This program is free software",
    "If you modify the Program",
]


def corpus_paragraphs(max_chars):
    """The licence's paragraphs in order, whitespace normalised and deduplicated, up to the
    first one that reaches max_chars in all (0: the whole text)."""
    paras, seen, chars = [], set(), 0
    for path in sorted(sum((glob.glob("/usr/share/common-licenses/" + c) for c in CORPUS), [])):
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="ignore") as f:
            text = f.read()
        for p in re.split(r"\n\s*\n", text):
            p = " ".join(p.split())
            if len(p) > 20 and p not in seen and (max_chars == 0 or chars < max_chars):
                seen.add(p)
                paras.append(p)
                chars += len(p)
    if not paras:
        raise SystemExit("no corpus: /usr/share/common-licenses/GPL-3 is missing")
    return paras


# ---------------------------------------------------------------------------------------------
# LLaDA architecture (parameter names = checkpoint tensor names)
# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


# The Debian torch links the reference BLAS (~2 GFLOP/s on one core); its bundled oneDNN GEMM
# (mkldnn_linear) is >10x faster, so linear layers run forward and backward through it.
def _mm_nt(a, b):
    """a [N, k] @ b[M, k]^T through oneDNN."""
    return torch._C._nn.mkldnn_linear(a.contiguous().to_mkldnn(),
                                      b.contiguous().to_mkldnn()).to_dense()


class _DnnlLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return _mm_nt(x, w)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        return _mm_nt(gy, w.t()), _mm_nt(gy.t(), x.t())


def _bmm_nt(a, b):
    return torch.stack([_mm_nt(a[g], b[g]) for g in range(a.shape[0])])


class _DnnlBmmNT(torch.autograd.Function):
    """a [G, M, K] @ b[G, N, K]^T -> [G, M, N], one oneDNN GEMM per g."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _bmm_nt(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved_tensors
        gyt = gy.transpose(1, 2)
        return _bmm_nt(gy, b.transpose(1, 2)), _bmm_nt(gyt, a.transpose(1, 2))


def bmm_nt(a, b):
    if not USE_DNNL:
        return a @ b.transpose(-1, -2)
    shape = a.shape
    y = _DnnlBmmNT.apply(a.reshape(-1, shape[-2], shape[-1]), b.reshape(-1, b.shape[-2], b.shape[-1]))
    return y.reshape(*shape[:-1], b.shape[-2])


def _dnnl_ok():
    try:
        a, b = torch.randn(3, 4), torch.randn(5, 4)
        return torch.allclose(_mm_nt(a, b), a @ b.t(), atol=1e-5)
    except (RuntimeError, AttributeError):
        return False


USE_DNNL = _dnnl_ok()


class Linear(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(o, i))

    def forward(self, x):
        if not USE_DNNL:
            return F.linear(x, self.weight)
        shape = x.shape
        y = _DnnlLinear.apply(x.reshape(-1, shape[-1]), self.weight)
        return y.reshape(*shape[:-1], self.weight.shape[0])


def lin(i, o):
    return Linear(i, o)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        hd = D // N_HEADS
        self.attn_norm = RMSNorm(D)
        self.q_proj, self.k_proj, self.v_proj = lin(D, D), lin(D, N_KV * hd), lin(D, N_KV * hd)
        self.attn_out = lin(D, D)
        self.ff_norm = RMSNorm(D)
        self.ff_proj, self.up_proj, self.ff_out = lin(D, MLP), lin(D, MLP), lin(MLP, D)

    def forward(self, x, cos, sin):
        B, L, _ = x.shape
        hd = D // N_HEADS
        h = self.attn_norm(x)
        q = self.q_proj(h).view(B, L, N_HEADS, hd).transpose(1, 2)
        k = self.k_proj(h).view(B, L, N_KV, hd).transpose(1, 2)
        v = self.v_proj(h).view(B, L, N_KV, hd).transpose(1, 2)

        def rope(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
            return t * cos + torch.cat([-t2, t1], dim=-1) * sin
        q, k = rope(q), rope(k)
        rep = N_HEADS // N_KV
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = torch.softmax(bmm_nt(q, k) / math.sqrt(hd), dim=-1)  # bidirectional: no mask
        a = bmm_nt(a, v.transpose(-1, -2))
        x = x + self.attn_out(a.transpose(1, 2).reshape(B, L, D))
        h = self.ff_norm(x)
        return x + self.ff_out(F.silu(self.ff_proj(h)) * self.up_proj(h))


class Transformer(nn.Module):
    def __init__(self, emb_size):
        super().__init__()
        self.wte = nn.Embedding(emb_size, D)
        self.blocks = nn.ModuleList([Block() for _ in range(N_LAYERS)])
        self.ln_f = RMSNorm(D)
        self.ff_out = lin(D, emb_size)


class LLaDA(nn.Module):
    def __init__(self, emb_size):
        super().__init__()
        self.model = nn.Module()
        self.model.transformer = Transformer(emb_size)
        hd = D // N_HEADS
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(SEQ, dtype=torch.float64)[:, None] * inv[None]
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def hidden(self, ids):
        t = self.model.transformer
        L = ids.shape[1]
        x = t.wte(ids)
        for b in t.blocks:
            x = b(x, self.cos[:L], self.sin[:L])
        return t.ln_f(x)

    def head(self, h):
        return self.model.transformer.ff_out(h)


def init_weights(m, gen):
    """Embedding N(0, 1); linear layers N(0, 1/fan_in), residual outputs further scaled by
    1/sqrt(2 n_layers); LM head N(0, 1/d); norms 1.  (GPT-2's 0.02 everywhere leaves a model this
    small stuck at unigram statistics for the whole training budget.)"""
    for name, p in m.named_parameters():
        if name.endswith("norm.weight") or name.endswith("ln_f.weight"):
            continue
        if name.endswith("wte.weight"):
            std = 1.0
        else:
            std = 1.0 / math.sqrt(p.shape[1])
            if ".blocks." in name and (name.endswith("attn_out.weight")
                                       or name.endswith("ff_out.weight")):
                std /= math.sqrt(2 * N_LAYERS)
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=gen) * std)


# ---------------------------------------------------------------------------------------------


def lr_at(step, total):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    prog = (step - WARMUP) / max(1, total - WARMUP)
    return LR * (MIN_LR_FRAC + (1 - MIN_LR_FRAC) * 0.5 * (1 + math.cos(math.pi * prog)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "checkpoint"))
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    ap.add_argument("--corpus-chars", type=int, default=DEFAULT_CORPUS_CHARS,
                    help="train on the licence's paragraphs up to this many characters (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t_start = time.time()

    from tokenizers import Tokenizer
    from train_tokenizer import train_bpe_tokenizer

    paras = corpus_paragraphs(a.corpus_chars)
    tmp_out = a.out + ".tmp"
    shutil.rmtree(tmp_out, ignore_errors=True)
    os.makedirs(tmp_out)
    tok_path = os.path.join(tmp_out, "tokenizer.json")
    train_bpe_tokenizer(tok_path, vocab_size=VOCAB, special_tokens=SPECIALS, style="llama3",
                        corpus_texts=paras)
    tok = Tokenizer.from_file(tok_path)
    vocab = tok.get_vocab_size()
    bos, eos, eot, mask = (tok.token_to_id(s) for s in SPECIALS)
    emb_size = (vocab // 64 + 1) * 64

    stream = []
    for p in paras:  # <BOS> paragraph <EOS>, as a prompt encoded by the tokenizer starts with BOS
        stream.extend(tok.encode(p).ids)
        stream.append(eos)
    stream = torch.tensor(stream, dtype=torch.long)
    print(f"corpus: {len(paras)} paragraphs, {len(stream)} tokens, vocab {vocab} "
          f"(embedding_size {emb_size}); tokenizer {time.time() - t_start:.1f} s", flush=True)

    gen = torch.Generator().manual_seed(a.seed)
    model = LLaDA(emb_size)
    init_weights(model, gen)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: d {D}, {N_LAYERS} layers, {N_HEADS} heads / {N_KV} kv, mlp {MLP}, "
          f"{n_params} parameters; {a.steps} steps of {BATCH}x{SEQ} tokens", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95))
    curve = []
    run, run_n = 0.0, 0
    t_train = time.time()
    c_train = time.process_time()
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.steps)
        starts = torch.randint(0, len(stream) - SEQ, (BATCH,), generator=gen)
        x = torch.stack([stream[s:s + SEQ] for s in starts])
        # t stratified over the batch (t_i = (i + u) / B): an unbiased estimate of the same
        # objective with far less variance than i.i.d. t at this batch size
        t = (torch.arange(BATCH, dtype=torch.float32)[:, None] + torch.rand(1, generator=gen)) / BATCH
        p_mask = (1 - EPS) * t + EPS
        masked = torch.rand(BATCH, SEQ, generator=gen) < p_mask
        noisy = torch.where(masked, torch.full_like(x, mask), x)
        h = model.hidden(noisy)
        logits = model.head(h[masked])[:, :vocab]
        ce = F.cross_entropy(logits, x[masked], reduction="none")
        loss = (ce / p_mask.expand_as(masked)[masked]).sum() / (BATCH * SEQ)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        run += float(loss)
        run_n += 1
        if (step + 1) % 50 == 0 or step == 0:
            avg = run / run_n
            curve.append({"step": step + 1, "loss": round(avg, 4),
                          "seconds": round(time.time() - t_train, 1),
                          "cpu_seconds": round(time.process_time() - c_train, 1)})
            print(f"step {step + 1:5d}  loss {avg:.4f}  lr {lr_at(step, a.steps):.2e}  "
                  f"{time.time() - t_train:6.1f} s wall {time.process_time() - c_train:6.1f} s cpu",
                  flush=True)
            run, run_n = 0.0, 0
    train_seconds = time.time() - t_train
    train_cpu = time.process_time() - c_train

    # ---- write the checkpoint (LLaDA format, bf16)
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(tmp_out, "model.safetensors"), metadata={"format": "pt"})
    cfg = {
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "activation_type": "silu",
        "alibi": False, "attention_dropout": 0.0, "attention_layer_norm": False,
        "block_type": "llama", "d_model": D, "embedding_dropout": 0.0,
        "embedding_size": emb_size, "eos_token_id": eos, "include_bias": False,
        "input_emb_norm": False, "layer_norm_type": "rms", "max_sequence_length": SEQ,
        "mask_token_id": mask, "mlp_hidden_size": MLP, "n_heads": N_HEADS, "n_kv_heads": N_KV,
        "n_layers": N_LAYERS, "pad_token_id": eos, "bos_token_id": bos,
        "rms_norm_eps": NORM_EPS, "rope": True, "rope_theta": ROPE_THETA,
        "scale_logits": False, "torch_dtype": "bfloat16", "use_cache": False,
        "vocab_size": vocab, "weight_tying": False,
    }
    with open(os.path.join(tmp_out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(tmp_out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": bos, "eos_token_id": eos,
                   "pad_token_id": eos}, f, indent=2)
        f.write("\n")

    # ---- sample from the saved checkpoint with the reference sampler
    import models
    import samplers
    ref = models.Model(tmp_out)
    with torch.no_grad():
        ids = stream[:SEQ][None].clone()
        ids[0, 20:40] = mask
        diff = (ref.forward(ids[0]) - model.head(model.hidden(ids))[0, :, :vocab]).abs().max()
    samples = []
    for prompt in PROMPTS:
        pids = tok.encode(prompt).ids
        r = samplers.low_confidence(ref, pids, gen_length=32, block_length=4, steps=32)
        text = tok.decode(r["output_ids"], skip_special_tokens=True)
        samples.append({"prompt": prompt, "prompt_ids": pids, "output_ids": r["output_ids"],
                        "forwards": r["forwards"], "text": text})
        print(f"\nprompt: {prompt!r}\n  -> {text!r}  ({r['forwards']} forwards)")
    with open(os.path.join(tmp_out, "training_log.json"), "w") as f:
        json.dump({"command": "python tests/models/demo/train_demo_model.py --steps "
                              f"{a.steps} --corpus-chars {a.corpus_chars} --threads {a.threads}",
                   "corpus": "/usr/share/common-licenses/" + ",".join(CORPUS),
                   "corpus_chars": a.corpus_chars, "corpus_tokens": len(stream), "parameters": n_params,
                   "train_seconds": round(train_seconds, 1),
                   "train_cpu_seconds": round(train_cpu, 1),
                   "bf16_vs_f32_max_abs_logit_diff": float(diff),
                   "sampler": "reference low-confidence, gen 32, block 4, steps 32, T 0",
                   "loss_curve": curve, "samples": samples}, f, indent=1)
        f.write("\n")
    for fn in os.listdir(tmp_out):
        os.chmod(os.path.join(tmp_out, fn), 0o644)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp_out, a.out)
    size = sum(os.path.getsize(os.path.join(a.out, fn)) for fn in os.listdir(a.out))
    print(f"\nwrote {a.out}: {size / 1e6:.2f} MB; bf16 vs f32 logits max |diff| {float(diff):.3g}; "
          f"training {train_seconds:.0f} s wall / {train_cpu:.0f} s cpu, "
          f"total {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
