#!/usr/bin/python3
"""PyTorch reference for muP (--use-mup; Yang et al. 2022, "Tensor Programs V", as Megatron-Core
applies it) on a tiny GPT-2-style model (tests/unit/model_mup_pytorch_golden_test.cpp), in plain
torch float64, written from the definitions (no Megatron code):
  width multiplier   m = hidden / base_hidden = 32 / 16 = 2
  embedding output   (word + position) * EMBEDDING_MULT
  attention scores   q.k / d (power 1, no base head dim) instead of q.k / sqrt(d)
  logits             hidden . embeddingᵀ * OUTPUT_MULT (1/m: --mup-output-mult left at 1)
  optimizer          torch.optim.AdamW with Megatron's muP groups: the hidden matrices (QKV,
                     attention dense, both MLP matrices) at lr / m and eps / m; the embeddings
                     (word, position) and the vectors (biases, LayerNorm) at lr and eps; weight
                     decay on the matrices and embeddings only.
The model: LayerNorm, exact (erf) GeLU, learned positions, linear biases, the output layer tied to
the word embedding; weights in megatron-cpp's names and layouts (docs/model.md; the fused QKV rows
per head [heads, 3, d]).

OUT/golden.safetensors holds w.<name> (f32 weights), input_ids, labels, loss_mask [b, s],
logits [b, s, V], loss [], grad.<name> (autograd, checked against finite differences here) and
step.<name> (the weights after one AdamW step from these gradients).

Usage: /usr/bin/python3 tools/reference/mup_reference.py tests/data/mup
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import normal_sampler  # noqa: E402

# The shape and muP options the C++ test builds (model_mup_pytorch_golden_test.cpp): keep in step.
LAYERS, HIDDEN, HEADS, FFN, VOCAB, MAX_POS = 2, 32, 4, 64, 64, 16
BASE_HIDDEN, EMBEDDING_MULT = 16, 1.5
WIDTH_MULT = HIDDEN / BASE_HIDDEN
OUTPUT_MULT = 1.0 / WIDTH_MULT
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-5
BATCH, SEQ = 2, 16
# One optimizer step: eps large enough that its / m shows in the update.
LR, WEIGHT_DECAY, BETAS, ADAM_EPS = 1e-2, 0.1, (0.9, 0.95), 1e-3
HIDDEN_MATRICES = ("query_key_value.weight", "dense.weight", "dense_h_to_4h.weight",
                   "dense_4h_to_h.weight")


def make_weights(gen):
    randn = normal_sampler(gen)
    w = {"embedding.word_embeddings.weight": randn(VOCAB, HIDDEN),
         "embedding.position_embeddings.weight": randn(MAX_POS, HIDDEN)}
    for i in range(LAYERS):
        pre = f"layers.{i}."
        for ln in ("input_layernorm", "post_attention_layernorm"):
            w[pre + ln + ".weight"] = randn(HIDDEN, std=0.1, mean=1.0)
            w[pre + ln + ".bias"] = randn(HIDDEN, std=0.1)
        a = pre + "self_attention."
        w[a + "query_key_value.weight"] = randn(3 * HIDDEN, HIDDEN)
        w[a + "query_key_value.bias"] = randn(3 * HIDDEN, std=0.1)
        w[a + "dense.weight"] = randn(HIDDEN, HIDDEN, std=0.1)
        w[a + "dense.bias"] = randn(HIDDEN, std=0.1)
        w[pre + "mlp.dense_h_to_4h.weight"] = randn(FFN, HIDDEN, std=0.1)
        w[pre + "mlp.dense_h_to_4h.bias"] = randn(FFN, std=0.1)
        w[pre + "mlp.dense_4h_to_h.weight"] = randn(HIDDEN, FFN, std=0.1)
        w[pre + "mlp.dense_4h_to_h.bias"] = randn(HIDDEN, std=0.1)
    w["final_layernorm.weight"] = randn(HIDDEN, std=0.1, mean=1.0)
    w["final_layernorm.bias"] = randn(HIDDEN, std=0.1)
    # Round to f32 first: the C++ side starts from the f32 values.
    return {k: t.float().double() for k, t in w.items()}


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * w + b


def forward(w, ids):
    b, s = ids.shape
    d = HEAD_DIM
    x = (w["embedding.word_embeddings.weight"][ids]
         + w["embedding.position_embeddings.weight"][:s][None]) * EMBEDDING_MULT
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    for i in range(LAYERS):
        pre = f"layers.{i}."
        a = pre + "self_attention."
        y = layernorm(x, w[pre + "input_layernorm.weight"], w[pre + "input_layernorm.bias"])
        qkv = (y @ w[a + "query_key_value.weight"].t() + w[a + "query_key_value.bias"])
        qkv = qkv.reshape(b, s, HEADS, 3, d)
        q, k, v = (qkv[:, :, :, j, :].transpose(1, 2) for j in range(3))  # [b, heads, s, d]
        scores = (q @ k.transpose(-1, -2)) / d  # muP: 1/d, not 1/sqrt(d)
        scores = scores.masked_fill(~causal, float("-inf"))
        context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, HIDDEN)
        x = x + context @ w[a + "dense.weight"].t() + w[a + "dense.bias"]
        m = layernorm(x, w[pre + "post_attention_layernorm.weight"],
                      w[pre + "post_attention_layernorm.bias"])
        u = m @ w[pre + "mlp.dense_h_to_4h.weight"].t() + w[pre + "mlp.dense_h_to_4h.bias"]
        x = x + torch.nn.functional.gelu(u) @ w[pre + "mlp.dense_4h_to_h.weight"].t() \
            + w[pre + "mlp.dense_4h_to_h.bias"]
    x = layernorm(x, w["final_layernorm.weight"], w["final_layernorm.bias"])
    return (x @ w["embedding.word_embeddings.weight"].t()) * OUTPUT_MULT


def main(out_dir):
    gen = torch.Generator().manual_seed(20261208)
    weights = make_weights(gen)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    loss_mask = torch.ones(BATCH, SEQ, dtype=torch.float64)
    loss_mask[1, :3] = 0.0
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
        ["embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
         "layers.0.self_attention.query_key_value.weight", "layers.1.mlp.dense_4h_to_h.weight",
         "final_layernorm.bias"],
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

    # One AdamW step in Megatron's muP groups, from the f32-rounded gradients the C++ side has.
    hidden = [k for k in params if k.endswith(HIDDEN_MATRICES)]
    embeddings = [k for k in params if k.startswith("embedding.")]
    vectors = [k for k in params if k not in hidden and k not in embeddings]
    assert all(params[k].dim() == 1 for k in vectors) and len(hidden) == 4 * LAYERS
    for t in params.values():
        t.grad = t.grad.float().double()
    groups = [
        {"params": [params[k] for k in hidden], "lr": LR / WIDTH_MULT, "eps": ADAM_EPS / WIDTH_MULT,
         "weight_decay": WEIGHT_DECAY},
        {"params": [params[k] for k in embeddings], "weight_decay": WEIGHT_DECAY},
        {"params": [params[k] for k in vectors], "weight_decay": 0.0},
    ]
    torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=ADAM_EPS).step()
    for k, t in params.items():
        golden["step." + k] = t.detach().float().numpy()

    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/mup_reference.py",
                         "torch": torch.__version__})
    print(f"loss {loss.item():.10f}; wrote {out_dir}/golden.safetensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/mup")
