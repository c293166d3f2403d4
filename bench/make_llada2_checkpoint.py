#!/usr/bin/env python3
"""A random-weight LLaDA2.x checkpoint (`LLaDA2MoeModelLM`, model_type `llada2_moe`) of the
LLaDA2-mini shape, with fewer layers, for the real-width CPU benchmark (bench/llada2_mini_cpu.py).

    .venv/bin/python bench/make_llada2_checkpoint.py [--out DIR] [--layers 2] [--experts 256]
        [--seed 2] [--dtype bf16|f32] [--hidden 2048] [--heads 16] [--kv-heads 4] [--head-dim 128]
        [--intermediate 5120] [--moe-intermediate 512] [--shared-intermediate 512] [--top-k 8]
        [--n-group 8] [--topk-group 4] [--vocab 157184] [--first-dense 1] [--qk-gain 5]
        [--mask-embedding-gain 0.1] [--expert-bias-std 0.01] [--shard-gib 4]

The default is LLaDA2-mini at full width (the shape of the issue; tests/reference/llada2/README.md
for the fields): hidden 2048, 16 heads / 4 KV heads of 128, partial_rotary_factor 0.5, rope_theta
600000, QK norm, vocab 157184, untied head, rms_norm_eps 1e-6; layer 0 dense (intermediate 5120,
first_k_dense_replace 1), the other layers sparse: 256 experts top-8 of width 512, sigmoid scores
with an expert bias, n_group 8 / topk_group 4, routed_scaling_factor 2.5, norm_topk_prob, one
shared expert of width 512. Only the layer count differs from the real 20 (default 2: one dense,
one MoE), so that a 24 GiB machine holds it twice (the PyTorch baseline and dlm).
--experts N (n_group must divide it) and the width options shrink it for a smoke test.

Laid out as published: config.json, model.safetensors (or model-0000i-of-0000n.safetensors + the
index, when bigger than --shard-gib), per-expert tensors `mlp.experts.{e}.{gate,up,down}_proj.weight`,
fused `attention.query_key_value.weight`, `mlp.gate.expert_bias` in float32 (SGLang keeps it
float32), every other tensor in bf16 (--dtype f32: float32). tokenizer.json is a word-level
tokenizer of the full vocabulary (`w<i>`, tests/reference/fixture_tools.py's scheme) with
`<unk>` = V-293, `<|endoftext|>` = V-292 (EOS and pad) and `<|mask|>` = V-289, i.e. 156891,
156892 and 156895 for V 157184 (SGLang hardcodes mask 156895 for LLaDA2MoeModelLM; the other two
are this script's choice). config.json names no mask id, as SGLang reads none: dlmc takes
tokenizer_config.json's mask_token.

Weights: torch.Generator(seed), drawn tensor by tensor in file order, so a seed gives the same
checkpoint for a given torch version (torch's CPU randn is ~5x faster than numpy's here, which
matters at 1.5G parameters); bf16 by round-to-nearest-even (torch's conversion). Written tensor
by tensor (a shard's header first), so memory stays at one tensor (the embedding: 1.3 GB in
float32, drawn in chunks).

Scales (sane, not trained): embeddings N(0, 1); every projection N(0, 1/fan_in), the LM head too
(logits ~N(0, 1): no position comes near a confidence threshold); the LM head's mask row x0.05
(never the argmax); RMSNorm weights U(0.8, 1.2); router N(0, 1/H). Three choices keep the routing
of a decoded block from collapsing onto a few experts, which would make the MoE unrealistically
cheap (a 32-token block reads the weights of every expert it hits): a random network gives the
32 mask positions of a block nearly the same hidden state, so they would all pick the same 8
experts. The mask token's embedding row is x0.1 (--mask-embedding-gain) and the QK norm weights
U(0.5, 1.5) x5 (--qk-gain), so that a mask position's state is mostly what its sharp, position-
dependent attention reads from the prompt; expert_bias is N(0, 0.01^2) (--expert-bias-std; at
0.1 a random bias, unlike a trained load-balancing one, steers every token to the same
high-bias experts). Measured with hidden 2048 and 256 experts (vocab 4096 and experts of width 8,
which the first MoE layer's routing does not depend on), the block of bench/llada2_mini_cpu.py
(which prints the figure for its own runs) decoded in 8 forwards hits 92, 110, 121, 124, 142,
147, 156, 156 distinct experts (uniform routing of 32 tokens: 163); with gains 1, 1 and bias
0.1: 8 to 26.

Size at the default: 1.51G parameters, 3.01 GB (2.80 GiB) in bf16, one file (embedding and head
0.64 GB each, the dense layer 42M parameters, the MoE layer 819M = 1.64 GB, its experts 805M);
each further MoE layer adds 1.64 GB (the real 20 layers: 16.3G parameters, 32.5 GB, 8 shards).

Default output: $DLM_BENCH_CACHE/llada2-mini-<layers>l-<experts>e[-h<hidden>][-v<vocab>]-<dtype>
(DLM_BENCH_CACHE defaults to ~/.cache/dlm-bench), never inside the repository.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from checkpoint_files import bench_cache, write_json  # noqa: E402

FULL = {"hidden": 2048, "heads": 16, "kv_heads": 4, "head_dim": 128, "intermediate": 5120,
        "moe_intermediate": 512, "shared_intermediate": 512, "experts": 256, "top_k": 8,
        "n_group": 8, "topk_group": 4, "vocab": 157184}
CHUNK = 1 << 24  # elements drawn at once (64 MiB of float32)


def special_ids(vocab):
    """<unk>, <|endoftext|>, <|mask|>: 156891, 156892, 156895 at V = 157184."""
    return {"<unk>": vocab - 293, "<|endoftext|>": vocab - 292, "<|mask|>": vocab - 289}


def default_out(a):
    tag = f"llada2-mini-{a.layers}l-{a.experts}e"
    if a.hidden != FULL["hidden"]:
        tag += f"-h{a.hidden}"
    if a.vocab != FULL["vocab"]:
        tag += f"-v{a.vocab}"
    return bench_cache(tag + "-" + a.dtype)


def tensor_plan(a):
    """[(name, shape, init, store dtype)] in file order. init: ("normal", std) | ("uniform", lo, hi)."""
    H, hd, nh, kv = a.hidden, a.head_dim, a.heads, a.kv_heads
    dt = a.dtype
    plan = [("model.word_embeddings.weight", (a.vocab, H), ("normal", 1.0), dt)]
    qk = (0.5 * a.qk_gain, 1.5 * a.qk_gain)

    def lin(name, out_f, in_f):
        plan.append((name, (out_f, in_f), ("normal", in_f ** -0.5), dt))

    def norm(name, n, lo=0.8, hi=1.2):
        plan.append((name, (n,), ("uniform", lo, hi), dt))

    for l in range(a.layers):
        p = f"model.layers.{l}."
        norm(p + "input_layernorm.weight", H)
        lin(p + "attention.query_key_value.weight", (nh + 2 * kv) * hd, H)
        norm(p + "attention.query_layernorm.weight", hd, *qk)
        norm(p + "attention.key_layernorm.weight", hd, *qk)
        lin(p + "attention.dense.weight", H, nh * hd)
        norm(p + "post_attention_layernorm.weight", H)
        if l < a.first_dense:
            lin(p + "mlp.gate_proj.weight", a.intermediate, H)
            lin(p + "mlp.up_proj.weight", a.intermediate, H)
            lin(p + "mlp.down_proj.weight", H, a.intermediate)
            continue
        lin(p + "mlp.gate.weight", a.experts, H)
        plan.append((p + "mlp.gate.expert_bias", (a.experts,), ("normal", a.expert_bias_std), "f32"))
        for e in range(a.experts):
            q = f"{p}mlp.experts.{e}."
            lin(q + "gate_proj.weight", a.moe_intermediate, H)
            lin(q + "up_proj.weight", a.moe_intermediate, H)
            lin(q + "down_proj.weight", H, a.moe_intermediate)
        q = p + "mlp.shared_experts."
        lin(q + "gate_proj.weight", a.shared_intermediate, H)
        lin(q + "up_proj.weight", a.shared_intermediate, H)
        lin(q + "down_proj.weight", H, a.shared_intermediate)
    norm("model.norm.weight", H)
    lin("lm_head.weight", a.vocab, H)
    return plan


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def itemsize(dtype):
    return 2 if dtype == "bf16" else 4


def shards_of(plan, limit):
    """Consecutive tensors, each shard at most `limit` bytes (a bigger tensor alone)."""
    shards, cur, size = [], [], 0
    for t in plan:
        b = numel(t[1]) * itemsize(t[3])
        if cur and size + b > limit:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += b
    if cur:
        shards.append(cur)
    return shards


def draw(gen, shape, init, mask_row=None, gain=0.05):
    """A float32 tensor drawn from `gen` in chunks of rows."""
    import torch
    n = numel(shape)
    flat = torch.empty(n, dtype=torch.float32)
    for lo in range(0, n, CHUNK):
        part = flat[lo:lo + CHUNK]
        if init[0] == "normal":
            torch.randn(part.shape, generator=gen, out=part)
            part.mul_(init[1])
        else:
            torch.rand(part.shape, generator=gen, out=part)
            part.mul_(init[2] - init[1]).add_(init[1])
    t = flat.view(*shape)
    if mask_row is not None:
        t[mask_row].mul_(gain)
    return t


def tensor_bytes(t, dtype):
    import torch
    if dtype == "bf16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    return t.contiguous().numpy().astype("<f4").tobytes()


def write_checkpoint(out, plan, a, mask_id):
    """Shards written tensor by tensor; returns (data bytes, shard names)."""
    import torch
    gen = torch.Generator().manual_seed(a.seed)
    shards = shards_of(plan, int(a.shard_gib * 2 ** 30))
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else \
        [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    weight_map, total = {}, 0
    for fname, shard in zip(names, shards):
        # safetensors header: offsets in the file order of the shard (sorted by name, as the
        # bench's checkpoint_files.write_safetensors does); the draws follow the plan's order.
        order = sorted(shard, key=lambda t: t[0])
        header, offset, where = {"__metadata__": {"format": "pt"}}, 0, {}
        for name, shape, _, dtype in order:
            size = numel(shape) * itemsize(dtype)
            header[name] = {"dtype": "BF16" if dtype == "bf16" else "F32", "shape": list(shape),
                            "data_offsets": [offset, offset + size]}
            where[name] = offset
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * ((8 - len(raw) % 8) % 8)
        base = 8 + len(raw)
        with open(os.path.join(out, fname), "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            f.truncate(base + offset)
            for name, shape, init, dtype in shard:
                if name == "lm_head.weight":
                    t = draw(gen, shape, init, mask_id, 0.05)
                elif name == "model.word_embeddings.weight":
                    t = draw(gen, shape, init, mask_id, a.mask_embedding_gain)
                else:
                    t = draw(gen, shape, init)
                f.seek(base + where[name])
                f.write(tensor_bytes(t, dtype))
                del t
                weight_map[name] = fname
        total += offset
    if n > 1:
        write_json(os.path.join(out, "model.safetensors.index.json"),
                   {"metadata": {"total_size": total}, "weight_map": weight_map})
    return total, names


def make_config(a, ids):
    eos = ids["<|endoftext|>"]
    return {
        "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
        "vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
        "partial_rotary_factor": 0.5, "rope_theta": 600000.0, "rope_scaling": None,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "hidden_act": "silu",
        "use_qk_norm": True, "use_qkv_bias": False, "use_bias": False, "norm_head": False,
        "tie_word_embeddings": False, "embedding_dropout": 0.0, "attention_dropout": 0.0,
        "output_dropout": 0.0, "initializer_range": 0.02,
        "first_k_dense_replace": a.first_dense, "num_experts": a.experts,
        "num_experts_per_tok": a.top_k, "num_shared_experts": 1,
        "moe_intermediate_size": a.moe_intermediate,
        "moe_shared_expert_intermediate_size": a.shared_intermediate,
        "n_group": a.n_group, "topk_group": a.topk_group, "routed_scaling_factor": 2.5,
        "score_function": "sigmoid", "moe_router_enable_expert_bias": True, "router_dtype": "fp32",
        "norm_topk_prob": True, "output_router_logits": False,
        "pad_token_id": eos, "eos_token_id": eos,
        "torch_dtype": "bfloat16" if a.dtype == "bf16" else "float32", "use_cache": False,
    }


def write_tokenizer(out, vocab, ids):
    """Word-level tokenizer of the whole vocabulary (tests/reference/fixture_tools.py's scheme,
    with `tokenizers` alone) and its tokenizer_config.json naming the mask token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    names = {i: n for n, i in ids.items()}
    tok = Tokenizer(models.WordLevel(vocab={names.get(i, "w%d" % i): i for i in range(vocab)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False)
                            for n, _ in sorted(ids.items(), key=lambda kv: kv[1])])
    tok.save(os.path.join(out, "tokenizer.json"))
    for n, i in ids.items():
        assert tok.token_to_id(n) == i, (n, i, tok.token_to_id(n))
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "backend": "tokenizers", "eos_token": "<|endoftext|>", "mask_token": "<|mask|>",
        "model_max_length": 8192, "pad_token": "<|endoftext|>",
        "tokenizer_class": "TokenizersBackend", "unk_token": "<unk>"})


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (default under $DLM_BENCH_CACHE, see above)")
    ap.add_argument("--layers", type=int, default=2, help="layers (the first dense, the rest MoE; real: 20)")
    ap.add_argument("--experts", type=int, default=FULL["experts"])
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--hidden", type=int, default=FULL["hidden"])
    ap.add_argument("--heads", type=int, default=FULL["heads"])
    ap.add_argument("--kv-heads", type=int, default=FULL["kv_heads"])
    ap.add_argument("--head-dim", type=int, default=FULL["head_dim"])
    ap.add_argument("--intermediate", type=int, default=FULL["intermediate"])
    ap.add_argument("--moe-intermediate", type=int, default=FULL["moe_intermediate"])
    ap.add_argument("--shared-intermediate", type=int, default=FULL["shared_intermediate"])
    ap.add_argument("--top-k", type=int, default=FULL["top_k"])
    ap.add_argument("--n-group", type=int, default=FULL["n_group"])
    ap.add_argument("--topk-group", type=int, default=FULL["topk_group"])
    ap.add_argument("--vocab", type=int, default=FULL["vocab"])
    ap.add_argument("--first-dense", type=int, default=1, help="first_k_dense_replace")
    ap.add_argument("--qk-gain", type=float, default=5.0, help="QK norm weights U(0.5, 1.5) x this")
    ap.add_argument("--mask-embedding-gain", type=float, default=0.1, help="the mask token's embedding row x this")
    ap.add_argument("--expert-bias-std", type=float, default=0.01, help="mlp.gate.expert_bias N(0, this^2)")
    ap.add_argument("--shard-gib", type=float, default=4.0, help="shard the weights above this size")
    a = ap.parse_args(argv)
    if a.heads % a.kv_heads:
        ap.error("--heads must be a multiple of --kv-heads")
    if a.experts % a.n_group or not 0 < a.topk_group <= a.n_group:
        ap.error(f"--n-group ({a.n_group}) must divide --experts ({a.experts}) and "
                 f"--topk-group ({a.topk_group}) be in [1, n_group]")
    if a.top_k > a.topk_group * (a.experts // a.n_group):
        ap.error(f"--top-k {a.top_k} exceeds the experts of the {a.topk_group} best groups "
                 f"({a.topk_group * (a.experts // a.n_group)})")
    if a.vocab < 512:
        ap.error("--vocab must be at least 512")
    if not 0 <= a.first_dense <= a.layers:
        ap.error("--first-dense must be in [0, --layers]")
    return a


def main():
    a = parse()
    out = a.out or default_out(a)
    if os.path.abspath(out).startswith(ROOT + os.sep):
        print(f"warning: writing inside the repository: {out}", file=sys.stderr)
    start = time.time()
    ids = special_ids(a.vocab)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    write_tokenizer(tmp, a.vocab, ids)
    write_json(os.path.join(tmp, "config.json"), make_config(a, ids))
    plan = tensor_plan(a)
    nbytes, files = write_checkpoint(tmp, plan, a, ids["<|mask|>"])
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)

    params = sum(numel(t[1]) for t in plan)
    experts = sum(numel(t[1]) for t in plan if ".mlp.experts." in t[0])
    active = params - experts - 2 * a.vocab * a.hidden \
        + (a.layers - a.first_dense) * a.top_k * 3 * a.hidden * a.moe_intermediate
    print(f"wrote {out} in {time.time() - start:.1f} s")
    print(f"  LLaDA2MoeModelLM, {a.dtype}, seed {a.seed}: hidden {a.hidden}, {a.layers} layers "
          f"({a.first_dense} dense x {a.intermediate}, {a.layers - a.first_dense} MoE), {a.heads} heads / "
          f"{a.kv_heads} kv x {a.head_dim}, {a.experts} experts top-{a.top_k} x {a.moe_intermediate} "
          f"(groups {a.n_group}, top {a.topk_group}) + shared {a.shared_intermediate}, vocab {a.vocab}")
    print(f"  {params / 1e6:.1f}M parameters ({experts / 1e6:.1f}M in experts; {active / 1e6:.1f}M active "
          f"per token in the layers, + {2 * a.vocab * a.hidden / 1e6:.1f}M embedding and head); "
          f"{nbytes / 2 ** 30:.2f} GiB in {len(files)} file(s), {len(plan)} tensors")
    print("  special ids: " + ", ".join(f"{n} {i}" for n, i in ids.items()))


if __name__ == "__main__":
    main()
