#!/usr/bin/python3
"""PyTorch reference for multi-latent attention (DeepSeek-V2, Liu et al. 2024, §2.1 and its
appendix; the structure of HF's DeepSeek-V2 modelling), for tests/unit/mla_pytorch_golden_test.cpp
and tests/dist/model_mla_tp_test.cpp, in plain torch float64, written from the paper (no
Megatron code):

  queries  c_q = W_DQ x (the query latent, rank rq), normalised, q = W_UQ c_q, per head
           [q_content (dn) | q_rope (dr)]; without a query latent q = W_Q x
  keys     [c_kv | k_rope] = W_DKV x: the key/value latent (rank r, normalised) and ONE rope
           key of dr channels per position, shared by every head; [k_content (dn) | v (dv)] =
           W_UKV c_kv per head; k = [k_content | k_rope]
  RoPE     on q_rope and k_rope only (rotate-half pairs (j, j + dr/2), base 10000, positions
           0..s-1), at YaRN scaling factor 1 (where YaRN's frequencies are RoPE's), or with
           mla_yarn at factor 40 (yarn_reference.py's frequencies and cos/sin factor, with
           Megatron-Core MLA's fixed original context 4096 and betas 32, 1)
  scores   q kᵀ · mscale(F, mscale_all_dim)² / √(dn + dr) (YaRN's temperature, 1 at F = 1),
           causal softmax, times v → [b, s, heads · dv] → output projection

Three fixtures (argument VARIANT):
  mla       GPT with learned absolute positions AND MLA's RoPE (Megatron's default position
            embedding), LayerNorm (with biases, also on the two latents), linear biases, GeLU
            (erf), a query latent (--q-lora-rank), untied output layer
  mla_rms   --position-embedding-type rope (no learned positions), RMSNorm everywhere, SwiGLU,
            no linear biases, no query latent (a direct query projection), tied output layer
  mla_yarn  mla's model with a RoPE part of 10 channels (5 pairs: kept, blended and
            interpolated frequencies) and YaRN: --rotary-scaling-factor 40 --mscale 1
            --mscale-all-dim 0.8 (cos/sin factor 1.369/1.295, softmax scale × 1.295²)

The weights are in megatron-cpp's parameter names and layouts (model/mla_projection.h):
  layers.i.self_attention.linear_q_down_proj.weight [rq, h], .q_layernorm.{weight,bias} [rq],
  .linear_q_up_proj.weight [heads·(dn+dr), h] (rows per head: content then rope channels) or
  .linear_q_proj.weight [heads·(dn+dr), h], .linear_kv_down_proj.weight [r + dr, h] (latent rows
  then the rope key's), .kv_layernorm.{weight,bias} [r], .linear_kv_up_proj.weight
  [heads·(dn+dv), r] (rows per head: key content then value), .dense.{weight [h, heads·dv], bias}
and OUT/golden.safetensors holds w.<name>, input_ids, labels, loss_mask, logits, loss, grad.<name>.

Usage: /usr/bin/python3 tools/reference/mla_reference.py mla tests/data/mla
       /usr/bin/python3 tools/reference/mla_reference.py mla_rms tests/data/mla_rms
       /usr/bin/python3 tools/reference/mla_reference.py mla_yarn tests/data/mla_yarn
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import normal_sampler  # noqa: E402
from yarn_reference import rotate_half, yarn_cos_sin, yarn_mscale  # noqa: E402

# The shapes the C++ tests build (tests/common/mla_golden.h): keep in step.
LAYERS, HIDDEN, HEADS, FFN, VOCAB = 2, 32, 4, 48, 64
Q_LORA, KV_LORA, QK_DIM, V_DIM = 24, 16, 8, 6
YARN_FACTOR, YARN_MSCALE, YARN_MSCALE_ALL_DIM = 40.0, 1.0, 0.8  # mla_yarn
ROTARY_BASE, EPS = 10000.0, 1e-5
BATCH, SEQ = 2, 16


class Variant:
    def __init__(self, name):
        self.name = name
        rms = name == "mla_rms"
        self.rmsnorm = rms
        self.learned_positions = not rms
        self.bias = not rms
        self.swiglu = rms
        self.q_lora = 0 if rms else Q_LORA
        self.tied = rms
        self.yarn = name == "mla_yarn"
        self.rope_dim = 10 if self.yarn else 4
        self.factor = YARN_FACTOR if self.yarn else 1.0


def make_weights(gen, v):
    randn = normal_sampler(gen)
    d = QK_DIM + v.rope_dim
    w = {"embedding.word_embeddings.weight": randn(VOCAB, HIDDEN)}
    if v.learned_positions:
        w["embedding.position_embeddings.weight"] = randn(SEQ, HIDDEN)

    def norm(name, n):
        w[name + ".weight"] = 1.0 + randn(n, std=0.1)
        if not v.rmsnorm:
            w[name + ".bias"] = randn(n, std=0.1)

    for i in range(LAYERS):
        pre = f"layers.{i}."
        a = pre + "self_attention."
        norm(pre + "input_layernorm", HIDDEN)
        if v.q_lora:
            w[a + "linear_q_down_proj.weight"] = randn(v.q_lora, HIDDEN, std=0.15)
            norm(a + "q_layernorm", v.q_lora)
            w[a + "linear_q_up_proj.weight"] = randn(HEADS * d, v.q_lora, std=0.15)
        else:
            w[a + "linear_q_proj.weight"] = randn(HEADS * d, HIDDEN, std=0.15)
        w[a + "linear_kv_down_proj.weight"] = randn(KV_LORA + v.rope_dim, HIDDEN, std=0.15)
        norm(a + "kv_layernorm", KV_LORA)
        w[a + "linear_kv_up_proj.weight"] = randn(HEADS * (QK_DIM + V_DIM), KV_LORA, std=0.15)
        w[a + "dense.weight"] = randn(HIDDEN, HEADS * V_DIM, std=0.1)
        norm(pre + "post_attention_layernorm", HIDDEN)
        # SwiGLU's fc1 holds the gate block, then the up block: [2, f, h] in our layout.
        fc1 = 2 * FFN if v.swiglu else FFN
        w[pre + "mlp.dense_h_to_4h.weight"] = randn(fc1, HIDDEN, std=0.1)
        if v.swiglu:
            w[pre + "mlp.dense_h_to_4h.weight"] = w[pre + "mlp.dense_h_to_4h.weight"].reshape(
                2, FFN, HIDDEN)
        w[pre + "mlp.dense_4h_to_h.weight"] = randn(HIDDEN, FFN, std=0.1)
        if v.bias:
            w[a + "dense.bias"] = randn(HIDDEN, std=0.1)
            w[pre + "mlp.dense_h_to_4h.bias"] = randn(fc1, std=0.1)
            w[pre + "mlp.dense_4h_to_h.bias"] = randn(HIDDEN, std=0.1)
    norm("final_layernorm", HIDDEN)
    if not v.tied:
        w["output_layer.weight"] = randn(VOCAB, HIDDEN)
    # Round to f32 first: the C++ side starts from the f32 values.
    return {k: t.float().double() for k, t in w.items()}


def normalise(w, name, x, v):
    if v.rmsnorm:
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w[name + ".weight"]
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * w[name + ".weight"] + w[name + ".bias"]


def rope(x, v):
    """x [..., s, dr]: channel j paired with j + dr/2, rotated by θ_j = p · ω_j, ω_j =
    base^(−2j/dr) (YaRN's blend, cos and sin times its factor, with mla_yarn)."""
    s, r = x.shape[-2], x.shape[-1]
    if v.yarn:
        cos, sin = yarn_cos_sin(r, range(s), ROTARY_BASE, v.factor, mscale=YARN_MSCALE,
                                mscale_all_dim=YARN_MSCALE_ALL_DIM)
        return rotate_half(x, cos, sin)
    inv_freq = ROTARY_BASE ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    theta = torch.arange(s, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [s, r/2]
    return rotate_half(x, torch.cos(theta), torch.sin(theta))


def linear(w, name, x, v):
    weight = w[name + ".weight"]
    y = x @ weight.reshape(-1, weight.shape[-1]).t()
    return y + w[name + ".bias"] if v.bias and name + ".bias" in w else y


def mla(w, a, x, v):
    b, s, _ = x.shape
    d = QK_DIM + v.rope_dim
    if v.q_lora:
        c_q = normalise(w, a + "q_layernorm", x @ w[a + "linear_q_down_proj.weight"].t(), v)
        q = c_q @ w[a + "linear_q_up_proj.weight"].t()
    else:
        q = x @ w[a + "linear_q_proj.weight"].t()
    q = q.reshape(b, s, HEADS, d).transpose(1, 2)  # [b, heads, s, d]
    down = x @ w[a + "linear_kv_down_proj.weight"].t()
    c_kv, k_rope = down[..., :KV_LORA], down[..., KV_LORA:]
    kv = normalise(w, a + "kv_layernorm", c_kv, v) @ w[a + "linear_kv_up_proj.weight"].t()
    kv = kv.reshape(b, s, HEADS, QK_DIM + V_DIM).transpose(1, 2)
    k_content, values = kv[..., :QK_DIM], kv[..., QK_DIM:]
    q = torch.cat([q[..., :QK_DIM], rope(q[..., QK_DIM:], v)], dim=-1)
    k_rope = rope(k_rope, v)[:, None].expand(b, HEADS, s, v.rope_dim)  # one per position
    k = torch.cat([k_content, k_rope], dim=-1)
    temperature = yarn_mscale(v.factor, YARN_MSCALE_ALL_DIM) ** 2
    scores = (q @ k.transpose(-1, -2)) * temperature / math.sqrt(d)
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    scores = scores.masked_fill(~causal, float("-inf"))
    context = (torch.softmax(scores, dim=-1) @ values).transpose(1, 2).reshape(b, s, HEADS * V_DIM)
    return linear(w, a + "dense", context, v)


def forward(w, ids, v):
    b, s = ids.shape
    x = w["embedding.word_embeddings.weight"][ids]
    if v.learned_positions:
        x = x + w["embedding.position_embeddings.weight"][:s]
    for i in range(LAYERS):
        pre = f"layers.{i}."
        x = x + mla(w, pre + "self_attention.", normalise(w, pre + "input_layernorm", x, v), v)
        m = normalise(w, pre + "post_attention_layernorm", x, v)
        u = linear(w, pre + "mlp.dense_h_to_4h", m, v)
        if v.swiglu:
            act = torch.nn.functional.silu(u[..., :FFN]) * u[..., FFN:]
        else:
            act = 0.5 * u * (1.0 + torch.erf(u / math.sqrt(2.0)))
        x = x + linear(w, pre + "mlp.dense_4h_to_h", act, v)
    x = normalise(w, "final_layernorm", x, v)
    out = w["embedding.word_embeddings.weight"] if v.tied else w["output_layer.weight"]
    return x @ out.t()


def main(variant, out_dir):
    v = Variant(variant)
    gen = torch.Generator().manual_seed(
        {"mla": 20261207, "mla_rms": 20261208, "mla_yarn": 20261209}[variant])
    weights = make_weights(gen, v)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    loss_mask = torch.ones(BATCH, SEQ, dtype=torch.float64)
    loss_mask[0, -2:] = 0.0
    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

    def compute():
        logits = forward(params, ids, v)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                                               reduction="none")
        return logits, (ce * loss_mask.reshape(-1)).sum() / loss_mask.sum()

    logits, loss = compute()
    loss.backward()
    a = "layers.0.self_attention."
    checked = [a + "linear_kv_down_proj.weight", a + "kv_layernorm.weight",
               a + "linear_kv_up_proj.weight", "layers.1.self_attention.dense.weight"]
    checked += [a + "linear_q_down_proj.weight", a + "q_layernorm.weight",
                a + "linear_q_up_proj.weight"] if v.q_lora else [a + "linear_q_proj.weight"]
    safetensors_io.check_gradients(lambda: compute()[1], params, checked,
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
                        {"generator": "tools/reference/mla_reference.py " + variant,
                         "torch": torch.__version__})
    print(f"{variant}: loss {loss.item():.10f}; wrote {out_dir}/golden.safetensors")


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "mla"
    assert name in ("mla", "mla_rms", "mla_yarn"), name
    main(name, sys.argv[2] if len(sys.argv) > 2 else "tests/data/" + name)
