#!/usr/bin/env python3
"""Train a small SentencePiece-style BPE tokenizer shaped like Gemma's or Llama 2's tokenizer.json.

The Hugging Face conversions of SentencePiece models (Gemma, Llama 2, Mistral) are BPE models
with byte fallback: spaces are written as '▁', a character missing from the vocabulary becomes
the <0xNN> tokens of its UTF-8 bytes, and decoding turns '▁' back into spaces. This trains one
with the `tokenizers` library, with the layout of the real files but a small vocabulary:

  gemma   normalizer Replace(' ' -> '▁'), no pre-tokenizer, decoder
          Sequence[Replace('▁' -> ' '), ByteFallback, Fuse], "<bos> $A";
          ids: <pad> <eos> <bos> <unk>, the 256 byte tokens, then the learned ones
  llama2  normalizer Sequence[Prepend('▁'), Replace(' ' -> '▁')], no pre-tokenizer, decoder
          Sequence[Replace('▁' -> ' '), ByteFallback, Fuse, Strip(' ', 1, 0)], "<s> $A";
          ids: <unk> <s> </s>, the 256 byte tokens, then the learned ones

Both have unk_token "<unk>", fuse_unk and byte_fallback. The alphabet is limited so that many
characters (CJK, emoji, control characters, most accented letters; for llama2 also the newline)
have no token and go through byte fallback, as rare characters do in the real vocabularies.
Training uses the same Debian texts as train_tokenizer.py and is deterministic; it takes a few
seconds.

Library use:

    from train_sentencepiece_tokenizer import train_sentencepiece_tokenizer
    train_sentencepiece_tokenizer("out/tokenizer.json", vocab_size=2048, style="gemma")

Command line:

    python train_sentencepiece_tokenizer.py OUT.json [--vocab-size N] [--style gemma|llama2]
"""

import argparse
import json
import os
import sys

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_tokenizer import default_corpus  # noqa: E402

STYLES = ("gemma", "llama2")
DEFAULT_VOCAB_SIZE = 2048
SPACE = "\u2581"  # '▁', SentencePiece's space
BYTE_TOKENS = [f"<0x{byte:02X}>" for byte in range(256)]
# The model's own special tokens, which take the first ids as in the real files.
MODEL_SPECIAL_TOKENS = {
    "gemma": ["<pad>", "<eos>", "<bos>", "<unk>"],
    "llama2": ["<unk>", "<s>", "</s>"],
}
BOS = {"gemma": "<bos>", "llama2": "<s>"}
# The characters the vocabulary has (training text is filtered to them): printable ASCII, a few
# accented letters, the newline for gemma. Everything else falls back to bytes. (The trainer's own
# limit_alphabet breaks ties between equally frequent characters differently from run to run.)
ALPHABET = set(chr(c) for c in range(0x20, 0x7f)) | set("\néèàçüöäßñ—’“”…°") | {SPACE}


def _training_texts(style, corpus_texts):
    """Lines of the corpus. Llama 2's vocabulary has no newline (it is <0x0A>), Gemma's has."""
    texts = []
    for text in corpus_texts:
        text = "".join(c for c in text if c in ALPHABET)
        lines = text.split("\n")
        if style == "gemma":
            texts += ["\n".join(lines[i:i + 4]) + "\n" for i in range(0, len(lines), 4)]
        else:
            texts += [line for line in lines if line]
    return texts


def _normalizer(style):
    replace = normalizers.Replace(" ", SPACE)
    if style == "gemma":
        return replace
    return normalizers.Sequence([normalizers.Prepend(SPACE), replace])


def _decoder_config(style):
    steps = [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
             {"type": "ByteFallback"}, {"type": "Fuse"}]
    if style == "llama2":
        steps.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"type": "Sequence", "decoders": steps}


def _template_config(bos, bos_id):
    return {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": bos, "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
    }


def train_sentencepiece_tokenizer(out_path, vocab_size=DEFAULT_VOCAB_SIZE, style="gemma",
                                  corpus_texts=None):
    """Trains a Gemma- or Llama-2-style byte-fallback BPE tokenizer and writes it to `out_path`.

    vocab_size counts the model's special tokens, the 256 byte tokens and the learned tokens.
    Returns the trained tokenizers.Tokenizer (loaded back from the written file).
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, not {style!r}")
    specials = MODEL_SPECIAL_TOKENS[style]
    learned_size = vocab_size - len(BYTE_TOKENS)
    if learned_size <= len(specials) + len(ALPHABET):
        raise ValueError(f"vocab_size {vocab_size} leaves no room for merges")

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = _normalizer(style)
    # Training only: words are runs of non-spaces with one '▁' in front, and runs of '▁' before
    # such a word, so that merges form within words and within white space as SentencePiece's do.
    tokenizer.pre_tokenizer = pre_tokenizers.Split(
        Regex(f"{SPACE}+(?={SPACE}[^{SPACE}])|{SPACE}?[^{SPACE}]+|{SPACE}+"), behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=learned_size, min_frequency=2, show_progress=False,
                                  special_tokens=specials)
    corpus = list(corpus_texts) if corpus_texts is not None else default_corpus()
    texts = _training_texts(style, corpus)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))

    config = json.loads(tokenizer.to_str())
    learned = sorted(config["model"]["vocab"].items(), key=lambda item: item[1])
    order = specials + BYTE_TOKENS + [token for token, _ in learned
                                      if token not in specials and token not in BYTE_TOKENS]
    config["model"].update({
        "vocab": {token: index for index, token in enumerate(order)},
        "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
        "dropout": None,
    })
    id_of = config["model"]["vocab"]
    for entry in config["added_tokens"]:
        entry["id"] = id_of[entry["content"]]
    config["pre_tokenizer"] = None
    config["decoder"] = _decoder_config(style)
    config["post_processor"] = _template_config(BOS[style], id_of[BOS[style]])

    text = json.dumps(config, ensure_ascii=False, indent=2)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Tokenizer.from_str(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_path")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    parser.add_argument("--style", choices=STYLES, default="gemma")
    args = parser.parse_args()
    tokenizer = train_sentencepiece_tokenizer(args.out_path, vocab_size=args.vocab_size,
                                              style=args.style)
    print(f"{args.out_path}: {args.style} style, {tokenizer.get_vocab_size()} ids")


if __name__ == "__main__":
    main()
