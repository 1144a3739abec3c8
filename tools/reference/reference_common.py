"""Pieces shared by the PyTorch reference generators (gpt2_reference.py, bert_reference.py):
the random weight initialiser, GeLU's tanh form (HF "gelu_new", GPT-2's), and writing the
HF-layout model directory plus the golden file with the autograd gradients."""
import json
import math
import os

import numpy as np
import torch

import safetensors_io


def normal_sampler(gen):
    """randn(*shape, std, mean): float64 normal samples drawn from `gen`."""
    def randn(*shape, std=0.2, mean=0.0):
        return mean + std * torch.randn(*shape, generator=gen, dtype=torch.float64)
    return randn


def gelu_new(x):
    """GeLU with the tanh approximation (HF "gelu_new", Megatron's --openai-gelu)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def write_outputs(out_dir, config, hf_tensors, golden, params, generator):
    """Writes OUT/hf/config.json, OUT/hf/model.safetensors (hf_tensors) and
    OUT/golden.safetensors (golden plus grad.<name> of every param), f32 gradients."""
    os.makedirs(os.path.join(out_dir, "hf"), exist_ok=True)
    with open(os.path.join(out_dir, "hf", "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    safetensors_io.save(os.path.join(out_dir, "hf", "model.safetensors"), hf_tensors,
                        {"format": "pt"})
    golden = dict(golden)
    for k, t in params.items():
        golden["grad." + k] = t.grad.float().numpy()
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": generator, "torch": torch.__version__})
