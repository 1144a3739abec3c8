#!/usr/bin/python3
"""PyTorch float64 reference of the MoE router alone (model/moe_router.h), for
tests/unit/model_moe_router_test.cpp, its GPU twin and tests/dist/model_moe_router_dist_test.cpp,
written from the semantics of Megatron-Core's TopKRouter (router.py, moe_utils.py), with no
Megatron code.

fp64 fixtures (--moe-router-dtype fp64: x and W cast to float64, the logits x Wᵀ, the routing,
the losses and every gradient in float64):
  softmax  s 7, b 3, h 13, E 10, top-3 post-softmax with 5 groups (3 chosen), aux_loss 1e-2,
           seq_aux_loss 3e-2, z-loss 1e-3
  sigmoid  s 5, b 3, h 11, E 12, top-4 sigmoid with an expert bias (changes the choice, not the
           weights), 4 groups (2 chosen), scaling factor 2.5, aux_loss 2e-2, seq_aux_loss 1e-2
  tie      s 3, b 1, h 4, E 4, top-2 post-softmax: token 0's second and third logits differ by
           2^-30 (1 + 2^-30 against 1), which an fp32 GEMM rounds to a tie (then the lower
           index wins) and float64 keeps: fp32 and fp64 choose different experts
The objective whose gradients are written is Σ(probs · dprobs) + Σ coeff · loss (a backward
with loss scale 1). Each golden holds x [s, b, h], w [E, h] (values exact in f32), dprobs
[N, k], bias [E] (sigmoid), indices i32 [N, k] (decreasing selection score), probs [N, k],
loss.<name>, grad.w [E, h], grad.x [N, h] (float64).

global fixture (--moe-router-load-balancing-type global_aux_loss, coefficient 1e-2, fp32
router: the logits of x Wᵀ in float64 here, exact products of f32 values; the test's tolerance
covers the f32 GEMM): a top-2 softmax router over 2 data-parallel ranks x 2 micro-batches of
[s 5, b 2, h 9], E 6. For micro-batch m (in order) the counts of the loss's top-k of
softmax(logits) are summed over the ranks and added to the step's running total; the loss uses
their running mean c̄ = total / (m + 1) (f32, as Megatron's buffers), T = s·b·ranks tokens and
each rank's own scores q:  share[r, m] = E/(k·T²) Σ_e c̄_e Σ_{t of rank r} q_te. The logged
global_load_balancing_loss of micro-batch m is Σ_r share[r, m]. Gradients as Megatron's
training applies them: each rank's backward scales its share by coeff / micro-batches, the
weight gradient is the mean over the ranks of their sums (grad.w), grad.x [r, m] the input
gradient of each (the counts carry no gradient). Also the same at one rank whose micro-batch m
holds both ranks' sequences (b 4): the same losses, a weight gradient ranks times larger
(grad.w_dp1: Megatron's mean over data-parallel ranks divides the global loss's gradient by
their number, Megatron-LM issue 3672).

Usage: /usr/bin/python3 tools/reference/moe_router_reference.py NAME tests/data/moe_router/NAME
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from moe_reference import grouped_switch_loss  # noqa: E402
from reference_common import normal_sampler  # noqa: E402


class Variant:
    def __init__(self, name):
        self.name = name
        self.seq, self.batch, self.hidden, self.experts, self.topk = {
            "softmax": (7, 3, 13, 10, 3), "sigmoid": (5, 3, 11, 12, 4), "tie": (3, 1, 4, 4, 2),
            "global": (5, 2, 9, 6, 2)}[name]
        self.sigmoid = name == "sigmoid"
        self.groups, self.group_topk = {"softmax": (5, 3), "sigmoid": (4, 2)}.get(name, (0, 0))
        self.scaling = 2.5 if name == "sigmoid" else 1.0
        self.aux = {"softmax": 1e-2, "sigmoid": 2e-2}.get(name, 0.0)
        self.seq_aux = {"softmax": 3e-2, "sigmoid": 1e-2}.get(name, 0.0)
        self.z = 1e-3 if name == "softmax" else 0.0


def choose(v, logits, bias):
    """Each token's experts [N, k] (decreasing selection score) and weights [N, k]."""
    n, e = logits.shape
    scores = torch.sigmoid(logits) if v.sigmoid else logits
    select = scores.detach() + (bias if bias is not None else 0.0)
    if v.groups:
        per = e // v.groups
        grouped = select.view(n, v.groups, per)
        group_score = torch.topk(grouped, v.topk // v.group_topk, dim=-1).values.sum(-1)
        ranked = torch.topk(group_score, v.group_topk + 1, dim=-1).values
        assert float((ranked[:, -2] - ranked[:, -1]).min()) > 1e-3, "near-tie: change the seed"
        keep = torch.zeros(n, v.groups, dtype=torch.bool)
        keep.scatter_(1, torch.topk(group_score, v.group_topk, dim=-1).indices, True)
        mask = keep.unsqueeze(-1).expand(n, v.groups, per).reshape(n, e)
        select = select.masked_fill(~mask, float("-inf"))
    top = torch.topk(select, v.topk + 1 if v.topk < e else v.topk, dim=-1)
    if v.name != "tie" and v.topk < e:  # the fixtures route alike in any precision but tie's
        finite = top.values[:, -1] > float("-inf")
        gap = (top.values[:, -2] - top.values[:, -1])[finite]
        assert gap.numel() == 0 or float(gap.min()) > 1e-3, "near-tie: change the seed"
    idx = top.indices[:, :v.topk]
    chosen = torch.gather(scores, 1, idx)
    if v.sigmoid:
        weights = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) if v.topk > 1 else chosen
    else:
        weights = torch.softmax(chosen, dim=-1)
    return idx, weights * v.scaling


