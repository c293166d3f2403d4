#!/usr/bin/env python3
"""Convert a LLaDA checkpoint directory to GGUF for llama.cpp with the vendored converter.

    bench/llama_cpp/convert.py CHECKPOINT [-o model.gguf] [--outtype f32|bf16|q8_0|q4_k_m]
                               [--tree DIR]

Uses `convert_hf_to_gguf.py` from the llama.cpp tree that bench/llama_cpp/build.py unpacked
(it imports `gguf` from the tree's gguf-py; the PyPI `gguf` package is the same code).
q4_k_m is the f32 GGUF quantized by llama.cpp's own `llama-quantize ... Q4_K_M` (built by
build.py), as llama.cpp's users make it. The output is cached under $DLM_BENCH_CACHE/gguf/<key>/model-<outtype>.gguf, where the key
hashes the checkpoint's files and this script's settings; the path is printed.

What the converter needs that our checkpoints do not provide is prepared in a staging
directory beside the output (the checkpoint itself is never modified):

  * tokenizer_config.json: the LLaDA converter loads the vocabulary through
    transformers.AutoTokenizer, which cannot resolve `model_type: llada` without remote code;
    the staging file names PreTrainedTokenizerFast (reads tokenizer.json as is) and carries
    a pass-through chat template (see below).
  * embedding padding: our LLaDA checkpoints pad the embedding and LM head to
    `embedding_size` > `vocab_size` rows (like OLMo); llama.cpp requires token_embd/output to
    have exactly n_vocab rows, so the staged safetensors keep the first vocab_size rows.  The
    dropped rows are never read (ids < vocab_size) and their logits are dropped by the
    reference too, so this is exact.  Checkpoints without padding are symlinked.
  * BPE pre-tokenizer: the converter identifies the pre-tokenizer by a hash of the token ids
    of a fixed text, which only matches the published tokenizers it lists.  Our tokenizers
    are trained locally, so when the hash is unknown this script reads the Split regex from
    tokenizer.json and names the llama.cpp pre-tokenizer that implements the same regex:
    the Llama 3 pattern -> "llama-bpe", the Qwen2 pattern -> "qwen2", a plain ByteLevel
    (GPT-2 regex) -> "gpt-2".  Any other pattern is an error (no guessing).
  * BOS: the LLaDA converter always sets tokenizer.ggml.add_bos_token = true; this script
    sets it to what tokenizer.json's post-processor does (encode "a", look for BOS first).
  * EOS made visible: llama-diffusion-cli prints only text, without special tokens, and does
    not stop at EOS, so where it put EOS would be invisible.  The EOS token (eos_token_id) is
    written as a USER_DEFINED token with the text "<dlm-eos>" (renamed, because llama.cpp turns
    a token spelled <|endoftext|> back into a control token), so the CLI prints it and run.py
    cuts the text there, like the reference's output that ends at EOS.  Token ids, the EOS id
    and the computation are unchanged; only a prompt that spells the EOS text literally would
    tokenise differently (the bench compares prompt ids and says so).
  * chat template: llama-diffusion-cli always formats the prompt through the model's chat
    template and falls back to ChatML when the GGUF has none; the GGUF gets
    `{% for m in messages %}{{ m['content'] }}{% endfor %}`, so the raw prompt is tokenised
    exactly as `tokenizers` does (plus BOS as above).

No quantisation: f32 (default, the reference computes in f32) or bf16.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import build  # noqa: E402

FORMAT_VERSION = 2  # bump when the staging or the driver changes what the GGUF holds
EOS_MARKER = "<dlm-eos>"
PASSTHROUGH_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_BY_PATTERN = {LLAMA3_PATTERN: "llama-bpe", QWEN2_PATTERN: "qwen2"}


class ConvertError(Exception):
    pass


def pre_tokenizer_name(tokenizer_json):
    """llama.cpp's name for the BPE pre-tokenizer whose regex this tokenizer.json uses."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    splits = [p for p in parts if p.get("type") == "Split"]
    levels = [p for p in parts if p.get("type") == "ByteLevel"]
    if splits:
        pattern = splits[0].get("pattern", {}).get("Regex")
        if len(splits) == 1 and pattern in PRE_BY_PATTERN and all(
                not b.get("use_regex", True) for b in levels):
            return PRE_BY_PATTERN[pattern]
        raise ConvertError(f"no llama.cpp pre-tokenizer known for Split regex {pattern!r}")
    if len(levels) == 1 and levels[0].get("use_regex", True):
        return "gpt-2"
    raise ConvertError(f"no llama.cpp pre-tokenizer known for {json.dumps(pre)[:200]}")


