#!/usr/bin/python3
"""PyTorch port of Megatron's zero-shot GPT evaluation (tasks/zeroshot_gpt/: detokenizer.py,
datasets.py, evaluate.py), the reference of tests/e2e/eval_zero_shot.sh.

From the hand-written WikiText-format file OUT/wiki.test.tokens it writes
  OUT/gpt2-vocab.json, OUT/gpt2-merges.txt  a small byte-level GPT-2 BPE vocabulary: the 256
                                            bytes, merges learned from the detokenized file,
                                            and <|endoftext|>
  OUT/hf/config.json, OUT/hf/model.safetensors  a tiny GPT-2 with deterministic random weights
                                            (gpt2_reference.py's layout and forward)
  OUT/wiki.test.detok                       Megatron's wikitext_detokenizer output (Python re)
  OUT/lambada_test.jsonl                    LAMBADA-format samples; about half end in the
                                            model's own arg-max token, so some are correct
  OUT/expected.json                         the metrics and result lines per configuration
The evaluation runs in float64: a GPT-2 BPE tokenizer (pre-tokenization pattern restricted to
the ASCII + degree-sign text used here, since Python's re lacks \\p{L}), Megatron's
_LMDataset windows and _LambadaDataset samples, the loss summed over the masked targets and
the arg-max accuracy.

Usage: /usr/bin/python3 tools/reference/zeroshot_reference.py tests/data/zero_shot
"""
import collections
import json
import math
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference  # noqa: E402
import safetensors_io  # noqa: E402

NUM_MERGES = 120
SEQ_LENGTH = 48
OVERLAPPING_EVALS = (16, 48, 5)


# ---- Megatron's wikitext_detokenizer, transcribed step by step ----
def wikitext_detokenizer(string):
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    for a, b in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" : ", ": "), (" ; ", "; "),
                 (" . ", ". "), (" ! ", "! "), (" ? ", "? "), (" , ", ", ")):
        string = string.replace(a, b)
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    for a, b in (("= = = =", "===="), ("= = =", "==="), ("= =", "=="),
                 (" " + chr(176) + " ", chr(176)), (" \n", "\n"), ("\n ", "\n"), (" N ", " 1 "),
                 (" 's", "'s")):
        string = string.replace(a, b)
    return string


