#!/usr/bin/env python3
"""LLaDA2-mini at full width on the CPU: one block forward of dlm (as stored bf16 and `--weights
int8`) against a PyTorch implementation of the same forward in bf16, per layer and per kind of work,
projected to the real 20 layers.

    .venv/bin/python bench/llada2_mini_cpu.py [--checkpoint DIR | --layers 2 --experts 256
        [--hidden H --vocab V ...]] [--threads N] [--repeats 5] [--prompt-length 96]
        [--steps-per-block 8] [--weights stored,int8] [--engines dlm,torch] [--full-layers 20]
        [--torch-python /work/refvenv/bin/python] [--torch-dtype bf16|f32] [--artifacts DIR]
        [--no-check] [--reference-check] [--json out.json]

Checkpoint: --checkpoint DIR, else bench/make_llada2_checkpoint.py's (made once under
$DLM_BENCH_CACHE with the shape options given here; default 2 layers, 256 experts, full width:
3.0 GB). dlm: `dlmc compile DIR --block-length 32` once per --weights entry ("stored": as the
checkpoint stores them, bf16; "int8" etc.: `--weights int8`), into --artifacts DIR (kept and reused
while newer than the checkpoint) or a temporary directory. dlmc's --weights converts the
projection matrices (attention, the dense MLP, the shared expert) and the routed experts;
embeddings, LM head and routers stay as stored (dlmc says so when it compiles).

What is timed: decoding as the block-refinement policy runs it. The prompt (--prompt-length ids,
a multiple of the block) is cached by one prefill forward; then one block of 32 masks is decoded in
--steps-per-block steps, each one forward of the block's 32 tokens over the cached prompt
(bidirectional within the block) followed by the step's commits: the schedule's quota of the most
confident masked positions (threshold knob 2.0, so never more: a fixed number of forwards whatever
the weights; eos_early_stop off). Only those block forwards are measured, prefill and sampling
excluded:
- dlm: `dlm-prof ART --prompt-ids ... --gen-length 32 --knob steps_per_block=S --knob
  threshold=2 --knob eos_early_stop=false --warmup 1 --threads N --json --trace T`; from the Chrome
  trace, every forward inside a refine_step and the kernel events inside it (calling thread:
  kernels run to completion there), grouped by layer and kind. The process is fresh each repeat
  (load excluded; --warmup 1 runs one untimed request first). Resident weights:
  memory.weight_bytes of the same run, and its peak RSS.
- torch: a worker process (`--torch-python`, default the reference venv's torch 2.15, else this
  Python) running this file's TorchLLaDA2 (written for the bench: llada2_reference.py upcasts every
  weight to float32 and recomputes the whole window every forward): the checkpoint's bf16 tensors as
  loaded by safetensors (the router also in float32, router_dtype "fp32"), activations in bf16 as a model
  loaded with torch_dtype=bfloat16 runs (RMSNorm in float32, RoPE in float32 then rounded), the
  prompt's K/V cached by a block-causal prefill, attention by scaled_dot_product_attention (GQA),
  the MoE with the tokens grouped by expert as transformers' eager MoE / Ling's moe_infer do (one
  SwiGLU per expert hit, then index_add weighted by the routing weights), torch threads = N. It
  decodes the same block with the same rule; each forward timed with perf_counter around every
  part. Resident weights: the parameter bytes it holds; also its peak RSS. --torch-dtype f32
  upcasts the weights at load (twice the memory) and computes in float32.
Runs are interleaved (per repeat: torch, then each dlm artifact; the order reversed on odd
repeats). Per repeat the mean over its S forwards; the table shows medians over repeats.

Projection to --full-layers (20): per-layer times from the same forwards. dense = the dense
layers (first_k_dense_replace of them, all measured), MoE layer = the mean of the measured MoE
layers, once = the rest of the forward (embedding, final norm, LM head, anything untracked):
    T_20 = once + dense + (20 - first_k_dense_replace) * MoE_layer
and the same per kind of work. tokens/s at 20 layers = TPF / T_20 with TPF = block /
steps_per_block (32 / 8 = 4 by default: the schedule's quota, exactly what the random-weight run
commits; a trained model at threshold 0.7 commits at least that). It leaves out the per-block
forward that stores the block's final K/V (one per S step forwards, no LM head) and the steps'
sampling (dlm's is printed: host overhead per step).

Kinds of work: moe = a MoE layer's MLP block (router, routed experts, shared expert); dense_mlp =
the dense layer's SwiGLU; attn_proj = q/k/v (fused in torch) and o projections; attention = QK
norm, RoPE, K/V store, scores, softmax and values; lm_head; other = embedding, the layer norms,
residual adds, the final norm, untracked time.

Check (unless --no-check; before the timing): the first block forward's logits of each dlm
artifact (`dlm-run --dump-logits`, same knobs) against torch's: max |difference| (the logits' std
is ~1), argmax agreement, and the block's decoded tokens (dlm-run --json output_ids) against
torch's. Reported, never enforced. dlm computes in float32 on the bf16 weights, torch in bf16, and
the bench checkpoint's attention is sharp on purpose (QK norm x5, see make_llada2_checkpoint.py),
which magnifies bf16 rounding: expect differences of order 1 and a third of the argmaxes flipped
with --torch-dtype bf16. --reference-check (after the timing, so that it does not show in the
worker's peak RSS) compares torch's and each dlm artifact's first logits with
tests/reference/llada2/llada2_reference.py (float32, the whole block-causal window; it upcasts the
weights, so small checkpoints only). On the smoke checkpoints: torch f32 within 3e-5 of it, dlm
bf16 (stored) within 4e-4, argmax 32/32; torch bf16 1.5-2.9 and 23-27/32; dlm int8 2.2 and 23/32.

Memory at the default (2 layers, full width): the checkpoint 3.0 GB; the torch worker holds its
3.0 GB of tensors (+ ~0.5 GB runtime). A dlm process holds its weight bytes: the projections, the
LM head and the routed experts packed as stored (bf16, or 8 bits with --weights int8), the
embedding table widened to float32 at load, plus the artifact it reads (on disk too). Each further
MoE layer adds 1.64 GB to the checkpoint, the bf16 artifact, torch and dlm's weights.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build"))
REF_PYTHON = os.environ.get("DLM_REF_PYTHON", "/work/refvenv/bin/python")
GROUPS = ("moe", "dense_mlp", "attn_proj", "attention", "lm_head", "other")
THRESHOLD = 2.0  # above every probability: each step commits exactly its quota


def transfer_schedule(block, steps):
    base, rem = divmod(block, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


# ------------------------------------------------------------------------------------------------
# The PyTorch baseline (runs in the worker process: `--worker`)


class TorchLLaDA2:
    """LLaDA2MoeModelLM's forward (tests/reference/llada2/README.md, "The math") in the checkpoint's
    dtype, with a K/V cache of the prompt's blocks and per-part timing."""

    def __init__(self, ckpt, threads, dtype="bf16"):
        import torch
        import torch.nn.functional as F
        from safetensors.torch import load_file
        self.torch, self.F = torch, F
        torch.set_num_threads(threads)
        c = json.load(open(os.path.join(ckpt, "config.json")))
        self.c = c
        index = os.path.join(ckpt, "model.safetensors.index.json")
        files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
            else ["model.safetensors"]
        t = {}
        for f in files:
            t.update(load_file(os.path.join(ckpt, f)))
        if dtype == "f32":  # upcast at load (twice the memory): the f32 baseline / a check
            t = {k: v.float() for k, v in t.items()}
        self.t = t
        self.dtype = t["model.word_embeddings.weight"].dtype
        self.H, self.nh, self.kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or self.H // self.nh
        self.rot = int(self.hd * c["partial_rotary_factor"]) if "partial_rotary_factor" in c \
            else c.get("rotary_dim", self.hd)
        self.eps = c["rms_norm_eps"]
        self.L = c["num_hidden_layers"]
        self.first_dense = c["first_k_dense_replace"]
        self.E, self.K = c["num_experts"], c["num_experts_per_tok"]
        self.G, self.TG = c.get("n_group") or 1, c.get("topk_group") or 1
        assert c.get("score_function") == "sigmoid" and c.get("moe_router_enable_expert_bias"), \
            "the bench implements LLaDA2's sigmoid + expert-bias router only"
        self.router, self.bias, self.experts = {}, {}, {}
        for l in range(self.first_dense, self.L):
            p = "model.layers.%d.mlp." % l
            self.router[l] = t[p + "gate.weight"].float()          # router_dtype fp32
            self.bias[l] = t[p + "gate.expert_bias"].float()
            self.experts[l] = [tuple(t[p + "experts.%d.%s_proj.weight" % (e, w)] for w in ("gate", "up", "down"))
                               for e in range(self.E)]
        self.param_bytes = sum(v.numel() * v.element_size() for v in t.values()) + \
            sum(v.numel() * 4 for v in self.router.values())
        theta = float(c.get("rope_theta", 10000.0))
        inv = 1.0 / (theta ** (torch.arange(0, self.rot, 2, dtype=torch.float32) / self.rot))
        f = torch.arange(c["max_position_embeddings"], dtype=torch.float32)[:, None] * inv[None, :]
        self.cos, self.sin = f.cos(), f.sin()
        self.sdpa = getattr(F, "scaled_dot_product_attention", None)
        self.gqa_kw = {}
        if self.sdpa is not None:
            try:  # torch >= 2.5
                q = torch.zeros(2, 1, 4)
                self.sdpa(q, q[:1], q[:1], enable_gqa=True)
                self.gqa_kw = {"enable_gqa": True}
            except TypeError:
                pass
        self.cache = None

    # --- pieces ---
    def rms(self, x, w):
        x32 = x.float()
        x32 = x32 * self.torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * x32.to(x.dtype)

    def rope(self, x, pos):
        """NeoX style on the first `rot` dims of each head; x [T, n, hd]."""
        r = self.rot
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        x1, x2 = x[..., : r // 2].float(), x[..., r // 2: r].float()
        return self.torch.cat([(x1 * cos - x2 * sin).to(x.dtype), (x2 * cos + x1 * sin).to(x.dtype), x[..., r:]], -1)

    def attend(self, q, k, v, mask=None):
        """q [T, nh, hd], k/v [S, kv, hd] -> [T, nh*hd]."""
        torch = self.torch
        T = q.shape[0]
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        rep = self.nh // self.kv
        if self.sdpa is not None:
            if not self.gqa_kw:
                k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
            o = self.sdpa(q[None], k[None], v[None], attn_mask=mask, **self.gqa_kw)[0]
        else:
            k, v = k.repeat_interleave(rep, 0).float(), v.repeat_interleave(rep, 0).float()
            s = torch.einsum("hqd,hkd->hqk", q.float(), k) * self.hd ** -0.5
            if mask is not None:
                s = s.masked_fill(~mask[None], float("-inf"))
            o = torch.einsum("hqk,hkd->hqd", s.softmax(-1), v).to(q.dtype)
        return o.transpose(0, 1).reshape(T, self.nh * self.hd)

    def swiglu(self, x, g, u, d):
        F = self.F
        return F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)

    def moe(self, l, x):
        """SGLang's biased_grouped_topk_impl routing; experts over the tokens grouped by expert.
        Returns (y, experts hit)."""
        torch = self.torch
        T = x.shape[0]
        scores = (x.float() @ self.router[l].T).sigmoid()
        choice = scores + self.bias[l][None, :]
        grouped = choice.view(T, self.G, self.E // self.G)
        group_scores = grouped.topk(min(2, self.E // self.G), dim=-1).values.sum(-1)
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(
            1, group_scores.topk(self.TG, dim=-1).indices, True)
        keep = keep[:, :, None].expand_as(grouped).reshape(T, self.E)
        ids = choice.masked_fill(~keep, float("-inf")).topk(self.K, dim=-1).indices
        w = scores.gather(1, ids)
        if self.c["norm_topk_prob"]:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * self.c.get("routed_scaling_factor", 1.0)
        flat = ids.reshape(-1)
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=self.E).tolist()
        tok = order // self.K
        xs = x[tok]
        parts, start, hit = [], 0, 0
        for e, n in enumerate(counts):
            if n:
                parts.append(self.swiglu(xs[start:start + n], *self.experts[l][e]))
                start += n
                hit += 1
        ys = torch.cat(parts).float() * w.reshape(-1)[order, None]
        routed = torch.zeros(T, self.H, dtype=torch.float32).index_add_(0, tok, ys).to(x.dtype)
        p = "model.layers.%d.mlp.shared_experts." % l
        if p + "gate_proj.weight" in self.t:
            routed = routed + self.swiglu(x, self.t[p + "gate_proj.weight"], self.t[p + "up_proj.weight"],
                                          self.t[p + "down_proj.weight"])
        return routed, hit

    # --- the forward ---
    def forward(self, ids, pos, mask=None, keep_cache=False, timed=None):
        """ids [T] over positions pos; attends to the cached prompt K/V (if any) and to itself
        (under `mask` when given). keep_cache: store this forward's K/V as the cache.
        timed: a dict filled with seconds per kind, per layer and 'total'. Returns logits (float32)."""
        torch, t, F = self.torch, self.t, self.F
        clock = time.perf_counter
        rec = timed if timed is not None else {}
        layers = rec.setdefault("layers", [0.0] * self.L)
        sparse = rec.setdefault("sparse_groups", {})
        hits = rec.setdefault("experts_hit", [])
        start = last = clock()

        def lap(kind, layer=None):
            nonlocal last
            now = clock()
            rec[kind] = rec.get(kind, 0.0) + (now - last)
            if layer is not None:
                layers[layer] += now - last
                if layer >= self.first_dense:
                    sparse[kind] = sparse.get(kind, 0.0) + (now - last)
            last = now

        T = ids.shape[0]
        h = t["model.word_embeddings.weight"][ids]
        lap("other")
        new_cache = []
        for l in range(self.L):
            p = "model.layers.%d." % l
            x = self.rms(h, t[p + "input_layernorm.weight"])
            lap("other", l)
            qkv = F.linear(x, t[p + "attention.query_key_value.weight"])
            lap("attn_proj", l)
            q, k, v = qkv.split([self.nh * self.hd, self.kv * self.hd, self.kv * self.hd], dim=-1)
            q = self.rms(q.view(T, self.nh, self.hd), t[p + "attention.query_layernorm.weight"])
            k = self.rms(k.view(T, self.kv, self.hd), t[p + "attention.key_layernorm.weight"])
            q, k, v = self.rope(q, pos), self.rope(k, pos), v.view(T, self.kv, self.hd)
            if keep_cache:
                new_cache.append((k, v))
            if self.cache is not None and not keep_cache:
                k, v = torch.cat([self.cache[l][0], k]), torch.cat([self.cache[l][1], v])
            o = self.attend(q, k, v, mask)
            lap("attention", l)
            h = h + F.linear(o, t[p + "attention.dense.weight"])
            lap("attn_proj", l)
            x = self.rms(h, t[p + "post_attention_layernorm.weight"])
            lap("other", l)
            if l < self.first_dense:
                h = h + self.swiglu(x, t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"],
                                    t[p + "mlp.down_proj.weight"])
                lap("dense_mlp", l)
            else:
                y, hit = self.moe(l, x)
                h = h + y
                hits.append(hit)
                lap("moe", l)
        h = self.rms(h, t["model.norm.weight"])
        lap("other")
        logits = F.linear(h, t["lm_head.weight"]).float()
        lap("lm_head")
        rec["total"] = rec.get("total", 0.0) + (last - start)
        if keep_cache:
            self.cache = new_cache
        return logits

    def prefill(self, prompt, block):
        """The prompt's blocks, block-causal, as the cache (block-refinement's prefill forward)."""
        torch = self.torch
        with torch.no_grad():
            T = len(prompt)
            b = torch.arange(T) // block
            self.cache = None
            self.forward(torch.tensor(prompt), torch.arange(T), mask=b[None, :] <= b[:, None],
                         keep_cache=True)
        self.prompt_len = T

    def decode_block(self, block, steps, mask_id, first_logits=False):
        """One block of masks after the cached prompt in `steps` steps (block-refinement's quota
        commits): per forward its timing; the block's tokens; the first forward's logits."""
        torch = self.torch
        P = self.prompt_len
        x = torch.full((block,), mask_id, dtype=torch.long)
        pos = torch.arange(P, P + block)
        out = {"forwards": []}
        with torch.no_grad():
            for s, quota in enumerate(transfer_schedule(block, steps)):
                rec = {}
                logits = self.forward(x, pos, timed=rec)
                out["forwards"].append(rec)
                if s == 0 and first_logits:
                    out["logits"] = logits.clone()
                conf, tok = logits.softmax(-1).max(-1)
                masked = x == mask_id
                conf = torch.where(masked, conf, torch.full_like(conf, -math.inf))
                high = conf > THRESHOLD
                commit = high if int(high.sum()) >= quota else torch.zeros_like(masked)
                if not bool(commit.any()):
                    commit[conf.topk(min(quota, int(masked.sum()))).indices] = True
                x = torch.where(commit, tok, x)
        out["tokens"] = x.tolist()
        return out


def peak_rss():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def worker(a):
    """JSON lines on stdin/stdout: {"cmd": "time"} | {"cmd": "check", "logits": PATH}
    | {"cmd": "reference"}."""
    import numpy as np
    import torch
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the protocol stream
    t0 = time.time()
    m = TorchLLaDA2(a.checkpoint, a.threads, a.torch_dtype)
    prompt = [int(i) for i in a.prompt_ids.split(",")]
    m.prefill(prompt, a.block)
    load_s = time.time() - t0
    m.decode_block(a.block, a.steps, a.mask_id)  # warm-up: lazy init, allocator growth
    first = None

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    reply({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "param_bytes": m.param_bytes, "load_s": load_s, "dtype": str(m.dtype),
           "sdpa": m.sdpa is not None, "gqa": bool(m.gqa_kw)})
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "time":
            r = m.decode_block(a.block, a.steps, a.mask_id)
            reply({"forwards": r["forwards"], "tokens": r["tokens"], "peak_rss": peak_rss()})
        elif req["cmd"] == "check":
            r = m.decode_block(a.block, a.steps, a.mask_id, first_logits=True)
            first = r["logits"]
            np.save(req["logits"], first.numpy())
            reply({"tokens": r["tokens"]})
        elif req["cmd"] == "reference":
            sys.path.insert(0, os.path.join(ROOT, "tests", "reference", "llada2"))
            import llada2_reference as ref
            if first is None:
                first = m.decode_block(a.block, a.steps, a.mask_id, first_logits=True)["logits"]
            try:
                rm = ref.LLaDA2Reference(ref.read_config(a.checkpoint), m.t)  # (it upcasts to float32)
                ids = prompt + [a.mask_id] * a.block
                want = rm.forward(torch.tensor(ids), ref.block_causal_mask(len(ids), a.block))["logits"][len(prompt):]
                del rm
            except Exception as e:  # noqa: BLE001 - reported, the timing stands
                reply({"error": f"{type(e).__name__}: {e}"})
                continue
            np.save(req["logits"], want.numpy())
            reply(compare_logits(want.numpy(), first.numpy()))
        else:
            reply({"error": "unknown command %r" % req["cmd"]})


def compare_logits(want, got):
    import numpy as np
    d = np.abs(np.asarray(want, np.float64) - np.asarray(got, np.float64))
    return {"max_abs_diff": float(d.max()), "logit_std": float(np.std(want)),
            "argmax_agree": int((np.argmax(want, -1) == np.argmax(got, -1)).sum()), "rows": int(want.shape[0])}


class Torch:
    """The worker, from the bench's side."""

    def __init__(self, python, checkpoint, threads, prompt, block, steps, mask_id, dtype):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", "--checkpoint", checkpoint,
             "--threads", str(threads), "--prompt-ids", ",".join(map(str, prompt)),
             "--block", str(block), "--steps", str(steps), "--mask-id", str(mask_id),
             "--torch-dtype", dtype],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the torch worker did not start: " + self.proc.stderr.read().strip()[-1500:])
        self.info = json.loads(line)

    def __call__(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the torch worker died: " + self.proc.stderr.read().strip()[-1500:])
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


# ------------------------------------------------------------------------------------------------
# dlm


def kind_of(name, category, layer, first_dense):
    """A trace kernel event -> one of GROUPS."""
    if category == "lm_head":
        return "lm_head"
    if category == "moe":
        return "moe"
    if name in ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj"):
        return "attn_proj"
    if name in ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "silu_mul") and layer is not None:
        return "dense_mlp" if layer < first_dense else "moe"
    if category in ("attention", "rope", "kv_store") or name in ("q_norm", "k_norm"):
        return "attention"
    if category == "gemm":  # an unnamed projection: by layer kind
        return "attn_proj"
    return "other"


def dlm_forwards(trace_path, layers, first_dense):
    """The block forwards of a dlm-prof trace (forwards inside a denoise step), each as seconds
    per kind, per layer and total."""
    ev = [e for e in json.load(open(trace_path))["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "step"]
    fwds = sorted((e for e in ev if e.get("cat") == "forward" and e["pid"] == 1 and e["tid"] == 0
                   and any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in steps)), key=lambda e: e["ts"])
    kernels = sorted((e for e in ev if e["pid"] == 1 and e["tid"] == 0
                      and e.get("cat") not in ("forward", "worker_share")), key=lambda e: e["ts"])
    out = []
    for f in fwds:
        lo, hi = f["ts"], f["ts"] + f["dur"]
        rec = {g: 0.0 for g in GROUPS}
        rec["layers"] = [0.0] * layers
        rec["sparse_groups"] = {g: 0.0 for g in GROUPS}
        rec["names"] = {}
        tracked = 0.0
        for k in kernels:
            if k["ts"] < lo or k["ts"] >= hi:
                continue
            s = k["dur"] * 1e-6
            layer = k.get("args", {}).get("layer")
            g = kind_of(k["name"], k["cat"], layer, first_dense)
            rec[g] += s
            tracked += s
            if layer is not None:
                rec["layers"][layer] += s
                if layer >= first_dense:
                    rec["sparse_groups"][g] += s
            key = f"{k['name']}@{'-' if layer is None else layer}"
            rec["names"][key] = rec["names"].get(key, 0.0) + s
        rec["total"] = f["dur"] * 1e-6
        rec["other"] += max(0.0, rec["total"] - tracked)  # untracked
        out.append(rec)
    host = []
    for a_, b_ in steps:
        inside = sum(e["dur"] for e in fwds if a_ <= e["ts"] < b_)
        host.append((b_ - a_ - inside) * 1e-6)
    return out, host


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}):\n{r.stderr.strip()[-1500:]}")
    return r.stdout


