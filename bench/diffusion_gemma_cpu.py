#!/usr/bin/env python3
"""DiffusionGemma on the CPU: dlm (`dlm-run`) against transformers 5.23's own
`DiffusionGemmaForBlockDiffusion.generate` on the same random checkpoint (issue 12).

    .venv/bin/python bench/diffusion_gemma_cpu.py [--checkpoint DIR] [--prompt TEXT ...]
        [--threads N] [--repeats 3] [--max-denoising-steps N] [--engines dlm,transformers]
        [--ref-python /work/refvenv/bin/python] [--json out.json]

Without --checkpoint it makes (once) the default bf16 checkpoint of
bench/make_diffusion_gemma_checkpoint.py under $DLM_BENCH_CACHE (default ~/.cache/dlm-bench).
The prompts are tokenised once with `tokenizers` from the checkpoint's tokenizer.json and both
engines get the same ids (`dlm-run --prompt-ids`). dlm: `dlmc compile DIR -o X.dlm --activations
bf16` (transformers multiplies the bf16 checkpoint in bf16; dlm does where oneDNN has a bf16
brgemm kernel, else its float32-activation tiles: `--activations f32` to compare those), then one
`dlm-run X.dlm --prompt-ids ... --json --threads N` per run. The baseline: transformers'
`generate` in the reference venv (torch 2.15 + transformers 5.23, torch threads = N, sdpa
attention and grouped_mm experts as from_pretrained picks them), one long-lived process
(bench/diffusion_gemma_hf.py serve) so that only generate() is timed. Runs are interleaved
(per repeat and prompt: dlm, then transformers). Both use the checkpoint's generation_config.json
(canvas, max_new_tokens, t_min/t_max, entropy bound, stop rule); --max-denoising-steps overrides
max_denoising_steps on both (dlm-run --max-steps). Both draw their own random numbers (dlm has its
own RNG), so the tokens differ: the table compares speed, not outputs.

Figures, medians over the runs: tokens/s = generated tokens (output up to and including EOS) /
wall seconds of generation (load and compile excluded; each engine times itself), decoder
forwards/s (denoising forwards over the canvas; the encoder passes over the prompt and committed
canvases are not counted, as in transformers' tokens_per_forward), tokens per decoder forward, denoising steps per canvas (forwards / canvases), and dlm /
baseline. If the reference venv is missing or fails: "baseline skipped: <reason>".
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_cpu import cpu_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("DLM_BUILD_DIR", os.path.join(ROOT, "build"))
REF_PYTHON = os.environ.get("DLM_REF_PYTHON", "/work/refvenv/bin/python")
DEFAULT_PROMPTS = ["The license grants permission to use, copy and modify the software",
                   "def main():\n    args = parse_args()"]
ENGINES = ("dlm", "transformers")


def default_checkpoint():
    cache = os.environ.get("DLM_BENCH_CACHE", os.path.expanduser("~/.cache/dlm-bench"))
    path = os.path.join(cache, "diffusion-gemma-bf16")
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_diffusion_gemma_checkpoint.py"),
                        "--out", path], check=True)
    return path


class Transformers:
    """The baseline: bench/diffusion_gemma_hf.py serve in the reference venv."""

    def __init__(self, python, checkpoint, threads, steps):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self.steps = steps
        self.proc = subprocess.Popen(
            [python, os.path.join(ROOT, "bench", "diffusion_gemma_hf.py"), "serve", checkpoint,
             "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            err = self.proc.stderr.read()
            raise RuntimeError("the transformers worker did not start: " + err.strip()[-800:])

    def __call__(self, ids, seed):
        self.proc.stdin.write(json.dumps({"prompt_ids": ids, "seed": seed,
                                          "max_denoising_steps": self.steps}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the transformers worker died: " + self.proc.stderr.read().strip()[-800:])
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="DiffusionGemma checkpoint directory (default: make the bench one)")
    ap.add_argument("--prompt", action="append", help="prompt text (repeatable)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-denoising-steps", type=int,
                    help="override generation_config.json's max_denoising_steps on both engines")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--activations", default="bf16", choices=["bf16", "f32"],
                    help="dlmc compile --activations (default bf16, as transformers computes)")
    ap.add_argument("--ref-python", default=REF_PYTHON,
                    help="python with torch 2.15 + transformers 5.23 (the baseline)")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    names = [e.strip() for e in a.engines.split(",") if e.strip()]
    for n in names:
        if n not in ENGINES:
            ap.error(f"unknown engine {n!r} (known: {', '.join(ENGINES)})")
    checkpoint = a.checkpoint or default_checkpoint()
    prompts = a.prompt or DEFAULT_PROMPTS

    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
    prompt_ids = [tok.encode(p).ids for p in prompts]
    with open(os.path.join(checkpoint, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(checkpoint, "generation_config.json")) as f:
        generation = json.load(f)
    canvas = config.get("canvas_length", 256)
    steps = a.max_denoising_steps or generation.get("max_denoising_steps", 48)
    tc = config["text_config"]

    skipped = {}
    engines = {}
    baseline = None
    with tempfile.TemporaryDirectory() as tmp:
        if "dlm" in names:
            artifact = os.path.join(tmp, "model.dlm")
            r = subprocess.run([os.path.join(BUILD, "bin", "dlmc"), "compile", checkpoint, "-o", artifact,
                                "--activations", a.activations], capture_output=True, text=True)
            if r.returncode != 0:
                skipped["dlm"] = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["failed"]
                skipped["dlm"] = "dlmc compile failed: " + skipped["dlm"][0]
                print(f"dlm skipped: {skipped['dlm']}", file=sys.stderr, flush=True)
            else:
                cmd = [os.path.join(BUILD, "bin", "dlm-run"), artifact, "--json",
                       "--threads", str(a.threads)]
                if a.max_denoising_steps:
                    cmd += ["--max-steps", str(a.max_denoising_steps)]
                env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), DLM_THREADS=str(a.threads))

                def run_dlm(ids, seed, cmd=cmd, env=env):
                    full = cmd + ["--prompt-ids", ",".join(map(str, ids)), "--seed", str(seed)]
                    res = subprocess.run(full, capture_output=True, text=True, env=env)
                    if res.returncode != 0:
                        raise RuntimeError(f"{' '.join(full)} failed:\n{res.stderr}")
                    return json.loads(res.stdout)
                engines["dlm"] = run_dlm
        if "transformers" in names:
            if not os.path.exists(a.ref_python):
                skipped["transformers"] = f"no reference venv python at {a.ref_python}"
            else:
                try:
                    baseline = Transformers(a.ref_python, checkpoint, a.threads, a.max_denoising_steps)
                    engines["transformers"] = baseline
                except Exception as e:
                    skipped["transformers"] = f"{type(e).__name__}: {e}"
            if "transformers" in skipped:
                print(f"baseline skipped: {skipped['transformers']}", file=sys.stderr, flush=True)
        if not engines:
            sys.exit("bench: no engine left to run")

        if baseline is not None:
            # torch's first generate() pays one-off costs (lazy init, allocator growth): one
            # untimed call with a single denoising step. dlm starts a fresh process every run.
            baseline.steps, steps_saved = 1, baseline.steps
            baseline(prompt_ids[0], seed=0)
            baseline.steps = steps_saved
        runs = {n: [] for n in engines}
        for rep in range(a.repeats):
            for i, ids in enumerate(prompt_ids):
                for name, fn in list(engines.items()):
                    try:
                        out = fn(ids, seed=rep * 1000 + i)
                    except Exception as e:
                        skipped[name] = f"{type(e).__name__}: {str(e).strip()[-600:]}"
                        print(f"{name} skipped: {skipped[name]}", file=sys.stderr, flush=True)
                        del engines[name]
                        continue
                    if out["prompt_ids"] != ids:
                        sys.exit(f"bench: {name} ran prompt ids {out['prompt_ids']}, not {ids}")
                    tokens = len(out["output_ids"])
                    canvases = out.get("canvases") or out.get("blocks") or max(1, math.ceil(tokens / canvas))
                    if name == "dlm":
                        # dlm's "forwards" also counts the encoder passes (prefill, commits);
                        # "decode_steps" are the decoder forwards whose logits were decoded
                        decoder, total = out["decode_steps"], out["forwards"]
                    else:
                        decoder, total = out["forwards"], out["forwards"] + out["encoder_passes"]
                    runs[name].append({"tokens": tokens, "seconds": out["seconds"],
                                       "forwards": decoder, "all_forwards": total,
                                       "canvases": canvases, "prompt_len": len(ids)})
                    print(f"  repeat {rep} prompt {i} {name}: {tokens} tokens, {decoder} decoder "
                          f"forwards ({total} with the encoder's), {canvases} canvases, "
                          f"{out['seconds']:.3f} s", file=sys.stderr, flush=True)
        if baseline is not None:
            baseline.close()

    runs = {k: v for k, v in runs.items() if v}
    result = {
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": a.threads,
                    "load_average": os.getloadavg()},
        "settings": {"checkpoint": checkpoint, "dtype": config.get("dtype"),
                     "model": {k: tc.get(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                       "num_key_value_heads", "head_dim", "per_layer_config",
                                                       "intermediate_size", "num_experts", "top_k_experts",
                                                       "moe_intermediate_size", "vocab_size", "sliding_window")},
                     "canvas_length": canvas, "max_denoising_steps": steps,
                     "max_new_tokens": generation.get("max_new_tokens"),
                     "prompts": prompts, "prompt_ids": prompt_ids, "repeats": a.repeats},
        "engines": list(runs), "skipped": skipped,
    }
    for name, rs in runs.items():
        result[name] = {
            "tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in rs),
            "forwards_per_s": statistics.median(r["forwards"] / r["seconds"] for r in rs),
            "tokens_per_forward": statistics.median(r["tokens"] / r["forwards"] for r in rs),
            "steps_per_canvas": statistics.median(r["forwards"] / r["canvases"] for r in rs),
            "seconds_median": statistics.median(r["seconds"] for r in rs),
            "tokens_median": statistics.median(r["tokens"] for r in rs),
            "runs": rs,
        }
    if "dlm" in runs and "transformers" in runs:
        result["ratio_tokens_per_s"] = result["dlm"]["tokens_per_s"] / result["transformers"]["tokens_per_s"]
        result["ratio_forwards_per_s"] = (result["dlm"]["forwards_per_s"] /
                                          result["transformers"]["forwards_per_s"])

    m = result["settings"]["model"]
    print(f"machine: {result['machine']['cpu']}, {a.threads} threads, load {os.getloadavg()[0]:.1f}")
    print(f"checkpoint: {checkpoint} ({config.get('dtype')}; hidden {m['hidden_size']}, "
          f"{m['num_hidden_layers']} layers, {m['num_experts']} experts top-{m['top_k_experts']}, "
          f"vocab {m['vocab_size']}); canvas {canvas}, max_denoising_steps {steps}, "
          f"max_new_tokens {generation.get('max_new_tokens')}, {len(prompts)} prompts x {a.repeats}")
    print(f"{'engine':<14}{'tokens/s':>10}{'forwards/s':>12}{'TPF':>7}{'steps/canvas':>14}"
          f"{'s/request':>11}{'dlm/this':>10}")
    for name in runs:
        s = result[name]
        ratio = ""
        if name != "dlm" and "dlm" in runs:
            ratio = f"{result['dlm']['tokens_per_s'] / s['tokens_per_s']:.2f}x"
        print(f"{name:<14}{s['tokens_per_s']:>10.2f}{s['forwards_per_s']:>12.3f}"
              f"{s['tokens_per_forward']:>7.2f}{s['steps_per_canvas']:>14.1f}{s['seconds_median']:>11.2f}"
              f"{ratio:>10}")
    for name, why in skipped.items():
        print(("baseline" if name == "transformers" else name) + f" skipped: {why}")
    if "ratio_tokens_per_s" in result:
        print(f"dlm / transformers: {result['ratio_tokens_per_s']:.2f}x tokens/s, "
              f"{result['ratio_forwards_per_s']:.2f}x forwards/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
