#!/usr/bin/env python3
"""Makes the Hugging Face fixtures under tests/data/hf/ with the real `tokenizers` and
`transformers` libraries, so that our C++ tokenizer and checkpoint loaders can be compared
against them in CI, where there is no Python. Run through scripts/hf_fixtures.sh (Debian sid
chroot with python3-transformers, python3-tokenizers, python3-torch, python3-safetensors).

Deterministic: tokenizer training is single-valued for a fixed corpus and fixed settings, the
models use fixed torch seeds, and every JSON file is written with sorted keys.

  tokenizers/<family>/   tokenizer.json + tokenizer_config.json (PreTrainedTokenizerFast's
                         save_pretrained) + reference.json (corpus ids, torture texts)
  tokenizers/torture.json   the torture texts alone, in the order reference.json lists them
  models/<name>/         save_pretrained output + reference.json (loss, logits, greedy ids)

Usage: python3 tests/hf/make_fixtures.py [--corpus assets/sotu] [--out tests/data/hf]
"""
import argparse
import glob
import json
import os
import shutil
import struct
import sys
import tempfile

import tokenizers
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from sft_fixture import sft_fixture

VOCAB_SIZE = 2000  # learned entries (byte-level) / whole model vocab (SentencePiece-style)
MIN_FREQUENCY = 2

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken's o200k_base (GPT-4o), as Phi-4 and Llama 4 tokenizer.json files carry it: letter runs
# split by case, with the contraction as a suffix; '/' joins the newlines after punctuation.
O200K_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                 r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                 r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                 r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                 r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

IGNORE_MERGES_WORD = "Pneumonoultramicroscopicsilicovolcanoconiosis"

# Texts each tokenizer family is checked on; what each one is after is in the comment beside it.
TORTURE = [
    "",                                        # nothing at all (no ids; bos only with specials)
    " ",                                       # a lone space
    "Hello world",                             # the plain case
    "  leading and trailing spaces  ",         # space runs at both ends (\s+(?!\S) split)
    "multiple     spaces\tand\t\ttabs",        # inner space runs, tabs
    " \t \t",                                  # whitespace only, mixed
    "line one\r\nline two",                    # CRLF
    "\n\n\n",                                  # newline run only
    "para\n\n\nnext\n",                        # newline runs between words, trailing newline
    "I'm, you'RE, they'll, it's, we'VE, he'd", # contractions, mixed case (the (?i:) group)
    "HELLO 's",                                # a contraction after a space
    "1234567 3.14159 2026-11-26",              # digit runs (\p{N}{1,3} vs \p{N})
    "!!!???... ,,, ;;",                        # punctuation runs
    "café",                                    # precomposed é (U+00E9)
    "cafe\u0301",                              # e + combining acute: NFC makes it "café" (qwen2)
    "\u212b \u2126 \ufb01",                    # Angstrom sign, Ohm sign, fi ligature (NFC/NFKC)
    "日本語のテキスト",                         # CJK, 3-byte UTF-8, unseen in training
    "😀 👍🏽 👩‍👩‍👧‍👦",                            # emoji, skin tone modifier, ZWJ family (4-byte)
    "Ελληνικά Русский",                        # Greek, Cyrillic
    "a <|endoftext|> b",                       # GPT-2/Qwen special token written in the text
    "<s>x</s> <unk>",                          # SentencePiece specials written in the text
    "<|begin_of_text|>hi<|end_of_text|>",      # Llama 3 specials written in the text
    "<|im_start|>user\nhi<|im_end|>",          # Qwen chat specials written in the text
    IGNORE_MERGES_WORD,                        # a long word (one token in llama3: ignore_merges)
    "a" * 300,                                 # a very long single-character run
    "def f(x):\n    return x**2\n",            # code: indentation, operators
    "Ω Ж ñ ø ß ð þ",                           # letters absent from the training corpus
    "ctrl\x00\x01\x7f chars",                  # control characters (NUL, SOH, DEL)
    "\u00a0nbsp\u2009thin\u3000ideographic",   # non-ASCII whitespace
    "The President of the United States",      # corpus-like text (long merges)
    " ▁already▁has▁meta▁",                     # the SentencePiece meta symbol in the input
]

