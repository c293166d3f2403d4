#!/usr/bin/env python3
"""A forward of a model whose weights do not fit in cache, against this machine's limit, in one run.

    .venv/bin/python bench/forward_limit.py [--checkpoint DIR] [--weights bf16]
        [--quantize-embeddings] [--activations f32] [--threads 2] [--rounds 3] [--prompt-length 4] [--gen-length 8]
        [--json OUT]

The checkpoint defaults to a ~1B-parameter LLaDA shape (hidden 2048, 16 layers, 16 heads, SwiGLU
MLP 5632, a 32,000-entry vocabulary, untied LM head: bench/make_llada_checkpoint.py, made when
missing, 2.1 GB in bf16). dlmc compiles it once with --weights and --activations; then each
round runs, one after the other, on the same thread count:
  - dlm-prof on one request (a synthetic prompt, gen_length = block_length = steps, cache none:
    every forward runs the same prompt + gen_length rows): the forwards' median time, their GEMM
    shapes and FLOPs, and the weight bytes the backend holds (`memory.weight_bytes`);
  - dlm-bench-memory: the machine's streaming read bandwidth (1 GiB, far past the caches);
  - dlm-bench-gemm-library on the forward's GEMM shapes' N and K with at least 256 rows:
    oneDNN's best float32 rate on each when compute-bound (bench/gemm_rate.py's methods).
A forward reads every weight once except the embedding table (only its tokens' rows), so its
limit is the larger of
  memory bound:  (held weight bytes - embedding table bytes) / read bandwidth
  compute bound: the forward's GEMM FLOPs / the library's best rate on its N and K
and the figure is the forward's median time over that limit (1.0: at the limit; the issue's target
is at most 1/0.7 = 1.43). Few rows per forward make it memory-bound; many, compute-bound.
"""
import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from checkpoint_files import bench_cache  # noqa: E402
from gemm_rate import METHODS, library, prof_report, run  # noqa: E402

SHAPE = {"hidden": 2048, "layers": 16, "heads": 16, "mlp": 5632, "vocab": 32000}
DEFAULT_CHECKPOINT = bench_cache("llada-2048x16-bf16")
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}
# Rows at which a GEMM of the forward's N and K is compute-bound (256 rows: 128 FLOPs per float32
# weight byte), for the machine's best rate.
COMPUTE_ROWS = 256


def tool(a, name):
    return os.path.join(a.build, "bin", name)


# Bytes a table value takes held at a --weights precision with --quantize-embeddings, its scales
# included (int8, fp8: an f32 a row; int4: an f16 per 32 values).
QUANTIZED_VALUE_BYTES = {"f32": 4, "bf16": 2, "int8": 1, "fp8": 1, "int4": 0.5 + 2 / 32}


def embedding_bytes(checkpoint, quantized=None):
    """The held bytes of the embedding table (its shape from model.safetensors' header: as
    stored, or at `quantized` precision), which a forward reads only a row per token of."""
    path = os.path.join(checkpoint, "model.safetensors")
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    for name, entry in header.items():
        if name.endswith("wte.weight") or name.endswith("embed_tokens.weight"):
            rows, cols = entry["shape"]
            value = QUANTIZED_VALUE_BYTES[quantized] if quantized else DTYPE_BYTES[entry["dtype"]]
            scale_row = 4 if quantized in ("int8", "fp8") else 0
            return int(rows * cols * value) + rows * scale_row
    sys.exit(f"{path}: no embedding table (wte.weight) in its header")


def library_best(a, shapes):
    """The seconds the forwards' GEMMs (each shape's calls) take at oneDNN's best rate on their N
    and K with rows enough to be compute-bound (COMPUTE_ROWS): the machine's GEMM rate, not the
    library's at the forward's few rows, which streams its float32 weights from memory."""
    wide = {(max(s["m"], COMPUTE_ROWS), s["n"], s["k"]) for s in shapes}
    rates = library(a, [{"m": m, "n": n, "k": k} for m, n, k in sorted(wide)])
    seconds = 0.0
    for s in shapes:
        rate = rates[(max(s["m"], COMPUTE_ROWS), s["n"], s["k"])]
        best = max(rate[m] for m in METHODS)
        seconds += 2.0 * s["m"] * s["n"] * s["k"] * s["calls"] * 1e-9 / best
    return seconds


def bandwidth(a):
    out = json.loads(run([tool(a, "dlm-bench-memory"), "--json", "--threads", str(a.threads),
                          "--mib", str(a.bandwidth_mib), "--repeats", "5"]))
    return out["median_gb_s"] * 1e9


