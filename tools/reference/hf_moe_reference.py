#!/usr/bin/python3
"""PyTorch reference for the HF mixture-of-experts imports (tests/e2e/convert_hf_moe.sh,
tests/unit/convert_hf_moe_test.cpp): tiny MixtralForCausalLM, Qwen2MoeForCausalLM and
Qwen3MoeForCausalLM models from deterministic random weights in HuggingFace's layouts and names,
written here from the published architectures (Mixtral: Jiang et al. 2024; Qwen1.5-MoE / Qwen2-MoE
and Qwen3-MoE: the Qwen technical reports) with plain torch in float64, no `transformers` (PyTorch
1.13 has none). The decoder is llama_reference.py's (RMSNorm, RoPE, grouped-query attention,
Qwen2's q/k/v biases, Qwen3's per-head q/k RMSNorm); the MLP of a sparse layer is HF's sparse
block, a loop over experts:

  logits  = m Wgateᵀ                                        m [N, h], Wgate [E, h]
  p       = softmax(logits) over all E experts (float)
  w, idx  = the top k of p;  w /= Σ w  when renormalised   (Mixtral always; Qwen: norm_topk_prob)
  out     = Σ_j w_j · down_e(silu(gate_e m) ⊙ up_e m),  e = idx_j
  Qwen2-MoE adds its shared expert: sigmoid(m wsᵀ) · down_s(silu(gate_s m) ⊙ up_s m)

Which layers are sparse: Mixtral every layer; Qwen layer i when i is not in mlp_only_layers and
(i + 1) % decoder_sparse_step == 0, the others a dense MLP of intermediate_size.

The loss is the mean cross entropy of the next token over one document of 2·16 + 1 tokens cut
into two sequences of 16 (what Megatron's GPT dataset makes of it at --seq-length 16), and the
gradient norm the 2-norm of every parameter's gradient of that loss (no router losses: HF adds
its load-balancing loss only with output_router_logits, which these configs leave off).

Writes, for VARIANT mixtral | qwen2_moe | qwen3_moe, into OUT (tests/data/VARIANT_tiny):
  OUT/hf/config.json, OUT/hf/model.safetensors  the HF model directory (f32 weights)
  OUT/document.jsonl                            {"text": the 33 token ids}, NullTokenizer's text
  OUT/golden.json                               {"loss", "grad_norm", "sequences"}

Usage: /usr/bin/python3 tools/reference/hf_moe_reference.py VARIANT OUT
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from llama_reference import dense_mlp, forward  # noqa: E402
from reference_common import normal_sampler  # noqa: E402

COMMON = {"hidden_act": "silu", "vocab_size": 64, "max_position_embeddings": 64,
          "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
          "attention_dropout": 0.0, "tie_word_embeddings": False, "initializer_range": 0.02,
          "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2, "use_cache": True}
# Every layer sparse, 4 experts, top 2, renormalised.
MIXTRAL = dict(COMMON, architectures=["MixtralForCausalLM"], model_type="mixtral",
               intermediate_size=16, num_hidden_layers=2, rms_norm_eps=1e-5,
               rope_theta=1000000.0, sliding_window=None, num_local_experts=4,
               num_experts_per_tok=2, output_router_logits=False, router_aux_loss_coef=0.02,
               router_jitter_noise=0.0)
# q/k/v biases, a gated shared expert, top 2 not renormalised, layer 1 dense (mlp_only_layers).
QWEN2_MOE = dict(COMMON, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
                 intermediate_size=48, moe_intermediate_size=16,
                 shared_expert_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                 norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
                 num_hidden_layers=3, rms_norm_eps=1e-6, rope_theta=1000000.0,
                 use_sliding_window=False, sliding_window=64, max_window_layers=3,
                 output_router_logits=False, router_aux_loss_coef=0.001)
# The QK norms, head_dim 16 (heads · head_dim ≠ hidden), top 2 renormalised, layer 0 dense
# (decoder_sparse_step 2).
QWEN3_MOE = dict(COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                 intermediate_size=48, moe_intermediate_size=16, num_experts=4,
                 num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=2,
                 mlp_only_layers=[], num_hidden_layers=2, head_dim=16, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, attention_bias=False, use_sliding_window=False,
                 sliding_window=None, max_window_layers=2, output_router_logits=False,
                 router_aux_loss_coef=0.001)
VARIANTS = {"mixtral": (MIXTRAL, 20261207), "qwen2_moe": (QWEN2_MOE, 20261208),
            "qwen3_moe": (QWEN3_MOE, 20261209)}
SEQ = 16


def is_sparse(config, i):
    if config["model_type"] == "mixtral":
        return True
    return (i not in config["mlp_only_layers"] and config["num_experts"] > 0
            and (i + 1) % config["decoder_sparse_step"] == 0)


def experts_of(config):
    return config.get("num_local_experts", config.get("num_experts"))


def expert_names(config, i, e):
    """HF's (gate, up, down) weight names of expert e of layer i."""
    if config["model_type"] == "mixtral":
        pre = f"model.layers.{i}.block_sparse_moe.experts.{e}."
        return pre + "w1.weight", pre + "w3.weight", pre + "w2.weight"
    pre = f"model.layers.{i}.mlp.experts.{e}."
    return pre + "gate_proj.weight", pre + "up_proj.weight", pre + "down_proj.weight"