# More texts for the families added with the general pre-tokenizers and normalizers (issue 46);
# the first families keep exactly TORTURE, so their fixtures stay as they were.
TORTURE_MORE = [
    "İstanbul İİ DŽ ǅ ΣΑΣ",                     # U+0130 lowercases to two characters; titlecase
    "x² ½ ③ Ⅻ ٣٤ 𝟙𝟚",                          # No, Nl and non-ASCII Nd numbers (Digits, \w)
    "a\u200db \u200c \u00ad \ufeff",           # joiners (Rust's \w has them), soft hyphen, BOM
    "¿Qué? «quote» — em–dash… †‡ 「括弧」",     # Unicode punctuation (Pd, Ps, Pe, Pi, Pf, Po)
    "$5 + 3 = 8; 50% #tag @user a^b `x` ~y | <z>", # ASCII punctuation that Unicode calls symbols
    "ﬁﬀ ㎏ ① ｆｕｌｌ ｗｉｄｔｈ ﾊﾝｶｸ",          # compatibility characters (NFKC, NFKD)
    "\u1100\u1161\u11a8 한국어 e\u0301\u0323 \u1e9b\u0323",  # Hangul jamo, combining order
    "It's   DON'T\tI'LL\n\nWe'Re",               # case-folded contractions, space runs
    "path/to/file\n/etc/passwd\n//\n",           # '/' after punctuation (o200k)
    "CamelCaseWord HTTPServer iPhone ABCdef",   # case-split letter runs (o200k)
    "a-b--c---d  e\u3000\u3000f",                # delimiters in runs, wide spaces
    "▁▁x▁ y ▁",                                 # the meta symbol, repeated
]


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for b in struct.pack(f"<{len(ids)}I", *ids):
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def read_corpus(folder):
    docs = []
    for path in sorted(glob.glob(os.path.join(folder, "*.txt"))):
        with open(path, "rb") as f:
            docs.append(f.read().decode("utf-8"))  # exactly as in the file: no newline translation
    if not docs:
        sys.exit(f"make_fixtures: no *.txt in {folder} (scripts/fetch_assets.sh brings them)")
    return docs


def write_json(path, obj, indent=None):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------

def bpe_parts(tok):
    """vocab and merges of a trained BPE tokenizer, through its JSON (the Python API hides merges)."""
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def train_byte_level(docs, normalizer, pre_tokenizer):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=MIN_FREQUENCY,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer)
    return tok


def make_bytelevel(docs):
    """GPT-2: byte-level BPE with ByteLevel's own regex, <|endoftext|> after the learned vocab."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok = train_byte_level(docs, None, pre)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok, dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                     unk_token="<|endoftext|>")


def make_llama3(docs):
    """Llama 3: Split(regex, isolated) then ByteLevel without its regex; the BPE has
    ignore_merges=True as Meta's tokenizer.json has (a word already in the vocab is one token even
    where the merges would split it); <|begin_of_text|> added by TemplateProcessing, after a
    ByteLevel post-processor, as in Meta-Llama-3's tokenizer.json."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    trained = train_byte_level(docs, None, pre)
    vocab, merges = bpe_parts(trained)
    # A trained vocab holds only what its merges reach, so ignore_merges would change nothing.
    # Meta's (converted from tiktoken) holds words the merges do not reach; so does this one:
    # IGNORE_MERGES_WORD is one token here (a torture text), many with ignore_merges off.
    vocab[IGNORE_MERGES_WORD] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|begin_of_text|>", special=True, normalized=False),
                            AddedToken("<|end_of_text|>", special=True, normalized=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok, dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")


def make_qwen2(docs):
    """Qwen2: NFC normalizer, Split(regex with single digits), ByteLevel; no bos is ever added."""
    norm = normalizers.NFC()
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok = train_byte_level(docs, norm, pre)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    return tok, dict(bos_token=None, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                     unk_token=None, extra_special_tokens=["<|im_start|>", "<|im_end|>"])


SPM_SPECIALS = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]


def train_spm_like(docs):
    """vocab/merges of a SentencePiece-style BPE: <unk> <s> </s> <0x00>..<0xFF> are ids 0..258,
    then the characters kept and the learned pieces. Trained on lines (no newline ever seen, so a
    newline becomes <0x0A> as in Llama 2), split before each ▁ as SentencePiece splits on
    whitespace, and with the rarest characters left out of the alphabet (SentencePiece's
    character_coverage) so that byte fallback also happens inside the corpus."""
    norm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    lines = [line for d in docs for line in d.split("\n") if line]
    counts = {}
    for line in lines:
        for ch in norm.normalize_str(line):
            counts[ch] = counts.get(ch, 0) + 1
    keep = sum(1 for c in counts.values() if c >= 10)  # characters seen fewer than 10 times go
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = norm
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=MIN_FREQUENCY,
                                  special_tokens=SPM_SPECIALS, limit_alphabet=keep,
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    vocab, merges = bpe_parts(tok)
    for i, s in enumerate(SPM_SPECIALS):
        assert vocab[s] == i, (s, vocab[s])
    assert "\n" not in vocab
    return vocab, merges