def knobs(a):
    return ["--gen-length", str(a.block), "--block-length", str(a.block),
            "--knob", f"steps_per_block={a.steps_per_block}", "--knob", f"threshold={THRESHOLD}",
            "--knob", "eos_early_stop=false", "--threads", str(a.threads)]


def time_once(a, label, kind, art, torch_w, prompt, extra, tmp, env, layers, first_dense):
    """One repeat of one engine: its block forwards (records of seconds per kind, layer, total)."""
    if kind == "torch":
        r = torch_w(cmd="time")
        fs = r["forwards"]
        extra["peak_rss"].append(r["peak_rss"])
        for f in fs:
            extra["experts_hit"] += f.pop("experts_hit", [])
        return fs
    trace = os.path.join(tmp, "trace.json")
    out = json.loads(run([os.path.join(BUILD, "bin", "dlm-prof"), art, "--prompt-ids",
                          ",".join(map(str, prompt)), "--warmup", "1", "--repeat", "1",
                          "--json", "--trace", trace] + knobs(a), env))
    fs, host = dlm_forwards(trace, layers, first_dense)
    os.remove(trace)
    mem = out["memory"]
    extra["weight_bytes"].append(mem["weight_bytes"])
    extra["converted_weight_bytes"].append(mem["converted_weight_bytes"])
    extra["peak_rss"].append(mem["peak_rss_bytes"])
    extra["host_s"] += host
    req = out["requests"][0]
    extra["dlm_tpf"].append(req["generated_tokens"] / max(1, req["decode_steps"]))
    if len(fs) != a.steps_per_block:
        print(f"  note: {label} ran {len(fs)} block forwards, not {a.steps_per_block}", file=sys.stderr, flush=True)
    return fs


