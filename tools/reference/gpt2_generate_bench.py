#!/usr/bin/python3
"""PyTorch baseline for `megatron bench --mode generate` (bench/generate_vs_pytorch.sh).

GPT-2 (124M by default, random weights) decoding greedily with a KV cache the way HuggingFace's
GPT2LMHeadModel does it in eager PyTorch: Conv1D projections (addmm with [in, out] weights),
past keys/values concatenated to the new ones every step, tanh GeLU, LM head tied to wte. No
`transformers` needed: the same arithmetic in plain torch, so the comparison is of the engines.
Prints (and with --json-file writes) one JSON object per (dtype, batch): prefill tokens/s, decode
ms/token, decode tokens/s, weight GB/s — the fields `megatron bench --mode generate` writes.

Usage: /usr/bin/python3 tools/reference/gpt2_generate_bench.py [--threads N] [--json-file F]
"""
import argparse
import json
import math
import os
import time

import torch


def make_weights(layers, h, vocab, positions, dtype):
    g = torch.Generator().manual_seed(0)

    def randn(*shape, std=0.02):
        return (torch.randn(*shape, generator=g) * std).to(dtype)

    w = {"wte": randn(vocab, h), "wpe": randn(positions, h, std=0.01)}
    for i in range(layers):
        p = f"h{i}."
        w[p + "ln1.w"], w[p + "ln1.b"] = torch.ones(h, dtype=dtype), torch.zeros(h, dtype=dtype)
        w[p + "attn.w"], w[p + "attn.b"] = randn(h, 3 * h), torch.zeros(3 * h, dtype=dtype)
        w[p + "proj.w"], w[p + "proj.b"] = randn(h, h), torch.zeros(h, dtype=dtype)
        w[p + "ln2.w"], w[p + "ln2.b"] = torch.ones(h, dtype=dtype), torch.zeros(h, dtype=dtype)
        w[p + "fc.w"], w[p + "fc.b"] = randn(h, 4 * h), torch.zeros(4 * h, dtype=dtype)
        w[p + "fc2.w"], w[p + "fc2.b"] = randn(4 * h, h), torch.zeros(h, dtype=dtype)
    w["lnf.w"], w["lnf.b"] = torch.ones(h, dtype=dtype), torch.zeros(h, dtype=dtype)
    return w


def conv1d(x, weight, bias):  # HF's Conv1D: x @ W + b with W [in, out]
    shape = x.shape[:-1] + (weight.shape[1],)
    return torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight).view(shape)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward(w, ids, past, layers, heads):
    b, s = ids.shape
    h = w["wte"].shape[1]
    d = h // heads
    start = 0 if past[0] is None else past[0][0].shape[2]
    x = w["wte"][ids] + w["wpe"][start:start + s]
    for i in range(layers):
        p = f"h{i}."
        a = torch.nn.functional.layer_norm(x, (h,), w[p + "ln1.w"], w[p + "ln1.b"])
        q, k, v = conv1d(a, w[p + "attn.w"], w[p + "attn.b"]).split(h, dim=2)
        q, k, v = (t.view(b, s, heads, d).transpose(1, 2) for t in (q, k, v))
        if past[i] is not None:
            k = torch.cat((past[i][0], k), dim=-2)
            v = torch.cat((past[i][1], v), dim=-2)
        past[i] = (k, v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        total = k.shape[2]
        causal = torch.ones(s, total, dtype=torch.bool).tril(total - s)
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        y = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, h)
        x = x + conv1d(y, w[p + "proj.w"], w[p + "proj.b"])
        m = torch.nn.functional.layer_norm(x, (h,), w[p + "ln2.w"], w[p + "ln2.b"])
        x = x + conv1d(gelu_new(conv1d(m, w[p + "fc.w"], w[p + "fc.b"])), w[p + "fc2.w"],
                       w[p + "fc2.b"])
    x = torch.nn.functional.layer_norm(x[:, -1], (h,), w["lnf.w"], w["lnf.b"])
    return torch.matmul(x, w["wte"].t())  # last position's logits [b, vocab]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--prompt-length", type=int, default=128)
    ap.add_argument("--tokens-to-generate", type=int, default=32)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--dtypes", nargs="+", default=["f32", "bf16"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "0")))
    ap.add_argument("--json-file")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    out = open(a.json_file, "w") if a.json_file else None
    for name in a.dtypes:
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[name]
        w = make_weights(a.layers, a.hidden, a.vocab, a.positions, dtype)
        weight_bytes = sum(t.numel() * t.element_size() for t in w.values())
        for b in a.batch_sizes:
            ids = (torch.arange(b * a.prompt_length) * 7919 + 13).remainder(a.vocab).view(b, -1)
            best_prefill = best_decode = float("inf")
            with torch.inference_mode():
                for rep in range(a.repeats + 1):  # rep 0 warms up
                    past = [None] * a.layers
                    t0 = time.perf_counter()
                    nxt = forward(w, ids, past, a.layers, a.heads).argmax(-1, keepdim=True)
                    prefill = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    for _ in range(a.tokens_to_generate):
                        nxt = forward(w, nxt, past, a.layers, a.heads).argmax(-1, keepdim=True)
                    decode = (time.perf_counter() - t0) / a.tokens_to_generate
                    if rep > 0:
                        best_prefill, best_decode = min(best_prefill, prefill), min(best_decode, decode)
            r = {"impl": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                 "dtype": name, "batch": b, "prompt": a.prompt_length,
                 "tokens": a.tokens_to_generate,
                 "prefill_tokens_per_s": b * a.prompt_length / best_prefill,
                 "decode_ms_per_token": best_decode * 1e3, "decode_tokens_per_s": b / best_decode,
                 "weight_gb_per_s": weight_bytes / best_decode / 1e9}
            print(json.dumps(r), flush=True)
            if out:
                out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
