#!/usr/bin/env python3
"""Conformance test: dlm's tokenizer against `tokenizers` on WordLevel tokenizer.json files.

Checks the word-level tokenizers of the tiny DiffusionGemma fixtures
(tests/reference/diffusion_gemma/fixtures/*/tokenizer.json: WordLevel, WhitespaceSplit, the
WordPiece decoder, a <bos> template) and WordLevel tokenizers trained here with WordLevelTrainer:
with the WhitespaceSplit and the Whitespace (\\w+|[^\\w\\s]+) pre-tokenizers, a Sequence of both
after NFC, the WordPiece decoder with and without cleanup and with another prefix, continuation
("##") and cleanup-triggering tokens ("n't", "'s", ".", "do not") added to the vocabulary, and
added tokens with lstrip / rstrip / single_word / normalized. The text is the sample set of
check_tokenizer_matches_hf.py (source files, every kind of white space, many scripts, special
tokens inside words, random mixtures) plus the fixtures' "w<i>" words. `dlm-tokenize` must give
the same ids as `Tokenizer.encode` (with and without special tokens) and the same text as
`Tokenizer.decode` (with and without skipping special tokens), also for random id sequences.
Exits non-zero after printing the differing samples. About 10 s.

    check_wordlevel_matches_hf.py --tool build/bin/dlm-tokenize [--keep DIR]
"""

import argparse
import glob
import json
import os
import random
import sys
import tempfile

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
sys.path.insert(0, HERE)
from check_tokenizer_matches_hf import (EXTRA_ADDED_TOKENS, build_samples,  # noqa: E402
                                        check_decoding, describe_encode, report_mismatches,
                                        run_tool)
from train_tokenizer import default_corpus  # noqa: E402

SEED = 20250601
MIN_TEXT_BYTES = 100_000
VOCAB_SIZE = 6000
SPECIAL_TOKENS = ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Tokens the WordPiece decoder treats specially: continuations (prefix removed, no space) and the
# ones its cleanup glues to the previous word.
DECODER_TOKENS = ["##ing", "##s", "##", "####", "#", "@@ed", "@@", ".", "?", "!", ",", "'",
                  "n't", "'m", "'s", "'ve", "'re", "do", "not", "do not", "x do not y", "' ",
                  " ' x", "a . b", "don't"]


def fixture_tokenizers():
    pattern = os.path.join(REPO, "tests", "reference", "diffusion_gemma", "fixtures", "*",
                           "tokenizer.json")
    paths = sorted(glob.glob(pattern))
    if not paths:
        sys.exit(f"FAIL: no fixture tokenizers match {pattern}")
    return [("fixture-" + os.path.basename(os.path.dirname(p)), p) for p in paths]


def train_word_level(path, pre_tokenizer, decoder, normalizer=None):
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    trainer = trainers.WordLevelTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS)
    tokenizer.train_from_iterator(default_corpus(), trainer=trainer)
    tokenizer.decoder = decoder
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer.save(path)
    # Decoder-relevant tokens go into the model's vocabulary itself, after the trained words.
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    vocab = config["model"]["vocab"]
    for token in DECODER_TOKENS:
        vocab.setdefault(token, max(vocab.values()) + 1)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle, ensure_ascii=False)
    return path


def make_variants(workdir):
    variants = fixture_tokenizers()
    variants.append(("wordlevel-whitespace-split", train_word_level(
        os.path.join(workdir, "whitespace-split.json"), pre_tokenizers.WhitespaceSplit(),
        decoders.WordPiece(prefix="##", cleanup=True))))
    variants.append(("wordlevel-whitespace", train_word_level(
        os.path.join(workdir, "whitespace.json"), pre_tokenizers.Whitespace(),
        decoders.WordPiece(prefix="##", cleanup=False))))
    path = train_word_level(
        os.path.join(workdir, "sequence.json"),
        pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Whitespace()]),
        decoders.WordPiece(prefix="@@", cleanup=True), normalizer=normalizers.NFC())
    tokenizer = Tokenizer.from_file(path)
    for content, special, lstrip, rstrip, single_word, normalized in EXTRA_ADDED_TOKENS:
        token = AddedToken(content, special=special, lstrip=lstrip, rstrip=rstrip,
                           single_word=single_word, normalized=normalized)
        (tokenizer.add_special_tokens if special else tokenizer.add_tokens)([token])
    tokenizer.save(path)
    variants.append(("wordlevel-sequence-added-tokens", path))
    return variants