def aux_scores(v, logits):
    if v.sigmoid:
        s = torch.sigmoid(logits)
        return s / (s.sum(-1, keepdim=True) + 1e-20)
    return torch.softmax(logits, dim=-1)


def routed_counts(v, q):
    routed = torch.zeros_like(q)
    routed.scatter_(1, torch.topk(q.detach(), v.topk, dim=-1).indices, 1.0)
    return routed


def balancing_loss(v, logits, groups):
    """Switch Transformer's loss over `groups` groups of tokens (token n in group n % groups)."""
    q = aux_scores(v, logits)
    return grouped_switch_loss(q, routed_counts(v, q), v.topk, groups)


def save(out_dir, name, golden):
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/moe_router_reference.py " + name,
                         "torch": torch.__version__})


def fp64_fixture(v, out_dir):
    gen = torch.Generator().manual_seed({"softmax": 31, "sigmoid": 32, "tie": 33}[v.name])
    sample = normal_sampler(gen)

    def randn(*shape, std):  # values exact in f32, the C++ tests' dtype
        return sample(*shape, std=std).float().double()

    n = v.seq * v.batch
    w = randn(v.experts, v.hidden, std=0.5)
    x = randn(v.seq, v.batch, v.hidden, std=1.0)
    if v.name == "tie":
        # Token 0: logits [2, 1, 1 + 2^-30, 0.5·x3-ish]; the f32 GEMM rounds 1 + 2^-30 to 1.
        x[0, 0] = torch.tensor([1.0, 2.0 ** -30, 0.5, 0.25], dtype=torch.float64)
        w[0] = torch.tensor([2.0, 0.0, 0.0, 0.0], dtype=torch.float64)
        w[1] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
        w[2] = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
        w[3] = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    bias = randn(v.experts, std=0.05) if v.sigmoid else None
    dprobs = randn(n, v.topk, std=1.0)
    w.requires_grad_(True)
    x.requires_grad_(True)
    logits = x.view(n, v.hidden) @ w.t()
    idx, probs = choose(v, logits, bias)
    if bias is not None:
        assert not torch.equal(idx, choose(v, logits, None)[0]), "the bias changes no choice"
    if v.name == "tie":
        assert idx[0].tolist() == [0, 2], idx[0]
        f32 = (x.detach().float().view(n, v.hidden) @ w.detach().float().t())
        assert float(f32[0, 1]) == float(f32[0, 2]), "f32 does not round to a tie"
    objective = (probs * dprobs).sum()
    losses = {}
    if v.aux:
        losses["load_balancing"] = balancing_loss(v, logits, 1)
        objective = objective + v.aux * losses["load_balancing"]
    if v.seq_aux:
        losses["seq_load_balancing"] = balancing_loss(v, logits, v.batch)
        objective = objective + v.seq_aux * losses["seq_load_balancing"]
    if v.z:
        losses["z_loss"] = (torch.logsumexp(logits, dim=-1) ** 2).mean()
        objective = objective + v.z * losses["z_loss"]
    objective.backward()
    golden = {"x": x.detach().float().numpy(), "w": w.detach().float().numpy(),
              "dprobs": dprobs.float().numpy(), "indices": idx.to(torch.int32).numpy(),
              "probs": probs.detach().numpy(), "grad.w": w.grad.numpy(),
              "grad.x": x.grad.view(n, v.hidden).numpy()}
    if bias is not None:
        golden["bias"] = bias.float().numpy()
    for k, t in losses.items():
        golden["loss." + k] = np.array([float(t)], dtype=np.float64)
    save(out_dir, v.name, golden)