# ------------------------------------------------------------------------------------------------
# Figures


def summarize(forward_sets, layers, first_dense, full_layers):
    """forward_sets: per repeat, the list of forward records. Per repeat the mean over its
    forwards; medians over repeats; projection to full_layers."""
    reps = []
    for fs in forward_sets:
        if not fs:
            continue
        n = len(fs)
        mean = lambda key: sum(f[key] for f in fs) / n  # noqa: E731
        r = {"total": mean("total"), "groups": {g: sum(f.get(g, 0.0) for f in fs) / n for g in GROUPS}}
        lay = [sum(f["layers"][l] for f in fs) / n for l in range(layers)]
        r["dense"] = sum(lay[:first_dense])
        sparse = lay[first_dense:]
        r["moe_layer"] = sum(sparse) / len(sparse) if sparse else None
        r["once"] = r["total"] - sum(lay)
        if sparse:
            r["full"] = r["once"] + r["dense"] + (full_layers - first_dense) * r["moe_layer"]
        reps.append(r)
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    s = {"repeats": len(reps), "forwards": sum(len(fs) for fs in forward_sets),
         "forward_s": med([r["total"] for r in reps]),
         "forward_s_all": [r["total"] for r in reps],
         "dense_layer_s": med([r["dense"] for r in reps]),
         "moe_layer_s": med([r["moe_layer"] for r in reps if r["moe_layer"] is not None]),
         "once_s": med([r["once"] for r in reps]),
         "groups_s": {g: med([r["groups"][g] for r in reps]) for g in GROUPS}}
    s["forwards_per_s"] = 1.0 / s["forward_s"]
    if s["moe_layer_s"] is not None:
        s["full_forward_s"] = med([r["full"] for r in reps])
        s["full_forwards_per_s"] = 1.0 / s["full_forward_s"]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="LLaDA2 checkpoint directory (default: make the bench one)")
    ap.add_argument("--layers", type=int, help="for the made checkpoint (default 2)")
    ap.add_argument("--experts", type=int, help="for the made checkpoint (default 256)")
    for flag in ("--hidden", "--heads", "--kv-heads", "--head-dim", "--intermediate", "--moe-intermediate",
                 "--shared-intermediate", "--top-k", "--n-group", "--topk-group", "--vocab"):
        ap.add_argument(flag, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="dlm and torch threads")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats (medians over them)")
    ap.add_argument("--prompt-length", type=int, default=96, help="cached prompt ids (a multiple of the block)")
    ap.add_argument("--block", type=int, default=32, help="block length (compiled and decoded)")
    ap.add_argument("--steps-per-block", type=int, default=8, help="block forwards per repeat; TPF = block / this")
    ap.add_argument("--weights", default="stored,int8",
                    help="dlm artifacts: stored | f32 | bf16 | int8 | fp8, comma-separated")
    ap.add_argument("--engines", default="torch,dlm", help="torch, dlm or both")
    ap.add_argument("--full-layers", type=int, default=20, help="the real model's layers, for the projection")
    ap.add_argument("--torch-dtype", default="bf16", choices=["bf16", "f32"],
                    help="the baseline's weights and activations (f32: upcast at load, twice the memory)")
    ap.add_argument("--torch-python", default=REF_PYTHON if os.path.exists(REF_PYTHON) else sys.executable,
                    help="the baseline worker's python (default: the reference venv's, else this one)")
    ap.add_argument("--artifacts", help="keep the compiled artifacts here (reused while newer than the checkpoint)")
    ap.add_argument("--no-check", dest="check", action="store_false", help="skip the dlm-vs-torch logits check")
    ap.add_argument("--reference-check", action="store_true",
                    help="also check torch against llada2_reference.py (float32; small checkpoints only)")
    ap.add_argument("--json", help="also write the figures here")
    # the worker's own arguments
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-ids", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--mask-id", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    bench(ap, a)