def spm_tokenizer(vocab, merges):
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<unk>", "<s>", "</s>")])
    return tok


def make_llama2(vocab, merges):
    """Llama 2 / Mistral / TinyLlama as transformers converts them (legacy): Prepend+Replace
    normalizer, no pre-tokenizer (the whole text is one BPE word), byte fallback, <s> added."""
    tok = spm_tokenizer(vocab, merges)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    # add_bos_token=True makes transformers write this TemplateProcessing itself
    # ("<s> $A", pair "<s> $A <s> $B"), exactly as in Llama 2's tokenizer.json.
    return tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                     add_bos_token=True, add_eos_token=False)


def make_metaspace(vocab, merges):
    """Newer conversions (legacy=False): no normalizer, Metaspace(prepend_scheme=first,
    split=False) pre-tokenizer, Metaspace decoder. The decoder is Sequence[ByteFallback, Fuse,
    Metaspace] so byte tokens still decode (a bare Metaspace decoder would print <0xF0>...)."""
    tok = spm_tokenizer(vocab, merges)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                 split=False)
    tok.decoder = decoders.Sequence([
        decoders.ByteFallback(), decoders.Fuse(),
        decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)])
    return tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                     add_bos_token=True, add_eos_token=False)


def train_words(docs, normalizer, pre_tokenizer, specials):
    """A BPE without byte level (characters unseen in training are <unk>), as BERT-era word
    pre-tokenizers are used."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=MIN_FREQUENCY,
                                  special_tokens=specials, show_progress=False)
    tok.train_from_iterator(docs, trainer)
    return tok


def make_smollm2(docs):
    """SmolLM2 / StarCoder2: Digits(individual_digits) before ByteLevel's own regex."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok = train_byte_level(docs, None, pre)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False,
                                              use_regex=True)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    return tok, dict(bos_token="<|im_start|>", eos_token="<|im_end|>",
                     unk_token="<|endoftext|>")


def make_o200k(docs):
    """GPT-4o / Phi-4: Split(o200k_base's regex, isolated), then ByteLevel without its regex."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok = train_byte_level(docs, None, pre)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    return tok, dict(bos_token=None, eos_token="<|endoftext|>")


def make_nfkc(docs):
    """Every normalizer that changes text: NFKC, Lowercase, Strip (right only), a Replace with a
    regex (whitespace runs to one space) and with a string; ByteLevel with its prefix space; a
    template with a BOS and an EOS."""
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(left=False, right=True),
        normalizers.Replace(Regex(r"\s+"), " "), normalizers.Replace("''", '"'),
    ])
    pre = pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok = train_byte_level(docs, norm, pre)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|bos|>", "<|eos|>")])
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A <|eos|>", pair="<|bos|> $A <|eos|> $B:1 <|eos|>:1",
        special_tokens=[("<|bos|>", tok.token_to_id("<|bos|>")),
                        ("<|eos|>", tok.token_to_id("<|eos|>"))])
    return tok, dict(bos_token="<|bos|>", eos_token="<|eos|>")


def make_whitespace(docs):
    """Word pre-tokenizers: NFD with the combining marks removed by a regex Replace, then
    Whitespace (\\w+|[^\\w\\s]+) and Digits in runs; unseen characters are <unk>; no decoder."""
    norm = normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex(r"\p{Mn}"), "")])
    pre = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                   pre_tokenizers.Digits(individual_digits=False)])
    tok = train_words(docs, norm, pre, ["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B:1", special_tokens=[("<s>", 1)])
    return tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def make_roberta(docs):
    """NFKD and Lowercase, WhitespaceSplit then Punctuation (contiguous runs), RobertaProcessing
    (<s> $A </s>), Strip on both sides."""
    norm = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase(),
                                 normalizers.Strip(left=True, right=True)])
    pre = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                   pre_tokenizers.Punctuation(behavior="contiguous")])
    tok = train_words(docs, norm, pre, ["<s>", "<pad>", "</s>", "<unk>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


def make_splits(docs):
    """Split's other behaviours and invert, Punctuation (isolated), then ByteLevel with a prefix
    space and no regex."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"[.,;:!?]"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{Lu}+"), behavior="contiguous", invert=True),
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated", invert=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=False),
    ])
    tok = train_byte_level(docs, None, pre)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok, dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def make_metaspace_split(vocab, merges, scheme, normalizer=None):
    """Metaspace with split=True and prepend_scheme "always", "never" or "first" (the metaspace
    family has "first" without split)."""
    tok = spm_tokenizer(vocab, merges)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme,
                                                 split=True)
    tok.decoder = decoders.Sequence([
        decoders.ByteFallback(), decoders.Fuse(),
        decoders.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)])
    return tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                     add_bos_token=False, add_eos_token=False)


