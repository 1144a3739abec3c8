#!/usr/bin/python3
"""PyTorch float64 reference for YaRN RoPE scaling (Peng et al. 2023, "YaRN: Efficient Context
Window Extension of Large Language Models") with Megatron-Core's parameterisation
(YarnRotaryEmbedding at d98e8a6: --rotary-scaling-factor, --mscale, --mscale-all-dim,
--yarn-original-max-position-embeddings, --yarn-beta-fast/slow,
--[no-]yarn-correction-range-round-to-int), for tests/unit/kernels_yarn_rope_test.cpp; its
yarn_cos_sin() also serves tools/reference/mla_reference.py's mla_yarn fixture.

Written from those definitions (no Megatron code). For rotary dim r, base b, pair j < r/2,
ω_j = b^(−2j/r):
  c(β)     = r · ln(L / (2π β)) / (2 ln b)                 the pair making β turns over L
  lo, hi   = c(beta_fast), c(beta_slow), floor/ceil when rounding, clamped to [0, r − 1],
             hi += 0.001 when they meet
  ramp_j   = clamp((j − lo) / (hi − lo), 0, 1)
  ω'_j     = ω_j / F · ramp_j + ω_j · (1 − ramp_j)          (low frequencies interpolated)
  m        = mscale(F, mscale) / mscale(F, mscale_all_dim), mscale(F, a) = 0.1 a ln F + 1 (F > 1)
and a pair (x_lo, x_hi) at position p becomes m · (x_lo cos θ − x_hi sin θ, x_hi cos θ +
x_lo sin θ), θ = p ω'_j, rotate-half pairs (j, j + r/2).

The golden file tests/data/yarn_rope/golden.safetensors holds, per case k: case{k}.x [s, m, r]
(f32 values), case{k}.y (the rotation, float64 rounded to f32), case{k}.cos and case{k}.sin
[s, r/2] (m · cos θ, m · sin θ) and case{k}.params = [r, base, F, L, beta_fast, beta_slow,
mscale, mscale_all_dim, round_to_int, position_start].

Usage: /usr/bin/python3 tools/reference/yarn_reference.py [OUT_DIR (tests/data/yarn_rope)]
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def yarn_mscale(factor, a):
    return 1.0 if factor <= 1 else 0.1 * a * math.log(factor) + 1.0


def yarn_inv_freq(r, base, factor, context, beta_fast, beta_slow, round_to_int):
    """ω'_j, j < r/2, in float64."""
    def correction(rotations):
        return r * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = correction(beta_fast), correction(beta_slow)
    if round_to_int:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, r - 1)
    if lo == hi:
        hi += 0.001
    j = torch.arange(r // 2, dtype=torch.float64)
    ramp = ((j - lo) / (hi - lo)).clamp(0, 1)
    omega = base ** (-2 * j / r)
    return omega / factor * ramp + omega * (1 - ramp)


def yarn_cos_sin(r, positions, base=10000.0, factor=1.0, context=4096, beta_fast=32.0,
                 beta_slow=1.0, mscale=1.0, mscale_all_dim=0.0, round_to_int=True):
    """m · cos θ and m · sin θ, [len(positions), r/2], float64."""
    inv_freq = yarn_inv_freq(r, base, factor, context, beta_fast, beta_slow, round_to_int)
    theta = torch.as_tensor(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    m = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    return m * torch.cos(theta), m * torch.sin(theta)


def rotate_half(x, cos, sin):
    """x [..., s, r] with cos, sin [s, r/2]: pairs (j, j + r/2)."""
    h = x.shape[-1] // 2
    lo, hi = x[..., :h], x[..., h:]
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)


# (r, base, F, L, beta_fast, beta_slow, mscale, mscale_all_dim, round_to_int, start, s, m):
# odd pair counts; every ramp regime; unrounded bounds; bounds that meet (L below 2π: both
# correction dims clamp to 0); DeepSeek-V3's mscales (m = 1); positions past the context.
CASES = [
    (10, 10000.0, 40.0, 4096, 32.0, 1.0, 1.0, 0.8, True, 0, 7, 3),
    (22, 500.0, 8.0, 64, 8.0, 2.0, 0.7, 0.0, False, 37, 5, 2),
    (6, 10000.0, 4.0, 4, 32.0, 1.0, 1.3, 0.4, True, 3, 9, 1),
    (14, 10000.0, 40.0, 4096, 32.0, 1.0, 1.0, 1.0, True, 4090, 11, 3),
]


def main(out_dir):
    gen = torch.Generator().manual_seed(20261209)
    golden = {}
    for k, (r, base, factor, context, fast, slow, ms, ms_all, rnd, start, s, m) in \
            enumerate(CASES):
        x = (torch.rand(s, m, r, generator=gen, dtype=torch.float64) * 4 - 2).float().double()
        cos, sin = yarn_cos_sin(r, range(start, start + s), base, factor, context, fast, slow,
                                ms, ms_all, rnd)
        y = rotate_half(x.transpose(0, 1), cos, sin).transpose(0, 1)
        golden[f"case{k}.x"] = x.float().numpy()
        golden[f"case{k}.y"] = y.float().numpy()
        golden[f"case{k}.cos"] = cos.float().numpy()
        golden[f"case{k}.sin"] = sin.float().numpy()
        golden[f"case{k}.params"] = np.array(
            [r, base, factor, context, fast, slow, ms, ms_all, float(rnd), start], np.float64)
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/yarn_reference.py",
                         "torch": torch.__version__})
    print(f"wrote {len(CASES)} cases to {out_dir}/golden.safetensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/yarn_rope")
