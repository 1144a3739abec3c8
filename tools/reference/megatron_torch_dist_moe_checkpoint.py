#!/usr/bin/python3
"""Megatron-LM `torch_dist` checkpoints of mixture-of-experts models, written by PyTorch 1.13's own
DCP writer from two gloo processes (tensor-parallel ranks 0 and 1 each save their own chunks), the
way megatron_torch_dist_checkpoint.py writes the dense ones (its helpers are reused). For
tests/unit/convert_megatron_torch_dist_test.cpp.

Megatron-LM is not imported: the keys, global shapes and chunks are Megatron-Core's as read from
its source (TransformerBlock.sharded_state_dict, moe/experts.py TEGroupedMLP and SequentialMLP
sharded_state_dict, moe/router.py, moe/shared_experts.py, apply_swiglu_sharded_factory):

* the experts of a layer are one key per tensor with the expert as an axis after the layer's
  ("decoder.layers.mlp.experts.linear_fc1.weight" [L, E, 2·ffn, h]); each expert's chunks are
  its own (offset (layer, expert, ...)); SwiGLU's [gate; up] per expert, two chunks per rank;
* the router's weight [E, h] and the shared expert's gate_weight [1, h] are replicated (TP rank
  0); the shared expert's linear_fc1 / linear_fc2 are a dense MLP's;
* a MoE layer's pre-MLP norm is pre_mlp_layernorm (Transformer Engine fuses no norm into the
  experts); a dense layer's is linear_fc1.layer_norm_weight;
* MoE layers mixed with dense ones (--moe-layer-freq other than 1) make the layers non-
  homogeneous: one key per layer, "decoder.layers.<i>.<suffix>", without the layer axis;
* QK norms are self_attention.q_layernorm.weight / k_layernorm.weight [d], replicated.

Writes, under OUT (default tests/data/megatron_lm_gpt_tiny), from the HF weights of
tests/data/qwen2_moe_tiny/hf and tests/data/qwen3_moe_tiny/hf (f32, iteration 7):
  torch_dist_qwen2_moe_tp2/  Qwen2-MoE: layers 0 and 2 MoE (4 experts, top 2, a gated shared
                             expert), layer 1 dense (mlp_only_layers): per-layer keys; GQA with
                             QKV biases, RMSNorm, RoPE, untied output layer
  torch_dist_qwen3_moe_tp2/  Qwen3-MoE: layer 0 dense, layer 1 MoE (decoder_sparse_step 2): per-
                             layer keys; QK norms, head size 16 (not hidden / heads)
The import of either must give the weights megatron-cpp's HF import of the same directory gives
(the padded vocabulary rows aside): the same model, so the same loss.

Regenerate: /usr/bin/python3 tools/reference/megatron_torch_dist_moe_checkpoint.py [OUT]
(deterministic: the same bytes each run).
"""
import argparse
import itertools
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_torch_dist_checkpoint as td  # noqa: E402

mlm, safetensors_io, TP, Chunk = td.mlm, td.safetensors_io, td.TP, td.Chunk
ITERATION = 7


def chunks_of(t, lead, axis=None, swiglu=False):
    """The chunks of global `t` whose first `lead` axes (the layer of a stacked key, the expert)
    are Megatron's sharded offsets, one entry each; the rest split over TP along `axis` (of the
    rest; None: whole, on rank 0), or SwiGLU's [gate; up] rows, each rank's rows of each half a
    chunk of its own."""
    chunks = []
    for idx in itertools.product(*(range(n) for n in t.shape[:lead])):
        x = t[idx] if idx else t
        one = lambda d: d.reshape((1,) * lead + tuple(d.shape))  # noqa: E731
        if axis is None:
            chunks.append(Chunk(0, idx + (0,) * x.dim(), one(x)))
        elif swiglu:
            ffn = x.shape[0] // 2
            step = ffn // TP
            for r in range(TP):
                for half in (0, 1):
                    row = half * ffn + r * step
                    chunks.append(Chunk(r, idx + (row,) + (0,) * (x.dim() - 1),
                                        one(x[row:row + step])))
        else:
            step = x.shape[axis] // TP
            for r in range(TP):
                off = [0] * x.dim()
                off[axis] = r * step
                chunks.append(Chunk(r, idx + tuple(off), one(x.narrow(axis, r * step, step))))
    return chunks


