#!/usr/bin/python3
"""PyTorch reference for the Llama golden tests (tests/unit/model_llama_pytorch_golden_test.cpp,
tests/dist/llama_pytorch_golden_test.cpp).

Builds a tiny Llama-family decoder from deterministic random weights in HuggingFace's
LlamaForCausalLM layout (separate q/k/v/o_proj, gate/up/down_proj, names as in the hub
repositories), written here from the published architecture (Touvron et al. 2023; RoPE from
Su et al. 2021 in the rotate-half convention, RMSNorm from Zhang & Sennrich 2019, SwiGLU from
Shazeer 2020, grouped-query attention from Ainslie et al. 2023) with plain torch in float64,
no `transformers`:
  x = embed(ids)
  per layer: a = RMSNorm(x); q, k, v = a Wqᵀ (+bq), a Wkᵀ (+bk), a Wvᵀ (+bv)
             q, k rotated by RoPE at positions 0..s-1 (θ_j = p · base^(−2j/d))
             query head i uses KV head i // (heads / kv_heads); causal softmax(q kᵀ / √d) v
             x = x + (·) Woᵀ;  m = RMSNorm(x);  x = x + (silu(m Wgᵀ) ⊙ m Wuᵀ) Wdᵀ
  logits = RMSNorm(x) lm_headᵀ (untied)
and writes
  OUT/hf/config.json, OUT/hf/model.safetensors   the HF-layout model directory (f32 weights)
  OUT/golden.safetensors                         input_ids, labels, loss_mask [b, s];
                                                 logits [b, s, vocab]; loss []; grad.<HF name>
The loss is Σ(ce · loss_mask) / Σ loss_mask over all tokens, as Megatron's GPT loss.

Usage: /usr/bin/python3 tools/reference/llama_reference.py tests/data/llama_tiny [qwen2|qwen3]
  qwen2: a Qwen2ForCausalLM instead (q/k/v biases), written to the given directory;
  qwen3: a Qwen3ForCausalLM (each head's q and k RMS-normalised over its channels before RoPE,
         q_norm / k_norm of [head_dim], Yang et al. 2025).
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import normal_sampler, write_outputs  # noqa: E402

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "vocab_size": 96, "max_position_embeddings": 64, "hidden_size": 128,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
    "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
    "tie_word_embeddings": False, "initializer_range": 0.02, "torch_dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2,
}
# Smaller: it exercises the q/k/v biases; the rest is Llama's, checked by the larger fixture.
QWEN2 = dict(LLAMA, architectures=["Qwen2ForCausalLM"], model_type="qwen2", rope_theta=1000000.0,
             hidden_size=64, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4)
del QWEN2["attention_bias"], QWEN2["mlp_bias"]
# GQA with the QK norms; head_dim given explicitly, as Qwen3's configs do.
QWEN3 = dict(LLAMA, architectures=["Qwen3ForCausalLM"], model_type="qwen3", rope_theta=1000000.0,
             hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)
BATCH, SEQ = 2, 16


def make_weights(gen, config, qkv_bias, qk_norm=False):
    """HF Llama weights; std 0.2 (not 0.02) so that every path carries a visible signal."""
    h, v, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    nh, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim", h // nh)
    randn = normal_sampler(gen)
    w = {"model.embed_tokens.weight": randn(v, h)}
    for i in range(config["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        w[pre + "input_layernorm.weight"] = randn(h, std=0.1, mean=1.0)
        w[pre + "self_attn.q_proj.weight"] = randn(nh * d, h, std=0.1)
        w[pre + "self_attn.k_proj.weight"] = randn(nkv * d, h, std=0.1)
        w[pre + "self_attn.v_proj.weight"] = randn(nkv * d, h, std=0.1)
        if qkv_bias:
            for p, n in (("q", nh), ("k", nkv), ("v", nkv)):
                w[pre + f"self_attn.{p}_proj.bias"] = randn(n * d, std=0.1)
        if qk_norm:
            w[pre + "self_attn.q_norm.weight"] = randn(d, std=0.1, mean=1.0)
            w[pre + "self_attn.k_norm.weight"] = randn(d, std=0.1, mean=1.0)
        w[pre + "self_attn.o_proj.weight"] = randn(h, nh * d, std=0.1)
        w[pre + "post_attention_layernorm.weight"] = randn(h, std=0.1, mean=1.0)
        w[pre + "mlp.gate_proj.weight"] = randn(f, h, std=0.1)
        w[pre + "mlp.up_proj.weight"] = randn(f, h, std=0.1)
        w[pre + "mlp.down_proj.weight"] = randn(h, f, std=0.1)
    w["model.norm.weight"] = randn(h, std=0.1, mean=1.0)
    w["lm_head.weight"] = randn(v, h)
    # Round to f32 first: the C++ side starts from the f32 file, so both use the same weights.
    return {k: t.float().double() for k, t in w.items()}


def rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x, base):
    """x [b, heads, s, d] rotated at positions 0..s-1: channel j pairs with j + d/2."""
    s, d = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # [d/2]
    theta = torch.arange(s, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [s, d/2]
    cos, sin = torch.cos(theta), torch.sin(theta)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def dense_mlp(w, pre, m):
    """HF's gated MLP of layer `pre`: (silu(m Wgᵀ) ⊙ m Wuᵀ) Wdᵀ."""
    gate = m @ w[pre + "mlp.gate_proj.weight"].t()
    up = m @ w[pre + "mlp.up_proj.weight"].t()
    return (gate * torch.sigmoid(gate) * up) @ w[pre + "mlp.down_proj.weight"].t()


