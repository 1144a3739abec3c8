#!/usr/bin/python3
"""PyTorch reference for the model variants of Megatron-Core that no HF architecture of ours
carries (tests/unit/model_variants_pytorch_golden_test.cpp), Nemotron-style:
  --apply-layernorm-1p   LayerNorm whose stored gain w is zero-centred: y = norm(x) · (1 + w) + β
  --squared-relu         the MLP's activation relu(u)² (So et al. 2021, "Primer")
  --qk-layernorm         each head's query and key LayerNorm-ed over its d channels, before RoPE
  --rotary-interleaved   RoPE on channel pairs (2j, 2j + 1) (Su et al. 2021's own layout) of the
                         first rotary_percent · d channels
with grouped-query attention, linear biases and an untied output layer, in plain torch float64,
written from the published definitions (no Megatron code).

The weights are in megatron-cpp's parameter names and layouts (docs/model.md):
  embedding.word_embeddings.weight [V, h]; layers.i.{input,post_attention}_layernorm.{weight,bias}
  layers.i.self_attention.query_key_value.{weight [g·(q+2)·d, h], bias}: per KV group its q
      query heads, its key, its value; head n = group · q + i
  layers.i.self_attention.{q,k}_layernorm.{weight,bias} [d]
  layers.i.self_attention.dense.{weight [h, heads·d], bias}; layers.i.mlp.dense_h_to_4h.{weight
  [f, h], bias}, layers.i.mlp.dense_4h_to_h.{weight [h, f], bias}; final_layernorm.{weight,bias};
  output_layer.weight [V, h]
and the file OUT/golden.safetensors holds
  w.<name> (f32 weights), input_ids, labels, loss_mask [b, s], logits [b, s, V], loss [],
  grad.<name> (f32 autograd gradients, checked against finite differences here).

Usage: /usr/bin/python3 tools/reference/gpt_variants_reference.py tests/data/gpt_variants
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import normal_sampler  # noqa: E402

# The shape the C++ test builds (model_variants_pytorch_golden_test.cpp): keep in step.
LAYERS, HIDDEN, HEADS, GROUPS, FFN, VOCAB = 2, 32, 4, 2, 48, 64
HEAD_DIM = HIDDEN // HEADS
ROTARY_DIM = HEAD_DIM // 2  # --rotary-percent 0.5
ROTARY_BASE, EPS = 10000.0, 1e-5
BATCH, SEQ = 2, 16


def make_weights(gen, layers=LAYERS):
    randn = normal_sampler(gen)
    q = HEADS // GROUPS
    qkv_rows = GROUPS * (q + 2) * HEAD_DIM
    w = {"embedding.word_embeddings.weight": randn(VOCAB, HIDDEN)}
    for i in range(layers):
        pre = f"layers.{i}."
        for ln in ("input_layernorm", "post_attention_layernorm"):
            w[pre + ln + ".weight"] = randn(HIDDEN, std=0.1)  # γ − 1: near 0
            w[pre + ln + ".bias"] = randn(HIDDEN, std=0.1)
        a = pre + "self_attention."
        w[a + "query_key_value.weight"] = randn(qkv_rows, HIDDEN, std=0.1)
        w[a + "query_key_value.bias"] = randn(qkv_rows, std=0.1)
        for qk in ("q_layernorm", "k_layernorm"):
            w[a + qk + ".weight"] = randn(HEAD_DIM, std=0.1)
            w[a + qk + ".bias"] = randn(HEAD_DIM, std=0.1)
        w[a + "dense.weight"] = randn(HIDDEN, HEADS * HEAD_DIM, std=0.1)
        w[a + "dense.bias"] = randn(HIDDEN, std=0.1)
        w[pre + "mlp.dense_h_to_4h.weight"] = randn(FFN, HIDDEN, std=0.1)
        w[pre + "mlp.dense_h_to_4h.bias"] = randn(FFN, std=0.1)
        w[pre + "mlp.dense_4h_to_h.weight"] = randn(HIDDEN, FFN, std=0.1)
        w[pre + "mlp.dense_4h_to_h.bias"] = randn(HIDDEN, std=0.1)
    w["final_layernorm.weight"] = randn(HIDDEN, std=0.1)
    w["final_layernorm.bias"] = randn(HIDDEN, std=0.1)
    w["output_layer.weight"] = randn(VOCAB, HIDDEN)
    # Round to f32 first: the C++ side starts from the f32 values.
    return {k: t.float().double() for k, t in w.items()}


def layernorm_1p(x, w, b):
    """LayerNorm over the last dim with the zero-centred gain: (1 + w)."""
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * (1.0 + w) + b


def rope_interleaved(x):
    """x [b, heads, s, d]: pairs (2j, 2j + 1) of the first ROTARY_DIM channels rotated by
    θ_j = p · base^(−2j/r) at positions p = 0..s-1; the other channels pass."""
    s = x.shape[-2]
    r = ROTARY_DIM
    inv_freq = ROTARY_BASE ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)  # [r/2]
    theta = torch.arange(s, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [s, r/2]
    cos, sin = torch.cos(theta), torch.sin(theta)
    even, odd = x[..., 0:r:2], x[..., 1:r:2]
    rotated = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
    return torch.cat([rotated.flatten(-2), x[..., r:]], dim=-1)


def final_hidden(w, ids):
    """The final LayerNorm's output [b, s, h] of the model whose weights are `w` (any depth)."""
    b, s = ids.shape
    q, d = HEADS // GROUPS, HEAD_DIM
    x = w["embedding.word_embeddings.weight"][ids]  # [b, s, h]
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    layers = sum(1 for k in w if k.endswith(".input_layernorm.weight"))
    for i in range(layers):
        pre = f"layers.{i}."
        a = pre + "self_attention."
        y = layernorm_1p(x, w[pre + "input_layernorm.weight"], w[pre + "input_layernorm.bias"])
        qkv = y @ w[a + "query_key_value.weight"].t() + w[a + "query_key_value.bias"]
        qkv = qkv.reshape(b, s, GROUPS, q + 2, d)
        queries = qkv[:, :, :, :q, :].reshape(b, s, HEADS, d)  # head = group · q + i
        keys = qkv[:, :, :, q, :]  # [b, s, g, d]
        values = qkv[:, :, :, q + 1, :]
        queries = layernorm_1p(queries, w[a + "q_layernorm.weight"], w[a + "q_layernorm.bias"])
        keys = layernorm_1p(keys, w[a + "k_layernorm.weight"], w[a + "k_layernorm.bias"])
        queries = rope_interleaved(queries.transpose(1, 2))  # [b, heads, s, d]
        keys = rope_interleaved(keys.transpose(1, 2)).repeat_interleave(q, dim=1)
        values = values.transpose(1, 2).repeat_interleave(q, dim=1)
        scores = (queries @ keys.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~causal, float("-inf"))
        context = (torch.softmax(scores, dim=-1) @ values).transpose(1, 2).reshape(b, s, HEADS * d)
        x = x + context @ w[a + "dense.weight"].t() + w[a + "dense.bias"]
        m = layernorm_1p(x, w[pre + "post_attention_layernorm.weight"],
                         w[pre + "post_attention_layernorm.bias"])
        u = m @ w[pre + "mlp.dense_h_to_4h.weight"].t() + w[pre + "mlp.dense_h_to_4h.bias"]
        act = torch.relu(u).pow(2)
        x = x + act @ w[pre + "mlp.dense_4h_to_h.weight"].t() + w[pre + "mlp.dense_4h_to_h.bias"]
    return layernorm_1p(x, w["final_layernorm.weight"], w["final_layernorm.bias"])


