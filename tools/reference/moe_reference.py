#!/usr/bin/python3
"""PyTorch reference for the mixture-of-experts layer (Megatron-Core's MoELayer with its
TopKRouter, at expert-parallel size 1), for tests/unit/model_moe_golden_test.cpp and
tests/dist/model_moe_tp_test.cpp, in plain torch float64 with autograd, written from the
semantics of Megatron-Core's router and experts (Switch Transformer, ST-MoE, DeepSeek-V2/V3),
with a loop over experts and no Megatron code:

  logits   = x Wrᵀ                                    x [N, h] (tokens in [s, b] order)
  choice   softmax: top-k of the logits, then softmax over the k (post), or of softmax(logits)
           (pre-softmax); sigmoid: top-k of sigmoid(logits), weights normalised over the k;
           group-limited: only the group_topk groups with the largest sums of their top
           k/group_topk scores; weights × scaling factor
  capacity C = ceil(N·k/E · factor): an expert keeps its C pairs of the largest weights, padded
  expert e = fc2_e(act(fc1_e(x) + b1_e)) + b2_e        (GeLU erf, or SwiGLU [gate | up])
  output   Σ_j weight_j · expert_{e_j}(x)  (+ shared expert: a dense MLP of its own width)
  losses   aux_loss = E/(k·N²) Σ_e (Σ_n q_ne)·count_e with q = softmax(logits) (or normalised
           sigmoid), count over the top-k of q; seq_aux_loss the same per sequence of s tokens,
           averaged over the b sequences; z_loss = mean_n logsumexp(logits_n)²

The objective whose gradients are written is Σ(output · R) + coeff·aux + coeff·seq_aux +
coeff·z for a random R (the upstream gradient, "dout"), so the gradients of the losses are
those a backward with loss scale 1 adds (Megatron's MoEAuxLossAutoScaler).

Fixtures (argument VARIANT):
  softmax   top-2 post-softmax, aux_loss 1e-2, z-loss 1e-3, GeLU, linear biases
  sigmoid   top-4 sigmoid with 4 groups (2 chosen), scaling factor 2.5, seq_aux_loss 1e-2,
            SwiGLU, no biases, a shared expert
  capacity  top-2 pre-softmax, capacity factor 1.0 with the probs drop policy, padded,
            aux_loss 1e-2, GeLU, linear biases
  sinkhorn  top-2 sinkhorn balancing, z-loss 1e-3, GeLU, no biases, a shared expert with its
            sigmoid gate (--moe-shared-expert-gate)
  sinkhorn_top1  top-1 sinkhorn balancing, GeLU, linear biases

Sinkhorn (S-BASE, Megatron's --moe-router-load-balancing-type sinkhorn): in training the
choice is the top-k of the Sinkhorn-normalised exp(logits) (row and column factors iterated
until the column factors change by at most 1e-4 on average), the weights are the chosen
entries of sigmoid(logits) (k = 1) or softmax(logits) over all experts (k > 1), without
renormalisation; in evaluation the choice is the top-k of those same scores. out_eval holds
the evaluation output of the sinkhorn fixtures.

The weights are in megatron-cpp's names and layouts (model/moe_layer.h), OUT/golden.safetensors
holds w.<name>, x, dout, out, loss.<name>, grad.x and grad.<name>.

expert_bias (a fixture of its own, for tests/unit/kernels_moe_test.cpp and the GPU twin):
aux-loss-free load balancing (DeepSeek-V3, Megatron's --moe-router-enable-expert-bias) over
STEPS training steps of two routers (MoE layers), each step MICRO micro-batches on each of RANKS
data-parallel ranks, in float32 as Megatron's buffers: each token takes the top-k of
sigmoid(logits) + expert_bias (the weights do not see the bias); the tokens routed to each
expert are counted over the step's micro-batches and summed over the ranks; then
expert_bias += rate * sign(mean(count) - count). It holds logits [STEPS, RANKS, MICRO, ROUTERS,
N, E], indices [the same, N, k] (each micro-batch's choice), counts [STEPS, ROUTERS, E] (the
summed counts) and bias [STEPS + 1, ROUTERS, E] (before each step, and after the last), rate.

Usage: /usr/bin/python3 tools/reference/moe_reference.py softmax tests/data/moe/softmax
       /usr/bin/python3 tools/reference/moe_reference.py expert_bias tests/data/moe/expert_bias
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import normal_sampler  # noqa: E402

# The shapes the C++ tests build (tests/common/moe_golden.h): keep in step.
SEQ, BATCH, HIDDEN, EXPERTS, FFN, SHARED_FFN = 6, 3, 16, 8, 12, 20


SEEDS = {"softmax": 11, "sigmoid": 12, "capacity": 13, "sinkhorn": 14, "sinkhorn_top1": 15}


class Variant:
    def __init__(self, name):
        self.name = name
        self.topk = {"softmax": 2, "sigmoid": 4, "capacity": 2, "sinkhorn": 2,
                     "sinkhorn_top1": 1}[name]
        self.sinkhorn = name.startswith("sinkhorn")
        # Sinkhorn's scores: the sigmoid for k = 1, else the softmax over all experts.
        self.sigmoid = name == "sigmoid" or (self.sinkhorn and self.topk == 1)
        self.pre_softmax = name == "capacity" or (self.sinkhorn and self.topk > 1)
        self.groups, self.group_topk = (4, 2) if name == "sigmoid" else (0, 0)
        self.scaling = 2.5 if name == "sigmoid" else 1.0
        self.aux = 1e-2 if name in ("softmax", "capacity") else 0.0
        self.seq_aux = 1e-2 if name == "sigmoid" else 0.0
        self.z = 1e-3 if name in ("softmax", "sinkhorn") else 0.0
        self.swiglu = name == "sigmoid"
        self.bias = name not in ("sigmoid", "sinkhorn")
        self.shared = SHARED_FFN if name in ("sigmoid", "sinkhorn") else 0
        self.shared_gate = name == "sinkhorn"
        self.capacity = 1.0 if name == "capacity" else None


def sinkhorn(logits, tol=1e-4):
    """The Sinkhorn-normalised exp(logits): row factors d0 [N], column factors d1 [E]."""
    cost = torch.exp(logits)
    n, e = cost.shape
    d0 = torch.ones(n, dtype=cost.dtype)
    d1 = torch.ones(e, dtype=cost.dtype)
    d1_old = d1
    error = 1e9
    while error > tol:
        d0 = 1.0 / n / ((cost * d1).sum(1) + 1e-8)
        d1 = 1.0 / e / ((cost * d0.unsqueeze(1)).sum(0) + 1e-8)
        error = float((d1_old - d1).abs().mean())
        d1_old = d1
    return cost * d0.unsqueeze(1) * d1


def top_k(scores, k):
    """Indices of the k largest of each row, decreasing (ties never occur in these fixtures)."""
    return torch.topk(scores, k, dim=-1).indices


def choose(v, logits, train=True):
    """Each token's experts [N, k] and weights [N, k] (differentiable in the logits)."""
    n, e = logits.shape
    if v.sinkhorn:
        scores = torch.sigmoid(logits) if v.topk == 1 else torch.softmax(logits, dim=-1)
        select = sinkhorn(logits.detach()) if train else scores.detach()
        idx = top_k(select, v.topk)
        return idx, torch.gather(scores, 1, idx)
    if v.sigmoid:
        scores = torch.sigmoid(logits)
    elif v.pre_softmax:
        scores = torch.softmax(logits, dim=-1)
    else:
        scores = logits
    select = scores.detach()
    if v.groups:
        per = e // v.groups
        grouped = select.view(n, v.groups, per)
        group_score = torch.topk(grouped, v.topk // v.group_topk, dim=-1).values.sum(-1)
        keep = torch.zeros(n, v.groups, dtype=torch.bool)
        keep.scatter_(1, top_k(group_score, v.group_topk), True)
        mask = keep.unsqueeze(-1).expand(n, v.groups, per).reshape(n, e)
        select = select.masked_fill(~mask, float("-inf"))
    idx = top_k(select, v.topk)
    chosen = torch.gather(scores, 1, idx)
    if v.sigmoid:
        weights = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) if v.topk > 1 else chosen
    elif v.pre_softmax:
        weights = chosen
    else:
        weights = torch.softmax(chosen, dim=-1)
    return idx, weights * v.scaling