# ---- GPT-2 byte-level BPE ----
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()
# GPT-2's pattern with \p{L} -> [A-Za-z] and \p{N} -> [0-9]: exact for ASCII plus the degree
# sign (a symbol, "other"), which is all the test texts contain (checked in pre_tokenize).
PATTERN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|"""
                     r"""\s+(?!\S)|\s+""")


def pre_tokenize(text):
    assert all(c.isascii() or c == chr(176) for c in text), "text outside the supported set"
    return ["".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
            for piece in PATTERN.findall(text)]


def learn_merges(text, count):
    words = collections.Counter(tuple(p) for p in pre_tokenize(text))
    merges = []
    for _ in range(count):
        pairs = collections.Counter()
        for w, n in words.items():
            for pair in zip(w, w[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])  # ties: the smallest pair
        merges.append(best)
        merged = collections.Counter()
        for w, n in words.items():
            merged[tuple(merge_word(list(w), best))] += n
        words = merged
    return merges


def merge_word(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


class Tokenizer:
    def __init__(self, vocab, merges):
        self.encoder = vocab
        self.decoder = {v: k for k, v in vocab.items()}
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.byte_decoder = {v: k for k, v in BYTE_ENCODER.items()}
        self.eod = vocab["<|endoftext|>"]

    def bpe(self, piece):
        word = list(piece)
        while len(word) > 1:
            pair = min(zip(word, word[1:]), key=lambda p: self.ranks.get(p, float("inf")))
            if pair not in self.ranks:
                break
            word = merge_word(word, pair)
        return word

    def tokenize(self, text):
        return [self.encoder[t] for p in pre_tokenize(text) for t in self.bpe(p)]

    def detokenize(self, ids):
        return bytes(self.byte_decoder[c] for i in ids for c in self.decoder[i]).decode("utf-8", errors="replace")


# ---- Megatron's datasets ----
def lm_windows(tokens, seq_len, pad, overlapping_eval):
    """_LMDataset: (tokens [seq_len + 1], pad_mask [seq_len]) per window."""
    ov = max(1, overlapping_eval)
    total_targets = len(tokens) - 1
    targets = max(total_targets - ov, 0)
    for idx in range(max(math.ceil(targets / ov) + 1, 1)):
        start = idx * ov
        window = tokens[start:start + seq_len + 1]
        pad_mask = [1] * len(window)
        if len(window) < seq_len + 1:
            pad_mask += [0] * (seq_len + 1 - len(window))
            window = window + [pad] * (seq_len + 1 - len(window))
        pad_mask = np.array(pad_mask[1:])
        if ov != seq_len and idx != 0:
            pad_mask[:-ov] *= 0
        yield window, pad_mask


def lambada_sample(tok, text, seq_len, strict):
    """_LambadaDataset.get_tokens + __getitem__."""
    if not strict:
        tokens = tok.tokenize(text)
        context, labels = tokens[:-1], [tokens[-1]]
    else:
        last = text.split()[-1]
        start = text.rfind(last)
        context, labels = tok.tokenize(text[:start].strip()), tok.tokenize(" " + last)
    pad_mask = [0] * len(context) + [1] * len(labels)
    tokens = context + labels
    assert len(tokens) <= seq_len + 1
    pad_mask += [0] * (seq_len + 1 - len(tokens))
    tokens = tokens + [tok.eod] * (seq_len + 1 - len(tokens))
    return tokens, np.array(pad_mask[1:])


# ---- evaluate.py ----
def loss_sum(w, windows):
    total = 0.0
    for tokens, mask in windows:
        t = torch.tensor([tokens])
        logits = gpt2_reference.forward(w, t[:, :-1])[0]
        ce = torch.nn.functional.cross_entropy(logits, t[0, 1:], reduction="none")
        total += float((ce * torch.tensor(mask, dtype=torch.float64)).sum())
    return total


def correct_and_margin(w, samples):
    """Number of samples whose masked targets are all the arg-max, and the smallest gap between
    the best and the second-best logit at a masked position (the f32 side agrees above it)."""
    correct, margin = 0, float("inf")
    for tokens, mask in samples:
        t = torch.tensor([tokens])
        logits = gpt2_reference.forward(w, t[:, :-1])[0]
        ok = True
        for p in np.nonzero(mask)[0]:
            top2 = torch.topk(logits[p], 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            ok = ok and int(torch.argmax(logits[p])) == tokens[p + 1]
        correct += ok
    return correct, margin


def fmt_e(x):
    return "{:.4E}".format(x)


def framed(string):
    rule = "-" * (len(string) + 1)
    return "\n".join([rule, string, rule])


def wikitext_result(w, tok, raw, overlapping_eval):
    num_original = len(raw.strip().split(" "))
    tokens = tok.tokenize(wikitext_detokenizer(raw))
    windows = list(lm_windows(tokens, SEQ_LENGTH, tok.eod, overlapping_eval))
    total = loss_sum(w, windows)
    val_loss = total / (len(tokens) - 1)
    ratio = (len(tokens) - 1) / (num_original - 1)
    r = {"num_original_tokens": num_original, "num_tokenized_tokens": len(tokens),
         "num_windows": len(windows), "loss_sum": total, "avg_loss": val_loss,
         "ppl": math.exp(min(20, val_loss)), "adjusted_ppl": math.exp(min(20, val_loss * ratio)),
         "token_ratio": ratio}
    r["lines"] = framed(" validation results on WIKITEXT103 | avg loss: {} | ppl: {} | "
                        "adjusted ppl: {} | token ratio: {} |".format(
                            fmt_e(r["avg_loss"]), fmt_e(r["ppl"]), fmt_e(r["adjusted_ppl"]),
                            r["token_ratio"]))
    return r


def lambada_result(w, tok, texts, strict):
    samples = [lambada_sample(tok, t, SEQ_LENGTH, strict) for t in texts]
    correct, margin = correct_and_margin(w, samples)
    assert 0 < correct < len(samples), f"want some right and some wrong, got {correct}"
    assert margin > 1e-2, f"an arg-max is nearly tied ({margin})"
    return {"num_correct": correct, "total_examples": len(samples), "margin": margin,
            "lines": framed(" validation results on LAMBADA | number correct: {} | total "
                            "examples: {} | avg accuracy: {}".format(
                                fmt_e(correct), fmt_e(len(samples)),
                                fmt_e(correct / len(samples))))}


def lambada_texts(w, tok, detok):
    """Sentences of the detokenized text; every other one is cut after a word and continued by
    the model's arg-max token when that token is a space and letters (so the sample is right).
    Samples whose arg-max is nearly tied are left out."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", detok.replace("\n", " "))]
    sentences = [s for s in sentences if 8 <= len(s.split()) and len(tok.tokenize(s)) < SEQ_LENGTH]
    texts = []
    for i, s in enumerate(sentences[:24]):
        if i % 2 == 0:
            texts.append(s)
            continue
        words = s.split()
        for cut in range(len(words) - 1, 3, -1):
            context = " ".join(words[:cut])
            ids = tok.tokenize(context)
            best = int(torch.argmax(gpt2_reference.forward(w, torch.tensor([ids]))[0, -1]))
            piece = tok.detokenize([best])
            if re.fullmatch(r" [A-Za-z]+", piece):
                texts.append(context + piece)
                break
        else:
            texts.append(s)
    # Keep the samples whose arg-maxes are clear in both formulations (float32 agrees).
    return [t for t in texts
            if all(correct_and_margin(w, [lambada_sample(tok, t, SEQ_LENGTH, strict)])[1] > 1e-2
                   for strict in (False, True))]