def forward(w, ids):
    return final_hidden(w, ids) @ w["output_layer.weight"].t()


def main(out_dir):
    gen = torch.Generator().manual_seed(20261207)
    weights = make_weights(gen)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    loss_mask = torch.ones(BATCH, SEQ, dtype=torch.float64)
    loss_mask[0, -2:] = 0.0
    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

    def compute():
        logits = forward(params, ids)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                                               reduction="none")
        return logits, (ce * loss_mask.reshape(-1)).sum() / loss_mask.sum()

    logits, loss = compute()
    loss.backward()
    safetensors_io.check_gradients(
        lambda: compute()[1], params,
        ["layers.0.input_layernorm.weight", "layers.0.self_attention.q_layernorm.weight",
         "layers.1.self_attention.k_layernorm.bias", "layers.0.self_attention.query_key_value.weight",
         "layers.1.mlp.dense_h_to_4h.bias", "final_layernorm.weight"],
        torch.Generator().manual_seed(7))
    golden = {"w." + k: t.float().numpy() for k, t in weights.items()}
    golden.update({
        "input_ids": ids.to(torch.int32).numpy(),
        "labels": labels.to(torch.int32).numpy(),
        "loss_mask": loss_mask.float().numpy(),
        "logits": logits.detach().float().numpy(),
        "loss": np.array(loss.item(), dtype=np.float64),
    })
    for k, t in params.items():
        golden["grad." + k] = t.grad.float().numpy()
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/gpt_variants_reference.py",
                         "torch": torch.__version__})
    print(f"loss {loss.item():.10f}; wrote {out_dir}/golden.safetensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gpt_variants")