def balancing_loss(v, logits, groups):
    """Switch Transformer's loss over `groups` groups of tokens (token n in group n % groups)."""
    n, e = logits.shape
    if v.sigmoid:
        s = torch.sigmoid(logits)
        q = s / (s.sum(-1, keepdim=True) + 1e-20)
    else:
        q = torch.softmax(logits, dim=-1)
    routed = torch.zeros(n, e, dtype=torch.float64)
    routed.scatter_(1, top_k(q.detach(), v.topk), 1.0)
    return grouped_switch_loss(q, routed, v.topk, groups)


def grouped_switch_loss(q, routed, topk, groups):
    """E / (k T² G) Σ_g Σ_e (Σ_{n in g} q[n, e]) (Σ_{n in g} routed[n, e]), token n in group
    n % groups of T tokens: the Switch Transformer loss per group, averaged."""
    n, e = q.shape
    tokens = n // groups
    total = 0.0
    for g in range(groups):
        rows = torch.arange(g, n, groups)
        total = total + (q[rows].sum(0) * routed[rows].sum(0)).sum()
    return total * e / (topk * tokens * tokens * groups)


def expert_slots(v, idx, weights):
    """For each expert, the (token, choice) pairs it computes, in token order, and its slot
    count (capacity and padding)."""
    n, k = idx.shape
    pairs = [[] for _ in range(EXPERTS)]
    for t in range(n):
        for j in range(k):
            pairs[int(idx[t, j])].append((t, j))
    slots = [len(p) for p in pairs]
    if v.capacity is not None:
        cap = math.ceil(n * k / EXPERTS * v.capacity)
        for e in range(EXPERTS):
            if len(pairs[e]) > cap:
                ranked = sorted(pairs[e], key=lambda tj: (-float(weights[tj]), tj))
                pairs[e] = sorted(ranked[:cap])
            slots[e] = cap
    return pairs, slots


