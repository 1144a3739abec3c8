#!/usr/bin/env python3
"""Golden BERT WordPiece ids for tests/data/bpe_golden.txt (tests/data/wordpiece_golden.ids).

Restates google-research/bert tokenization.py (BasicTokenizer + WordpieceTokenizer, which
Megatron-LM copies) with Python's own str.lower(), str.split() and unicodedata, so the C++
tokenizer (utf8proc) is checked against Python's Unicode behaviour, which is what BERT's
vocabulary was built with. Needs only the standard library.

Usage: python3 tools/reference/bert_reference_ids.py VOCAB_TXT TEXT_FILE OUT_IDS
  e.g. python3 tools/reference/bert_reference_ids.py \
         ~/.cache/megatron-cpp/bert-base-uncased-vocab.txt tests/data/bpe_golden.txt \
         tests/data/wordpiece_golden.ids
"""
import sys
import unicodedata

MAX_WORD_CHARS = 100  # HF BertTokenizer's limit (Google's code uses 200), as the C++ side


def is_whitespace(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def is_control(c):
    return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf")


def is_punctuation(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def is_chinese(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
            0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def basic_tokenize(text, lower_case):
    text = "".join(" " if is_whitespace(c) else c for c in text
                   if not (ord(c) == 0 or ord(c) == 0xFFFD or is_control(c)))
    text = "".join(" " + c + " " if is_chinese(ord(c)) else c for c in text)
    pieces = []
    for token in text.split():
        if lower_case:
            token = token.lower()
            token = "".join(c for c in unicodedata.normalize("NFD", token)
                            if unicodedata.category(c) != "Mn")
        word = []
        for c in token:
            if is_punctuation(c):
                if word:
                    pieces.append("".join(word))
                    word = []
                pieces.append(c)
            else:
                word.append(c)
        if word:
            pieces.append("".join(word))
    return " ".join(pieces).split()


def wordpiece(token, vocab):
    if len(token) > MAX_WORD_CHARS:
        return [vocab["[UNK]"]]
    ids, start = [], 0
    while start < len(token):
        end = len(token)
        while start < end:
            sub = ("##" if start > 0 else "") + token[start:end]
            if sub in vocab:
                ids.append(vocab[sub])
                break
            end -= 1
        if start == end:
            return [vocab["[UNK]"]]
        start = end
    return ids


def main():
    vocab_path, text_path, out_path = sys.argv[1:4]
    with open(vocab_path, encoding="utf-8") as f:
        vocab = {line.strip(): i for i, line in enumerate(f)}
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    ids = [i for token in basic_tokenize(text, lower_case=True) for i in wordpiece(token, vocab)]
    with open(out_path, "w") as f:
        for i in range(0, len(ids), 20):
            f.write(" ".join(map(str, ids[i:i + 20])) + "\n")
    print(f"wrote {len(ids)} ids to {out_path}")


if __name__ == "__main__":
    main()
