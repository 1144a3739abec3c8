#!/usr/bin/env python3
"""Reference for the fill-in-the-middle samples (--fim-data; tests/unit/data_fim_dataset_test.cpp)
in plain Python 3 with the `regex` module (no torch), written from Megatron-LM's GPTFIMDataset
semantics and the published FIM transformation (Bavarian et al. 2022), independently of the C++
code:
  - GPT-2 byte-level BPE from openai/gpt-2's encoder.py algorithm (the `regex` module, the
    vocabulary and merges of scripts/fetch_data.sh), with the four FIM sentinels appended to the
    vocabulary (ids 50257..50260), as a FIM vocabulary has them;
  - Philox4x32-10 (Salmon et al. 2011) and megatron-cpp's documented random stream
    (data/random_stream.h: 64-bit draws hi·2^32 + lo, rejection below n, 53-bit uniforms; the
    stream of sample i keyed by the splitmix64 chain of ("FIM", i)), which replaces Megatron's
    sequentially shared numpy RandomState on purpose (docs/data.md);
  - Megatron's transformation: cut at EOD (empty segments vanish with their EOD, the part after
    the last EOD is always transformed), optionally at the split token into fragments, then per
    part with probability rate: decode (special token dropped, ill-formed UTF-8 replaced), cut at
    two uniform code-point positions, re-encode, SPM with probability spm_rate else PSM; the
    sample cut or padded with the pad sentinel to its length.

The input samples are windows of seq_length + 1 tokens over documents of the real corpus
(sotu.jsonl) plus texts with multi-byte characters, EOD-separated, so that windows start and end
inside documents and inside multi-byte characters.

Writes OUT/golden.json: {"seq_length", "seed", "cases": [{"options": {...}, "samples":
[{"index", "input", "output"}]}]}.

Usage: python3 tools/reference/fim_reference.py ~/.cache/megatron-cpp tests/data/fim
"""
import json
import os
import sys
from functools import lru_cache

import regex

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
FIM_SENTINELS = ["<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"]
SEQ_LENGTH = 63
SEED = 1234
KEY_FIM = 0x46494D  # "FIM"


# ---- Philox4x32-10 and the random stream ----

def philox4x32_10(counter, key):
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(10):
        if r > 0:
            k0 = (k0 + 0x9E3779B9) & MASK32
            k1 = (k1 + 0xBB67AE85) & MASK32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        hi0, lo0 = p0 >> 32, p0 & MASK32
        hi1, lo1 = p1 >> 32, p1 & MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def philox_key(fields):
    h = 0x6A09E667F3BCC909
    for f in fields:
        z = h ^ ((f + 0x9E3779B97F4A7C15) & MASK64)
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        h = z ^ (z >> 31)
    return h


class Stream:
    def __init__(self, seed, key):
        self.seed, self.key = seed, key
        self.block, self.words = 0, []

    def u32(self):
        if not self.words:
            self.words = list(philox4x32_10(
                (self.block & MASK32, self.block >> 32, self.key & MASK32, self.key >> 32),
                (self.seed & MASK32, self.seed >> 32)))
            self.block += 1
        return self.words.pop(0)

    def u64(self):
        hi = self.u32()
        return (hi << 32) | self.u32()

    def below(self, n):
        limit = MASK64 - (MASK64 % n + 1) % n
        while True:
            x = self.u64()
            if x <= limit:
                return x % n

    def uniform(self):
        return (self.u64() >> 11) * 2.0 ** -53

    def bernoulli(self, p):
        return self.uniform() < p


# ---- GPT-2 byte-level BPE (openai/gpt-2 encoder.py) ----

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