def save_tokenizer(family, tok, kwargs, docs, out, texts=TORTURE):
    folder = os.path.join(out, "tokenizers", family)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                                   **kwargs)
    fast.save_pretrained(folder)
    for extra in ("special_tokens_map.json", "added_tokens.json", "chat_template.jinja"):
        # Only tokenizer.json and tokenizer_config.json are part of the fixture.
        if os.path.exists(os.path.join(folder, extra)):
            os.remove(os.path.join(folder, extra))

    # The saved folder is the reference: the raw tokenizers library on tokenizer.json alone
    # (what our C++ reads) and transformers' AutoTokenizer on the folder must agree everywhere.
    raw = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(folder)
    corpus_ids = []
    for enc, doc in zip(raw.encode_batch(docs, add_special_tokens=False), docs):
        ids = enc.ids
        assert ids == auto.encode(doc, add_special_tokens=False), (family, "corpus")
        corpus_ids.extend(ids)
    torture = []
    for text in texts:
        ids = raw.encode(text, add_special_tokens=False).ids
        with_special = raw.encode(text, add_special_tokens=True).ids
        decoded = raw.decode(ids, skip_special_tokens=False)
        assert ids == auto.encode(text, add_special_tokens=False), (family, text)
        assert with_special == auto.encode(text, add_special_tokens=True), (family, text)
        assert decoded == auto.decode(ids, skip_special_tokens=False), (family, text)
        torture.append({"text": text, "ids": ids, "ids_with_special": with_special,
                        "decoded": decoded})
    special = {t.content: i for i, t in raw.get_added_tokens_decoder().items() if t.special}
    ref = {
        "family": family,
        "tokenizers_version": tokenizers.__version__,
        "transformers_version": transformers.__version__,
        "vocab_size": len(auto),
        "bos_id": auto.bos_token_id,
        "eos_id": auto.eos_token_id,
        "special_tokens": special,
        "corpus": {"documents": len(docs), "tokens": len(corpus_ids),
                   "fnv1a64": fnv1a64(corpus_ids), "first_ids": corpus_ids[:1000]},
        "torture": torture,
    }
    write_json(os.path.join(folder, "reference.json"), ref, indent=1)
    return ref, raw


def tokenizer_fixtures(docs, out):
    os.makedirs(os.path.join(out, "tokenizers"), exist_ok=True)
    write_json(os.path.join(out, "tokenizers", "torture.json"), TORTURE, indent=1)
    spm_vocab, spm_merges = train_spm_like(docs)
    made = {
        "bytelevel": make_bytelevel(docs),
        "llama3": make_llama3(docs),
        "qwen2": make_qwen2(docs),
        "llama2": make_llama2(spm_vocab, spm_merges),
        "metaspace": make_metaspace(spm_vocab, spm_merges),
        # Issue 46: the general pre-tokenizers, normalizers and post-processors.
        "smollm2": make_smollm2(docs),
        "o200k": make_o200k(docs),
        "nfkc": make_nfkc(docs),
        "whitespace": make_whitespace(docs),
        "roberta": make_roberta(docs),
        "splits": make_splits(docs),
        "metaspace_always": make_metaspace_split(spm_vocab, spm_merges, "always"),
        "metaspace_never": make_metaspace_split(spm_vocab, spm_merges, "never"),
        # "first" asks whether a piece starts at the original's offset 0, which normalizers move:
        # a stripped start, a start replaced by a match longer than a character, not an NFKC
        # expansion's first half.
        "metaspace_first": make_metaspace_split(spm_vocab, spm_merges, "first", normalizers.Sequence([
            normalizers.Strip(left=True, right=False), normalizers.NFKC(),
            normalizers.Replace(Regex(r"^(The|It)\b"), "_"), normalizers.Replace(Regex("^fi"), "f"),
        ])),
    }
    first = ("bytelevel", "llama3", "qwen2", "llama2", "metaspace")
    for family, (tok, kwargs) in made.items():
        texts = TORTURE if family in first else TORTURE + TORTURE_MORE
        ref, raw = save_tokenizer(family, tok, kwargs, docs, out, texts)
        notes = []
        if family == "llama3":
            # How much ignore_merges changes: the corpus encoded with it off.
            j = json.loads(raw.to_str())
            j["model"]["ignore_merges"] = False
            off = Tokenizer.from_str(json.dumps(j))
            ids = [i for e in off.encode_batch(docs, add_special_tokens=False) for i in e.ids]
            notes.append(f"ignore_merges=False would give {len(ids)} tokens, "
                         f"{'the same' if fnv1a64(ids) == ref['corpus']['fnv1a64'] else 'different'} ids")
            n_on = len(raw.encode(IGNORE_MERGES_WORD, add_special_tokens=False).ids)
            n_off = len(off.encode(IGNORE_MERGES_WORD, add_special_tokens=False).ids)
            assert n_on == 1 and n_off > 1, (n_on, n_off)
            notes.append(f"{IGNORE_MERGES_WORD}: 1 token, {n_off} with ignore_merges off")
        if family in ("llama2", "metaspace"):
            emoji = raw.encode("😀Ω", add_special_tokens=False).tokens
            assert emoji[-6:] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0xCE>", "<0xA9>"], emoji
            notes.append(f"'😀Ω' -> {emoji}")
        print(f"tokenizer {family}: vocab {ref['vocab_size']}, corpus {ref['corpus']['tokens']} "
              f"tokens, fnv1a64 {ref['corpus']['fnv1a64']}" + "".join(f"; {n}" for n in notes))
    # The two SentencePiece-style families must give the same ids (the same pieces, a different
    # pipeline) on text without the legacy Prepend-per-segment difference.
    a = json.load(open(os.path.join(out, "tokenizers", "llama2", "reference.json")))
    b = json.load(open(os.path.join(out, "tokenizers", "metaspace", "reference.json")))
    print(f"llama2 vs metaspace corpus ids identical: {a['corpus']['fnv1a64'] == b['corpus']['fnv1a64']}")


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------

