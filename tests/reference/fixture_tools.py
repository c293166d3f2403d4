"""What the oracle-fixture scripts (autoregressive/, dflash/, diffusion_gemma/, llada2/, llada_moe/, sdar/
make_fixtures.py) share: hashes, array conversion, trace.json / trace.npz / replay/ writing, the independent
re-check, the tiny word-level tokenizer, the seeded Llama/Qwen weights and the directly written checkpoints,
refusing a fragile fixture, MANIFEST.json, and --check's comparison of a regenerated fixture with the committed one.

Runs in the reference venv (torch 2.15, transformers 5.23; see diffusion_gemma/README.md). The scripts import it
by putting this folder on sys.path. The plain-PyTorch references themselves import torch_blocks.py instead (no
transformers: ctest runs them in the repo .venv).
"""

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch

import transformers

WARNINGS = []   # --check's differences below the tolerances (printed, not failures)


# ------------------------------------------------------------------------------------------------------------
# Hashes, arrays, files


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def arr_sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def f32(t):
    return t.detach().float().cpu().numpy().astype(np.float32)


def i64(t):
    """A tensor (or list) as an int64 array (a copy)."""
    return np.array(t.detach().cpu().numpy() if torch.is_tensor(t) else t, dtype=np.int64)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def list_files(d, sort=True):
    """Files under d, relative ('replay/sample0_step_logits.npy'): sorted, or (sort=False) folder by folder, each
    folder's files sorted, d's own first."""
    out = []
    for root, dirs, files in os.walk(d):
        dirs.sort()
        out += [os.path.relpath(os.path.join(root, f), d) for f in sorted(files)]
    return sorted(out) if sort else out


def chmod_files(root):
    for dp, _, fs in os.walk(root):
        for f in fs:
            os.chmod(os.path.join(dp, f), 0o644)  # safetensors writes 0600


def versions(**others):
    return dict({"torch": torch.__version__, "transformers": transformers.__version__}, **others)


# ------------------------------------------------------------------------------------------------------------
# Making a fixture


def save_trace(d, trace, meta):
    """Writes d/trace.npz and records in meta every array's shape/dtype/hash and the sha256 of d's other files
    (meta itself, trace.json, is the caller's to write)."""
    np.savez_compressed(os.path.join(d, "trace.npz"), **trace)
    meta["arrays"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype), "sha256_16": arr_sha(v)}
                      for k, v in sorted(trace.items())}
    meta["files"] = {f: sha256(os.path.join(d, f)) for f in sorted(os.listdir(d))
                     if f not in ("trace.json", "trace.npz")}


def replay_arrays(trace, dtypes):
    """The trace arrays the C++ tests read (name -> the dtype written: plain .npy, no Python or zip needed at run
    time); refused where the conversion would change a value."""
    out = {}
    for name, dtype in dtypes.items():
        out[name] = np.asarray(trace[name]).astype(dtype)
        assert np.array_equal(out[name], trace[name]), name
    return out


def write_fixture_files(d, name, trace, meta, replay, verify_fixture):
    """d/trace.npz, d/replay/<name>.npy for each of `replay` (name -> array) and d/trace.json, written twice: the
    independent reference (verify_fixture) reads the first, and its verdict goes into the second."""
    save_trace(d, trace, meta)   # first: it hashes d's files, and replay/ is a folder
    os.makedirs(os.path.join(d, "replay"), exist_ok=True)
    for array_name, array in replay.items():
        np.save(os.path.join(d, "replay", array_name + ".npy"), array, allow_pickle=False)
    write_json(os.path.join(d, "trace.json"), meta)
    meta["reference_check"] = reference_check(name, verify_fixture, d)
    write_json(os.path.join(d, "trace.json"), meta)
    chmod_files(d)


def refuse_if_fragile(problems, gaps, gap_limits, runs, min_distinct_tokens=6):
    """Refuses the fixture (SystemExit) when a smallest decision gap is within its bound (gap_limits: (name, bound)
    pairs), a run is degenerate (fewer than min_distinct_tokens distinct tokens) or `problems` were found."""
    problems = list(problems)
    for name, lim in gap_limits:
        if gaps[name] <= lim:
            problems.append("min gap %s = %.3g <= %g" % (name, gaps[name], lim))
    for run in runs:
        if run["distinct_tokens"] < min_distinct_tokens:
            problems.append("%s: degenerate (%d distinct tokens)" % (run["name"], run["distinct_tokens"]))
    if problems:
        raise SystemExit("refusing the fixture:\n  " + "\n  ".join(problems))


