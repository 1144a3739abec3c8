#!/usr/bin/python3
"""PyTorch reference for DeepSeek sparse attention (DeepSeek-V3.2's DSA on multi-latent
attention), for tests/unit/dsa_pytorch_golden_test.cpp and tests/dist/model_dsa_tp_test.cpp, in
plain torch float64, written from the DeepSeek-V3.2 report and Megatron-Core's documented
semantics (no Megatron code). The model is mla_reference.py's tiny MLA GPT; each layer's
attention adds the lightning indexer:

  indexer   q_I = qr W_qbᵀ (qr: the normalised query latent; x without a query latent),
            H heads of D channels; k_I = LayerNorm(x W_kᵀ) (D channels, weight and bias);
            RoPE on the FIRST dr channels of every q_I head and of k_I (pairs (j, j + dr/2),
            or (2j, 2j + 1) when interleaved); the Hadamard rotation of q_I and k_I (H_D / √D,
            Sylvester's), which leaves their products unchanged; w = x W_wᵀ · H^-½ · D^-½
            scores[b, i, j] = Σ_h w[b, i, h] · relu(q_I[b, i, h] · k_I[b, j])   (relu optional)
            x and qr are detached: only the indexer loss trains the indexer
  top-k     query i keeps its TOPK highest-scoring causal keys (all of them when it has fewer),
            ties to the smaller index; the attention's softmax masks the others
  loss      target = Σ over heads of the main attention's probabilities of the detached Q, K
            (dense causal; or with the sparse loss, restricted to the top-k keys), normalised
            per query; p = softmax of the scores over the same keys;
            indexer loss = COEFF · mean over the b·s queries of Σ_j t̂_j (log t̂_j − log p_j)
  objective lm loss + Σ over layers of the indexer losses (Megatron's DSAIndexerLossAutoScaler
            gives the indexer loss the LM loss's gradient scale); the golden loss is the lm loss

Three fixtures (argument VARIANT):
  dsa         learned positions, LayerNorm, a query latent (--q-lora-rank 24), no linear biases,
              GeLU, untied output layer; the dense indexer loss, ReLU scores
  dsa_sparse  --position-embedding-type rope, RMSNorm, SwiGLU, no query latent, tied output
              layer; the sparse indexer loss, no ReLU, interleaved indexer RoPE
  dsa_dense   dsa with top-k = the sequence (every causal key kept): no selection that bf16's
              rounding could change, for the bf16 comparison of the indexer and its loss

Weights in megatron-cpp's names (model/mla_projection.h, model/dsa_indexer.h): mla_reference.py's
plus layers.i.self_attention.core_attention.indexer.{linear_wq_b.weight [H·D, rq],
linear_wk.weight [D, h], k_norm.{weight,bias} [D], linear_weights_proj.weight [H, h]}.
OUT/golden.safetensors holds w.<name>, input_ids, labels, loss_mask, logits, loss,
indexer_loss [layers] and grad.<name>.

Usage: /usr/bin/python3 tools/reference/dsa_reference.py dsa tests/data/dsa
       /usr/bin/python3 tools/reference/dsa_reference.py dsa_sparse tests/data/dsa_sparse
       /usr/bin/python3 tools/reference/dsa_reference.py dsa_dense tests/data/dsa_dense
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
import mla_reference as mla  # noqa: E402
from reference_common import normal_sampler  # noqa: E402

# The indexer's shapes the C++ tests build (tests/common/dsa_golden.h): keep in step.
INDEX_HEADS, INDEX_DIM, TOPK, COEFF = 4, 8, 5, 0.5
LAYERS, HIDDEN, HEADS, SEQ, BATCH = mla.LAYERS, mla.HIDDEN, mla.HEADS, mla.SEQ, mla.BATCH
ROPE_DIM, QK_DIM, V_DIM, KV_LORA = mla.ROPE_DIM, mla.QK_DIM, mla.V_DIM, mla.KV_LORA


class Variant:
    def __init__(self, name):
        sparse = name == "dsa_sparse"
        self.name = name
        self.rmsnorm = sparse
        self.learned_positions = not sparse
        self.bias = False  # DSA's MLA has no linear biases
        self.swiglu = sparse
        self.q_lora = 0 if sparse else mla.Q_LORA
        self.tied = sparse
        self.sparse_loss = sparse
        self.relu = not sparse
        self.rope_interleaved = sparse
        self.topk = SEQ if name == "dsa_dense" else TOPK


def make_weights(gen, v):
    w = mla.make_weights(gen, v)
    randn = normal_sampler(gen)
    q_in = v.q_lora or HIDDEN
    for i in range(LAYERS):
        p = f"layers.{i}.self_attention.core_attention.indexer."
        w[p + "linear_wq_b.weight"] = randn(INDEX_HEADS * INDEX_DIM, q_in, std=0.3)
        w[p + "linear_wk.weight"] = randn(INDEX_DIM, HIDDEN, std=0.3)
        w[p + "k_norm.weight"] = 1.0 + randn(INDEX_DIM, std=0.1)
        w[p + "k_norm.bias"] = randn(INDEX_DIM, std=0.1)
        w[p + "linear_weights_proj.weight"] = randn(INDEX_HEADS, HIDDEN, std=0.3)
    return {k: t.float().double() for k, t in w.items()}


def layer_norm(w, name, x):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + mla.EPS) * w[name + ".weight"] + w[name + ".bias"]


def rope_first(x, interleaved):
    """RoPE on the first ROPE_DIM channels of x [..., s, D] (rotate-half or interleaved pairs)."""
    r = ROPE_DIM
    head, rest = x[..., :r], x[..., r:]
    if interleaved:
        s = x.shape[-2]
        inv_freq = mla.ROTARY_BASE ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
        theta = torch.arange(s, dtype=torch.float64)[:, None] * inv_freq[None, :]
        cos, sin = torch.cos(theta), torch.sin(theta)
        even, odd = head[..., 0::2], head[..., 1::2]
        rotated = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
        head = rotated.flatten(-2)
    else:
        head = mla.rope(head)
    return torch.cat([head, rest], dim=-1)


def hadamard(n):
    """Sylvester's Hadamard matrix of order n (a power of two), scaled to be orthogonal."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(n)