def activation(v, u, ffn):
    if v.swiglu:
        a, b = u[..., :ffn], u[..., ffn:]
        return torch.nn.functional.silu(a) * b
    return torch.nn.functional.gelu(u)


def expert_bias_fixture(out_dir):
    steps, ranks, micro, routers, n, e, k, rate = 5, 2, 2, 2, 13, 8, 2, 0.05
    gen = torch.Generator().manual_seed(21)
    sample = normal_sampler(gen)
    # A skewed router (experts 0 and 1 preferred) that the bias must rebalance.
    skew = torch.tensor([1.5, 1.0] + [0.0] * (e - 2), dtype=torch.float64)
    logits = (sample(steps, ranks, micro, routers, n, e, std=1.0) + skew).float()
    bias = torch.zeros(routers, e, dtype=torch.float32)
    biases, indices, sums = [bias.clone()], [], []
    for step in range(steps):
        counts = torch.zeros(routers, e, dtype=torch.float32)
        chosen_step = []
        for rank in range(ranks):
            for mb in range(micro):
                chosen_mb = []
                for r in range(routers):
                    select = torch.sigmoid(logits[step, rank, mb, r]) + bias[r]
                    top = torch.topk(select, k + 1, dim=-1)
                    # Routes the same in the C++ kernels' double: no near-tie at the k-th choice.
                    assert float((top.values[:, -2] - top.values[:, -1]).min()) > 1e-4, \
                        "near-tie: change the seed"
                    idx = top.indices[:, :k]
                    counts[r] += torch.zeros(n, e).scatter(1, idx, 1.0).sum(0)
                    chosen_mb.append(idx.to(torch.int32))
                chosen_step.append(torch.stack(chosen_mb))
        indices.append(torch.stack(chosen_step).view(ranks, micro, routers, n, k))
        sums.append(counts.clone())
        mean = counts.sum(-1, keepdim=True) / e
        bias = bias + torch.sign(mean - counts) * rate
        biases.append(bias.clone())
    golden = {"logits": logits.numpy(), "indices": torch.stack(indices).numpy(),
              "counts": torch.stack(sums).numpy(), "bias": torch.stack(biases).numpy(),
              "rate": np.array([rate], dtype=np.float32)}
    assert not torch.equal(indices[0], indices[-1]), "the bias changed no choice"
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/moe_reference.py expert_bias",
                         "torch": torch.__version__})


