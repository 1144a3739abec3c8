#!/usr/bin/env python3
"""GPT-2 training-step throughput in PyTorch: the reference that scripts/gpu_check.sh puts beside
`megatron bench --mode step` on a GPU.

The model is megatron's GPT (docs/model.md), written plainly: learned position embeddings,
pre-LayerNorm blocks (eps 1e-5), fused QKV, causal attention through
F.scaled_dot_product_attention (flash attention where PyTorch has it), erf GeLU (Megatron's
and pretrain-gpt's default), 4h MLP, final LayerNorm, LM head tied to the word embeddings,
vocabulary padded to a multiple of 128 (Megatron's rule), hidden and attention dropout 0.1. Training as megatron's defaults: fp32
master weights under bf16 autocast, cross-entropy in fp32, gradient clipping at 1.0, AdamW
(fused, lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01), random tokens already on the
GPU (megatron bench runs on --mock-data). One step = one micro-batch = one optimizer step, the
same tokens per step as the megatron run it is compared with. No torch.compile: a plain eager
PyTorch program, as a user would write it.

FLOPs per step by Megatron's formula 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)), the one megatron
bench uses, so TFLOP/s are comparable.

Usage:
  bench_pytorch_gpt.py --model 12,768,12,1024,32 [--model L,h,heads,s,micro_batch ...]
                       [--warmup 3] [--iters 10] [--ceiling 8192] [--json results.json]
Prints one line per model:
  pytorch GPT L=12 h=768 heads=12 s=1024 micro-batch=32 bf16: step time (ms): ... | tokens/s: ... |
  TFLOP/s: ... | peak memory (GiB): ...
and, with --ceiling N, "pytorch bf16 GEMM ceiling (N^3): ... TFLOP/s" (median of 20 products of
random N×N bf16 matrices after 3 warm-ups, timed with CUDA events); with --attention b,s,heads,d,
the causal attention alone (the model's causal_attention: scaled_dot_product_attention where
PyTorch has it) in the --dtype, "pytorch attention ...: forward TFLOP/s: ... | forward+backward
TFLOP/s: ..." — FlashAttention's FLOP count (forward 4·b·heads·s²·d / 2 with the causal mask,
backward 2.5 times that), the one `megatron bench --mode kernels` prints beside its own.
"""
import argparse
import gc
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 50257


def padded_vocab(vocab, multiple=128):
    return (vocab + multiple - 1) // multiple * multiple


def megatron_flops_per_step(batch, seq, layers, hidden, vocab):
    return 72.0 * batch * seq * layers * hidden ** 2 * (
        1 + seq / (6.0 * hidden) + vocab / (12.0 * layers * hidden))