def main(out_dir):
    raw = open(os.path.join(out_dir, "wiki.test.tokens"), "rb").read().decode("utf-8")
    detok = wikitext_detokenizer(raw)
    with open(os.path.join(out_dir, "wiki.test.detok"), "w", encoding="utf-8") as f:
        f.write(detok)

    merges = learn_merges(detok, NUM_MERGES)
    vocab = {BYTE_ENCODER[b]: b for b in range(256)}  # byte-level BPE has every byte
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(out_dir, "gpt2-vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "gpt2-merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    tok = Tokenizer(vocab, merges)

    config = dict(gpt2_reference.CONFIG, vocab_size=len(vocab), n_positions=64, n_ctx=64,
                  bos_token_id=tok.eod, eos_token_id=tok.eod)
    gpt2_reference.CONFIG = config
    w = gpt2_reference.make_weights(torch.Generator().manual_seed(20251201))
    os.makedirs(os.path.join(out_dir, "hf"), exist_ok=True)
    with open(os.path.join(out_dir, "hf", "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    safetensors_io.save(os.path.join(out_dir, "hf", "model.safetensors"),
                        {k: t.float().numpy() for k, t in w.items()}, {"format": "pt"})

    texts = lambada_texts(w, tok, detok)
    with open(os.path.join(out_dir, "lambada_test.jsonl"), "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"text": t}) + "\n" for t in texts))

    expected = {"seq_length": SEQ_LENGTH, "wikitext": {}, "lambada": {}}
    for ov in OVERLAPPING_EVALS:
        expected["wikitext"][str(ov)] = wikitext_result(w, tok, raw, ov)
    for strict in (False, True):
        expected["lambada"]["strict" if strict else "plain"] = lambada_result(w, tok, texts, strict)
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(json.dumps(expected, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