def moe_state(name):
    """`name`'s (qwen2_moe, qwen3_moe) global tensors (Megatron-Core keys), chunks and args."""
    d = os.path.join(mlm.ROOT, f"tests/data/{name}_tiny/hf")
    raw, _ = safetensors_io.load(os.path.join(d, "model.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {k: torch.from_numpy(np.array(v)).float() for k, v in raw.items()}
    h, heads, groups = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh = cfg.get("head_dim", h // heads)
    n, experts, vocab = cfg["num_hidden_layers"], cfg["num_experts"], cfg["vocab_size"]
    vp = mlm.padded_vocab(vocab, TP)
    gen = torch.Generator().manual_seed(41)
    q_per_group = heads // groups
    qwen3 = name == "qwen3_moe"
    if qwen3:  # HF Qwen3-MoE: layer i is MoE when (i + 1) % decoder_sparse_step == 0
        moe = [(i + 1) % cfg["decoder_sparse_step"] == 0 and i not in cfg["mlp_only_layers"]
               for i in range(n)]
    else:
        moe = [i not in cfg["mlp_only_layers"] for i in range(n)]

    def grouped(q, k, v):  # rows [g, q + 2, d]: each query group's q heads, its key, its value
        rest = q.shape[1:]
        return torch.cat([q.reshape(groups, q_per_group * dh, *rest),
                          k.reshape(groups, dh, *rest), v.reshape(groups, dh, *rest)],
                         dim=1).reshape(-1, *rest)

    def pad(x):  # Megatron's padding rows hold their random initial values
        return torch.cat([x, torch.randn(vp - vocab, h, generator=gen) * 0.02])

    def gate_up(p):
        return torch.cat([w[p + "gate_proj.weight"], w[p + "up_proj.weight"]])

    # key → (global tensor, lead axes, TP axis, swiglu)
    tensors = {
        "embedding.word_embeddings.weight": (pad(w["model.embed_tokens.weight"]), 0, 0, False),
        "decoder.final_layernorm.weight": (w["model.norm.weight"], 0, None, False),
        "output_layer.weight": (pad(w["lm_head.weight"]), 0, 0, False),
    }
    for i in range(n):
        p, a, m = f"model.layers.{i}.", f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        k = f"decoder.layers.{i}."  # non-homogeneous layers: one key per layer
        tensors[k + "self_attention.linear_qkv.layer_norm_weight"] = (
            w[p + "input_layernorm.weight"], 0, None, False)
        tensors[k + "self_attention.linear_qkv.weight"] = (
            grouped(w[a + "q_proj.weight"], w[a + "k_proj.weight"], w[a + "v_proj.weight"]),
            0, 0, False)
        if not qwen3:
            tensors[k + "self_attention.linear_qkv.bias"] = (
                grouped(w[a + "q_proj.bias"], w[a + "k_proj.bias"], w[a + "v_proj.bias"]),
                0, 0, False)
        else:
            tensors[k + "self_attention.q_layernorm.weight"] = (w[a + "q_norm.weight"], 0, None,
                                                                False)
            tensors[k + "self_attention.k_layernorm.weight"] = (w[a + "k_norm.weight"], 0, None,
                                                                False)
        tensors[k + "self_attention.linear_proj.weight"] = (w[a + "o_proj.weight"], 0, 1, False)
        if not moe[i]:
            tensors[k + "mlp.linear_fc1.layer_norm_weight"] = (
                w[p + "post_attention_layernorm.weight"], 0, None, False)
            tensors[k + "mlp.linear_fc1.weight"] = (gate_up(m), 0, 0, True)
            tensors[k + "mlp.linear_fc2.weight"] = (w[m + "down_proj.weight"], 0, 1, False)
            continue
        tensors[k + "pre_mlp_layernorm.weight"] = (w[p + "post_attention_layernorm.weight"], 0,
                                                   None, False)
        tensors[k + "mlp.router.weight"] = (w[m + "gate.weight"], 0, None, False)
        e = [f"{m}experts.{j}." for j in range(experts)]
        tensors[k + "mlp.experts.linear_fc1.weight"] = (
            torch.stack([gate_up(x) for x in e]), 1, 0, True)
        tensors[k + "mlp.experts.linear_fc2.weight"] = (
            torch.stack([w[x + "down_proj.weight"] for x in e]), 1, 1, False)
        if not qwen3:
            s = m + "shared_expert."
            tensors[k + "mlp.shared_experts.linear_fc1.weight"] = (gate_up(s), 0, 0, True)
            tensors[k + "mlp.shared_experts.linear_fc2.weight"] = (w[s + "down_proj.weight"], 0,
                                                                   1, False)
            tensors[k + "mlp.shared_experts.gate_weight"] = (w[m + "shared_expert_gate.weight"],
                                                             0, None, False)
    globals_ = {k: t.contiguous() for k, (t, _, _, _) in tensors.items()}
    chunks = {k: chunks_of(globals_[k], lead, axis, swiglu)
              for k, (_, lead, axis, swiglu) in tensors.items()}
    args = argparse.Namespace(
        num_layers=n, hidden_size=h, ffn_hidden_size=cfg["intermediate_size"],
        num_attention_heads=heads, kv_channels=dh, group_query_attention=True,
        num_query_groups=groups, max_position_embeddings=cfg["max_position_embeddings"],
        seq_length=cfg["max_position_embeddings"], position_embedding_type="rope",
        rotary_base=int(cfg["rope_theta"]), rotary_percent=1.0, normalization="RMSNorm",
        norm_epsilon=cfg["rms_norm_eps"], swiglu=True, add_bias_linear=False,
        add_qkv_bias=not qwen3, qk_layernorm=qwen3, untie_embeddings_and_output_weights=True,
        bias_gelu_fusion=False, openai_gelu=False, hidden_dropout=0.0, attention_dropout=0.0,
        init_method_std=0.02, make_vocab_size_divisible_by=mlm.DIVISIBLE_BY, padded_vocab_size=vp,
        vocab_size=vocab, tokenizer_type="HuggingFaceTokenizer", tensor_model_parallel_size=TP,
        pipeline_model_parallel_size=1, expert_model_parallel_size=1, bf16=False, fp16=False,
        params_dtype=torch.float32, iteration=ITERATION, ckpt_format="torch_dist",
        use_dist_ckpt=True, attention_backend=mlm.AttnBackend.auto,
        num_experts=experts, moe_router_topk=cfg["num_experts_per_tok"],
        moe_ffn_hidden_size=cfg["moe_intermediate_size"],
        moe_shared_expert_intermediate_size=None if qwen3 else
        cfg["shared_expert_intermediate_size"],
        moe_shared_expert_gate=not qwen3, moe_layer_freq=[int(x) for x in moe],
        moe_router_score_function="softmax", moe_router_pre_softmax=not cfg["norm_topk_prob"],
        moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=cfg["router_aux_loss_coef"],
        moe_grouped_gemm=True, moe_token_dispatcher_type="alltoall")
    return globals_, chunks, {}, args, ITERATION, {}


td.STATES["qwen2_moe"] = lambda: moe_state("qwen2_moe")
td.STATES["qwen3_moe"] = lambda: moe_state("qwen3_moe")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(mlm.ROOT,
                                                             "tests/data/megatron_lm_gpt_tiny")
    for which, port in (("qwen2_moe", 29541), ("qwen3_moe", 29542)):
        td.write_checkpoint(out, which, port)


if __name__ == "__main__":
    main()