def indexer_scores(w, p, x, qr, v):
    """x [b, s, h], qr [b, s, rq] (detached) → scores [b, s, s]."""
    b, s, _ = x.shape
    q = (qr @ w[p + "linear_wq_b.weight"].t()).reshape(b, s, INDEX_HEADS, INDEX_DIM)
    q = rope_first(q.transpose(1, 2), v.rope_interleaved)  # [b, H, s, D]
    k = rope_first(layer_norm(w, p + "k_norm", x @ w[p + "linear_wk.weight"].t()),
                   v.rope_interleaved)  # [b, s, D]
    rot = hadamard(INDEX_DIM)
    q, k = q @ rot, k @ rot
    weights = (x @ w[p + "linear_weights_proj.weight"].t()) / math.sqrt(INDEX_HEADS * INDEX_DIM)
    per_head = q @ k[:, None].transpose(-1, -2)  # [b, H, s, s]
    if v.relu:
        per_head = torch.relu(per_head)
    return (per_head * weights.transpose(1, 2)[..., None]).sum(1)


def topk_mask(scores, topk):
    """True where query i keeps key j: its TOPK best causal keys, ties to the smaller index."""
    b, s, _ = scores.shape
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    masked = scores.detach().masked_fill(~causal, float("-inf"))
    order = torch.sort(-masked, dim=-1, stable=True).indices[..., :topk]
    keep = torch.zeros(b, s, s, dtype=torch.bool).scatter_(-1, order, True)
    # The selection must not hinge on rounding: f32 (the C++ side) picks the same keys.
    sorted_scores = torch.sort(masked, dim=-1, descending=True).values
    for i in range(topk, s):
        gap = sorted_scores[:, i, topk - 1] - sorted_scores[:, i, topk]
        assert bool((gap > 1e-4).all() | (gap == 0).all()), ("near tie at query", i, gap)
    return keep & causal


def dsa_attention(w, a, x, v, losses):
    b, s, _ = x.shape
    d = QK_DIM + ROPE_DIM
    if v.q_lora:
        qr = mla.normalise(w, a + "q_layernorm", x @ w[a + "linear_q_down_proj.weight"].t(), v)
        q = qr @ w[a + "linear_q_up_proj.weight"].t()
    else:
        qr = x
        q = x @ w[a + "linear_q_proj.weight"].t()
    q = q.reshape(b, s, HEADS, d).transpose(1, 2)
    down = x @ w[a + "linear_kv_down_proj.weight"].t()
    c_kv, k_rope = down[..., :KV_LORA], down[..., KV_LORA:]
    kv = mla.normalise(w, a + "kv_layernorm", c_kv, v) @ w[a + "linear_kv_up_proj.weight"].t()
    kv = kv.reshape(b, s, HEADS, QK_DIM + V_DIM).transpose(1, 2)
    k_content, values = kv[..., :QK_DIM], kv[..., QK_DIM:]
    q = torch.cat([q[..., :QK_DIM], mla.rope(q[..., QK_DIM:])], dim=-1)
    k = torch.cat([k_content, mla.rope(k_rope)[:, None].expand(b, HEADS, s, ROPE_DIM)], dim=-1)

    idx = indexer_scores(w, a + "core_attention.indexer.", x.detach(), qr.detach(), v)
    keep = topk_mask(idx, v.topk)
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    probs = torch.softmax(scores.masked_fill(~keep[:, None], float("-inf")), dim=-1)
    context = (probs @ values).transpose(1, 2).reshape(b, s, HEADS * V_DIM)

    # The indexer loss against the detached main attention.
    valid = keep if v.sparse_loss else causal.expand(b, s, s)
    target_scores = (q.detach() @ k.detach().transpose(-1, -2)) / math.sqrt(d)
    target = torch.softmax(target_scores.masked_fill(~valid[:, None], float("-inf")), -1).sum(1)
    target = target / target.sum(-1, keepdim=True).clamp_min(1e-10)
    log_p = torch.log_softmax(idx.masked_fill(~valid, float("-inf")), dim=-1)
    kl = torch.where(valid, target * (torch.log(target.clamp_min(1e-10)) - log_p),
                     torch.zeros_like(target))
    losses.append(COEFF * kl.sum() / (b * s))
    return mla.linear(w, a + "dense", context, v)