def word_samples(rng, hf):
    """Text made of the vocabulary's own words, so that most words are known, with some unknown
    ones, every kind of white space between them and the decoder tokens."""
    vocab = sorted(token for token in hf.get_vocab(with_added_tokens=False) if token.strip())
    spaces = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\xa0", "\u2009", "\u2028",
              "\x85", "\u180e", "\u200b"]
    samples = []
    for _ in range(400):
        words = []
        for _ in range(rng.randint(1, 30)):
            roll = rng.random()
            if roll < 0.75:
                words.append(rng.choice(vocab))
            elif roll < 0.85:
                words.append(rng.choice(DECODER_TOKENS))
            else:
                words.append(rng.choice(vocab) + rng.choice(["x", "!", "\u00e9", "##"]))
            words.append(rng.choice(spaces))
        samples.append("".join(words))
    return samples


def check_variant(tool, name, path, rng):
    hf = Tokenizer.from_file(path)
    added = sorted(t.content for t in hf.get_added_tokens_decoder().values())
    samples = build_samples(rng, added) + word_samples(rng, hf)
    text_bytes = sum(len(s.encode()) for s in samples)
    if text_bytes < MIN_TEXT_BYTES:
        sys.exit(f"FAIL: only {text_bytes} bytes of test text (want {MIN_TEXT_BYTES})")
    totals = {"bytes": text_bytes, "ids": 0, "decoded_chars": 0}
    failures = 0
    for add_special in (True, False):
        expected = [e.ids for e in hf.encode_batch(samples, add_special_tokens=add_special)]
        actual = run_tool(tool, path, "--encode-jsonl", [json.dumps(s) for s in samples],
                          () if add_special else ("--no-special-tokens",))
        failures += report_mismatches(f"{name} encode add_special_tokens={add_special}",
                                      samples, expected, actual, describe_encode(hf))
        totals["ids"] += sum(len(ids) for ids in expected)

    id_lists = [e.ids for e in hf.encode_batch(samples)]
    vocab_size = hf.get_vocab_size()
    decoder_ids = [hf.token_to_id(t) for t in DECODER_TOKENS if hf.token_to_id(t) is not None]
    id_lists += [[rng.randrange(vocab_size) for _ in range(rng.randint(1, 40))]
                 for _ in range(1000)]
    # Mostly decoder tokens: continuations first, in the middle and in runs; cleanup patterns.
    # (The fixtures have none.)
    id_lists += [] if not decoder_ids else [[rng.choice(decoder_ids) if rng.random() < 0.7 else rng.randrange(vocab_size)
                  for _ in range(rng.randint(1, 12))] for _ in range(1000)]
    failures += check_decoding(tool, name, path, hf, id_lists, totals)
    return failures, totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", required=True, help="path to dlm-tokenize")
    parser.add_argument("--keep", help="write the tokenizers here instead of a temporary dir")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temporary:
        workdir = args.keep or temporary
        os.makedirs(workdir, exist_ok=True)
        failures = 0
        for name, path in make_variants(workdir):
            variant_failures, totals = check_variant(args.tool, name, path, random.Random(SEED))
            failures += variant_failures
            print(f"{name}: {totals['bytes']} bytes encoded twice (with and without special "
                  f"tokens), {totals['ids']} ids compared, {totals['decoded_chars']} decoded "
                  f"characters compared: {'OK' if not variant_failures else 'MISMATCH'}")
    if failures:
        sys.exit(1)
    print("wordlevel_tokenizer_matches_hf: all outputs identical")


if __name__ == "__main__":
    main()
