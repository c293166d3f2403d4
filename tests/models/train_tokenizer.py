#!/usr/bin/env python3
"""Train a small byte-level BPE tokenizer shaped like a real model family's tokenizer.json.

The tiny test checkpoints need a tokenizer whose *structure* matches the models dlm targets, so
that the runtime tokenizer is exercised on the same pre-tokenizer patterns, added tokens,
post-processor and decoder as the real files, only with a small vocabulary:

  llama3  Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=False), ignore_merges=True,
          BOS template (<|begin_of_text|> or <|startoftext|> when among the special tokens);
          also LLaDA's layout
  qwen2   NFC normalizer, Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=False); also Qwen3
          and Dream
  gpt2    ByteLevel(use_regex=True), i.e. the GPT-2 regex inside the ByteLevel pre-tokenizer

Training uses text every Debian machine has (Python stdlib sources, license texts) plus a
multilingual paragraph written here, and is deterministic: the same machine always produces the
same file. It takes a few seconds.

Library use (from tests/models/make_tiny_models.py):

    from train_tokenizer import train_bpe_tokenizer
    train_bpe_tokenizer("out/tokenizer.json", vocab_size=1024, style="qwen2")

Command line:

    python train_tokenizer.py OUT.json [--vocab-size N] [--style llama3|qwen2|gpt2]
                              [--special-token TOKEN ...]
"""

import argparse
import glob
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

# The published pre-tokenizer patterns (from the models' tokenizer.json files).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

STYLES = ("llama3", "qwen2", "gpt2")
DEFAULT_VOCAB_SIZE = 1024
DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|mdm_mask|>")
BOS_TOKENS = ("<|begin_of_text|>", "<|startoftext|>")

# About 2 MB: enough for merges across code, prose and the scripts below, small enough to train
# in a few seconds.
CORPUS_BYTE_BUDGET = 2_000_000
UNICODE_REPEATS = 40

# Written for this file: several scripts, accents (precomposed and combining), right-to-left
# text, emoji sequences, full-width forms and numbers, so that merges form outside ASCII too.
UNICODE_TEXT = """\
Grüße aus München! Die Straße ist schön, aber der Bäcker hat heute geschlossen.
Le cœur a ses raisons que la raison ne connaît point ; où est l'hôtel « Château » ?
¿Dónde está la estación? El niño comió piña y jalapeños en Córdoba.
Ça va très bien, merci — et toi ? Voilà déjà l'été.
Tiếng Việt có dấu: Người ta nói rằng học đi đôi với hành.
Ελληνικά: Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.
Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.
Українська: Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!
עברית: דג סקרן שט בים מאוכזב ולפתע מצא חברה.
العربية: نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر.
हिन्दी: ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले।
中文：我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧。
日本語：いろはにほへと　ちりぬるを。東京都の天気は晴れのち曇りです。カタカナもあります。
한국어: 다람쥐 헌 쳇바퀴에 타고파. 오늘 날씨가 정말 좋네요.
ภาษาไทย: เป็นมนุษย์สุดประเสริฐเลิศคุณค่า
Emoji: 👍🏽 🎉 👩‍💻 👨‍👩‍👧‍👦 🇩🇪 🇯🇵 ❤️ 🤖 🚀✨ 😀😃😄
Math: ∀x ∈ ℝ, x² ≥ 0; ∑ᵢ aᵢ ≤ ∞; π ≈ 3.14159; √2 ≠ ⅔.
Full width: ＡＢＣ１２３！ and half width ｶﾀｶﾅ.
Combining: e\u0301 a\u0300 o\u0308 n\u0303 (decomposed) versus é à ö ñ (precomposed).
Numbers: 1234567890, 3.14, 1,000,000, ٠١٢٣٤٥٦٧٨٩, ०१२३४५६७८९, ²³¹.
Contractions: I'm, you're, he's, we've, they'll, I'd, don't, CAN'T, WE'RE, It'S.
"""


def _read_text(path, limit):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", errors="ignore")
    except OSError:
        return ""


def default_corpus():
    """Texts to train on, in a fixed order: license texts, stdlib sources, Unicode prose."""
    paths = sorted(glob.glob("/usr/share/common-licenses/*"))
    paths += sorted(glob.glob("/usr/lib/python3.11/*.py"))
    texts, total = [], 0
    for path in paths:
        if total >= CORPUS_BYTE_BUDGET or not os.path.isfile(path):
            continue
        text = _read_text(path, 64_000)
        texts.append(text)
        total += len(text)
    texts.extend([UNICODE_TEXT] * UNICODE_REPEATS)
    return texts


def _pre_tokenizer(style):
    if style == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pattern = LLAMA3_PATTERN if style == "llama3" else QWEN2_PATTERN
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=style == "llama3",
                                 use_regex=False),
    ])


def _post_processor(style, tokenizer, special_tokens):
    byte_level = processors.ByteLevel(trim_offsets=False)
    bos = next((t for t in special_tokens if t in BOS_TOKENS), None)
    if style != "llama3" or bos is None:
        return byte_level
    template = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0",
        pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
        special_tokens=[(bos, tokenizer.token_to_id(bos))],
    )
    return processors.Sequence([byte_level, template])


def train_bpe_tokenizer(out_path, vocab_size=DEFAULT_VOCAB_SIZE,
                        special_tokens=DEFAULT_SPECIAL_TOKENS, style="llama3",
                        corpus_texts=None):
    """Trains a byte-level BPE tokenizer and writes it as tokenizer.json to `out_path`.

    vocab_size counts every id: the 256 byte symbols, the learned merges and the special tokens,
    which take the last ids as in the real families. With a small corpus the trainer may learn
    fewer merges; the returned Tokenizer's get_vocab_size() is the true count.
    corpus_texts replaces the default training text (an iterable of strings).
    Returns the trained tokenizers.Tokenizer.
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, not {style!r}")
    special_tokens = list(special_tokens or [])
    if len(set(special_tokens)) != len(special_tokens):
        raise ValueError("special_tokens contains duplicates")
    model_size = vocab_size - len(special_tokens)
    if model_size <= 256:
        raise ValueError(f"vocab_size {vocab_size} leaves no room for merges beyond the 256 byte "
                         f"symbols and {len(special_tokens)} special tokens")

    tokenizer = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    if style == "qwen2":
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = _pre_tokenizer(style)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=model_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    texts = list(corpus_texts) if corpus_texts is not None else default_corpus()
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))

    # Special tokens go after the learned vocabulary, matched on the raw text.
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in special_tokens])
    tokenizer.post_processor = _post_processor(style, tokenizer, special_tokens)

    # Training rebuilds the model, so settings of the BPE model itself are applied to the JSON.
    config = json.loads(tokenizer.to_str())
    config["model"]["ignore_merges"] = style == "llama3"
    text = json.dumps(config, ensure_ascii=False, indent=2)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Tokenizer.from_str(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_path")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    parser.add_argument("--style", choices=STYLES, default="llama3")
    parser.add_argument("--special-token", action="append", dest="special_tokens",
                        help="repeat for several; default: " + " ".join(DEFAULT_SPECIAL_TOKENS))
    args = parser.parse_args()
    tokenizer = train_bpe_tokenizer(args.out_path, vocab_size=args.vocab_size,
                                    special_tokens=args.special_tokens or DEFAULT_SPECIAL_TOKENS,
                                    style=args.style)
    print(f"{args.out_path}: {args.style} style, {tokenizer.get_vocab_size()} ids")


if __name__ == "__main__":
    main()