def forward(w, ids, config, mlp=None):
    """Logits [b, s, vocab]; mlp(w, layer prefix, m [b, s, h]) is the MLP block (default: the
    dense gated MLP; hf_moe_reference.py passes its sparse blocks)."""
    mlp = mlp or dense_mlp
    b, s = ids.shape
    h, nh, nkv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim", h // nh)
    eps, base = config["rms_norm_eps"], config["rope_theta"]
    x = w["model.embed_tokens.weight"][ids]
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))

    def linear(t, name):
        y = t @ w[name + ".weight"].t()
        return y + w[name + ".bias"] if name + ".bias" in w else y

    for i in range(config["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        a = rms_norm(x, w[pre + "input_layernorm.weight"], eps)
        q = linear(a, pre + "self_attn.q_proj").reshape(b, s, nh, d)
        k = linear(a, pre + "self_attn.k_proj").reshape(b, s, nkv, d)
        if pre + "self_attn.q_norm.weight" in w:  # Qwen3: per head, before RoPE
            q = rms_norm(q, w[pre + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[pre + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = linear(a, pre + "self_attn.v_proj").reshape(b, s, nkv, d).transpose(1, 2)
        q, k = rope(q, base), rope(k, base)
        k = k.repeat_interleave(nh // nkv, dim=1)  # query head i uses KV head i // (nh / nkv)
        v = v.repeat_interleave(nh // nkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, nh * d)
        x = x + y @ w[pre + "self_attn.o_proj.weight"].t()
        m = rms_norm(x, w[pre + "post_attention_layernorm.weight"], eps)
        x = x + mlp(w, pre, m)
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].t()


def main(out_dir, variant):
    config = {"qwen2": QWEN2, "qwen3": QWEN3}.get(variant, LLAMA)
    gen = torch.Generator().manual_seed(
        {"qwen2": 20250301, "qwen3": 20261206}.get(variant, 20250201))
    weights = make_weights(gen, config, qkv_bias=variant == "qwen2",
                           qk_norm=variant == "qwen3")
    v = config["vocab_size"]
    ids = torch.randint(0, v, (BATCH, SEQ), generator=gen)
    labels = torch.randint(0, v, (BATCH, SEQ), generator=gen)
    loss_mask = torch.ones(BATCH, SEQ, dtype=torch.float64)
    loss_mask[0, -3:] = 0.0  # masked tokens must not count
    loss_mask[1, 5] = 0.0

    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

    def compute():
        logits = forward(params, ids, config)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, v), labels.reshape(-1),
                                               reduction="none")
        return logits, (ce * loss_mask.reshape(-1)).sum() / loss_mask.sum()

    logits, loss = compute()
    loss.backward()
    # Autograd against finite differences, so the golden gradients are trusted independently.
    last = f"model.layers.{config['num_hidden_layers'] - 1}."
    checked = ["model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight",
               "model.layers.0.self_attn.q_proj.weight", last + "mlp.gate_proj.weight",
               last + "post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"]
    if variant == "qwen2":
        checked.append(last + "self_attn.k_proj.bias")
    if variant == "qwen3":
        checked += ["model.layers.0.self_attn.q_norm.weight", last + "self_attn.k_norm.weight"]
    safetensors_io.check_gradients(lambda: compute()[1], params, checked,
                                   torch.Generator().manual_seed(7))

    hf = {k: t.float().numpy() for k, t in weights.items()}
    golden = {
        "input_ids": ids.to(torch.int32).numpy(),
        "labels": labels.to(torch.int32).numpy(),
        "loss_mask": loss_mask.float().numpy(),
        "logits": logits.detach().float().numpy(),
        "loss": np.array(loss.item(), dtype=np.float64),
    }
    write_outputs(out_dir, config, hf, golden, params, "tools/reference/llama_reference.py")
    print(f"loss {loss.item():.10f}; wrote {out_dir}/hf and {out_dir}/golden.safetensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/llama_tiny",
         sys.argv[2] if len(sys.argv) > 2 else "llama")
