#!/usr/bin/env python3
"""Conformance test: dlm's tokenizer against `tokenizers` on SentencePiece-converted BPE files.

Trains a small Gemma-style and a small Llama-2-style tokenizer (BPE with byte fallback, '▁' for
spaces; tests/models/train_sentencepiece_tokenizer.py) and derives variants from them that use
the other spellings of the same components: a Metaspace pre-tokenizer with each prepend_scheme
(split or not, the older add_prefix_space spelling), the Metaspace decoder, Strip, NFC and a
regex Replace in a normalizer Sequence, byte tokens missing from the vocabulary (so characters
fall back to <unk>, fused or not), and added tokens with lstrip / rstrip / single_word /
normalized. It generates over 1 MB of text deterministically (ASCII prose and code, CJK, emoji,
runs of spaces, tabs and newlines, control characters, characters from every plane that the
small vocabularies lack, '▁' and "<0x41>" written literally, special tokens inside words) and
checks that `dlm-tokenize` gives the same ids as `Tokenizer.encode` (with special tokens, and
without them on part of the text) and the same text as `Tokenizer.decode` (with and without
skipping special tokens), also for random id sequences full of <0xNN> tokens that form valid,
cut or invalid UTF-8. Exits non-zero after printing the differing samples. About 30 s.

    check_sentencepiece_matches_hf.py --tool build/bin/dlm-tokenize [--keep DIR]
"""

import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

from tokenizers import AddedToken, Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
sys.path.insert(0, HERE)
from check_tokenizer_matches_hf import (check_decoding, check_speed,  # noqa: E402
                                        describe_encode, report_mismatches, run_tool)
from train_sentencepiece_tokenizer import SPACE, train_sentencepiece_tokenizer  # noqa: E402

SEED = 20250312
MIN_TEXT_BYTES = 1_000_000
SAMPLES_WITHOUT_SPECIAL_TOKENS = 500
# Encoding the whole text as one input (one long BPE word for Gemma's layout, which has no
# pre-tokenizer), process start and loading included, must stay well under this.
ENCODE_SECONDS_LIMIT = 5.0

EXTRA_SPECIAL_TOKENS = ["<mask>", "<start_of_turn>", "<end_of_turn>"]
EXTRA_ADDED_TOKENS = [
    # (content, special, lstrip, rstrip, single_word, normalized)
    ("<mask>", True, True, False, False, False),
    ("[rs]", True, False, True, False, False),
    ("hello", False, False, False, True, True),
    ("good day", False, False, False, False, True),  # matched as "good▁day" after Replace
    ("\t\t", False, False, False, False, True),
    (SPACE * 2, False, False, False, False, False),  # raw match of a literal '▁▁'
]
# Everything any variant treats as an added token, written into the text.
ADDED_CONTENTS = sorted({"<bos>", "<eos>", "<pad>", "<unk>", "<s>", "</s>"}
                        | set(EXTRA_SPECIAL_TOKENS) | {t[0] for t in EXTRA_ADDED_TOKENS})

WORDS = ("the of and to in is was for on that with as by at from it an be this are which or "
         "have not had but were they his her their one all there been has when who more will "
         "would no if out so said what up its about into than them can only other new some "
         "could time these two may then do first any my now such like our over man me even most "
         "made after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still "
         "own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take "
         "tokenizer diffusion sentence piece fallback metaspace Gemma Llama Mistral hello good "
         "day").split()
EMOJI = ["\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f469\u200d\U0001f4bb",
         "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466", "\U0001f1e9\U0001f1ea",
         "\u2764\ufe0f", "\U0001f916", "\U0001f680\u2728", "\U0001fae0", "\u263a\ufe0f"]
WHITE_SPACE = [" ", "  ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\u3000",
               "\xa0", " \t ", "\x0b", "\x0c", "\u2028", "\u2009"]
CONTROL = [chr(c) for c in list(range(0x00, 0x20)) + [0x7f] + list(range(0x80, 0xa0))]
LITERALS = [SPACE, SPACE * 3, "<0x41>", "<0xE4><0xB8>", "<0x+A>", " " + SPACE + " ", "\u2581a"]


def rare_points():
    """Assigned code points from every plane in use, without combining marks (Hugging Face's
    NFC tables are older than ICU's and disagree on some recent marks) or surrogates."""
    return [c for c in range(0xa0, 0x3134f)
            if unicodedata.category(chr(c)) not in ("Cs", "Cn", "Co", "Mn", "Mc", "Me")
            and unicodedata.combining(chr(c)) == 0]


