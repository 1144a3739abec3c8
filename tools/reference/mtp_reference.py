#!/usr/bin/python3
"""PyTorch reference for multi-token prediction (--mtp-num-layers N, DeepSeek-V3 §2.2 as
Megatron-Core's MultiTokenPredictionBlock computes it; tests/unit/model_mtp_golden_test.cpp),
in plain torch float64, written from the definitions (no Megatron code):

  h_0      the decoder's output after its final norm [b, s, h]; the main loss reads it
  depth k  ids_k, pos_k = the input ids and positions shifted left k places, 0 in the last k
           e_k = embedding(ids_k, pos_k)                       (the model's own tables)
           x_k = [norm(e_k; enorm), norm(h_{k-1}; hnorm)] @ eh_projᵀ          [2h] -> [h]
           h_k = norm(layer(x_k); final_layernorm)   one decoder-like layer; RoPE at 0..s-1
           logits_k = the model's LM head on h_k
           L_k = Σ(ce(logits_k, labels shifted k)·mask_k) / max(Σ mask_k, 1),
                 mask_k = the loss mask shifted k places with 0 in the last k
  objective  main loss + FACTOR / N · Σ_k L_k   (the gradients below are of this)

Two models, weights in megatron-cpp's names and layouts (docs/model.md; the fused QKV rows per
head [heads, 3, d], SwiGLU's fc1 [2, ffn, h] gate then up):
  gpt_n2    GPT-2 style (LayerNorm, erf GeLU, learned positions, biases, the output tied to the
            word embedding), N = 2, FACTOR 0.3
  llama_n1  Llama style (RMSNorm, RoPE, SwiGLU, no biases, an untied output layer), N = 1,
            FACTOR 0.1 (Megatron's default)

OUT/<model>.safetensors holds w.<name> (f32 weights), input_ids, labels, loss_mask [b, s], loss
(the main loss), mtp_losses [N] (L_1..L_N), and grad.<name> (autograd of the objective, checked
against finite differences here).

Usage: /usr/bin/python3 tools/reference/mtp_reference.py tests/data/mtp
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import normal_sampler  # noqa: E402

# The shapes the C++ test builds (model_mtp_golden_test.cpp): keep in step.
LAYERS, HIDDEN, HEADS, VOCAB, MAX_POS = 2, 32, 4, 64, 16
HEAD_DIM = HIDDEN // HEADS
BATCH, SEQ = 2, 16
EPS = 1e-5
ROPE_BASE = 10000.0
MODELS = {
    "gpt_n2": dict(llama=False, depths=2, factor=0.3, ffn=64),
    "llama_n1": dict(llama=True, depths=1, factor=0.1, ffn=48),
}


def layer_weights(randn, pre, m):
    """One transformer layer's weights under `pre` ("layers.0.", "mtp.layers.0.transformer_layer.")."""
    w = {}
    for ln in ("input_layernorm", "post_attention_layernorm"):
        w[pre + ln + ".weight"] = randn(HIDDEN, std=0.1, mean=1.0)
        if not m["llama"]:
            w[pre + ln + ".bias"] = randn(HIDDEN, std=0.1)
    a = pre + "self_attention."
    w[a + "query_key_value.weight"] = randn(3 * HIDDEN, HIDDEN)
    w[a + "dense.weight"] = randn(HIDDEN, HIDDEN, std=0.1)
    if m["llama"]:
        w[pre + "mlp.dense_h_to_4h.weight"] = randn(2, m["ffn"], HIDDEN, std=0.2)
    else:
        w[a + "query_key_value.bias"] = randn(3 * HIDDEN, std=0.1)
        w[a + "dense.bias"] = randn(HIDDEN, std=0.1)
        w[pre + "mlp.dense_h_to_4h.weight"] = randn(m["ffn"], HIDDEN, std=0.1)
        w[pre + "mlp.dense_h_to_4h.bias"] = randn(m["ffn"], std=0.1)
        w[pre + "mlp.dense_4h_to_h.bias"] = randn(HIDDEN, std=0.1)
    w[pre + "mlp.dense_4h_to_h.weight"] = randn(HIDDEN, m["ffn"], std=0.1)
    return w


def norm_weights(randn, name, m):
    w = {name + ".weight": randn(HIDDEN, std=0.1, mean=1.0)}
    if not m["llama"]:
        w[name + ".bias"] = randn(HIDDEN, std=0.1)
    return w


def make_weights(gen, m):
    randn = normal_sampler(gen)
    w = {"embedding.word_embeddings.weight": randn(VOCAB, HIDDEN)}
    if not m["llama"]:
        w["embedding.position_embeddings.weight"] = randn(MAX_POS, HIDDEN)
    for i in range(LAYERS):
        w.update(layer_weights(randn, f"layers.{i}.", m))
    w.update(norm_weights(randn, "final_layernorm", m))
    # Megatron's registration order: the depths after the decoder, before the output layer.
    for d in range(m["depths"]):
        pre = f"mtp.layers.{d}."
        w.update(norm_weights(randn, pre + "enorm", m))
        w.update(norm_weights(randn, pre + "hnorm", m))
        w[pre + "eh_proj.weight"] = randn(HIDDEN, 2 * HIDDEN, std=0.1)
        w.update(layer_weights(randn, pre + "transformer_layer.", m))
        w.update(norm_weights(randn, pre + "final_layernorm", m))
    if m["llama"]:
        w["output_layer.weight"] = randn(VOCAB, HIDDEN)
    # Round to f32 first: the C++ side starts from the f32 values.
    return {k: t.float().double() for k, t in w.items()}


def norm(w, name, x, m):
    if m["llama"]:
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w[name + ".weight"]
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * w[name + ".weight"] + w[name + ".bias"]