def global_fixture(v, out_dir):
    ranks, micro, coeff = 2, 2, 1e-2
    gen = torch.Generator().manual_seed(34)
    sample = normal_sampler(gen)
    n = v.seq * v.batch
    w = sample(v.experts, v.hidden, std=0.5).float().double().requires_grad_(True)
    x = sample(ranks, micro, v.seq, v.batch, v.hidden, std=1.0).float().double()
    x.requires_grad_(True)
    total = torch.zeros(v.experts, dtype=torch.float32)
    tokens = n * ranks
    losses = []
    objective = 0.0
    for m in range(micro):
        q = [aux_scores(v, x[r, m].reshape(n, v.hidden) @ w.t()) for r in range(ranks)]
        for r in range(ranks):  # no near-tie at the k-th choice
            top = torch.topk(q[r].detach(), v.topk + 1, dim=-1).values
            assert float((top[:, -2] - top[:, -1]).min()) > 1e-3, "near-tie: change the seed"
        counts = sum(routed_counts(v, q[r]).sum(0) for r in range(ranks))
        total = total + counts.float()
        mean = (total / float(m + 1)).double()
        shares = [(q[r].sum(0) * mean).sum() * v.experts / (v.topk * tokens * tokens)
                  for r in range(ranks)]
        losses.append(float(sum(shares)))
        # Each rank's backward: coeff / micro-batches; the weight gradient's mean over ranks.
        for r in range(ranks):
            objective = objective + shares[r] * coeff / micro / ranks
    objective.backward()
    golden = {"x": x.detach().float().numpy(), "w": w.detach().float().numpy(),
              "loss.global_load_balancing": np.array(losses, dtype=np.float64),
              "grad.w": w.grad.numpy(),
              # Per (rank, micro-batch): the rank's own backward, without the mean over ranks.
              "grad.x": (x.grad * ranks).view(ranks, micro, n, v.hidden).numpy(),
              "grad.w_dp1": (w.grad * ranks).numpy(),
              "coeff": np.array([coeff], dtype=np.float64)}
    save(out_dir, v.name, golden)


def main():
    name, out_dir = sys.argv[1], sys.argv[2]
    v = Variant(name)
    if name == "global":
        global_fixture(v, out_dir)
    else:
        fp64_fixture(v, out_dir)


if __name__ == "__main__":
    main()