def _files_key(ckpt, extra):
    h = hashlib.sha256(json.dumps(extra, sort_keys=True).encode())
    for name in sorted(os.listdir(ckpt)):
        path = os.path.join(ckpt, name)
        if os.path.isfile(path) and name.endswith((".json", ".safetensors")):
            st = os.stat(path)
            h.update(f"{name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


def stage(ckpt, staging):
    """Writes the converter's input directory (see the module docstring); returns facts."""
    from tokenizers import Tokenizer
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    if "LLaDAModelLM" not in cfg.get("architectures", []):
        raise ConvertError(f"{ckpt}: architectures {cfg.get('architectures')} is not LLaDAModelLM")
    if cfg.get("mask_token_id") is None:
        raise ConvertError(f"{ckpt}: config.json has no mask_token_id")
    with open(os.path.join(ckpt, "tokenizer.json")) as f:
        tj = json.load(f)
    tok = Tokenizer.from_file(os.path.join(ckpt, "tokenizer.json"))
    vocab = int(cfg["vocab_size"])
    if tok.get_vocab_size() > vocab:
        raise ConvertError(f"tokenizer has {tok.get_vocab_size()} tokens > vocab_size {vocab}")
    pre = pre_tokenizer_name(tj)
    bos_id = cfg.get("bos_token_id")
    add_bos = bos_id is not None and tok.encode("a").ids[:1] == [bos_id]

    if os.path.exists(staging):
        shutil.rmtree(staging)
    os.makedirs(staging)
    shutil.copy(os.path.join(ckpt, "config.json"), staging)
    shutil.copy(os.path.join(ckpt, "tokenizer.json"), staging)

    def tok_str(i):
        return None if i is None else tok.id_to_token(int(i))

    tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": PASSTHROUGH_TEMPLATE,
            "model_max_length": int(cfg.get("max_sequence_length", 4096))}
    for key in ("bos", "eos", "pad", "mask"):
        s = tok_str(cfg.get(f"{key}_token_id"))
        if s is not None:
            tcfg[f"{key}_token"] = s
    with open(os.path.join(staging, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)

    emb = int(cfg.get("embedding_size") or vocab)
    weights = sorted(n for n in os.listdir(ckpt) if n.endswith(".safetensors"))
    if not weights:
        raise ConvertError(f"{ckpt}: no *.safetensors")
    if emb == vocab:
        for name in weights + [n for n in os.listdir(ckpt) if n.endswith(".safetensors.index.json")]:
            os.symlink(os.path.abspath(os.path.join(ckpt, name)), os.path.join(staging, name))
    else:
        from safetensors.torch import load_file, save_file
        tensors = {}
        for name in weights:
            tensors.update(load_file(os.path.join(ckpt, name)))
        for name in ("model.transformer.wte.weight", "model.transformer.ff_out.weight"):
            if name in tensors and tensors[name].shape[0] == emb:
                tensors[name] = tensors[name][:vocab].contiguous()
        save_file(tensors, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
    eos_id = cfg.get("eos_token_id")
    return {"pre_tokenizer": pre, "add_bos": add_bos, "vocab_size": vocab,
            "eos_token_id": eos_id, "eos_marker": EOS_MARKER if eos_id is not None else None,
            "embedding_size": emb, "mask_token_id": cfg["mask_token_id"]}


# Runs in a subprocess with the llama.cpp tree on sys.path.
DRIVER = f"MARKER = {EOS_MARKER!r}\n" + r"""
import sys, json
tree, pre, add_bos, eos = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
sys.path.insert(0, tree)
sys.path.insert(1, tree + "/gguf-py")
import torch
# The converter names dtypes of torch >= 2.1 in lookup tables; torch 1.13 (the project's venv)
# lacks them.  Unique placeholders keep those tables importable; our checkpoints (f32/bf16)
# never hold such tensors, so the placeholders are never looked up.
for _name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"):
    if not hasattr(torch, _name):
        setattr(torch, _name, type("missing_torch_dtype_" + _name, (), {})())
import gguf
from conversion import base
orig_pre = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return orig_pre(self, tokenizer)
    except NotImplementedError:
        return pre
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
orig_bos = gguf.GGUFWriter.add_add_bos_token
seen = []
def add_add_bos_token(self, value):
    if not seen:
        seen.append(1)
        orig_bos(self, add_bos)
gguf.GGUFWriter.add_add_bos_token = add_add_bos_token
orig_list, orig_types = gguf.GGUFWriter.add_token_list, gguf.GGUFWriter.add_token_types
def add_token_list(self, tokens):
    tokens = list(tokens)
    if 0 <= eos < len(tokens):
        tokens[eos] = MARKER
    orig_list(self, tokens)
def add_token_types(self, types):
    types = list(types)
    if 0 <= eos < len(types):
        types[eos] = gguf.TokenType.USER_DEFINED
    orig_types(self, types)
gguf.GGUFWriter.add_token_list = add_token_list
gguf.GGUFWriter.add_token_types = add_token_types
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[5:]
import runpy
runpy.run_path(tree + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def quantize(ckpt, out, tree, cache, force):
    """The Q4_K_M GGUF: the f32 one through `llama-quantize` (cached beside it)."""
    source, facts = convert(ckpt, None, "f32", tree, cache, force)
    target = os.path.join(os.path.dirname(source), "model-q4_k_m.gguf")
    if force or not os.path.exists(target):
        info = build.ensure_built(cache=cache, quiet=True)
        log = os.path.join(os.path.dirname(source), "quantize.log")
        with open(log, "w") as f:
            r = subprocess.run([info["quantize"], source, target + ".tmp", "Q4_K_M"], stdout=f,
                               stderr=subprocess.STDOUT)
        if r.returncode != 0:
            with open(log) as f:
                tail = "".join(f.readlines()[-12:])
            raise ConvertError(f"llama-quantize failed (log {log}):\n{tail}")
        os.replace(target + ".tmp", target)
    facts = dict(facts, outtype="q4_k_m", gguf=target)
    if out:
        shutil.copy(target, out)
        target = out
    return target, facts


def convert(ckpt, out=None, outtype="f32", tree=None, cache=None, force=False):
    """Returns (path of the GGUF, facts dict).  Raises ConvertError or build.Skipped."""
    if outtype == "q4_k_m":
        return quantize(ckpt, out, tree, cache, force)
    ckpt = os.path.abspath(ckpt)
    if tree is None:
        tree = build.source_tree(cache=cache)
    key = _files_key(ckpt, {"outtype": outtype, "tree": tree, "v": FORMAT_VERSION})
    work = os.path.join(build.cache_root(cache), "gguf", key)
    target = os.path.join(work, f"model-{outtype}.gguf")
    facts_path = os.path.join(work, "facts.json")
    if not force and os.path.exists(target) and os.path.exists(facts_path):
        with open(facts_path) as f:
            facts = json.load(f)
    else:
        os.makedirs(work, exist_ok=True)
        facts = stage(ckpt, os.path.join(work, "staging"))
        log = os.path.join(work, "convert.log")
        with open(log, "w") as f:
            r = subprocess.run([sys.executable, "-c", DRIVER, tree, facts["pre_tokenizer"],
                                "1" if facts["add_bos"] else "0",
                                str(-1 if facts["eos_token_id"] is None else facts["eos_token_id"]),
                                os.path.join(work, "staging"), "--outfile", target + ".tmp",
                                "--outtype", outtype, "--model-name",
                                os.path.basename(ckpt.rstrip("/"))], stdout=f, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            with open(log) as f:
                tail = "".join(f.readlines()[-12:])
            raise ConvertError(f"convert_hf_to_gguf.py failed (log {log}):\n{tail}")
        os.replace(target + ".tmp", target)
        shutil.rmtree(os.path.join(work, "staging"), ignore_errors=True)
        facts.update({"checkpoint": ckpt, "outtype": outtype, "gguf": target})
        with open(facts_path, "w") as f:
            json.dump(facts, f, indent=2)
    if out:
        shutil.copy(target, out)
        target = out
    return target, facts


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("-o", "--out", help="copy the GGUF here (default: print the cached path)")
    ap.add_argument("--outtype", default="f32", choices=["f32", "bf16", "q8_0", "q4_k_m"])
    ap.add_argument("--tree", help="llama.cpp source tree (default: the one build.py unpacks)")
    ap.add_argument("--cache", help="default $DLM_BENCH_CACHE or ~/.cache/dlm-bench")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    try:
        path, facts = convert(args.checkpoint, args.out, args.outtype, args.tree, args.cache,
                              args.force)
    except (ConvertError, build.Skipped) as e:
        print(f"llama.cpp: skipped: {e}", file=sys.stderr)
        return 3
    print(path)
    print(f"pre-tokenizer {facts['pre_tokenizer']}, add_bos {facts['add_bos']}, vocab "
          f"{facts['vocab_size']} (embedding {facts['embedding_size']}), mask "
          f"{facts['mask_token_id']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