def main():
    name, out_dir = sys.argv[1], sys.argv[2]
    if name == "expert_bias":
        expert_bias_fixture(out_dir)
        return
    v = Variant(name)
    gen = torch.Generator().manual_seed(SEEDS[name])
    sample = normal_sampler(gen)

    def randn(*shape, std):  # values exact in f32, the C++ tests' dtype
        return sample(*shape, std=std).float().double()

    f1 = (2 if v.swiglu else 1) * FFN
    w = {"mlp.router.weight": randn(EXPERTS, HIDDEN, std=0.5)}
    fc1 = randn(EXPERTS, f1, HIDDEN, std=0.3)
    w["mlp.experts.linear_fc1.weight"] = fc1.view(EXPERTS, 2, FFN, HIDDEN) if v.swiglu else fc1
    w["mlp.experts.linear_fc2.weight"] = randn(EXPERTS, HIDDEN, FFN, std=0.3)
    if v.bias:
        w["mlp.experts.linear_fc1.bias"] = randn(EXPERTS, f1, std=0.1)
        w["mlp.experts.linear_fc2.bias"] = randn(EXPERTS, HIDDEN, std=0.1)
    if v.shared:
        sf1 = (2 if v.swiglu else 1) * v.shared
        sw1 = randn(sf1, HIDDEN, std=0.3)
        w["mlp.shared_experts.linear_fc1.weight"] = sw1.view(2, v.shared, HIDDEN) if v.swiglu else sw1
        w["mlp.shared_experts.linear_fc2.weight"] = randn(HIDDEN, v.shared, std=0.3)
        if v.shared_gate:
            w["mlp.shared_experts.gate_weight"] = randn(1, HIDDEN, std=0.5)
    params = {k: t.clone().requires_grad_(True) for k, t in w.items()}
    x = randn(SEQ, BATCH, HIDDEN, std=1.0).requires_grad_(True)
    dout = randn(SEQ, BATCH, HIDDEN, std=1.0)

    n = SEQ * BATCH
    x2 = x.view(n, HIDDEN)
    logits = x2 @ params["mlp.router.weight"].t()

    def layer(train):
        idx, weights = choose(v, logits, train)
        # The fixtures must route the same in f32: no near-tie at the k-th choice.
        if not v.groups:
            if v.sinkhorn:  # the choice's scores, compared relatively (sinkhorn's are ~1/N)
                plain = torch.sigmoid(logits) if v.topk == 1 else torch.softmax(logits, dim=-1)
                scores = sinkhorn(logits.detach()) if train else plain.detach()
                top = torch.topk(scores, v.topk + 1, dim=-1).values
                margin = float(((top[:, -2] - top[:, -1]) / top[:, -2]).min())
            else:
                scores = torch.sigmoid(logits) if v.sigmoid else logits
                top = torch.topk(scores.detach(), v.topk + 1, dim=-1).values
                margin = float((top[:, -2] - top[:, -1]).min())
            assert margin > 1e-3, "near-tie: change the seed"
        pairs, slots = expert_slots(v, idx, weights.detach())
        w1 = params["mlp.experts.linear_fc1.weight"].reshape(EXPERTS, f1, HIDDEN)
        out = torch.zeros(n, HIDDEN, dtype=torch.float64)
        for e in range(EXPERTS):
            if not pairs[e]:
                continue
            tokens = torch.tensor([t for t, _ in pairs[e]])
            choice = torch.tensor([j for _, j in pairs[e]])
            u = x2[tokens] @ w1[e].t()
            if v.bias:
                u = u + params["mlp.experts.linear_fc1.bias"].reshape(EXPERTS, f1)[e]
            y = activation(v, u, FFN) @ params["mlp.experts.linear_fc2.weight"][e].t()
            if v.bias:
                y = y + params["mlp.experts.linear_fc2.bias"][e]
            out = out.index_add(0, tokens, y * weights[tokens, choice].unsqueeze(-1))
        if v.shared:
            sw1 = params["mlp.shared_experts.linear_fc1.weight"].reshape(-1, HIDDEN)
            shared = activation(v, x2 @ sw1.t(), v.shared) @ params[
                "mlp.shared_experts.linear_fc2.weight"].t()
            if v.shared_gate:
                shared = shared * torch.sigmoid(x2 @ params["mlp.shared_experts.gate_weight"].t())
            out = out + shared
        return out.view(SEQ, BATCH, HIDDEN), slots

    out, slots = layer(train=True)
    objective = (out * dout).sum()
    losses = {}
    if v.aux:
        losses["load_balancing"] = balancing_loss(v, logits, 1)
        objective = objective + v.aux * losses["load_balancing"]
    if v.seq_aux:
        losses["seq_load_balancing"] = balancing_loss(v, logits, BATCH)
        objective = objective + v.seq_aux * losses["seq_load_balancing"]
    if v.z:
        losses["z_loss"] = (torch.logsumexp(logits, dim=-1) ** 2).mean()
        objective = objective + v.z * losses["z_loss"]
    objective.backward()

    golden = {"x": x.detach().float().numpy(), "dout": dout.float().numpy(),
              "out": out.detach().float().numpy(), "grad.x": x.grad.float().numpy(),
              "tokens_per_expert": np.array(slots, dtype=np.int64)}
    for k, t in w.items():
        golden["w." + k] = t.float().numpy()
        golden["grad." + k] = params[k].grad.float().numpy()
    for k, t in losses.items():
        golden["loss." + k] = np.array([float(t)], dtype=np.float64)
    if v.sinkhorn:
        golden["out_eval"] = layer(train=False)[0].detach().float().numpy()
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/moe_reference.py " + name,
                         "torch": torch.__version__})


if __name__ == "__main__":
    main()