def make_checkpoint(a):
    """The made checkpoint's directory (made when missing)."""
    sys.path.insert(0, HERE)
    import make_llada2_checkpoint as mk
    argv = []
    for name in ("layers", "experts", "hidden", "heads", "kv_heads", "head_dim", "intermediate",
                 "moe_intermediate", "shared_intermediate", "top_k", "n_group", "topk_group", "vocab"):
        v = getattr(a, name)
        if v is not None:
            argv += ["--" + name.replace("_", "-"), str(v)]
    path = mk.default_out(mk.parse(argv))
    if not os.path.exists(os.path.join(path, "config.json")):
        print(f"making the checkpoint {path} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "make_llada2_checkpoint.py"), "--out", path] + argv,
                       check=True)
    return path


def checkpoint_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors"))


def bench(ap, a):
    names = [e.strip() for e in a.engines.split(",") if e.strip()]
    for n in names:
        if n not in ("torch", "dlm"):
            ap.error(f"unknown engine {n!r} (known: torch, dlm)")
    if a.prompt_length % a.block or a.prompt_length <= 0:
        ap.error("--prompt-length must be a positive multiple of --block (the prompt is cached whole)")
    if a.checkpoint and (a.layers or a.experts):
        ap.error("--layers / --experts shape the made checkpoint; not with --checkpoint")
    checkpoint = a.checkpoint or make_checkpoint(a)
    config = json.load(open(os.path.join(checkpoint, "config.json")))
    tok_cfg = json.load(open(os.path.join(checkpoint, "tokenizer_config.json")))
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
    mask_id = config.get("mask_token_id")
    if mask_id is None:
        mask_id = tok.token_to_id(tok_cfg["mask_token"])
    V = config["vocab_size"]
    L, first_dense = config["num_hidden_layers"], config["first_k_dense_replace"]
    specials = {mask_id, tok.token_to_id("<unk>"), config.get("eos_token_id"), config.get("pad_token_id")}
    pool = [i for i in range(min(V, 150000)) if i not in specials]
    prompt = [pool[(17 + 7919 * i) % len(pool)] for i in range(a.prompt_length)]
    tpf = a.block / a.steps_per_block

    from compare_cpu import cpu_name
    result = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": a.threads,
                          "load_average_start": os.getloadavg()},
              "settings": {"checkpoint": checkpoint, "checkpoint_bytes": checkpoint_bytes(checkpoint),
                           "model": {k: config.get(k) for k in (
                               "hidden_size", "num_hidden_layers", "first_k_dense_replace", "num_attention_heads",
                               "num_key_value_heads", "head_dim", "intermediate_size", "num_experts",
                               "num_experts_per_tok", "moe_intermediate_size", "moe_shared_expert_intermediate_size",
                               "n_group", "topk_group", "vocab_size", "torch_dtype")},
                           "prompt_length": a.prompt_length, "block": a.block,
                           "steps_per_block": a.steps_per_block, "tokens_per_forward_assumed": tpf,
                           "threshold_knob": THRESHOLD, "repeats": a.repeats, "full_layers": a.full_layers,
                           "projection": f"T_{a.full_layers} = once + dense + ({a.full_layers} - {first_dense}) "
                                         f"* MoE_layer; "
                                         f"tokens/s = {tpf:g} / T_{a.full_layers}",
                           "mask_id": mask_id},
              "engines": {}, "skipped": {}, "check": {}}
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    tmpdir = tempfile.TemporaryDirectory(prefix="llada2-bench-")
    art_dir = a.artifacts or tmpdir.name
    os.makedirs(art_dir, exist_ok=True)
    engines = []  # (label, kind, artifact)
    try:
        if "dlm" in names:
            stamp = max(os.path.getmtime(os.path.join(checkpoint, f)) for f in os.listdir(checkpoint))
            for w in [w.strip() for w in a.weights.split(",") if w.strip()]:
                label = "dlm " + (("bf16" if config.get("torch_dtype") == "bfloat16" else "f32") + " (stored)"
                                  if w == "stored" else w)
                art = os.path.join(art_dir, f"llada2-{w}.dlm")
                if not (os.path.exists(art) and os.path.getmtime(art) > stamp):
                    cmd = [os.path.join(BUILD, "bin", "dlmc"), "compile", checkpoint, "-o", art,
                           "--block-length", str(a.block)] + ([] if w == "stored" else ["--weights", w])
                    t0 = time.time()
                    try:
                        msg = run(cmd).strip() or "compiled"
                    except RuntimeError as e:
                        result["skipped"][label] = str(e)
                        print(f"{label} skipped: {e}", file=sys.stderr, flush=True)
                        continue
                    print(f"{label}: {msg.splitlines()[-1] if msg else ''} ({time.time() - t0:.1f} s)",
                          file=sys.stderr, flush=True)
                    result["engines"].setdefault(label, {})["compile_s"] = time.time() - t0
                result["engines"].setdefault(label, {})["artifact_bytes"] = os.path.getsize(art)
                engines.append((label, "dlm", art))
        torch_w = None
        if "torch" in names:
            try:
                print(f"starting the torch worker ({a.torch_python}) ...", file=sys.stderr, flush=True)
                torch_w = Torch(a.torch_python, checkpoint, a.threads, prompt, a.block, a.steps_per_block, mask_id,
                                a.torch_dtype)
                label = (f"torch {torch_w.info['torch'].split('+')[0]} "
                         f"{torch_w.info['dtype'].replace('torch.', '').replace('bfloat16', 'bf16')}")
                result["engines"][label] = {"param_bytes": torch_w.info["param_bytes"],
                                            "load_s": torch_w.info["load_s"], "sdpa": torch_w.info["sdpa"],
                                            "gqa": torch_w.info["gqa"]}
                engines.insert(0, (label, "torch", None))
                print(f"{label}: loaded in {torch_w.info['load_s']:.1f} s", file=sys.stderr, flush=True)
            except Exception as e:
                result["skipped"]["torch"] = f"{type(e).__name__}: {e}"
                print(f"baseline skipped: {result['skipped']['torch']}", file=sys.stderr, flush=True)
        if not engines:
            sys.exit("bench: no engine left to run")
        torch_label = engines[0][0] if engines[0][1] == "torch" else None

        # --- check: first forward's logits and the block's tokens
        dlm_logits = {}
        if a.check and torch_label:
            import numpy as np
            tl = os.path.join(tmpdir.name, "torch-logits.npy")
            ttok = torch_w(cmd="check", logits=tl)["tokens"]
            want = np.load(tl)
            for label, kind, art in engines:
                if kind != "dlm":
                    continue
                dl = os.path.join(tmpdir.name, f"dlm-logits-{len(dlm_logits)}.npy")
                try:
                    out = json.loads(run([os.path.join(BUILD, "bin", "dlm-run"), art, "--json", "--prompt-ids",
                                          ",".join(map(str, prompt)), "--dump-logits", dl] + knobs(a), env))
                except RuntimeError as e:
                    result["skipped"][label + " check"] = str(e)
                    print(f"check {label} skipped: {e}", file=sys.stderr, flush=True)
                    continue
                dlm_logits[label] = dl
                got = np.load(dl)
                c = compare_logits(want, got)
                c["tokens_agree"] = sum(int(x == y) for x, y in zip(out["output_ids"], ttok))
                c["tokens"] = len(ttok)
                result["check"][label] = c
                print(f"check {label} vs torch: first-forward logits max |diff| {c['max_abs_diff']:.3g} "
                      f"(logit std {c['logit_std']:.3g}), argmax {c['argmax_agree']}/{c['rows']}, "
                      f"block tokens {c['tokens_agree']}/{c['tokens']}", file=sys.stderr, flush=True)

        # --- timing, interleaved
        sets = {label: [] for label, _, _ in engines}
        extra = {label: {"weight_bytes": [], "converted_weight_bytes": [], "peak_rss": [], "host_s": [],
                         "experts_hit": [], "dlm_tpf": []} for label, _, _ in engines}
        failed = set()
        for rep in range(a.repeats):
            order = engines if rep % 2 == 0 else engines[::-1]
            for label, kind, art in order:
                if label in failed:
                    continue
                try:
                    fs = time_once(a, label, kind, art, torch_w, prompt, extra[label], tmpdir.name, env, L,
                                   first_dense)
                except RuntimeError as e:
                    failed.add(label)
                    result["skipped"][label] = str(e)
                    print(f"{label} skipped: {e}", file=sys.stderr, flush=True)
                    continue
                sets[label].append(fs)
                ms = statistics.mean(f["total"] for f in fs) * 1e3 if fs else float("nan")
                print(f"  repeat {rep} {label}: {len(fs)} forwards, mean {ms:.1f} ms", file=sys.stderr, flush=True)
        engines = [e for e in engines if sets[e[0]]]
        if torch_label in failed:
            torch_w.proc.kill()
            torch_w.proc.wait()
            torch_w, torch_label = None, None
        if not engines:
            sys.exit("bench: every engine failed")
        # --- after the timing (the reference holds the weights in float32, which would show in
        # the worker's peak RSS): torch and dlm against llada2_reference.py
        if a.reference_check and torch_w is not None:
            import numpy as np
            rl = os.path.join(tmpdir.name, "reference-logits.npy")
            ref = torch_w(cmd="reference", logits=rl)
            if "error" in ref:
                result["skipped"]["reference check"] = ref["error"]
            else:
                result["check"]["torch_vs_reference"] = ref
                want = np.load(rl)
                for label, dl in dlm_logits.items():
                    result["check"][label + " vs reference"] = compare_logits(want, np.load(dl))
        if torch_w is not None:
            torch_w.close()
    finally:
        tmpdir.cleanup()

    # --- figures
    for label, _, _ in engines:
        fsets = sets[label]
        s = summarize(fsets, L, first_dense, a.full_layers)
        s.update(full_groups(fsets, L, first_dense, a.full_layers))
        x = extra[label]
        med = lambda v: statistics.median(v) if v else None  # noqa: E731
        s["peak_rss_bytes"] = max(x["peak_rss"]) if x["peak_rss"] else None
        if x["weight_bytes"]:
            s["weight_bytes"] = med(x["weight_bytes"])
            s["converted_weight_bytes"] = med(x["converted_weight_bytes"])
            s["host_overhead_per_step_s"] = med(x["host_s"])
            s["measured_tokens_per_forward"] = med(x["dlm_tpf"])
        names = {}
        for fs in fsets:
            for f in fs:
                for k, v in f.get("names", {}).items():
                    names[k] = names.get(k, 0.0) + v
        if names:  # dlm: seconds per kernel record name@layer, mean over every measured forward
            count = sum(len(fs) for fs in fsets)
            s["kernels_s"] = {k: v / count for k, v in sorted(names.items(), key=lambda kv: -kv[1])}
        if x["experts_hit"]:
            s["experts_hit_per_moe_layer"] = statistics.mean(x["experts_hit"])
        if "full_forward_s" in s:
            s["full_tokens_per_s"] = tpf / s["full_forward_s"]
        result["engines"].setdefault(label, {}).update(s)
        if label.startswith("torch"):
            result["engines"][label]["weight_bytes"] = result["engines"][label]["param_bytes"]
    if torch_label and "forwards_per_s" in result["engines"].get(torch_label, {}):
        base = result["engines"][torch_label]
        for label, kind, _ in engines:
            if kind == "dlm":
                e = result["engines"][label]
                e["ratio_forwards_per_s"] = e["forwards_per_s"] / base["forwards_per_s"]
                if "full_forward_s" in e and "full_forward_s" in base:
                    e["ratio_full_forwards_per_s"] = base["full_forward_s"] / e["full_forward_s"]
    result["machine"]["load_average_end"] = os.getloadavg()
    report(result, a, engines, torch_label, L, first_dense, tpf)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