def reference_check(name, verify_fixture, d):
    """The independent plain-PyTorch reference's verdict on fixture d: refuses the fixture when it disagrees,
    else its max differences (3 significant digits) for trace.json's reference_check."""
    errors, report = verify_fixture(d, verbose=False)
    if errors:
        raise SystemExit("%s: the independent reference disagrees:\n  %s" % (name, "\n  ".join(errors[:20])))
    return {k: float("%.3g" % v) for k, v in report.items()}


def word_level_tokenizer(vocab_size, special, bos=None, mask_token=None):
    """Word-level tokenizer: id i is 'w<i>' except the special tokens (name -> id); prepends <bos> when `bos` is
    an id; `mask_token` (a name in `special`) becomes the tokenizer's mask_token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    names = {v: k for k, v in special.items()}
    vocab = {names.get(i, "w%d" % i): i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", bos)])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    kw = dict(eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    if bos is not None:
        kw["bos_token"] = "<bos>"
    if mask_token is not None:
        kw["mask_token"] = mask_token
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kw)


def seeded_draws(seed):
    """normal(shape, std) and uniform(shape, lo, hi): new float32 tensors drawn in call order from one generator
    seeded with seed (a checkpoint's values depend on the order its tensors are drawn in)."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=g) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g)

    return normal, uniform


def write_checkpoint(d, spec, tensors, extra_json=None):
    """A checkpoint folder written directly: config.json (spec["config"]) and extra_json's files (file name ->
    object), model.safetensors (tensors) and the word-level tokenizer of spec["special"], spec["mask_token"] its
    mask token. Returns the tokenizer."""
    from safetensors.torch import save_file
    os.makedirs(d, exist_ok=True)
    for name, obj in dict({"config.json": spec["config"]}, **(extra_json or {})).items():
        write_json(os.path.join(d, name), obj)
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    tok = word_level_tokenizer(spec["config"]["vocab_size"], spec["special"], mask_token=spec["mask_token"])
    tok.save_pretrained(d)
    # transformers 4 writes special_tokens_map.json, 5 does not: removed, the files are the same with either
    for extra in ("special_tokens_map.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    return tok


def draw_prompt(spec, tok, vocab_size):
    """spec["prompt_len"] word ids drawn with seed spec["seed"] + 1, special tokens skipped, and their text (which
    the tokenizer must give back)."""
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    specials = set(spec["special"].values())
    prompt = []
    while len(prompt) < spec["prompt_len"]:
        i = int(torch.randint(0, vocab_size, (1,), generator=g))
        if i not in specials:
            prompt.append(i)
    text = " ".join("w%d" % i for i in prompt)
    assert tok(text)["input_ids"] == prompt and tok.mask_token_id == spec["special"][spec["mask_token"]]
    return prompt, text


@torch.no_grad()
def randomize_llama(model, seed, branch_gain=1.0, qk_gain=1.0, logit_gain=1.0, bias_gain=None,
                    final_norm="model.norm", router_gain=None):
    """Seeded random values for every parameter of a Llama/Qwen-style model (norm weights too): embeddings and
    head N(0, 1), q/k norms U(0.5, 1.5)·qk_gain (they set how sharp attention is), other norms U(0.5, 1.5),
    o_proj / down_proj N(0, branch_gain² / fan_in), other matrices N(0, 1 / fan_in), q/k/v biases
    N(0, bias_gain²) (when given); then the final norm (the module `final_norm`) times logit_gain.
    A Qwen3-MoE model (router_gain given) also has its experts as fused 3-D parameters:
    experts.gate_up_proj [E, 2I, H] N(0, 1 / H), experts.down_proj [E, H, I] N(0, branch_gain² / I), and the
    router mlp.gate [E, H] N(0, router_gain² / H) (router_gain sets how peaked routing is)."""
    g = torch.Generator().manual_seed(seed)

    def normal(t, std):
        t.copy_(torch.randn(t.shape, generator=g) * std)

    def uniform(t, lo, hi):
        t.copy_(lo + (hi - lo) * torch.rand(t.shape, generator=g))

    for name, p in model.named_parameters():
        if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
            normal(p, 1.0)
        elif name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
            uniform(p, 0.5 * qk_gain, 1.5 * qk_gain)
        elif name.endswith("norm.weight"):  # input/post_attention layernorms, final norm
            uniform(p, 0.5, 1.5)
        elif name.endswith("mlp.experts.gate_up_proj") and router_gain is not None:
            normal(p, 1.0 / math.sqrt(p.shape[2]))
        elif name.endswith("mlp.experts.down_proj") and router_gain is not None:
            normal(p, branch_gain / math.sqrt(p.shape[2]))
        elif name.endswith("mlp.gate.weight") and router_gain is not None:
            normal(p, router_gain / math.sqrt(p.shape[1]))
        elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            normal(p, branch_gain / math.sqrt(p.shape[1]))
        elif name.endswith(".weight") and p.dim() == 2:
            normal(p, 1.0 / math.sqrt(p.shape[1]))
        elif name.endswith("_proj.bias") and bias_gain is not None:  # Qwen2's q/k/v biases
            normal(p, bias_gain)
        else:
            raise AssertionError("unhandled parameter " + name)
    dict(model.named_modules())[final_norm].weight.mul_(logit_gain)


def write_manifest(root, made_by, extra_versions=None, sort=True, total_bytes=True):
    """root/MANIFEST.json: size and sha256 of every file of every fixture folder (list_files order), the total,
    and the versions that made them."""
    entries, total = {}, 0
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if os.path.isdir(d):
            entries[name] = {}
            for f in list_files(d, sort=sort):
                n = os.path.getsize(os.path.join(d, f))
                total += n
                entries[name][f] = {"bytes": n, "sha256": sha256(os.path.join(d, f))}
    manifest = {"made_by": made_by, "versions": versions(**(extra_versions or {}))}
    if total_bytes:
        manifest["total_bytes"] = total
    manifest["fixtures"] = entries
    write_json(os.path.join(root, "MANIFEST.json"), manifest)


# ------------------------------------------------------------------------------------------------------------
# Checking (--check)


def compare_arrays(what, x, y, errors):
    """Integer arrays bit-identical; float arrays with the same non-finite entries (-inf masks, NaN padding) and
    finite values within 1e-4 relative (a warning below that when not bitwise equal)."""
    if x.shape != y.shape or x.dtype != y.dtype:
        errors.append("%s shape/dtype %s %s != %s %s" % (what, x.shape, x.dtype, y.shape, y.dtype))
    elif x.dtype.kind == "f":
        if not np.array_equal(x, y, equal_nan=True):
            if not np.array_equal(np.isfinite(x), np.isfinite(y)):
                errors.append("%s: non-finite entries (-inf masks, NaN padding) differ" % what)
                return
            fin = np.isfinite(x)
            d = float(np.abs(x[fin].astype(np.float64) - y[fin]).max())
            (errors if d > 1e-4 * max(1.0, float(np.abs(x[fin]).max())) else WARNINGS).append(
                "%s not bitwise equal (max |diff| %.3g)" % (what, d))
    elif not np.array_equal(x, y):
        errors.append("%s differs" % what)


def compare_safetensors(what, a, b, errors, tolerance=None):
    """Tensors bit-identical; with a tolerance, a tensor off by at most tolerance · max(1, max |want|) is a
    warning (e.g. bf16-ulp noise of trained weights on another CPU)."""
    from safetensors.torch import load_file
    ta, tb = load_file(a), load_file(b)
    if sorted(ta) != sorted(tb):
        errors.append("%s: tensor names differ" % what)
    for k in ta:
        if k in tb and not (ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k])):
            if tolerance is None:
                errors.append("%s: %s differs" % (what, k))
                continue
            d = float((ta[k].float() - tb[k].float()).abs().max())
            (WARNINGS if d <= tolerance * max(1.0, float(ta[k].float().abs().max())) else errors).append(
                "%s: %s differs (max |diff| %.3g)" % (what, k, d))


