#!/usr/bin/env python3
"""dlm on the CPU against the PyTorch eager reference and llama.cpp: same checkpoint, prompts
and settings.

    bench/compare_cpu.py [--checkpoint DIR] [--prompts FILE] [--gen-length 64] [--block-length 32]
                         [--steps 64] [--threshold T] [--cache none|prefix] [--repeats 5]
                         [--threads N] [--engines dlm,pytorch,llama.cpp] [--no-llama-cpp]
                         [--gguf-type f32|bf16|q8_0|q4_k_m] [--weights f32|bf16|int8|fp8|int4]
                         [--activations f32|bf16] [--quantize-embeddings]
                         [--llama-cpp-arg ARG ...] [--json out.json]

Compiles the checkpoint with dlmc, then for each repeat and prompt runs `dlm-run --json`,
`tests/reference/generate.py --json` and llama.cpp's `llama-diffusion-cli` one after the other
(interleaved, so drift in machine load hits all alike). Each engine reports its own generation
time (model loading excluded); the table gives medians of tokens/s (output tokens, up to EOS),
pos/s (canvas positions decoded: whole blocks up to the one holding EOS), forwards/s, tokens per
forward (TPF) and whether the engines produced the same output. The baseline is the reference
sampler in PyTorch eager mode on the same number of threads, which is what the correctness tests
compare against.

llama.cpp (see bench/README.md and bench/llama_cpp/): built from the llama.cpp tree vendored in
the llama-cpp-python sdist on PyPI, into $DLM_BENCH_CACHE (default ~/.cache/dlm-bench/), the
checkpoint converted to an f32 GGUF by the vendored converter. When any of that fails the
engine is dropped with "llama.cpp: skipped: <reason>" and the rest still runs. Its sampler
differs from ours in ways the table notes: no greedy path (tokens drawn from the softmax with a
fixed seed), no threshold unmasking, no prefix cache, and a canvas rounded up to a multiple of
the block length; output agreement with it is reported on the text, never enforced.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build"))
DEFAULT_CHECKPOINT = os.path.join(ROOT, "tests", "models", "demo", "checkpoint")
DEFAULT_PROMPTS = ["The license grants", "def main():", "In this document, the term"]
ENGINES = ("dlm", "pytorch", "llama.cpp")
LLAMA = "llama.cpp"

sys.path.insert(0, os.path.join(ROOT, "bench", "llama_cpp"))


def run_json(cmd, env=None):
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{result.stderr}")
    return json.loads(result.stdout)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def skip(name, reason):
    print(f"{name}: skipped: {reason}", file=sys.stderr, flush=True)


class LlamaCpp:
    """llama-diffusion-cli on a GGUF of the checkpoint; None from prepare() when unavailable."""

    def __init__(self, info, gguf, facts, args):
        self.info, self.gguf, self.facts, self.args = info, gguf, facts, args
        self.prompt_ids = {}

    @classmethod
    def prepare(cls, args):
        import build
        import convert
        try:
            info = build.ensure_built(args.llama_cpp_version, args.jobs)
            gguf, facts = convert.convert(args.checkpoint, outtype=args.gguf_type,
                                          tree=info["tree"])
        except (build.Skipped, convert.ConvertError) as e:
            skip(LLAMA, e)
            return None
        except Exception as e:  # anything unexpected in a third-party toolchain: skip, not fail
            skip(LLAMA, f"{type(e).__name__}: {e}")
            return None
        return cls(info, gguf, facts, args)

    def __call__(self, prompt):
        import run
        a = self.args
        if prompt not in self.prompt_ids:
            self.prompt_ids[prompt] = run.tokenize(self.info["tokenize"], self.gguf, prompt)
        out = run.run(self.info["binary"], self.info["tokenize"], self.gguf, prompt,
                      a.gen_length, a.block_length, a.steps, a.threads, seed=0,
                      extra=a.llama_cpp_arg, prompt_ids=self.prompt_ids[prompt],
                      eos_marker=self.facts.get("eos_marker"))
        out["tokens"] = out["positions"] = out["gen_tokens"]
        return out


def text_agreement(ref, other):
    """Does `other` (llama.cpp's text up to its first EOS) reproduce the reference text?

    Returns (same, prefix_fraction): prefix_fraction = characters of the reference text that
    `other` reproduces from the start, over the reference length (an empty reference counts 1
    only against an empty text)."""
    a, b = ref["text"], other["text"]
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a == b, (n / len(a) if a else float(b == ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    ap.add_argument("--prompts", help="file with one prompt per line")
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--threshold", type=float)
    ap.add_argument("--cache", default="none", choices=["none", "prefix"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="comma-separated subset of " + ",".join(ENGINES))
    ap.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out")
    ap.add_argument("--llama-cpp-version", default=os.environ.get("DLM_LLAMA_CPP_PYTHON", "0.3.36"),
                    help="llama-cpp-python sdist whose vendored llama.cpp is built")
    ap.add_argument("--gguf-type", default="f32", choices=["f32", "bf16", "q8_0", "q4_k_m"])
    ap.add_argument("--weights", choices=["f32", "bf16", "int8", "fp8", "int4"],
                    help="dlmc compile --weights (default: as the checkpoint stores them)")
    ap.add_argument("--quantize-embeddings", action="store_true",
                    help="dlmc compile --quantize-embeddings (as a Q4_K_M GGUF quantizes its "
                         "embedding and output tables)")
    ap.add_argument("--activations", choices=["f32", "bf16"], help="dlmc compile --activations")
    ap.add_argument("--llama-cpp-arg", action="append", default=[],
                    help="extra llama-diffusion-cli argument (repeatable, e.g. --llama-cpp-arg=-fa "
                         "--llama-cpp-arg=on)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("DLM_BENCH_JOBS", 2)),
                    help="parallel jobs for the one-off llama.cpp build")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    for n in names:
        if n not in ENGINES:
            ap.error(f"unknown engine {n!r} (known: {', '.join(ENGINES)})")
    if args.no_llama_cpp and LLAMA in names:
        names.remove(LLAMA)

    prompts = DEFAULT_PROMPTS
    if args.prompts:
        with open(args.prompts) as f:
            prompts = [line.rstrip("\n") for line in f if line.strip()]

    settings = ["--gen-length", str(args.gen_length), "--block-length", str(args.block_length),
                "--steps", str(args.steps), "--cache", args.cache, "--temperature", "0"]
    if args.threshold is not None:
        settings += ["--threshold", str(args.threshold)]

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), DLM_THREADS=str(args.threads))
    llama = None
    if LLAMA in names:
        llama = LlamaCpp.prepare(args)
        if llama is None:
            names.remove(LLAMA)
    if not names:
        sys.exit("bench: no engine left to run")

    with tempfile.TemporaryDirectory() as tmp:
        engines = {}
        if "dlm" in names:
            artifact = os.path.join(tmp, "model.dlm")
            subprocess.run([os.path.join(BUILD, "bin", "dlmc"), "compile", args.checkpoint, "-o",
                            artifact, "--gen-length", str(args.gen_length), "--block-length",
                            str(args.block_length), "--steps", str(args.steps)] +
                           (["--weights", args.weights] if args.weights else []) +
                           (["--quantize-embeddings"] if args.quantize_embeddings else []) +
                           (["--activations", args.activations] if args.activations else []),
                           check=True)
            cmd = [os.path.join(BUILD, "bin", "dlm-run"), artifact, "--json", *settings]
            engines["dlm"] = lambda p, cmd=cmd: run_json(cmd + ["--prompt", p], env)
        if "pytorch" in names:
            cmd = [sys.executable, os.path.join(ROOT, "tests", "reference", "generate.py"),
                   args.checkpoint, "--json", "--threads", str(args.threads), *settings]
            engines["pytorch"] = lambda p, cmd=cmd: run_json(cmd + ["--prompt", p], env)
        if llama is not None:
            engines[LLAMA] = llama

        runs = {name: [] for name in engines}
        same_tokens = None  # dlm vs pytorch, token ids
        agree = {"same_text": 0, "prefix_fraction": [], "same_prompt_ids": True,
                 "same_canvas": True, "runs": 0, "examples": []}
        for _ in range(args.repeats):
            for prompt in prompts:
                outputs = {}
                for name, fn in list(engines.items()):
                    try:
                        out = fn(prompt)
                    except Exception as e:
                        if name != LLAMA:
                            raise
                        skip(LLAMA, f"{type(e).__name__}: {e}")
                        del engines[LLAMA], runs[LLAMA]
                        llama = None
                        continue
                    if "output_ids" in out:
                        out["tokens"] = len(out["output_ids"])
                        # canvas positions decoded: generation stops after the block holding
                        # the first EOS, where output_ids end
                        out["positions"] = min(args.gen_length, -(-out["tokens"] // args.block_length)
                                               * args.block_length)
                    runs[name].append(out)
                    outputs[name] = out
                if "dlm" in outputs and "pytorch" in outputs:
                    same = outputs["dlm"]["output_ids"] == outputs["pytorch"]["output_ids"]
                    same_tokens = same if same_tokens is None else (same_tokens and same)
                ref = outputs.get("pytorch") or outputs.get("dlm")
                if LLAMA in outputs and ref is not None:
                    lo = outputs[LLAMA]
                    same, frac = text_agreement(ref, lo)
                    agree["runs"] += 1
                    agree["same_text"] += same
                    agree["prefix_fraction"].append(frac)
                    agree["same_prompt_ids"] &= lo["prompt_ids"] == ref["prompt_ids"]
                    agree["same_canvas"] &= lo["same_canvas"]
                    if len(agree["examples"]) < len(prompts):
                        agree["examples"].append({"prompt": prompt, "reference": ref["text"],
                                                  LLAMA: lo["text"], "same": same,
                                                  "llama.cpp_full_text": lo["full_text"]})

    def summary(name):
        rs = runs[name]
        s = {
            "tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in rs),
            "positions_per_s": statistics.median(r["positions"] / r["seconds"] for r in rs),
            "forwards_per_s": statistics.median(r["forwards"] / r["seconds"] for r in rs),
            "tokens_per_forward": statistics.median(r["tokens"] / r["forwards"] for r in rs),
            "seconds_median": statistics.median(r["seconds"] for r in rs),
            "tokens_median": statistics.median(r["tokens"] for r in rs),
            "runs": len(rs),
        }
        if name == LLAMA:
            s.update({
                "llama_cpp_python": llama.info["version"],
                "llama_cpp_commit": llama.info["commit"],
                "binary": llama.info["binary"], "gguf": llama.gguf, "gguf_type": args.gguf_type,
                "pre_tokenizer": llama.facts["pre_tokenizer"],
                "canvas_median": statistics.median(r["canvas"] for r in rs),
                "example_command": rs[0]["command"] if rs else None,
            })
        return s

    runs = {k: v for k, v in runs.items() if v}
    result = {
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": args.threads},
        "settings": {"checkpoint": args.checkpoint, "prompts": len(prompts),
                     "gen_length": args.gen_length, "block_length": args.block_length,
                     "steps": args.steps, "threshold": args.threshold, "cache": args.cache,
                     "repeats": args.repeats},
        "engines": list(runs),
    }
    for name in runs:
        result[name] = summary(name)
    ratios, pos_ratios = {}, {}
    for a in ENGINES:
        for b in ENGINES:
            if ENGINES.index(a) < ENGINES.index(b) and a in runs and b in runs:
                ratios[f"{a}/{b}"] = result[a]["tokens_per_s"] / result[b]["tokens_per_s"]
                pos_ratios[f"{a}/{b}"] = (result[a]["positions_per_s"] /
                                          result[b]["positions_per_s"])
    result["ratios_tokens_per_s"] = ratios
    result["ratios_positions_per_s"] = pos_ratios
    if same_tokens is not None:
        result["same_tokens"] = same_tokens
        result["speedup_tokens_per_s"] = ratios["dlm/pytorch"]
    notes = []
    if LLAMA in runs:
        ref_name = "pytorch" if "pytorch" in runs else ("dlm" if "dlm" in runs else None)
        if ref_name:
            result["llama_cpp_agreement"] = {
                "reference": ref_name, "runs": agree["runs"], "same_text_runs": agree["same_text"],
                "mean_prefix_fraction": statistics.mean(agree["prefix_fraction"]),
                "same_prompt_ids": agree["same_prompt_ids"], "same_canvas": agree["same_canvas"],
                "examples": agree["examples"]}
        if not args.llama_cpp_arg:
            notes.append("llama.cpp samples tokens from the softmax at --temp 0 (its diffusion CLI "
                         "has no greedy path); agreement is on text")
        if any(len(r["prompt_ids"]) >= args.block_length for r in runs[LLAMA]):
            notes.append("llama.cpp runs canvas/block blocks from the end of the prompt, so a "
                         "prompt of P >= block tokens costs it P // block extra forwards")
        if not all(r["same_canvas"] for r in runs[LLAMA]):
            notes.append("llama.cpp canvas = prompt + gen rounded up to a multiple of the block "
                         "length (its CLI requires it): more tokens and forwards than dlm")
        if any(r["positions"] != r["tokens"] for n in runs for r in runs[n] if n != LLAMA):
            notes.append("dlm / pytorch stopped after the block holding EOS; llama.cpp has no "
                         "early stop and decodes the whole canvas: compare pos/s (canvas "
                         "positions decoded per second), not tokens/s")
        if args.threshold is not None:
            notes.append("llama.cpp has no confidence threshold: it ran the fixed schedule")
        if args.cache != "none":
            notes.append("llama.cpp has no prefix cache: it recomputes the canvas every step")
        if ref_name and not agree["same_prompt_ids"]:
            notes.append("llama.cpp tokenised the prompt differently")
    result["notes"] = notes

    print(f"machine: {result['machine']['cpu']}, {args.threads} threads")
    print(f"settings: gen {args.gen_length}, block {args.block_length}, steps {args.steps}, "
          f"threshold {args.threshold}, cache {args.cache}, {len(prompts)} prompts x {args.repeats}")
    print(f"{'engine':<10}{'tokens/s':>12}{'pos/s':>10}{'forwards/s':>12}{'TPF':>8}"
          f"{'s/request':>12}{'tokens':>8}")
    for name in runs:
        s = result[name]
        print(f"{name:<10}{s['tokens_per_s']:>12.1f}{s['positions_per_s']:>10.1f}"
              f"{s['forwards_per_s']:>12.1f}"
              f"{s['tokens_per_forward']:>8.2f}{s['seconds_median']:>12.4f}"
              f"{s['tokens_median']:>8g}")
    if ratios:
        print("tokens/s ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    if LLAMA in runs and any(r["positions"] != r["tokens"] for n in runs for r in runs[n]):
        # an early stop at EOS makes tokens/s count fewer tokens than llama.cpp decodes
        print("pos/s ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in pos_ratios.items()))
    if same_tokens is not None:
        print(f"dlm vs pytorch same tokens: {'yes' if same_tokens else 'NO'}")
    if "llama_cpp_agreement" in result:
        g = result["llama_cpp_agreement"]
        print(f"llama.cpp vs {g['reference']}: same text {g['same_text_runs']}/{g['runs']} runs, "
              f"mean matching prefix {100 * g['mean_prefix_fraction']:.0f}% of the text, "
              f"prompt ids {'same' if g['same_prompt_ids'] else 'DIFFERENT'}, "
              f"canvas {'same' if g['same_canvas'] else 'longer (rounded to block)'}")
    if LLAMA in runs:
        s = result[LLAMA]
        print(f"llama.cpp: llama-cpp-python {s['llama_cpp_python']} "
              f"(ggml-org/llama.cpp@{s['llama_cpp_commit']}), {s['gguf_type']} GGUF")
    for n in notes:
        print(f"note: {n}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