class Gpt2Bpe:
    PATTERN = regex.compile(
        r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

    def __init__(self, data_dir):
        with open(os.path.join(data_dir, "gpt2-vocab.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        for t in FIM_SENTINELS:
            self.encoder[t] = len(self.encoder)
        self.decoder = {v: k for k, v in self.encoder.items()}
        with open(os.path.join(data_dir, "gpt2-merges.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")[1:]
        merges = [tuple(line.split()) for line in lines if line]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.eod = self.encoder["<|endoftext|>"]

    @lru_cache(maxsize=None)
    def bpe(self, token):
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            first, second = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if (first, second) not in self.ranks:
                break
            out, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    out.append(first + second)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = tuple(out)
        return word

    def encode(self, text):
        ids = []
        for piece in self.PATTERN.findall(text):
            piece = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(piece))
        return ids

    def decode(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytearray(self.byte_decoder[c] for c in text).decode("utf-8", errors="replace")


# ---- Megatron's FIM transformation ----

class Fim:
    def __init__(self, bpe, options, rng):
        self.bpe, self.o, self.rng = bpe, options, rng
        e = bpe.encoder
        self.prefix, self.middle, self.suffix, self.pad = (e[t] for t in FIM_SENTINELS)
        self.eod = bpe.eod
        split = options.get("split_sample")
        self.split = e[split] if split is not None else None

    def sample(self, sample):
        out, start = [], 0
        for i, t in enumerate(sample):
            if t != self.eod:
                continue
            if i > start:
                out += self.split_and_permute(sample[start:i]) + [self.eod]
            start = i + 1
        out += self.split_and_permute(sample[start:])
        out = out[:len(sample)]
        return out + [self.pad] * (len(sample) - len(out))

    def split_and_permute(self, seq):
        if self.split is None or self.split not in seq:
            return self.permute(seq, self.o["rate"])
        if not self.rng.bernoulli(self.o["rate"]):
            return list(seq)
        out, start = [], 0
        for i, t in enumerate(seq):
            if t != self.split:
                continue
            if i > start:
                out += self.permute(seq[start:i], self.o["fragment_rate"]) + [self.split]
            start = i + 1
        return out + self.permute(seq[start:], self.o["fragment_rate"])

    def permute(self, part, rate):
        if not self.rng.bernoulli(rate):
            return list(part)
        contents = self.bpe.decode([t for t in part if t != self.eod])
        no_prefix = self.o.get("no_prefix")
        if no_prefix is not None and contents.startswith(no_prefix):
            return list(part)
        a, b = sorted([self.rng.below(len(contents) + 1), self.rng.below(len(contents) + 1)])
        prefix = self.bpe.encode(contents[:a])
        middle = self.bpe.encode(contents[a:b])
        suffix = self.bpe.encode(contents[b:])
        if self.rng.bernoulli(self.o["spm_rate"]):
            return [self.prefix, self.suffix] + suffix + [self.middle] + prefix + middle
        return [self.prefix] + prefix + [self.suffix] + suffix + [self.middle] + middle


def token_stream(bpe, data_dir):
    """Documents joined by EOD: corpus speeches (cut to ~300 characters, several paragraphs
    where they have them) and texts with multi-byte characters; an empty document gives two
    EODs in a row."""
    docs = []
    with open(os.path.join(data_dir, "sotu.jsonl"), encoding="utf-8") as f:
        for n, line in enumerate(f):
            if n >= 6:
                break
            text = json.loads(line)["text"]
            docs.append(text[:160] + "\n" + text[400:520] + "\n\n" + text[900:960])
    docs.insert(2, "Größe über alles — naïve café, 東京タワーの高さ 🗼 is 333 m.\nÉtude № 5")
    docs.insert(4, "")
    docs.insert(5, "def f(x):\n    return x * 2  # ½ → ∞\n")
    ids = []
    for d in docs:
        ids += bpe.encode(d) + [bpe.eod]
    return ids


def main(data_dir, out_dir):
    bpe = Gpt2Bpe(data_dir)
    stream = token_stream(bpe, data_dir)
    n = SEQ_LENGTH + 1
    # Windows at odd offsets, one starting at an EOD, as GPTDataset's samples overlap by one.
    starts = [0, 37, 100, 163, 226, 289, 352, 415, 478, 541]
    eods = [i for i, t in enumerate(stream) if t == bpe.eod]
    starts.append(eods[1])
    starts = [s for s in starts if s + n <= len(stream)]
    cases = [
        {"rate": 0.9, "spm_rate": 0.5},
        {"rate": 1.0, "spm_rate": 0.0, "split_sample": "Ċ", "fragment_rate": 0.6},
        {"rate": 1.0, "spm_rate": 1.0, "no_prefix": "Fellow"},
        # Nothing rearranged: only a vanished empty document's EOD, and the padding after.
        {"rate": 0.0, "spm_rate": 0.5},
    ]
    golden = {"seq_length": SEQ_LENGTH, "seed": SEED, "sentinels": FIM_SENTINELS, "cases": []}
    for options in cases:
        samples = []
        for index, s in enumerate(starts):
            window = stream[s:s + n]
            rng = Stream(SEED, philox_key([KEY_FIM, index]))
            samples.append({"index": index, "input": window,
                            "output": Fim(bpe, options, rng).sample(window)})
        golden["cases"].append({"options": options, "samples": samples})
    changed = sum(s["input"] != s["output"] for c in golden["cases"] for s in c["samples"])
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False)
        f.write("\n")
    print(f"{changed} of {len(starts) * len(cases)} samples rearranged; wrote {out_dir}/golden.json")


if __name__ == "__main__":
    main(os.path.expanduser(sys.argv[1] if len(sys.argv) > 1 else "~/.cache/megatron-cpp"),
         sys.argv[2] if len(sys.argv) > 2 else "tests/data/fim")