def one_round(a, artifact, table_bytes):
    # One block of gen_length, a step per token, no cache: every forward is the whole canvas.
    report = prof_report(a, artifact, a.gen_length, a.gen_length, "none")
    forwards = report["forward_ms"]["count"]
    shapes = report["gemm_shapes"]
    flops = sum(2.0 * s["m"] * s["n"] * s["k"] * s["calls"] for s in shapes) / forwards
    read_bytes = report["memory"]["weight_bytes"] - table_bytes
    bytes_per_s = bandwidth(a)
    gemm_seconds = library_best(a, shapes) / forwards
    memory_ms = read_bytes / bytes_per_s * 1e3
    compute_ms = gemm_seconds * 1e3
    limit_ms = max(memory_ms, compute_ms)
    forward_ms = report["forward_ms"]["median"]
    return {"forward_ms": forward_ms, "forwards": forwards, "read_bytes": read_bytes,
            "bandwidth_gb_s": bytes_per_s * 1e-9, "memory_ms": memory_ms,
            "gflop_per_forward": flops * 1e-9, "best_gflops": flops * 1e-9 / gemm_seconds,
            "compute_ms": compute_ms, "limit_ms": limit_ms, "ratio": forward_ms / limit_ms,
            "kernel_paths": report.get("kernel_paths", [])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    ap.add_argument("--build", default=os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--weights", default="bf16", choices=["f32", "bf16", "int8", "fp8", "int4"])
    ap.add_argument("--quantize-embeddings", action="store_true",
                    help="dlmc compile --quantize-embeddings: the tables at --weights' precision")
    ap.add_argument("--activations", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--library-repeats", type=int, default=3)
    ap.add_argument("--bandwidth-mib", type=int, default=1024)
    ap.add_argument("--prompt-length", type=int, default=4)
    ap.add_argument("--gen-length", type=int, default=8)
    ap.add_argument("--json", help="write the rounds and medians here")
    a = ap.parse_args()

    if not os.path.isdir(a.checkpoint):
        if a.checkpoint != DEFAULT_CHECKPOINT:
            sys.exit(f"no checkpoint at {a.checkpoint}")
        run([sys.executable, os.path.join(ROOT, "bench", "make_llada_checkpoint.py"),
             "--out", a.checkpoint] +
            [f"--{k.replace('_', '-')}={v}" for k, v in SHAPE.items()] + ["--kv-heads=16"])
    tables = "-tables" if a.quantize_embeddings else ""
    artifact = bench_cache(f"forward_limit-{os.path.basename(a.checkpoint)}-{a.weights}{tables}-"
                           f"{a.activations}.dlm")
    os.makedirs(os.path.dirname(artifact), exist_ok=True)
    run([tool(a, "dlmc"), "compile", a.checkpoint, "-o", artifact, "--weights", a.weights,
         "--activations", a.activations] +
        (["--quantize-embeddings"] if a.quantize_embeddings else []))
    table_bytes = embedding_bytes(a.checkpoint, a.weights if a.quantize_embeddings else None)

    rounds = [one_round(a, artifact, table_bytes) for _ in range(a.rounds)]
    med = {k: statistics.median(r[k] for r in rounds)
           for k in ("forward_ms", "bandwidth_gb_s", "memory_ms", "best_gflops", "compute_ms",
                     "limit_ms", "ratio")}
    first = rounds[0]
    print(f"{a.checkpoint} (--weights {a.weights}{' --quantize-embeddings' if tables else ''} "
          f"--activations {a.activations}): {a.threads} "
          f"threads, {a.prompt_length + a.gen_length} rows a forward ({first['forwards']} "
          f"forwards a round), median of {a.rounds} rounds")
    for path in first["kernel_paths"]:
        print(f"  path: {path}")
    print(f"\nweights read a forward: {first['read_bytes'] / 2**20:.1f} MiB; "
          f"GEMM work a forward: {first['gflop_per_forward']:.2f} GFLOP\n")
    print("| forward ms | read bandwidth GB/s | memory bound ms | library best GFLOP/s | "
          "compute bound ms | limit ms | forward / limit |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {med['forward_ms']:.1f} | {med['bandwidth_gb_s']:.2f} | {med['memory_ms']:.1f} | "
          f"{med['best_gflops']:.1f} | {med['compute_ms']:.1f} | {med['limit_ms']:.1f} | "
          f"**{med['ratio']:.2f}** |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": vars(a), "rounds": rounds, "median": med}, f, indent=1)


if __name__ == "__main__":
    main()