VOCAB = 384
MAX_POS = 64
# Weights drawn as transformers initialises them, with initializer_range 0.1 instead of 0.02:
# at 0.02 these tiny models attend almost uniformly and their logits hardly move, so a loader
# or a RoPE variant that is wrong would still match to ~1e-4.
INIT_RANGE = 0.1


def model_specs():
    common = dict(vocab_size=VOCAB, max_position_embeddings=MAX_POS, initializer_range=INIT_RANGE,
                  hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96)
    return {
        # GPT-2: learned positions, LayerNorm, Conv1D (transposed) weights, tied lm_head.
        "gpt2": ("gpt2", dict(vocab_size=VOCAB, n_positions=MAX_POS, n_embd=32, n_layer=2,
                              n_head=4, initializer_range=INIT_RANGE,
                              bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1),
                 torch.float32, None),
        # Llama 3.1 layout: GQA, untied head, llama3 RoPE scaling, bf16 on disk, 3+ shards.
        "llama": ("llama", dict(common, tie_word_embeddings=False, rms_norm_eps=1e-5,
                                rope_theta=500000.0,
                                rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 16}),
                  torch.bfloat16, "60KB"),
        # Tied embeddings (no lm_head.weight in the file), plain RoPE, one file.
        "llama-tied": ("llama", dict(common, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                     rope_theta=10000.0), torch.float32, None),
        # Linear RoPE scaling (positions divided by the factor).
        "llama-linear": ("llama", dict(common, tie_word_embeddings=False, rms_norm_eps=1e-5,
                                       rope_theta=10000.0,
                                       rope_scaling={"rope_type": "linear", "factor": 2.0}),
                         torch.float32, None),
        # Qwen2: q/k/v biases (made non-zero below), tied embeddings.
        "qwen2": ("qwen2", dict(common, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                rope_theta=1000000.0, bos_token_id=None, eos_token_id=VOCAB - 1),
                  torch.float32, None),
        # Mistral: Llama's layout under another name, no sliding window.
        "mistral": ("mistral", dict(common, tie_word_embeddings=False, rms_norm_eps=1e-5,
                                    rope_theta=10000.0, sliding_window=None, head_dim=16),
                    torch.float32, None),
        # Qwen3: q/k RMSNorm per head (made non-trivial below), head_dim wider than
        # hidden_size / heads as Qwen3's are, tied, bf16 on disk.
        "qwen3": ("qwen3", dict(common, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                rope_theta=1000000.0, head_dim=32, bos_token_id=None,
                                eos_token_id=VOCAB - 1),
                  torch.bfloat16, None),
        # Phi-3.5-mini shape: fused qkv_proj and gate_up_proj, longrope (short factors apply at
        # 16 tokens, attention factor from max_position_embeddings / original), untied.
        "phi3": ("phi3", dict(common, tie_word_embeddings=False, rms_norm_eps=1e-5,
                              rope_theta=10000.0, max_position_embeddings=256,
                              original_max_position_embeddings=8,
                              rope_scaling={"rope_type": "longrope",
                                            "short_factor": [1.0, 1.1, 1.3, 1.0, 2.0, 1.5, 1.2, 1.0],
                                            "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0, 40.0]},
                              bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None),
                 torch.float32, None),
        # Phi-4-mini shape: partial rotary 0.75 (12 of 16 channels), longrope, tied.
        "phi4-mini": ("phi3", dict(common, tie_word_embeddings=True, rms_norm_eps=1e-5,
                                   rope_theta=10000.0, max_position_embeddings=256,
                                   original_max_position_embeddings=32, partial_rotary_factor=0.75,
                                   rope_scaling={"rope_type": "longrope",
                                                 "short_factor": [1.0, 1.2, 1.0, 1.5, 1.0, 1.1],
                                                 "long_factor": [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]},
                                   bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None),
                      torch.bfloat16, None),
        # Gemma 3 (1B layout): offset and sandwich norms (made non-trivial below), q/k norms,
        # embeddings times sqrt(64), tanh GeGLU, query_pre_attn_scalar 24 (not head_dim), layer 0
        # sliding with a window of 5 (shorter than the 16-token input) and its own RoPE base,
        # layer 1 full with linear scaling, tied.
        "gemma3": ("gemma3_text", dict(common, head_dim=16, rms_norm_eps=1e-6,
                                       query_pre_attn_scalar=24, sliding_window=5,
                                       layer_types=["sliding_attention", "full_attention"],
                                       rope_parameters={
                                           "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                              "rope_theta": 1000000.0},
                                           "sliding_attention": {"rope_type": "default",
                                                                 "rope_theta": 10000.0}},
                                       bos_token_id=None, eos_token_id=VOCAB - 1, pad_token_id=None),
                   torch.float32, None),
        # SmolLM3: layer 1 without RoPE (NoPE), attention_bias on, untied.
        "smollm3": ("smollm3", dict(common, tie_word_embeddings=False, rms_norm_eps=1e-6,
                                    rope_theta=5000000.0, no_rope_layers=[1, 0],
                                    attention_bias=True, bos_token_id=None, pad_token_id=None,
                                    eos_token_id=VOCAB - 1),
                    torch.float32, None),
    }