def compare_dirs(want_dir, got_dir, errors, json_keys=(), compare_json=None, weights_tolerance=None,
                 handlers=None, name=None):
    """Compares a regenerated fixture folder with the committed one, appending to errors (and WARNINGS):
    the same files; .safetensors by compare_safetensors; .npz / .npy arrays by compare_arrays; trace.json's
    `json_keys` equal (and compare_json(name, want, got, errors) when given; other versions are a warning);
    other files byte for byte; subfolders alike, or by handlers[entry](name, want_path, got_path, errors)."""
    name = name or os.path.basename(want_dir)
    wf, gf = sorted(os.listdir(want_dir)), sorted(os.listdir(got_dir))
    if wf != gf:
        errors.append("%s: files %s != %s" % (name, wf, gf))
    for f in wf:
        a, b = os.path.join(want_dir, f), os.path.join(got_dir, f)
        if not os.path.exists(b):
            continue
        what = "%s/%s" % (name, f)
        if handlers and f in handlers:
            handlers[f](name, a, b, errors)
        elif os.path.isdir(a):
            compare_dirs(a, b, errors, json_keys, compare_json, weights_tolerance, handlers, what)
        elif f.endswith(".safetensors"):
            compare_safetensors(what, a, b, errors, weights_tolerance)
        elif f.endswith(".npz"):
            na, nb = np.load(a), np.load(b)
            if sorted(na.files) != sorted(nb.files):
                errors.append("%s: arrays %s != %s" % (what, sorted(na.files), sorted(nb.files)))
            for k in na.files:
                if k in nb.files:
                    compare_arrays("%s: %s" % (what, k), na[k], nb[k], errors)
        elif f.endswith(".npy"):
            compare_arrays(what, np.load(a), np.load(b), errors)
        elif f == "trace.json":
            ja, jb = json.load(open(a)), json.load(open(b))
            for key in json_keys:
                if ja.get(key) != jb.get(key):
                    errors.append("%s: %s differs" % (what, key))
            if compare_json:
                compare_json(name, ja, jb, errors)
            if ja.get("versions") != jb.get("versions"):
                WARNINGS.append("%s: made with %s, checked with %s" % (name, ja.get("versions"), jb.get("versions")))
        elif open(a, "rb").read() != open(b, "rb").read():
            errors.append("%s differs" % what)


