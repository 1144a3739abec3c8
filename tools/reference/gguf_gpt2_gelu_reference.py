"""Log-probabilities of the tiny GPT-2 fixture as llama.cpp's CPU backend computes them.

llama.cpp's gpt2 architecture applies ggml_gelu, which on the CPU (ggml-cpu/vec.h, GGML_GELU_FP16)
rounds each input to f16 and returns a tabulated f16 value of the tanh GeLU (inputs <= -10 give 0,
>= 10 pass through). That rounding moves the tiny fixture's per-token log-probabilities by up to
1.4e-3 from the exact model (whose values megatron-cpp reproduces to 1e-6), so
tests/e2e/gguf_llama_cpp.sh checks llama.cpp's numbers for the exported gpt2 file against this
script's: the same model in float64 with only that GeLU rounding, written from the GPT-2 paper's
definition (no llama.cpp code). Agreement to 1e-5 shows the export (fused QKV layout, transposes,
names, metadata) is exact and the difference is llama.cpp's GeLU.

Usage: /usr/bin/python3 tools/reference/gguf_gpt2_gelu_reference.py tests/data/gpt2_tiny \
           tests/data/gguf/gpt2_tiny_llama_cpp_logprobs.json
Writes {"tokens": [...], "exact": [...], "fp16_gelu": [...]}: tokens are the 30-token text of the
test (ids), exact/fp16_gelu the log-probability of each token after the first.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

TOKENS = [7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 2, 4,
          6, 8, 10, 12, 14, 16, 18]


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_f16_table(x):
    rounded = x.to(torch.float32).to(torch.float16).to(torch.float64)
    y = gelu_tanh(rounded).to(torch.float32).to(torch.float16).to(torch.float64)
    y = torch.where(x <= -10.0, torch.zeros_like(x), y)
    return torch.where(x >= 10.0, x, y)


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def logprobs(weights, config, gelu):
    n, h, heads = len(TOKENS), config["n_embd"], config["n_head"]
    d, eps = h // heads, config["layer_norm_epsilon"]
    w = weights
    x = w["wte.weight"][TOKENS] + w["wpe.weight"][:n]
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = (a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(h, -1)
        q, k, v = (t.view(n, heads, d).transpose(0, 1) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(causal, float("-inf"))
        context = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, h)
        x = x + context @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        up = m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        x = x + gelu(up) @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    lp = (x @ w["wte.weight"].T).log_softmax(-1)
    return [lp[i, TOKENS[i + 1]].item() for i in range(n - 1)]


def main():
    fixture, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(fixture, "hf", "config.json")) as f:
        config = json.load(f)
    loaded = safetensors_io.load(os.path.join(fixture, "hf", "model.safetensors"))
    tensors = loaded if isinstance(loaded, dict) else loaded[0]
    weights = {k: torch.from_numpy(v.copy()).double() for k, v in tensors.items()}
    result = {"tokens": TOKENS, "exact": logprobs(weights, config, gelu_tanh),
              "fp16_gelu": logprobs(weights, config, gelu_f16_table)}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
