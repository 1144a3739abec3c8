#!/usr/bin/python3
"""PyTorch reference for Muon (--optimizer muon, Megatron-LM's TensorParallelMuon from the
emerging_optimizers package) beside AdamW, written from the definitions in plain torch float64
(no Megatron code), for tests/unit/optim_muon_pytorch_golden_test.cpp:

  Muon, per 2-D weight matrix W (not the word embedding nor the output layer) with gradient G:
    W <- W * (1 - lr*wd)                               decoupled weight decay
    M <- mu*M + (1 - mu)*G                             momentum (EMA)
    U  = (1 - mu)*G + mu*M  (nesterov)  or  U = M
    X  = U / max(|U|_F, 1e-15), transposed when it has more rows than columns
    per Newton-Schulz step (a, b, c):  A = X Xt;  X = a X + (b A + c A A) X
    W <- W - lr * scale * extra * X                    scale: spectral sqrt(max(rows, cols)),
                                                       unit_rms_norm sqrt(rows/cols)
  A matrix is what Megatron holds as one 2-D tensor: SwiGLU's fc1 [gate; up] whole, each expert's
  weight on its own; the fused QKV weight [groups, (q + 2) * d, h] split into its query, key and
  value rows over all groups (split_qkv), each part orthogonalised and scaled alone.
  torch.optim.AdamW for the rest: the word embedding, the output layer (weight decay), the norms
  and biases (none).

The parameters are named and laid out as megatron-cpp's (full tensors): the QKV rows per query
group [q*d queries; d keys; d values], fc1 [2, ffn, h], expert weights [experts, ...]. The
gradients are random (the models' gradients are checked elsewhere); three steps at three learning
rates, so that the momentum carries over.

OUT/<case>.safetensors holds w0.<name> (initial weights), g<k>.<name> (step k's gradient, k = 1..3),
w3.<name> (the weights after step 3), m3.<name> (Muon's momentum after step 3), lr [3] (f64), for
the cases:
  ci:     momentum 0.9, spectral, extra scale 0.2, quintic x 5, split QKV (the CI configs' flags)
  variant: momentum 0.8, nesterov, unit_rms_norm, extra 1, polar_express x 9, QKV whole

Usage: /usr/bin/python3 tools/reference/muon_reference.py tests/data/muon
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# The shapes the C++ test registers (optim_muon_pytorch_golden_test.cpp): keep in step.
HIDDEN, GROUPS, QUERIES, HEAD_DIM, FFN, EXPERTS, EXPERT_FFN, VOCAB, MAX_POS = (
    16, 2, 2, 4, 24, 2, 12, 32, 8)
QKV_ROWS = GROUPS * (QUERIES + 2) * HEAD_DIM
WEIGHT_DECAY, BETAS, ADAM_EPS = 0.1, (0.9, 0.95), 1e-8
LRS = [2e-2, 1e-2, 5e-3]

# name -> (shape, kind): muon | expert (muon per expert) | qkv (muon, split) | adam_wd | adam
PARAMS = {
    "embedding.word_embeddings.weight": ((VOCAB, HIDDEN), "adam_wd"),
    "embedding.position_embeddings.weight": ((MAX_POS, HIDDEN), "muon"),
    "layers.0.input_layernorm.weight": ((HIDDEN,), "adam"),
    "layers.0.self_attention.query_key_value.weight": ((QKV_ROWS, HIDDEN), "qkv"),
    "layers.0.self_attention.query_key_value.bias": ((QKV_ROWS,), "adam"),
    "layers.0.self_attention.linear_proj.weight": ((HIDDEN, HIDDEN), "muon"),
    "layers.0.mlp.linear_fc1.weight": ((2, FFN, HIDDEN), "muon"),
    "layers.0.mlp.linear_fc2.weight": ((HIDDEN, FFN), "muon"),
    "layers.1.mlp.router.weight": ((EXPERTS, HIDDEN), "muon"),
    "layers.1.mlp.experts.linear_fc1.weight": ((EXPERTS, 2, EXPERT_FFN, HIDDEN), "expert"),
    "layers.1.mlp.experts.linear_fc2.weight": ((EXPERTS, HIDDEN, EXPERT_FFN), "expert"),
    "output_layer.weight": ((VOCAB, HIDDEN), "adam_wd"),
}

QUINTIC = [(4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
           (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)]
# Polar Express repeats its last entry past its 8: 9 steps test that.
POLAR_EXPRESS = [(8.2051, -22.9019, 16.4607), (4.0664, -2.8612, 0.5184),
                 (3.9096, -2.8234, 0.5250), (3.2856, -2.4153, 0.4853),
                 (2.2779, -1.6198, 0.3985), (1.8726, -1.2307, 0.3585),
                 (1.8564, -1.2132, 0.3568), (1.8750, -1.2500, 0.3750), (1.8750, -1.2500, 0.3750)]

CASES = {
    "ci": dict(momentum=0.9, nesterov=False, scale="spectral", extra=0.2, coeffs=QUINTIC,
               split_qkv=True),
    "variant": dict(momentum=0.8, nesterov=True, scale="unit_rms_norm", extra=1.0,
                    coeffs=POLAR_EXPRESS, split_qkv=False),
}


def newton_schulz(u, coeffs):
    transpose = u.shape[0] > u.shape[1]
    x = u.T if transpose else u
    x = x / max(float(torch.linalg.norm(x)), 1e-15)
    for a, b, c in coeffs:
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if transpose else x


def scaled_orthogonal(u, case):
    rows, cols = u.shape
    scale = math.sqrt(max(rows, cols)) if case["scale"] == "spectral" else math.sqrt(rows / cols)
    return newton_schulz(u, case["coeffs"]) * scale * case["extra"]


def muon_direction(u, kind, case):
    """The orthogonalised, scaled update of a parameter (its full tensor shape)."""
    if kind == "expert":
        return torch.stack([muon_direction(u[e], "muon", case) for e in range(u.shape[0])])
    if kind == "qkv" and case["split_qkv"]:
        grouped = u.reshape(GROUPS, (QUERIES + 2) * HEAD_DIM, HIDDEN)
        bounds = [0, QUERIES * HEAD_DIM, (QUERIES + 1) * HEAD_DIM, (QUERIES + 2) * HEAD_DIM]
        parts = []
        for begin, end in zip(bounds[:-1], bounds[1:]):
            part = grouped[:, begin:end, :].reshape(-1, HIDDEN)
            parts.append(scaled_orthogonal(part, case).reshape(GROUPS, end - begin, HIDDEN))
        return torch.cat(parts, dim=1).reshape(u.shape)
    return scaled_orthogonal(u.reshape(-1, u.shape[-1]), case).reshape(u.shape)


def f32_exact(shape, gen):
    """Random float64 values that f32 holds exactly (the C++ test reads them as f32)."""
    return torch.randn(*shape, generator=gen, dtype=torch.float64).float().double()


def run_case(case, gen):
    weights = {n: f32_exact(shape, gen) for n, (shape, _) in PARAMS.items()}
    out = {f"w0.{n}": w.numpy().copy() for n, w in weights.items()}
    adam_decay = [torch.nn.Parameter(weights[n].clone()) for n, (_, k) in PARAMS.items()
                  if k == "adam_wd"]
    adam_plain = [torch.nn.Parameter(weights[n].clone()) for n, (_, k) in PARAMS.items()
                  if k == "adam"]
    adam = torch.optim.AdamW([{"params": adam_decay, "weight_decay": WEIGHT_DECAY},
                              {"params": adam_plain, "weight_decay": 0.0}],
                             lr=LRS[0], betas=BETAS, eps=ADAM_EPS)
    adam_params = {}
    for n, (_, k) in PARAMS.items():
        if k == "adam_wd":
            adam_params[n] = adam_decay.pop(0)
        elif k == "adam":
            adam_params[n] = adam_plain.pop(0)
    momentum = {n: torch.zeros_like(w) for n, w in weights.items() if n not in adam_params}
    mu = case["momentum"]
    for step, lr in enumerate(LRS, start=1):
        grads = {n: f32_exact(shape, gen) for n, (shape, _) in PARAMS.items()}
        for n, g in grads.items():
            out[f"g{step}.{n}"] = g.numpy().copy()
        for group in adam.param_groups:
            group["lr"] = lr
        for n, p in adam_params.items():
            p.grad = grads[n].clone()
        adam.step()
        for n, p in adam_params.items():
            weights[n] = p.detach().clone()
        for n, m in momentum.items():
            g = grads[n]
            w = weights[n] * (1 - lr * WEIGHT_DECAY)
            m.mul_(mu).add_((1 - mu) * g)
            u = (1 - mu) * g + mu * m if case["nesterov"] else m
            weights[n] = w - lr * muon_direction(u, PARAMS[n][1], case)
    for n, w in weights.items():
        out[f"w3.{n}"] = w.numpy().copy()
    for n, m in momentum.items():
        out[f"m3.{n}"] = m.numpy().copy()
    out["lr"] = np.array(LRS, dtype=np.float64)
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    for name, case in CASES.items():
        tensors = run_case(case, gen)
        tensors = {k: (v.astype(np.float32) if k != "lr" else v) for k, v in tensors.items()}
        safetensors_io.save(os.path.join(out_dir, f"{name}.safetensors"), tensors,
                            {"generator": "tools/reference/muon_reference.py", "case": name})
        print(f"wrote {out_dir}/{name}.safetensors ({len(tensors)} tensors)")


if __name__ == "__main__":
    main()
