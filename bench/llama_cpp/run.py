#!/usr/bin/env python3
"""Run llama.cpp's `llama-diffusion-cli` with dlm's low-confidence settings and parse it.

    bench/llama_cpp/run.py MODEL.gguf --prompt TEXT [--gen-length 64] [--block-length 32]
                           [--steps 64] [--threads N] [--seed 0] [--json] [-- EXTRA CLI ARGS]

Prints one JSON object (with --json) shaped like `dlm-run --json` / generate.py --json, minus
output_ids (the CLI prints text only):

  prompt_ids   the prompt as llama.cpp tokenises it (from llama-tokenize, same GGUF, same
               add-BOS / parse-special rules as the CLI)
  text         the generated text up to the first EOS (exclusive), special tokens not
               rendered -- comparable with the reference's `text`
  full_text    everything the CLI printed: it does not stop at EOS; EOS shows as "<dlm-eos>"
               (convert.py makes the EOS token printable)
  eos          whether an EOS was generated
  forwards     model forward passes (progress callbacks counted: one per denoising step)
  seconds      the CLI's own "total time" of diffusion_generate (model load excluded)
  gen_tokens   positions generated (canvas length - prompt length)
  canvas       the canvas length the CLI ran (its -ub)
  steps        --diffusion-steps passed
  same_canvas  whether the canvas and schedule are exactly dlm's (see below)

Settings mapping (llama.cpp at ggml-org/llama.cpp@0c1e57098, examples/diffusion):
  gen length G, block B, steps N  -> the CLI generates n_ubatch - P tokens after a P-token prompt
      and requires n_ubatch % B == 0 and steps % (n_ubatch / B) == 0.  We pass
      -ub/-b/-c L with L = P + G rounded up to a multiple of B, and
      --diffusion-steps (N / (G / B)) * (L / B), i.e. the same steps per block.  When
      (P + G) % B == 0 the canvas, the blocks and the per-block schedule are dlm's exactly;
      otherwise llama.cpp runs a longer canvas (L - P tokens, extra masked positions that every
      position attends to) and same_canvas is false.
  low-confidence remasking -> --diffusion-algorithm 4 (CONFIDENCE_BASED, the default): per step,
      the top-k masked positions of the current block by the probability of their sampled token,
      ties to the lower position; k from the same LLaDA schedule (remainder to the first steps).
  temperature 0 -> --temp 0 --top-k 0 --top-p 1: the CLI has no greedy path (its sampler chain
      always ends in a `dist` draw, and a greedy top-k 1 would make every confidence 1.0, i.e.
      left-to-right order), so tokens are drawn from the full softmax with --seed; the
      confidence is the full-softmax probability of the drawn token, as in dlm.  Tokens
      therefore agree with dlm's greedy argmax only where the model is confident.
  --threshold (Fast-dLLM), --cache prefix: not supported by the CLI; it always runs the fixed
      schedule and recomputes the whole canvas every step.
  threads -> -t N -tb N.  Prompt: passed raw with --no-escape; the GGUF carries a pass-through
      chat template (see convert.py), BOS per the tokenizer.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_TOTAL = re.compile(r"\ntotal time: ([0-9.]+)ms, time per step: ([0-9.]+)ms, "
                    r"sampling time per step: ([0-9.]+)ms\n")
_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")
_STEP = re.compile(r"diffusion step: (\d+)/(\d+)")


class RunError(Exception):
    pass


class LostOutput(RunError):
    """The CLI's last log lines never reached stderr: its logger is a detached thread that is
    not flushed at exit (ggml-org/llama.cpp#22142), which loses them in about 1 run in 30."""


ATTEMPTS = 4


def tokenize(tokenize_bin, gguf, prompt):
    """Prompt token ids as llama.cpp sees them."""
    r = subprocess.run([tokenize_bin, "-m", gguf, "-p", prompt, "--ids", "--no-escape",
                        "--log-disable"], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise RunError(f"llama-tokenize failed: {r.stderr[-2000:]}")
    m = re.search(r"\[([0-9, ]*)\]", r.stdout)
    if not m:
        raise RunError(f"cannot parse llama-tokenize output: {r.stdout[-500:]!r}")
    return [int(t) for t in m.group(1).split(",") if t.strip()]


def plan(prompt_len, gen_length, block_length, steps):
    """Canvas length and step count for the CLI (see the module docstring)."""
    if gen_length % block_length or steps % (gen_length // block_length):
        raise RunError("gen_length must be a multiple of block_length and steps divisible by "
                       "the number of blocks")
    spb = steps // (gen_length // block_length)
    canvas = -(-(prompt_len + gen_length) // block_length) * block_length
    return canvas, spb * (canvas // block_length), canvas == prompt_len + gen_length


def cli_command(binary, gguf, prompt, canvas, steps, block_length, threads, seed, extra=()):
    return [binary, "-m", gguf, "-p", prompt, "--no-escape",
            "--diffusion-steps", str(steps), "--diffusion-block-length", str(block_length),
            "--diffusion-algorithm", "4", "--temp", "0", "--top-k", "0", "--top-p", "1",
            "--seed", str(seed), "-ub", str(canvas), "-b", str(canvas), "-c", str(canvas),
            "-t", str(threads), "-tb", str(threads),
            "--no-log-prefix", "--no-log-timestamps", "--log-colors", "off", *extra]


def parse_output(stderr):
    """(text, seconds, forwards) from the CLI's log stream."""
    m = _TOTAL.search(stderr)
    if not m:
        raise LostOutput(f"no 'total time' line in llama-diffusion-cli output:\n{stderr[-2000:]}")
    seconds = float(m.group(1)) / 1000.0
    forwards = len(_STEP.findall(stderr[:m.start()]))
    rest = stderr[m.end():]
    # the CLI prints "\n%s\n" (the text) right after the timing line, then frees the model;
    # a log prefix ("0.00.163.647 I ") is there only if the logger was told to add one
    rest = _PREFIX.sub("", rest, count=1)
    if not (rest.startswith("\n") and rest.endswith("\n") and len(rest) >= 2):
        raise LostOutput("llama-diffusion-cli's text line is missing (log lost at exit)")
    return rest[1:-1], seconds, forwards


def run(binary, tokenize_bin, gguf, prompt, gen_length, block_length, steps, threads, seed=0,
        extra=(), prompt_ids=None, eos_marker=None):
    if prompt_ids is None:
        prompt_ids = tokenize(tokenize_bin, gguf, prompt)
    canvas, cli_steps, same = plan(len(prompt_ids), gen_length, block_length, steps)
    cmd = cli_command(binary, gguf, prompt, canvas, cli_steps, block_length, threads, seed, extra)
    for attempt in range(ATTEMPTS):
        # bytes, not text mode: universal newlines would turn the progress bar's \r into \n
        r = subprocess.run(cmd, capture_output=True)
        out = (r.stdout + r.stderr).decode("utf-8", errors="replace")
        if r.returncode != 0:
            raise RunError(f"llama-diffusion-cli exited {r.returncode}:\n{out[-2000:]}")
        try:
            text, seconds, forwards = parse_output(out)
            break
        except LostOutput:
            if attempt == ATTEMPTS - 1:
                raise
    full_text = text
    eos = bool(eos_marker) and eos_marker in text
    if eos:
        text = text[:text.index(eos_marker)]
    return {"prompt_ids": prompt_ids, "text": text, "full_text": full_text, "eos": eos, "forwards": forwards, "seconds": seconds,
            "gen_tokens": canvas - len(prompt_ids), "canvas": canvas, "steps": cli_steps,
            "same_canvas": same, "attempts": attempt + 1, "command": cmd}


def main():
    sys.path.insert(0, HERE)
    import build
    ap = argparse.ArgumentParser(description=__doc__, usage="%(prog)s MODEL.gguf --prompt TEXT "
                                 "[options] [-- EXTRA llama-diffusion-cli ARGS]",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.extra = extra
    import convert
    try:
        info = build.ensure_built()
        out = run(info["binary"], info["tokenize"], args.gguf, args.prompt, args.gen_length,
                  args.block_length, args.steps, args.threads, args.seed, args.extra,
                  eos_marker=convert.EOS_MARKER)
    except (build.Skipped, RunError) as e:
        print(f"llama.cpp: skipped: {e}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(out))
    else:
        print(f"prompt ({len(out['prompt_ids'])} ids): {out['prompt_ids']}")
        print(f"text (to EOS): {out['text']!r}")
        print(f"full text: {out['full_text']!r}")
        print(f"canvas {out['canvas']} (same as dlm: {out['same_canvas']}), steps {out['steps']}, "
              f"forwards {out['forwards']}, seconds {out['seconds']:.4f}, "
              f"{out['gen_tokens'] / out['seconds']:.1f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