def prose(rng):
    sentences = []
    for _ in range(rng.randint(1, 4)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 16))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 10**rng.randint(1, 7))))
        sentence = " ".join(words)
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".!?,;:"))
    return " ".join(sentences)


def code(rng):
    lines = []
    for _ in range(rng.randint(1, 6)):
        indent = rng.choice(["", "    ", "        ", "\t", "\t\t", "  "])
        name = rng.choice(WORDS)
        lines.append(rng.choice([
            f"{indent}def {name}(x, y={rng.randint(0, 99)}):",
            f"{indent}return {name}[i] + {rng.random():.4f}",
            f"{indent}if ({name} != NULL) {{ {name}->next = 0; }}",
            f"{indent}# {prose(rng)}",
        ]))
    return "\n".join(lines) + rng.choice(["\n", "\n\n", ""])


def cjk(rng):
    blocks = [(0x4e00, 0x9fff), (0x3041, 0x3096), (0x30a1, 0x30fa), (0xac00, 0xd7a3)]
    out = []
    for _ in range(rng.randint(2, 40)):
        low, high = rng.choice(blocks)
        out.append(chr(rng.randint(low, high)))
        if rng.random() < 0.1:
            out.append(rng.choice("。、，！？「」 "))
    return "".join(out)


def emoji(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.5:
            out.append(rng.choice(EMOJI))
        else:
            low, high = rng.choice([(0x1f300, 0x1f5ff), (0x1f600, 0x1f64f), (0x1f680, 0x1f6ff),
                                    (0x1f900, 0x1f9ff), (0x1fa70, 0x1faff)])
            out.append(chr(rng.randint(low, high)))
        if rng.random() < 0.3:
            out.append(" ")
    return "".join(out)


def white_space(rng):
    return "".join(rng.choice(WHITE_SPACE) for _ in range(rng.randint(1, 6)))


def control(rng):
    return "".join(rng.choice(CONTROL) for _ in range(rng.randint(1, 5)))


def make_rare(points):
    def rare(rng):
        return "".join(chr(rng.choice(points)) + (" " if rng.random() < 0.15 else "")
                       for _ in range(rng.randint(1, 12)))
    return rare


def marks(rng):
    # Combining marks both NFC tables agree on: accents that compose and ones that do not.
    base = rng.choice("aeiouAEIOUnc")
    return base + "".join(rng.choice("\u0300\u0301\u0302\u0308\u0323\u0327\u0303")
                          for _ in range(rng.randint(1, 3)))


def added(rng):
    token = rng.choice(ADDED_CONTENTS)
    return rng.choice([token, f" {token} ", f"x{token}y", token[: max(1, len(token) // 2)],
                       f"  {token}\n", token + token])


def build_samples(rng):
    generators = [(prose, 30), (code, 10), (cjk, 10), (emoji, 6), (white_space, 8),
                  (control, 3), (make_rare(rare_points()), 8), (marks, 3), (added, 6),
                  (lambda r: r.choice(LITERALS), 2)]
    functions = [f for f, weight in generators for _ in range(weight)]

    def sample(max_segments):
        parts = [rng.choice(functions)(rng) for _ in range(rng.randint(1, max_segments))]
        if rng.random() < 0.2:  # white space at the very start matters to Prepend and Metaspace
            parts.insert(0, rng.choice([" ", "  ", "\t", "\n", SPACE]))
        joiner = rng.choice(["", " ", "", "\n"])
        return joiner.join(parts)

    samples, total = [], 0
    # Edge cases first, then many short samples, then a few long ones.
    samples += ["", " ", "  ", SPACE, " a", "a ", "\n", "<bos>", "<bos> hi", " <s>", "<s>",
                "hello", "hello world", "good day", " good day", "hello<mask>", "<mask>hello",
                "\t\thello", SPACE * 2 + "x", "<unk>" + SPACE, "\U0001f600", "\x00", "a" * 300]
    while total < MIN_TEXT_BYTES * 0.9:
        text = sample(8)
        samples.append(text)
        total += len(text.encode())
    for _ in range(4):
        text = "".join(sample(8) for _ in range(100))
        samples.append(text)
        total += len(text.encode())
    return samples


# --- Variants -----------------------------------------------------------------------------------

def _write(workdir, name, config):
    path = os.path.join(workdir, f"{name}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle, ensure_ascii=False)
    return name, path


def _with_added_tokens(workdir, name, path, tokens):
    tokenizer = Tokenizer.from_file(path)
    for content, special, lstrip, rstrip, single_word, normalized in tokens:
        token = AddedToken(content, special=special, lstrip=lstrip, rstrip=rstrip,
                           single_word=single_word, normalized=normalized)
        (tokenizer.add_special_tokens if special else tokenizer.add_tokens)([token])
    out = os.path.join(workdir, f"{name}.json")
    tokenizer.save(out)
    return name, out


def _without_tokens(config, removed):
    """The config with some vocabulary entries removed and the ids made contiguous again."""
    config = copy.deepcopy(config)
    vocab = sorted(config["model"]["vocab"].items(), key=lambda item: item[1])
    new_ids = {token: i for i, token in enumerate(t for t, _ in vocab if t not in removed)}
    config["model"]["vocab"] = new_ids
    config["model"]["merges"] = [m for m in config["model"]["merges"]
                                 if m[0] not in removed and m[1] not in removed]
    next_id = len(new_ids)
    for entry in config["added_tokens"]:
        if entry["content"] in new_ids:
            entry["id"] = new_ids[entry["content"]]
        else:
            entry["id"], next_id = next_id, next_id + 1
    return config


def _load(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def make_variants(workdir, vocab_size):
    variants = []
    base = {}
    for style in ("gemma", "llama2"):
        path = os.path.join(workdir, f"{style}-trained.json")
        train_sentencepiece_tokenizer(path, vocab_size=vocab_size, style=style)
        name, path = _with_added_tokens(
            workdir, style, path, [(t, True, False, False, False, False)
                                   for t in EXTRA_SPECIAL_TOKENS])
        variants.append((name, path))
        base[style] = _load(path)
        variants.append(_with_added_tokens(workdir, f"{style}-added-tokens", path,
                                           EXTRA_ADDED_TOKENS))

    # Characters whose bytes have no token fall back to <unk>: 4-byte characters (no <0xF0>),
    # most CJK (no <0xE4>..<0xE9>), one token per character without fuse_unk.
    config = _without_tokens(base["llama2"], {f"<0x{b:02X}>" for b in [0xF0, *range(0xE4, 0xEA)]})
    config["model"]["fuse_unk"] = False
    variants.append(_write(workdir, "llama2-missing-bytes", config))
    config["model"]["fuse_unk"] = True
    variants.append(_write(workdir, "llama2-missing-bytes-fused", config))

    # Newer Llama 2 / Mistral conversions: no normalizer, Metaspace prepending only at the start.
    config = copy.deepcopy(base["llama2"])
    config["normalizer"] = None
    config["pre_tokenizer"] = {"type": "Metaspace", "replacement": SPACE,
                               "prepend_scheme": "first", "split": False}
    name, path = _write(workdir, "metaspace-first", config)
    variants.append((name, path))
    variants.append(_with_added_tokens(workdir, "metaspace-first-added-tokens", path,
                                       EXTRA_ADDED_TOKENS))

    # The older spelling (add_prefix_space, prepend "always", split), the Metaspace decoder.
    config = copy.deepcopy(base["gemma"])
    config["normalizer"] = None
    config["pre_tokenizer"] = {"type": "Metaspace", "replacement": SPACE,
                               "add_prefix_space": True, "str_rep": SPACE}
    config["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
        {"type": "Fuse"}]}
    variants.append(_write(workdir, "metaspace-always-split", config))

    # Everything else the components allow: NFC and a regex Replace before Prepend, Split before
    # a Metaspace that never prepends, a Metaspace decoder after Fuse, Strip of two characters.
    config = copy.deepcopy(base["llama2"])
    config["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFC"},
        {"type": "Replace", "pattern": {"Regex": "\t+|\r\n"}, "content": SPACE * 2},
        {"type": "Prepend", "prepend": SPACE}]}
    config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}"}, "behavior": "Isolated",
         "invert": False},
        {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "never", "split": True}]}
    config["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "never", "split": True},
        {"type": "Strip", "content": " ", "start": 2, "stop": 0}]}
    variants.append(_write(workdir, "metaspace-never-nfc", config))
    config["pre_tokenizer"]["pretokenizers"][1]["prepend_scheme"] = "first"
    config["decoder"]["decoders"][2]["prepend_scheme"] = "first"
    variants.append(_write(workdir, "split-then-metaspace-first", config))
    return variants