def check_one_fixture(fixtures, name, make_fixture, json_keys):
    """--check of a script with one fixture: make_fixture(out_dir) into a temp dir, compared with fixtures/<name>
    by compare_dirs (trace.json's json_keys equal); the exit code."""
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        got = os.path.join(tmp, name)
        make_fixture(got)
        compare_dirs(os.path.join(fixtures, name), got, errors, json_keys=json_keys)
    return check_report(errors, " (1 fixture)")


def check_report(errors, what=""):
    """Prints --check's warnings, mismatches and verdict; the exit code."""
    for w in WARNINGS:
        print("warning: " + w)
    for e in errors:
        print("MISMATCH: " + e)
    print("check: %s%s" % ("FAILED" if errors else "OK", what))
    return 1 if errors else 0


# ------------------------------------------------------------------------------------------------------------
# main()


def parse_args(doc, fixtures=None):
    """--check; with `fixtures` (the default output folder) also --out and --only (one fixture per spec)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with fixtures/")
    if fixtures is not None:
        ap.add_argument("--out", default=fixtures, help="output directory (default: fixtures/ next to this script)")
        ap.add_argument("--only", action="append", help="only this fixture (repeatable)")
    return ap.parse_args()


def setup(torch_version, transformers_series, **others):
    """Warns when not running the versions the fixtures were made with (others: name -> (made with, running),
    compared exactly); quiets transformers' logging."""
    made = [("torch", torch_version, torch.__version__, torch.__version__.startswith(torch_version)),
            ("transformers", transformers_series + "x", transformers.__version__,
             transformers.__version__.startswith(transformers_series))]
    made += [(k, want, have, want == have) for k, (want, have) in others.items()]
    if not all(ok for *_, ok in made):
        print("warning: made for %s, running %s" % (" / ".join("%s %s" % (k, want) for k, want, _, _ in made),
                                                     " / ".join("%s %s" % (k, have) for k, _, have, _ in made)),
              file=sys.stderr)
    transformers.logging.set_verbosity_error()


def run_per_fixture(args, specs, fixtures, make_fixture, compare, summary, manifest):
    """main() of a script that makes one fixture per spec: make_fixture(spec, out_dir) -> trace.json's meta;
    --check makes each into a temp dir and compares it with fixtures/<name> (compare(want, got, errors)); else
    writes them into args.out, printing summary(spec, meta) for each, then manifest(args.out)."""
    specs = [s for s in specs if not args.only or s["name"] in args.only]
    if args.check:
        errors = []
        with tempfile.TemporaryDirectory() as tmp:
            for spec in specs:
                make_fixture(spec, os.path.join(tmp, spec["name"]))
                compare(os.path.join(fixtures, spec["name"]), os.path.join(tmp, spec["name"]), errors)
        return check_report(errors, " (%d fixtures)" % len(specs))
    os.makedirs(args.out, exist_ok=True)
    for spec in specs:
        print(summary(spec, make_fixture(spec, os.path.join(args.out, spec["name"]))))
    manifest(args.out)
    return 0