def saved_keys(folder):
    keys = []
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, "pt") as f:
            keys.extend(f.keys())
    return sorted(keys)


def run_reference(model, input_ids):
    """loss, logits[0, :4, :8], and greedy ids (argmax each step, no EOS stop) of model."""
    with torch.no_grad():
        out = model(input_ids=input_ids, labels=input_ids)
        seq = input_ids[:1, :8]
        margins = []
        for _ in range(8):
            logits = model(input_ids=seq).logits[0, -1].double()
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            seq = torch.cat([seq, top.indices[:1].view(1, 1)], dim=1)
    return out, seq[0, 8:].tolist(), margins


def reference(folder, input_ids, extra=None):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    out, greedy, margins = run_reference(model, input_ids)
    with torch.no_grad():
        gen = model.generate(input_ids[:1, :8], attention_mask=torch.ones_like(input_ids[:1, :8]),
                             max_new_tokens=8, do_sample=False)[0, 8:].tolist()
    # generate() stops at EOS: it must agree with the plain argmax loop up to its length. Not
    # where longrope crosses original_max_position_embeddings mid-generation: generate()'s KV
    # cache keeps keys rotated with the short factors, the loop recomputes them with the long.
    rope = model.config.rope_parameters or {}
    crosses = (rope.get("rope_type") == "longrope" and
               8 <= rope["original_max_position_embeddings"] < 16)
    assert crosses or gen == greedy[:len(gen)], (folder, gen, greedy)
    model64 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64,
                                                   attn_implementation="eager").eval()
    assert next(model64.parameters()).dtype == torch.float64
    with torch.no_grad():
        # By hand: transformers' loss casts the logits to float32 first.
        logits64 = model64(input_ids=input_ids).logits
        assert logits64.dtype == torch.float64
        loss64 = float(torch.nn.functional.cross_entropy(
            logits64[:, :-1].reshape(-1, logits64.shape[-1]), input_ids[:, 1:].reshape(-1)))
    ref = {
        "input_ids": input_ids.tolist(),
        "loss": float(out.loss),
        "loss_fp64": loss64,
        "logits": out.logits[0, :4, :8].tolist(),
        "greedy": greedy,
        "greedy_prompt_length": 8,
        "greedy_top2_margins": margins,
        "state_dict_keys": saved_keys(folder),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    ref.update(extra or {})
    write_json(os.path.join(folder, "reference.json"), ref, indent=1)
    return ref, model


def legacy_config(folder):
    """config.json as transformers 4.x (and the Hub's Llama checkpoints) write RoPE:
    top-level rope_theta and rope_scaling instead of 5.x's rope_parameters. Written beside
    config.json as config_v4.json, after checking that transformers reads it the same."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    rope = dict(cfg.pop("rope_parameters"))
    if cfg["model_type"] == "gemma3_text":  # by layer type: the sliding layers' base apart
        local = rope.pop("sliding_attention")
        rope = dict(rope.pop("full_attention"))
        cfg["rope_local_base_freq"] = local["rope_theta"]
        # 4.x files give the pattern, not the list (every 2nd layer full here).
        assert cfg.pop("layer_types") == ["sliding_attention", "full_attention"]
        cfg["sliding_window_pattern"] = 2
        cfg.pop("_sliding_window_pattern", None)  # what transformers 5 saves beside layer_types
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    with tempfile.TemporaryDirectory() as tmp:
        write_json(os.path.join(tmp, "config.json"), cfg, indent=2)
        a = transformers.AutoConfig.from_pretrained(folder)
        b = transformers.AutoConfig.from_pretrained(tmp)
        assert a.rope_parameters == b.rope_parameters, (a.rope_parameters, b.rope_parameters)
    write_json(os.path.join(folder, "config_v4.json"), cfg, indent=2)


def randomise_init(name, model):
    """Parameters transformers initialises to constants, given values, so that a loader that
    drops them cannot match: Qwen2's q/k/v biases (zero), Qwen3's q/k norms (one), SmolLM3's
    attention biases (zero), Gemma 3's norms (zero, scaling by one)."""
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            if name in ("qwen2", "smollm3"):
                for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj):
                    if proj.bias is not None:
                        proj.bias.normal_(0.0, INIT_RANGE)
            if name == "qwen3":
                attn.q_norm.weight.normal_(1.0, 0.2)
                attn.k_norm.weight.normal_(1.0, 0.2)
            if name == "gemma3":  # (1 + weight) norms start at zero
                for norm in (attn.q_norm, attn.k_norm, layer.input_layernorm,
                             layer.post_attention_layernorm, layer.pre_feedforward_layernorm,
                             layer.post_feedforward_layernorm):
                    norm.weight.normal_(0.0, 0.2)
        if name == "gemma3":
            model.model.norm.weight.normal_(0.0, 0.2)