# --- Checks -------------------------------------------------------------------------------------

def byte_heavy_id_lists(rng, hf, count):
    """Random id lists made mostly of <0xNN> runs: whole characters, cut characters, stray
    bytes, with ordinary, '▁' and special tokens between them."""
    vocab = hf.get_vocab()
    byte_ids = [vocab.get(f"<0x{b:02X}>") for b in range(256)]
    others = [vocab[t] for t in (SPACE, "<unk>", "a", "\n") if t in vocab]
    others += [i for t, i in vocab.items() if t in ADDED_CONTENTS]
    lists = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(1, 8)):
            kind = rng.random()
            if kind < 0.5:
                text = "".join(chr(rng.choice([rng.randint(0x80, 0x7ff), rng.randint(0x800, 0xffff),
                                               rng.randint(0x10000, 0x10ffff)]))
                               for _ in range(rng.randint(1, 3)))
                data = text.encode("utf-8", errors="surrogatepass")
                if rng.random() < 0.3:
                    data = data[: rng.randint(1, len(data))]
            elif kind < 0.7:
                data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            else:
                ids.append(rng.choice(others))
                continue
            ids += [byte_ids[b] for b in data if byte_ids[b] is not None]
        lists.append(ids or [rng.choice(others)])
    return lists


def check_variant(tool, name, path, samples, sample_lines, rng):
    hf = Tokenizer.from_file(path)
    totals = {"bytes": sum(len(s.encode()) for s in samples), "ids": 0, "decoded_chars": 0}
    failures = 0
    id_lists = []
    # Without special tokens only the template's <bos> differs: a part of the samples is enough.
    for add_special, count in ((True, len(samples)), (False, SAMPLES_WITHOUT_SPECIAL_TOKENS)):
        expected = [e.ids for e in hf.encode_batch(samples[:count],
                                                   add_special_tokens=add_special)]
        actual = run_tool(tool, path, "--encode-jsonl", sample_lines[:count],
                          () if add_special else ("--no-special-tokens",))
        failures += report_mismatches(f"{name} encode add_special_tokens={add_special}",
                                      samples[:count], expected, actual, describe_encode(hf))
        totals["ids"] += sum(len(ids) for ids in expected)
        if add_special:
            id_lists += expected

    vocab_size = hf.get_vocab_size()
    id_lists += [[rng.randrange(vocab_size) for _ in range(rng.randint(1, 40))]
                 for _ in range(1000)]
    id_lists += byte_heavy_id_lists(rng, hf, 2000)
    failures += check_decoding(tool, name, path, hf, id_lists, totals)
    return failures, totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", required=True, help="path to dlm-tokenize")
    parser.add_argument("--keep", help="write the tokenizers here instead of a temporary dir")
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--only", help="check only the variants whose name contains this")
    args = parser.parse_args()

    samples = build_samples(random.Random(SEED))
    text_bytes = sum(len(s.encode()) for s in samples)
    if text_bytes < MIN_TEXT_BYTES:
        sys.exit(f"FAIL: only {text_bytes} bytes of test text (want {MIN_TEXT_BYTES})")
    sample_lines = [json.dumps(s) for s in samples]
    with tempfile.TemporaryDirectory() as temporary:
        workdir = args.keep or temporary
        os.makedirs(workdir, exist_ok=True)
        variants = make_variants(workdir, args.vocab_size)
        failures = 0
        for name, path in variants:
            if args.only and args.only not in name:
                continue
            variant_failures, totals = check_variant(args.tool, name, path, samples,
                                                     sample_lines, random.Random(SEED))
            failures += variant_failures
            print(f"{name}: {len(samples)} samples, {totals['bytes']} bytes encoded, "
                  f"{totals['ids']} ids compared, {totals['decoded_chars']} decoded characters "
                  f"compared: {'OK' if not variant_failures else 'MISMATCH'}")
        whole = "".join(samples)
        for name, path in variants[:1] + [v for v in variants if v[0] == "llama2"]:
            expected = Tokenizer.from_file(path).encode(whole).ids
            actual = [int(t) for t in subprocess.run([args.tool, path, "--encode"],
                                                     input=whole.encode(),
                                                     capture_output=True).stdout.split()]
            if expected != actual:
                print(f"FAIL: {name}: the whole text as one input encodes differently")
                failures += 1
            if not check_speed(args.tool, path, whole, ENCODE_SECONDS_LIMIT):
                print(f"FAIL: encoding took longer than {ENCODE_SECONDS_LIMIT} s")
                failures += 1
    if failures:
        sys.exit(1)
    print("sentencepiece_tokenizer_matches_hf: all outputs identical")


if __name__ == "__main__":
    main()