def forward(w, ids, v):
    """→ logits [b, s, V] and the layers' indexer losses."""
    b, s = ids.shape
    x = w["embedding.word_embeddings.weight"][ids]
    if v.learned_positions:
        x = x + w["embedding.position_embeddings.weight"][:s]
    losses = []
    for i in range(LAYERS):
        pre = f"layers.{i}."
        attn_in = mla.normalise(w, pre + "input_layernorm", x, v)
        x = x + dsa_attention(w, pre + "self_attention.", attn_in, v, losses)
        m = mla.normalise(w, pre + "post_attention_layernorm", x, v)
        u = mla.linear(w, pre + "mlp.dense_h_to_4h", m, v)
        if v.swiglu:
            act = torch.nn.functional.silu(u[..., :mla.FFN]) * u[..., mla.FFN:]
        else:
            act = 0.5 * u * (1.0 + torch.erf(u / math.sqrt(2.0)))
        x = x + mla.linear(w, pre + "mlp.dense_4h_to_h", act, v)
    x = mla.normalise(w, "final_layernorm", x, v)
    out = w["embedding.word_embeddings.weight"] if v.tied else w["output_layer.weight"]
    return x @ out.t(), losses


def main(variant, out_dir):
    v = Variant(variant)
    gen = torch.Generator().manual_seed(20261217 if v.sparse_loss else 20261216)
    weights = make_weights(gen, v)
    ids = torch.randint(0, mla.VOCAB, (BATCH, SEQ), generator=gen)
    labels = torch.randint(0, mla.VOCAB, (BATCH, SEQ), generator=gen)
    loss_mask = torch.ones(BATCH, SEQ, dtype=torch.float64)
    loss_mask[0, -2:] = 0.0
    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

    def compute():
        logits, losses = forward(params, ids, v)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, mla.VOCAB), labels.reshape(-1),
                                               reduction="none")
        return logits, (ce * loss_mask.reshape(-1)).sum() / loss_mask.sum(), losses

    logits, loss, losses = compute()
    (loss + sum(losses)).backward()
    # The LM loss does not reach the indexer (its inputs are detached, top-k is a selection),
    # the indexer loss reaches nothing else: each checked against its own finite differences.
    a = "layers.0.self_attention."
    i = a + "core_attention.indexer."
    lm_checked = [a + "linear_kv_up_proj.weight", "layers.1.self_attention.dense.weight"]
    lm_checked += [a + "linear_q_up_proj.weight"] if v.q_lora else [a + "linear_q_proj.weight"]
    safetensors_io.check_gradients(lambda: compute()[1], params, lm_checked,
                                   torch.Generator().manual_seed(7))
    indexer_checked = [i + "linear_wq_b.weight", i + "linear_wk.weight", i + "k_norm.weight",
                       i + "k_norm.bias", i + "linear_weights_proj.weight"]
    safetensors_io.check_gradients(lambda: sum(compute()[2]), params, indexer_checked,
                                   torch.Generator().manual_seed(8))
    golden = {"w." + k: t.float().numpy() for k, t in weights.items()}
    golden.update({
        "input_ids": ids.to(torch.int32).numpy(),
        "labels": labels.to(torch.int32).numpy(),
        "loss_mask": loss_mask.float().numpy(),
        "logits": logits.detach().float().numpy(),
        "loss": np.array(loss.item(), dtype=np.float64),
        "indexer_loss": np.array([l.item() for l in losses], dtype=np.float64),
    })
    for k, t in params.items():
        golden["grad." + k] = t.grad.float().numpy()
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/dsa_reference.py " + variant,
                         "torch": torch.__version__})
    print(f"{variant}: loss {loss.item():.10f}, indexer losses "
          f"{[round(l.item(), 8) for l in losses]}; wrote {out_dir}/golden.safetensors")


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "dsa"
    assert name in ("dsa", "dsa_sparse", "dsa_dense"), name
    main(name, sys.argv[2] if len(sys.argv) > 2 else "tests/data/" + name)