def full_groups(fsets, layers, first_dense, full_layers):
    """Per kind: seconds of the measured forward and of the projected one, medians over repeats
    of per-repeat means. The projection scales each kind's share in the MoE layers."""
    reps_meas, reps_full = [], []
    for fs in fsets:
        if not fs:
            continue
        n = len(fs)
        meas = {g: sum(f.get(g, 0.0) for f in fs) / n for g in GROUPS}
        reps_meas.append(meas)
        if layers > first_dense:
            # per kind inside the MoE layers: from per-layer, per-kind records
            inside = {g: sum(f.get("sparse_groups", {}).get(g, 0.0) for f in fs) / n for g in GROUPS}
            mean_layer = {g: inside[g] / (layers - first_dense) for g in GROUPS}
            reps_full.append({g: meas[g] + (full_layers - layers) * mean_layer[g] for g in GROUPS})
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    out = {"groups_s": {g: med([r[g] for r in reps_meas]) for g in GROUPS}}
    if reps_full:
        out["full_groups_s"] = {g: med([r[g] for r in reps_full]) for g in GROUPS}
    return out


def report(result, a, engines, torch_label, L, first_dense, tpf):
    m = result["settings"]["model"]
    mib = lambda b: f"{b / 2 ** 20:,.0f}" if b else "-"  # noqa: E731
    print(f"machine: {result['machine']['cpu']}, {a.threads} threads, load "
          f"{result['machine']['load_average_start'][0]:.1f} -> {result['machine']['load_average_end'][0]:.1f}")
    print(f"checkpoint: {result['settings']['checkpoint']} ({m['torch_dtype']}, "
          f"{result['settings']['checkpoint_bytes'] / 2 ** 30:.2f} GiB): hidden {m['hidden_size']}, "
          f"{L} layers ({first_dense} dense x {m['intermediate_size']}, {L - first_dense} MoE), "
          f"{m['num_attention_heads']}/{m['num_key_value_heads']} heads x {m['head_dim']}, {m['num_experts']} experts "
          f"top-{m['num_experts_per_tok']} x {m['moe_intermediate_size']} + shared "
          f"{m['moe_shared_expert_intermediate_size']}, vocab {m['vocab_size']}")
    print(f"workload: prompt {a.prompt_length} (cached), block {a.block}, {a.steps_per_block} steps per block "
          f"(TPF {tpf:g} assumed), {a.repeats} repeats x {a.steps_per_block} block forwards, interleaved; "
          f"medians of per-repeat means")
    F = a.full_layers
    print(f"projection: T_{F} = once + dense + ({F} - {first_dense}) x MoE layer; tokens/s = {tpf:g} / T_{F}")
    hdr = (f"{'engine':<22}{'fwd ms':>9}{'fwd/s':>8}{'dense ms':>10}{'MoE lyr ms':>11}{'once ms':>9}"
           f"{f'{F}L fwd ms':>12}{f'{F}L fwd/s':>10}{f'{F}L tok/s':>10}{'MoE %':>8}{f'MoE% {F}L':>9}"
           f"{'weights MiB':>12}{'RSS MiB':>9}{'dlm/torch':>10}{f'@{F}L':>7}")
    print(hdr)
    for label, kind, _ in engines:
        e = result["engines"].get(label, {})
        if "forward_s" not in e:
            continue
        ms = lambda v: f"{v * 1e3:.1f}" if v is not None else "-"  # noqa: E731
        ratio = lambda e, k: f"{e[k]:.2f}x" if k in e else ""  # noqa: E731
        moe_share = e["groups_s"]["moe"] / e["forward_s"] * 100
        full = e.get("full_forward_s")
        moe_full = e["full_groups_s"]["moe"] / sum(e["full_groups_s"].values()) * 100 if "full_groups_s" in e else None
        print(f"{label:<22}{ms(e['forward_s']):>9}{e['forwards_per_s']:>8.2f}{ms(e['dense_layer_s']):>10}"
              f"{ms(e['moe_layer_s']):>11}{ms(e['once_s']):>9}{ms(full):>12}"
              f"{(f'{1 / full:.2f}' if full else '-'):>10}{(f'{tpf / full:.2f}' if full else '-'):>10}"
              f"{moe_share:>7.1f}%{(f'{moe_full:.1f}%' if moe_full is not None else '-'):>9}"
              f"{mib(e.get('weight_bytes')):>12}{mib(e.get('peak_rss_bytes')):>9}"
              f"{ratio(e, 'ratio_forwards_per_s'):>10}{ratio(e, 'ratio_full_forwards_per_s'):>7}")
    print(f"\nper kind of work, ms per forward measured ({L} layers) / share at {F} layers projected:")
    print(f"{'engine':<22}" + "".join(f"{g:>19}" for g in GROUPS))
    for label, _, _ in engines:
        e = result["engines"].get(label, {})
        if "groups_s" not in e:
            continue
        fg = e.get("full_groups_s")
        tot = sum(fg.values()) if fg else None
        cells = []
        for g in GROUPS:
            c = f"{e['groups_s'][g] * 1e3:.1f}"
            if fg:
                c += f" / {fg[g] / tot * 100:.1f}%"
            cells.append(f"{c:>19}")
        print(f"{label:<22}" + "".join(cells))
    notes = []
    for label, _, _ in engines:
        e = result["engines"].get(label, {})
        if "experts_hit_per_moe_layer" in e:
            E, K = m["num_experts"], m["num_experts_per_tok"]
            uniform = E * (1 - (1 - K / E) ** a.block)
            notes.append(f"{label}: {e['experts_hit_per_moe_layer']:.1f} of {E} experts hit per MoE layer per "
                         f"forward (uniform routing of {a.block} tokens would hit {uniform:.1f})")
        if "host_overhead_per_step_s" in e:
            notes.append(f"{label}: host overhead per step {e['host_overhead_per_step_s'] * 1e3:.2f} ms "
                         "(not in fwd ms), "
                         f"measured TPF {e['measured_tokens_per_forward']:.2f}, weights converted at load "
                         f"{mib(e['converted_weight_bytes'])} MiB, artifact {mib(e.get('artifact_bytes'))} MiB")
        if label.startswith("torch") and label in result["engines"]:
            notes.append(f"{label}: weights = parameter bytes held (router also in float32); "
                         f"load {e.get('load_s', 0):.1f} s")
    for label, c in result["check"].items():
        if label == "torch_vs_reference" or label.endswith(" vs reference"):
            who = "torch" if label == "torch_vs_reference" else label[: -len(" vs reference")]
            notes.append(f"{who} vs llada2_reference (f32): first-forward logits max |diff| {c['max_abs_diff']:.3g} "
                         f"(std {c['logit_std']:.3g}), argmax {c['argmax_agree']}/{c['rows']}")
        else:
            notes.append(f"check {label} vs torch: first-forward logits max |diff| {c['max_abs_diff']:.3g} "
                         f"(std {c['logit_std']:.3g}), argmax {c['argmax_agree']}/{c['rows']}, "
                         f"block tokens {c['tokens_agree']}/{c['tokens']}")
    for name, why in result["skipped"].items():
        notes.append(f"{name} skipped: {why.splitlines()[0] if why else why}")
    if notes:
        print()
        for n in notes:
            print(n)


if __name__ == "__main__":
    main()