def model_fixtures(out, only=None):
    """Every model of model_specs(), or those named in `only` (the others' folders are kept)."""
    from transformers import AutoConfig
    root = os.path.join(out, "models")
    if only is None:
        shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(0, VOCAB, (2, 16), generator=g)
    for seed, (name, (model_type, cfg_kwargs, dtype, shard)) in enumerate(model_specs().items()):
        if only is not None and name not in only:
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        torch.manual_seed(1000 + seed)
        config = AutoConfig.for_model(model_type, **cfg_kwargs)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        randomise_init(name, model)
        extra = {}
        model = model.to(dtype).eval()
        folder = os.path.join(root, name)
        model.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
        if name == "qwen2":
            # What the biases are worth: the loss with them zeroed.
            m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            with torch.no_grad():
                for layer in m.model.layers:
                    for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                 layer.self_attn.v_proj):
                        proj.bias.zero_()
                extra["loss_without_qkv_bias"] = float(m(input_ids=input_ids,
                                                         labels=input_ids).loss)
        if name == "smollm3":
            # What NoPE is worth: the loss with every layer rotating.
            m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            for layer in m.model.layers:
                layer.self_attn.use_rope = True
            with torch.no_grad():
                extra["loss_with_rope_everywhere"] = float(m(input_ids=input_ids,
                                                             labels=input_ids).loss)
        ref, loaded = reference(folder, input_ids, extra)
        if model_type != "gpt2":
            legacy_config(folder)
        files = sorted(os.listdir(folder))
        print(f"model {name}: loss {ref['loss']!r} (fp64 {ref['loss_fp64']!r}), greedy "
              f"{ref['greedy']}, files {files}")
        if name == "gpt2":
            gpt2_hub(root, loaded, input_ids, ref)


GENERATE_PROMPTS = ["The Congress", "Fellow citizens, 2026 — naïve café", ""]