def rope(x):
    """x [b, heads, s, d] rotated at positions 0..s-1, channel j paired with j + d/2."""
    s, d = x.shape[2], x.shape[3]
    inv_freq = ROPE_BASE ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    theta = torch.arange(s, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [s, d/2]
    cos, sin = torch.cos(theta), torch.sin(theta)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def layer(w, pre, x, m):
    b, s, _ = x.shape
    a = pre + "self_attention."
    bias = (lambda name: 0.0) if m["llama"] else (lambda name: w[name])
    y = norm(w, pre + "input_layernorm", x, m)
    qkv = (y @ w[a + "query_key_value.weight"].t() + bias(a + "query_key_value.bias"))
    qkv = qkv.reshape(b, s, HEADS, 3, HEAD_DIM)
    q, k, v = (qkv[:, :, :, j, :].transpose(1, 2) for j in range(3))  # [b, heads, s, d]
    if m["llama"]:
        q, k = rope(q), rope(k)
    scores = (q @ k.transpose(-1, -2)) / HEAD_DIM ** 0.5
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    scores = scores.masked_fill(~causal, float("-inf"))
    context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, HIDDEN)
    x = x + context @ w[a + "dense.weight"].t() + bias(a + "dense.bias")
    y = norm(w, pre + "post_attention_layernorm", x, m)
    fc1 = w[pre + "mlp.dense_h_to_4h.weight"]
    if m["llama"]:
        u = y @ fc1.reshape(-1, HIDDEN).t()
        gate, up = u[..., : m["ffn"]], u[..., m["ffn"]:]
        act = torch.nn.functional.silu(gate) * up
    else:
        act = torch.nn.functional.gelu(y @ fc1.t() + w[pre + "mlp.dense_h_to_4h.bias"])
    return x + act @ w[pre + "mlp.dense_4h_to_h.weight"].t() + bias(pre + "mlp.dense_4h_to_h.bias")


def shift_left(t, k):
    """Megatron's roll_tensor k times along the sequence: t[:, i + k], zeros in the last k."""
    return torch.cat([t[:, k:], torch.zeros_like(t[:, :k])], dim=1)


def embed(w, ids, positions, m):
    e = w["embedding.word_embeddings.weight"][ids]
    if not m["llama"]:
        e = e + w["embedding.position_embeddings.weight"][positions]
    return e


def head(w, h, m):
    table = w["output_layer.weight"] if m["llama"] else w["embedding.word_embeddings.weight"]
    return h @ table.t()


def masked_mean(logits, labels, mask):
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                                           reduction="none")
    return (ce * mask.reshape(-1)).sum() / torch.clamp(mask.sum(), min=1.0)


def losses(w, ids, labels, loss_mask, m):
    """(main loss, [L_1..L_N])."""
    positions = torch.arange(SEQ)[None].expand(BATCH, SEQ)
    x = embed(w, ids, positions, m)
    for i in range(LAYERS):
        x = layer(w, f"layers.{i}.", x, m)
    hidden = norm(w, "final_layernorm", x, m)
    main = masked_mean(head(w, hidden, m), labels, loss_mask)
    depth_losses = []
    for d in range(m["depths"]):
        k, pre = d + 1, f"mtp.layers.{d}."
        e = embed(w, shift_left(ids, k), shift_left(positions, k), m)
        cat = torch.cat([norm(w, pre + "enorm", e, m), norm(w, pre + "hnorm", hidden, m)], dim=-1)
        x = layer(w, pre + "transformer_layer.", cat @ w[pre + "eh_proj.weight"].t(), m)
        hidden = norm(w, pre + "final_layernorm", x, m)
        depth_losses.append(masked_mean(head(w, hidden, m), shift_left(labels, k),
                                        shift_left(loss_mask, k)))
    return main, depth_losses


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, m in MODELS.items():
        gen = torch.Generator().manual_seed(20261207)
        weights = make_weights(gen, m)
        ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        loss_mask = torch.ones(BATCH, SEQ, dtype=torch.float64)
        loss_mask[1, :3] = 0.0      # masked at the start: shifted into other depths' places
        loss_mask[0, SEQ - 4] = 0.0  # and one near the end
        params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

        def objective():
            main_loss, depth_losses = losses(params, ids, labels, loss_mask, m)
            return main_loss + m["factor"] / m["depths"] * sum(depth_losses), main_loss, depth_losses

        total, main_loss, depth_losses = objective()
        total.backward()
        checked = ["embedding.word_embeddings.weight", "layers.0.self_attention.query_key_value.weight",
                   "mtp.layers.0.eh_proj.weight", "mtp.layers.0.enorm.weight",
                   f"mtp.layers.{m['depths'] - 1}.transformer_layer.mlp.dense_4h_to_h.weight"]
        safetensors_io.check_gradients(lambda: objective()[0], params, checked,
                                       torch.Generator().manual_seed(7))
        golden = {"w." + k: t.float().numpy() for k, t in weights.items()}
        golden.update({
            "input_ids": ids.to(torch.int32).numpy(),
            "labels": labels.to(torch.int32).numpy(),
            "loss_mask": loss_mask.float().numpy(),
            "loss": np.array(main_loss.item(), dtype=np.float64),
            "mtp_losses": np.array([l.item() for l in depth_losses], dtype=np.float64),
        })
        for k, t in params.items():
            golden["grad." + k] = t.grad.float().numpy()
        path = os.path.join(out_dir, name + ".safetensors")
        safetensors_io.save(path, golden, {"generator": "tools/reference/mtp_reference.py",
                                           "torch": torch.__version__})
        print(f"{path}: loss {main_loss.item():.6f}, mtp {[round(l.item(), 6) for l in depth_losses]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/mtp")
