#!/usr/bin/python3
"""PyTorch reference for the GPT-2 golden test (tests/unit/model_gpt2_pytorch_golden_test.cpp).

Builds a tiny GPT-2 from deterministic random weights in HuggingFace's layout (Conv1D weights
[in, out], fused c_attn columns [Q; K; V], names as in the `gpt2` hub repository, including the
attn.bias causal-mask buffers real checkpoints carry), runs forward and backward in float64 with
plain torch (no `transformers`: pre-LN, tanh GeLU "gelu_new", causal attention, LM head tied to
wte, LayerNorm eps 1e-5, no dropout) and writes
  OUT/hf/config.json, OUT/hf/model.safetensors   the HF-layout model directory (f32 weights)
  OUT/golden.safetensors                         input_ids, labels, loss_mask [b, s];
                                                 logits [b, s, vocab]; loss []; grad.<HF name>
  OUT/greedy.safetensors                         greedy.<row>: a prompt (a prefix of input_ids
                                                 row) and its greedy continuation, i32;
                                                 greedy_margin.<row>: smallest top-2 logit gap
The loss is Σ(ce · loss_mask) / Σ loss_mask over all tokens, as Megatron's GPT loss.

Usage: /usr/bin/python3 tools/reference/gpt2_reference.py tests/data/gpt2_tiny
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import gelu_new, normal_sampler, write_outputs  # noqa: E402

CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
    "vocab_size": 96, "n_positions": 32, "n_ctx": 32, "n_embd": 32, "n_layer": 2, "n_head": 4,
    "n_inner": None, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
    "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
    "bos_token_id": 95, "eos_token_id": 95, "tie_word_embeddings": True,
}
BATCH, SEQ = 2, 16


def make_weights(gen):
    """HF GPT-2 weights; std 0.2 (not 0.02) so that every path carries a visible signal."""
    h, v, p, L = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"], CONFIG["n_layer"]

    randn = normal_sampler(gen)

    w = {"wte.weight": randn(v, h), "wpe.weight": randn(p, h, std=0.1)}
    for i in range(L):
        pre = f"h.{i}."
        w[pre + "ln_1.weight"] = randn(h, std=0.1, mean=1.0)
        w[pre + "ln_1.bias"] = randn(h, std=0.1)
        w[pre + "attn.c_attn.weight"] = randn(h, 3 * h)
        w[pre + "attn.c_attn.bias"] = randn(3 * h, std=0.1)
        w[pre + "attn.c_proj.weight"] = randn(h, h)
        w[pre + "attn.c_proj.bias"] = randn(h, std=0.1)
        w[pre + "ln_2.weight"] = randn(h, std=0.1, mean=1.0)
        w[pre + "ln_2.bias"] = randn(h, std=0.1)
        w[pre + "mlp.c_fc.weight"] = randn(h, 4 * h)
        w[pre + "mlp.c_fc.bias"] = randn(4 * h, std=0.1)
        w[pre + "mlp.c_proj.weight"] = randn(4 * h, h)
        w[pre + "mlp.c_proj.bias"] = randn(h, std=0.1)
    w["ln_f.weight"] = randn(h, std=0.1, mean=1.0)
    w["ln_f.bias"] = randn(h, std=0.1)
    # Round to f32 first: the C++ side starts from the f32 file, so both use the same weights.
    return {k: t.float().double() for k, t in w.items()}


def layer_norm(x, weight, bias):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias,
                                          CONFIG["layer_norm_epsilon"])


def forward(w, ids):
    b, s = ids.shape
    h, nh = CONFIG["n_embd"], CONFIG["n_head"]
    hd = h // nh
    x = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(s)]
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    for i in range(CONFIG["n_layer"]):
        pre = f"h.{i}."
        a = layer_norm(x, w[pre + "ln_1.weight"], w[pre + "ln_1.bias"])
        qkv = a @ w[pre + "attn.c_attn.weight"] + w[pre + "attn.c_attn.bias"]
        q, k, v = qkv.split(h, dim=-1)
        q, k, v = (t.reshape(b, s, nh, hd).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).reshape(b, s, h)
        x = x + y @ w[pre + "attn.c_proj.weight"] + w[pre + "attn.c_proj.bias"]
        m = layer_norm(x, w[pre + "ln_2.weight"], w[pre + "ln_2.bias"])
        m = gelu_new(m @ w[pre + "mlp.c_fc.weight"] + w[pre + "mlp.c_fc.bias"])
        x = x + m @ w[pre + "mlp.c_proj.weight"] + w[pre + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].t()


# Greedy continuations for the generation golden (tests/unit/generation_golden_test.cpp): each
# prompt is a prefix of input_ids row 0 / 1, continued for GREEDY_TOKENS tokens by recomputing
# the whole sequence each step in float64 and taking the arg-max (no KV cache): the plainest
# statement of greedy decoding.
GREEDY_PROMPTS = (5, 9)
GREEDY_TOKENS = 12


def greedy_continuations(w, ids):
    out = {}
    for row, length in enumerate(GREEDY_PROMPTS):
        seq = ids[row:row + 1, :length].clone()
        gaps = []
        for _ in range(GREEDY_TOKENS):
            top2 = torch.topk(forward(w, seq)[0, -1], 2).values
            gaps.append(float(top2[0] - top2[1]))
            nxt = torch.argmax(forward(w, seq)[0, -1]).view(1, 1)
            seq = torch.cat([seq, nxt], dim=1)
        out[f"greedy.{row}"] = seq[0].to(torch.int32).numpy()
        # The smallest margin between the best and second-best logit along the way: the C++
        # side (f32) must agree whenever its error stays below it.
        out[f"greedy_margin.{row}"] = np.array(min(gaps), dtype=np.float64)
    return out


def main(out_dir):
    gen = torch.Generator().manual_seed(20240601)
    weights = make_weights(gen)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), generator=gen)
    labels = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), generator=gen)
    loss_mask = torch.ones(BATCH, SEQ, dtype=torch.float64)
    loss_mask[0, -3:] = 0.0  # masked tokens must not count
    loss_mask[1, 5] = 0.0

    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

    def compute():
        logits = forward(params, ids)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, CONFIG["vocab_size"]),
                                               labels.reshape(-1), reduction="none")
        return logits, (ce * loss_mask.reshape(-1)).sum() / loss_mask.sum()

    logits, loss = compute()
    loss.backward()
    # Autograd against finite differences, so the golden gradients are trusted independently.
    safetensors_io.check_gradients(lambda: compute()[1], params,
                                   ["wte.weight", "h.0.attn.c_attn.weight", "h.1.mlp.c_fc.bias",
                                    "h.1.ln_2.weight", "ln_f.bias"], torch.Generator().manual_seed(7))

    hf = {k: t.float().numpy() for k, t in weights.items()}
    p = CONFIG["n_positions"]
    for i in range(CONFIG["n_layer"]):  # the causal-mask buffers real GPT-2 files carry
        hf[f"h.{i}.attn.bias"] = np.tril(np.ones((p, p), np.float32)).reshape(1, 1, p, p)
    golden = {
        "input_ids": ids.to(torch.int32).numpy(),
        "labels": labels.to(torch.int32).numpy(),
        "loss_mask": loss_mask.float().numpy(),
        "logits": logits.detach().float().numpy(),
        "loss": np.array(loss.item(), dtype=np.float64),
    }
    write_outputs(out_dir, CONFIG, hf, golden, params, "tools/reference/gpt2_reference.py")
    with torch.no_grad():
        safetensors_io.save(os.path.join(out_dir, "greedy.safetensors"),
                            greedy_continuations(weights, ids),
                            {"generator": "tools/reference/gpt2_reference.py",
                             "torch": torch.__version__})
    print(f"loss {loss.item():.10f}; wrote {out_dir}/hf and {out_dir}/golden.safetensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gpt2_tiny")