def generate_fixture(out):
    """models/llama-generate: a Llama with the llama3 tokenizer (BOS from its post-processor)
    and an embedding larger than the tokenizer, whose generation_config.json asks for greedy
    decoding, 16 new tokens at most and two EOS ids; reference.json holds what
    model.generate(**tokenizer(prompt)) gives for each prompt, ids and decoded text. The lm_head
    row of an id the tokenizer lacks is made to win one step, and the second EOS is a token greedy
    decoding reaches, so that skipping unknown ids and stopping at a listed EOS both show."""
    folder = os.path.join(out, "models", "llama-generate")
    shutil.rmtree(folder, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(os.path.join(out, "tokenizers", "llama3"))
    vocab = 2048  # the tokenizer's ids end at 2002
    assert len(tok) < vocab
    torch.manual_seed(4242)
    config = transformers.AutoConfig.for_model(
        "llama", vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=INIT_RANGE, tie_word_embeddings=False, rope_theta=500000.0,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    unknown = vocab - 5
    enc = tok(GENERATE_PROMPTS[0], return_tensors="pt")
    with torch.no_grad():
        plain = model.generate(**enc, max_new_tokens=16, do_sample=False, eos_token_id=None)
        third = int(plain[0, enc["input_ids"].shape[1] + 2])
        model.lm_head.weight[unknown] = 3.0 * model.lm_head.weight[third]
        plain = model.generate(**enc, max_new_tokens=16, do_sample=False, eos_token_id=None)
    new = plain[0, enc["input_ids"].shape[1]:].tolist()
    assert unknown in new, new
    stop = next(t for t in new[8:] if t != unknown and t < len(tok))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    gen = {"do_sample": False, "temperature": 0.6, "top_p": 0.9, "max_new_tokens": 16,
           "eos_token_id": [tok.eos_token_id, stop], "bos_token_id": tok.bos_token_id,
           "repetition_penalty": 1.0}
    write_json(os.path.join(folder, "generation_config.json"), gen, indent=2)
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    cases = []
    for prompt in GENERATE_PROMPTS:
        enc = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            ids = loaded.generate(**enc)[0].tolist()
        cases.append({"prompt": prompt, "prompt_ids": enc["input_ids"][0].tolist(), "ids": ids,
                      "text": tok.decode(ids)})
    ref = {"cases": cases, "unknown_id": unknown, "stop_id": stop,
           "transformers_version": transformers.__version__, "torch_version": torch.__version__}
    write_json(os.path.join(folder, "reference.json"), ref, indent=1)
    for c in cases:
        print(f"llama-generate {c['prompt']!r}: {len(c['ids']) - len(c['prompt_ids'])} new, "
              f"stops at {c['ids'][-1]}, unknown id {'in' if unknown in c['ids'] else 'not in'} it")


def gpt2_hub(root, model, input_ids, gpt2_ref):
    """The gpt2 weights under openai-community/gpt2's key names: no 'transformer.' prefix, no
    lm_head (tied), and the h.N.attn.bias causal-mask buffers ([1, 1, n_positions, n_positions]
    F32 lower-triangular ones) that the Hub's file carries and loaders must ignore."""
    folder = os.path.join(root, "gpt2-hub")
    os.makedirs(folder)
    sd = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight":
            continue
        assert k.startswith("transformer."), k
        sd[k[len("transformer."):]] = v.detach().clone().contiguous()
    n = model.config.n_positions
    for i in range(model.config.n_layer):
        sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
    save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(root, "gpt2", f), folder)
    hub, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                     output_loading_info=True)
    missing = sorted(info["missing_keys"])
    unexpected = sorted(info["unexpected_keys"])
    ref, _ = reference(folder, input_ids, {
        "transformers_loads": True,
        "transformers_missing_keys": missing,
        "transformers_unexpected_keys": unexpected,
    })
    assert ref["logits"] == gpt2_ref["logits"] and ref["loss"] == gpt2_ref["loss"], "gpt2-hub"
    assert ref["greedy"] == gpt2_ref["greedy"]
    print(f"model gpt2-hub: transformers loads it, same loss/logits as gpt2; missing {missing}, "
          f"unexpected {unexpected}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="assets/sotu")
    ap.add_argument("--out", default="tests/data/hf")
    ap.add_argument("--only", choices=["tokenizers", "models", "sft"])
    ap.add_argument("--chat-template",
                    help="sft: a chat template (Jinja) for the conversation case")
    ap.add_argument("--model", action="append",
                    help="(re)make only this model fixture (repeatable); the others are kept")
    args = ap.parse_args()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
          f"torch {torch.__version__}, python {sys.version.split()[0]}")
    if args.only == "sft":
        sft_fixture(args.out, args.chat_template)
        return
    if args.only != "models":
        docs = read_corpus(args.corpus)
        tokenizer_fixtures(docs, args.out)
    if args.only != "tokenizers":
        model_fixtures(args.out, args.model)
        if args.model is None or "llama-generate" in args.model:
            generate_fixture(args.out)


if __name__ == "__main__":
    main()
