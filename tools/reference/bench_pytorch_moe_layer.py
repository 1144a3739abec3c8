#!/usr/bin/env python3
"""One Mixtral mixture-of-experts block's training step in plain PyTorch: the reference that
bench/moe_layer.sh puts beside `megatron bench --mode moe`.

The block is HuggingFace's MixtralSparseMoeBlock, written out as transformers has it: a router
linear (no bias), softmax over all experts in float32, the top k, the k weights renormalised to
sum to 1, then a Python loop over the experts — each picks its tokens with torch.where on the
one-hot expert mask, runs its SwiGLU MLP (w2(silu(w1 x) * w3 x), no biases) on them, scales by
the routing weight and index_add_s the result into the output. No load-balancing loss (HF
computes it outside the block). One step = forward + backward of every weight and the input
with a fixed random upstream gradient; gradients are set to None between steps (no optimizer:
`megatron bench --mode moe` times the layer's forward and backward too). bf16 runs under CPU
autocast with float32 weights, as bench_pytorch_gpt.py does.

Usage:
  bench_pytorch_moe_layer.py [--tokens 4096] [--hidden 1024] [--ffn 3584] [--experts 8]
                             [--topk 2] [--dtype fp32|bf16] [--threads 2] [--warmup 1]
                             [--iters 3]
Prints: pytorch MoE block ... : step time (ms): <best of --iters>
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoeBlock(nn.Module):
    def __init__(self, hidden, ffn, experts, topk):
        super().__init__()
        self.experts_count, self.topk = experts, topk
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, ffn) for _ in range(experts))

    def forward(self, hidden_states):
        tokens, hidden = hidden_states.shape
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.topk, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final = torch.zeros((tokens, hidden), dtype=hidden_states.dtype)
        expert_mask = F.one_hot(selected, num_classes=self.experts_count).permute(2, 1, 0)
        for e in range(self.experts_count):
            choice, token = torch.where(expert_mask[e])
            current = self.experts[e](hidden_states[token])
            current = current * routing_weights[token, choice, None]
            final.index_add_(0, token, current.to(hidden_states.dtype))
        return final


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=3584)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    block = SparseMoeBlock(a.hidden, a.ffn, a.experts, a.topk)
    for w in block.parameters():
        nn.init.normal_(w, std=0.02)
    x = torch.randn(a.tokens, a.hidden, requires_grad=True)
    dout = torch.randn(a.tokens, a.hidden)
    best = float("inf")
    for i in range(a.warmup + a.iters):
        for w in block.parameters():
            w.grad = None
        x.grad = None
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            out = block(x)
        out.backward(dout.to(out.dtype))
        elapsed = time.perf_counter() - t0
        if i >= a.warmup:
            best = min(best, elapsed)
    print(f"pytorch MoE block {a.experts} experts top-{a.topk} h={a.hidden} ffn={a.ffn} "
          f"tokens={a.tokens} {a.dtype} threads={a.threads}: step time (ms): {best * 1e3:.1f}")


if __name__ == "__main__":
    main()