def router_name(config, i):
    block = "block_sparse_moe" if config["model_type"] == "mixtral" else "mlp"
    return f"model.layers.{i}.{block}.gate.weight"


def make_weights(gen, config):
    h, v = config["hidden_size"], config["vocab_size"]
    nh, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim", h // nh)
    qwen2, qwen3 = config["model_type"] == "qwen2_moe", config["model_type"] == "qwen3_moe"
    randn = normal_sampler(gen)
    w = {"model.embed_tokens.weight": randn(v, h)}
    for i in range(config["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        w[pre + "input_layernorm.weight"] = randn(h, std=0.1, mean=1.0)
        w[pre + "self_attn.q_proj.weight"] = randn(nh * d, h, std=0.15)
        w[pre + "self_attn.k_proj.weight"] = randn(nkv * d, h, std=0.15)
        w[pre + "self_attn.v_proj.weight"] = randn(nkv * d, h, std=0.15)
        if qwen2:
            for p, n in (("q", nh), ("k", nkv), ("v", nkv)):
                w[pre + f"self_attn.{p}_proj.bias"] = randn(n * d, std=0.1)
        if qwen3:
            w[pre + "self_attn.q_norm.weight"] = randn(d, std=0.1, mean=1.0)
            w[pre + "self_attn.k_norm.weight"] = randn(d, std=0.1, mean=1.0)
        w[pre + "self_attn.o_proj.weight"] = randn(h, nh * d, std=0.15)
        w[pre + "post_attention_layernorm.weight"] = randn(h, std=0.1, mean=1.0)
        if not is_sparse(config, i):
            f = config["intermediate_size"]
            w[pre + "mlp.gate_proj.weight"] = randn(f, h, std=0.15)
            w[pre + "mlp.up_proj.weight"] = randn(f, h, std=0.15)
            w[pre + "mlp.down_proj.weight"] = randn(h, f, std=0.15)
            continue
        f = config.get("moe_intermediate_size", config["intermediate_size"])
        w[router_name(config, i)] = randn(experts_of(config), h, std=0.5)  # distinct choices
        for e in range(experts_of(config)):
            gate, up, down = expert_names(config, i, e)
            w[gate], w[up], w[down] = randn(f, h, std=0.15), randn(f, h, std=0.15), randn(h, f, std=0.15)
        if qwen2:
            sf = config["shared_expert_intermediate_size"]
            w[pre + "mlp.shared_expert.gate_proj.weight"] = randn(sf, h, std=0.15)
            w[pre + "mlp.shared_expert.up_proj.weight"] = randn(sf, h, std=0.15)
            w[pre + "mlp.shared_expert.down_proj.weight"] = randn(h, sf, std=0.15)
            w[pre + "mlp.shared_expert_gate.weight"] = randn(1, h, std=0.5)
    w["model.norm.weight"] = randn(h, std=0.1, mean=1.0)
    w["lm_head.weight"] = randn(v, h)
    # Round to f32 first: megatron-cpp starts from the f32 file, so both use the same weights.
    return {k: t.float().double() for k, t in w.items()}


def sparse_block(config, margins):
    """HF's sparse MLP block as forward()'s mlp callback; dense layers keep the gated MLP.
    Appends each routed token's gap between its k-th and (k+1)-th router logit to `margins`."""
    k = config["num_experts_per_tok"]
    renormalise = config["model_type"] == "mixtral" or config["norm_topk_prob"]

    def mlp(w, pre, m):
        i = int(pre.split(".")[2])
        if not is_sparse(config, i):
            return dense_mlp(w, pre, m)
        shape = m.shape
        x = m.reshape(-1, shape[-1])
        logits = x @ w[router_name(config, i)].t()
        top = torch.topk(logits.detach(), k + 1, dim=-1).values
        margins.append(float((top[:, k - 1] - top[:, k]).min()))
        probs = torch.softmax(logits, dim=-1)
        weights, idx = torch.topk(probs, k, dim=-1)
        if renormalise:
            weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(experts_of(config)):
            token, choice = torch.nonzero(idx == e, as_tuple=True)
            if token.numel() == 0:
                continue
            gate, up, down = (w[n] for n in expert_names(config, i, e))
            xe = x[token]
            ge = xe @ gate.t()
            y = (ge * torch.sigmoid(ge) * (xe @ up.t())) @ down.t()
            out = out.index_add(0, token, y * weights[token, choice].unsqueeze(-1))
        if config["model_type"] == "qwen2_moe":
            s = pre + "mlp.shared_expert."
            g = x @ w[s + "gate_proj.weight"].t()
            shared = (g * torch.sigmoid(g) * (x @ w[s + "up_proj.weight"].t())) @ w[
                s + "down_proj.weight"].t()
            out = out + torch.sigmoid(x @ w[pre + "mlp.shared_expert_gate.weight"].t()) * shared
        return out.reshape(shape)

    return mlp


def main(variant, out_dir):
    config, seed = VARIANTS[variant]
    gen = torch.Generator().manual_seed(seed)
    weights = make_weights(gen, config)
    document = torch.randint(0, config["vocab_size"], (2 * SEQ + 1,), generator=gen)
    ids = torch.stack([document[:SEQ], document[SEQ:2 * SEQ]])
    labels = torch.stack([document[1:SEQ + 1], document[SEQ + 1:]])
    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}
    margins = []

    def loss_fn():
        logits = forward(params, ids, config, sparse_block(config, margins))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, config["vocab_size"]),
                                                 labels.reshape(-1))

    loss = loss_fn()
    # The choices must be those of f32 arithmetic: no near-tie at the k-th expert.
    assert min(margins) > 1e-3, f"near-tie in the routing ({min(margins)}): change the seed"
    loss.backward()
    grad_norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params.values())).item()
    # Autograd against finite differences, so the golden gradient norm is trusted independently.
    last = config["num_hidden_layers"] - 1
    sparse = [i for i in range(last + 1) if is_sparse(config, i)][-1]
    gate, up, down = expert_names(config, sparse, 1)
    checked = [router_name(config, sparse), gate, up, down, "model.embed_tokens.weight",
               f"model.layers.{last}.self_attn.q_proj.weight", "lm_head.weight"]
    if variant == "qwen2_moe":
        checked += [f"model.layers.{sparse}.mlp.shared_expert_gate.weight",
                    f"model.layers.{sparse}.mlp.shared_expert.down_proj.weight",
                    "model.layers.1.mlp.up_proj.weight"]
    if variant == "qwen3_moe":
        checked += ["model.layers.0.self_attn.k_norm.weight", "model.layers.0.mlp.down_proj.weight"]
    safetensors_io.check_gradients(loss_fn, params, checked, torch.Generator().manual_seed(7))

    os.makedirs(os.path.join(out_dir, "hf"), exist_ok=True)
    with open(os.path.join(out_dir, "hf", "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    safetensors_io.save(os.path.join(out_dir, "hf", "model.safetensors"),
                        {k: t.float().numpy() for k, t in weights.items()}, {"format": "pt"})
    with open(os.path.join(out_dir, "document.jsonl"), "w") as f:
        f.write(json.dumps({"text": " ".join(str(int(t)) for t in document)}) + "\n")
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"generator": "tools/reference/hf_moe_reference.py " + variant,
                   "torch": torch.__version__, "loss": loss.item(), "grad_norm": grad_norm,
                   "sequences": 2, "seq_length": SEQ}, f, indent=2)
        f.write("\n")
    print(f"{variant}: loss {loss.item():.10f}, grad norm {grad_norm:.10f}, "
          f"smallest routing margin {min(margins):.4f}; wrote {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