def causal_attention(q, k, v, dropout_p):
    """F.scaled_dot_product_attention(is_causal=True) where PyTorch has it (2.0+); before that
    (Debian's 1.13) the same product written out: scores, causal mask, softmax, dropout."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    probs = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), dropout_p)
    return probs @ v


class Block(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1 = nn.LayerNorm(hidden, eps=1e-5)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-5)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):  # x [b, s, h]
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(
            2, 0, 3, 1, 4)  # each [b, heads, s, head_dim]
        a = causal_attention(q, k, v, self.dropout if self.training else 0.0)
        a = a.transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(a), self.dropout, self.training)
        m = self.fc2(F.gelu(self.fc(self.ln2(x))))
        return x + F.dropout(m, self.dropout, self.training)


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, seq, vocab, dropout=0.1, std=0.02):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(hidden, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                # Megatron: output layers (proj, fc2) scaled by 1/sqrt(2L).
                scale = 1.0 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc2.weight")) else 1.0
                nn.init.normal_(p, 0.0, std * scale)

    def forward(self, ids, labels):
        s = ids.shape[1]
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(s, device=ids.device)))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def optimizer_for(model, device):
    # Megatron: weight decay on the matrices (embeddings included), none on biases and LayerNorm.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    fused = {"fused": True} if device == "cuda" else {}  # fused AdamW is CUDA-only
    return torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, **fused)


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def bench_model(layers, hidden, heads, seq, micro_batch, warmup, iters, device="cuda",
                dtype="bf16"):
    vocab = padded_vocab(VOCAB)
    torch.manual_seed(1234)
    model = GPT(layers, hidden, heads, seq, vocab).to(device).train()
    opt = optimizer_for(model, device)
    ids = torch.randint(0, VOCAB, (micro_batch, seq + 1), device=device)
    inputs, labels = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(inputs, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        loss = step()
    first_loss = float(loss)
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        loss = step()
    synchronize(device)
    seconds = (time.perf_counter() - t0) / iters
    tokens = micro_batch * seq
    result = {
        "framework": "pytorch", "layers": layers, "hidden": hidden, "heads": heads, "seq": seq,
        "micro_batch": micro_batch, "step_ms": seconds * 1e3, "tokens_per_s": tokens / seconds,
        "tflops": megatron_flops_per_step(micro_batch, seq, layers, hidden, vocab) / seconds / 1e12,
        "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else 0.0,
        "loss_first": first_loss, "loss_last": float(loss),
        "params": sum(p.numel() for p in model.parameters()),
    }
    del model, opt, ids, inputs, labels
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def gemm_ceiling(n, warmup=3, reps=20):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(warmup):
        a @ b
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2.0 * n ** 3 / times[len(times) // 2] / 1e12


def attention_tflops(b, s, heads, d, device, dtype, warmup=3, min_time=0.5):
    """Forward and forward+backward TFLOP/s of causal_attention (no dropout), mean over calls
    until min_time has passed."""
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    q, k, v = (torch.randn(b, heads, s, d, device=device, dtype=dt, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(b, heads, s, d, device=device, dtype=dt)

    def forward():
        with torch.no_grad():
            causal_attention(q, k, v, 0.0)

    def forward_backward():
        causal_attention(q, k, v, 0.0).backward(dout)

    def seconds_per_call(fn):
        for _ in range(warmup):
            fn()
        synchronize(device)
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            synchronize(device)
            elapsed = time.perf_counter() - start
            if calls >= 2 and elapsed >= min_time:
                return elapsed / calls

    forward_flops = 4.0 * b * heads * s * s * d / 2
    return (forward_flops / seconds_per_call(forward) / 1e12,
            3.5 * forward_flops / seconds_per_call(forward_backward) / 1e12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[],
                    help="L,h,heads,s,micro_batch (repeatable)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--ceiling", type=int, default=0, help="also measure an N^3 bf16 GEMM")
    ap.add_argument("--attention", default="",
                    help="b,s,heads,d: also measure the causal attention alone at this shape")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--device", default="cuda", help="cuda or cpu (bench/compare_pytorch.sh)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"],
                    help="bf16: fp32 weights under bf16 autocast (megatron --bf16); fp32: no autocast")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("pytorch: no GPU visible (torch.cuda.is_available() is False)")
        return 1
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"pytorch {torch.__version__} on {where}", flush=True)
    results = []
    if args.ceiling and args.device == "cuda":
        tf = gemm_ceiling(args.ceiling)
        results.append({"framework": "pytorch", "ceiling_n": args.ceiling, "ceiling_tflops": tf})
        print(f"pytorch bf16 GEMM ceiling ({args.ceiling}^3): {tf:.1f} TFLOP/s", flush=True)
    if args.attention:
        b, s, heads, d = (int(x) for x in args.attention.split(","))
        fwd, both = attention_tflops(b, s, heads, d, args.device, args.dtype)
        results.append({"framework": "pytorch", "attention": args.attention,
                        "forward_tflops": fwd, "forward_backward_tflops": both})
        print(f"pytorch attention b={b} s={s} heads={heads} d={d} causal {args.dtype}: "
              f"forward TFLOP/s: {fwd:.4g} | forward+backward TFLOP/s: {both:.4g}", flush=True)
    status = 0
    for spec in args.model:
        L, h, heads, s, mb = (int(x) for x in spec.split(","))
        name = f"pytorch GPT L={L} h={h} heads={heads} s={s} micro-batch={mb} {args.dtype}"
        try:
            r = bench_model(L, h, heads, s, mb, args.warmup, args.iters, args.device, args.dtype)
        except torch.cuda.OutOfMemoryError:
            print(f"{name}: out of GPU memory", flush=True)
            gc.collect()
            torch.cuda.empty_cache()
            status = 1
            continue
        results.append(r)
        print(f"{name}: step time (ms): {r['step_ms']:.1f} | tokens/s: {r['tokens_per_s']:.1f} | "
              f"TFLOP/s: {r['tflops']:.1f} | peak memory (GiB): {r['peak_gib']:.1f} | "
              f"loss {r['loss_first']:.3f} -> {r['loss_last']:.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
