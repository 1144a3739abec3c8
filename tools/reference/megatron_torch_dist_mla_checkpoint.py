#!/usr/bin/python3
"""A Megatron-LM `torch_dist` checkpoint of a multi-latent-attention GPT, written by PyTorch 1.13's
own DCP writer from two gloo processes (tensor-parallel ranks 0 and 1), the way
megatron_torch_dist_checkpoint.py writes the dense ones (its helpers are reused), for
tests/unit/convert_megatron_torch_dist_test.cpp.

The model is mla_reference.py's `mla` fixture (tests/data/mla/golden.safetensors: its weights in
megatron-cpp's names, a query latent, LayerNorm with biases on the input and both latents, linear
biases, learned absolute positions, 2 layers, 4 heads, rope dim 4). Megatron-Core's keys (read
from gpt_layer_specs.py's MLA spec with Transformer Engine and --qk-layernorm, and
multi_latent_attention.py) are:

* input_layernorm.{weight,bias}: a separate norm (linear_q_down_proj / linear_kv_down_proj are
  TELinear, replicated, with nothing to fuse it into);
* the latent norms fused into the up projections: linear_q_up_proj.layer_norm_{weight,bias},
  linear_kv_up_proj.layer_norm_{weight,bias};
* linear_q_up_proj.weight [heads·(dn+dr), rq] and linear_kv_up_proj.weight [heads·(dn+dv), r]
  column-parallel (rows per head), linear_proj row-parallel, the MLP's linear_fc1 with its fused
  pre-MLP norm, all stacked over the layers.

The rope channels. megatron-cpp's MLA (and mla_reference.py) rotates a head's rope channel pairs
(j, j + dr/2); Megatron-Core's MLA calls apply_rotary_pos_emb with mla_rotary_interleaved=True
(rope_utils.py: the channels de-interleaved, x[0::2] then x[1::2], before rotate_half), which
rotates the stored channels (2j, 2j + 1). So the checkpoint stores the rows that make a rope
channel permuted: Megatron's row dn + 2j holds megatron-cpp's dn + j, its dn + 2j + 1 megatron-
cpp's dn + dr/2 + j (each head's rows of linear_q_up_proj, the rope rows of linear_kv_down_proj).
This script CHECKS that claim before writing: mla_reference.py's forward with Megatron's rope
(de-interleave, then rotate) on the permuted weights gives the golden's logits (float64, within
1e-12) — and, as a control, that the unpermuted weights do not.

Writes, under OUT (default tests/data/megatron_lm_gpt_tiny):
  torch_dist_mla_tp2/        iteration 9, f32, common.pt
  torch_dist_mla_expected.json  the megatron-cpp tensors its import must give: the golden's
                             weights (shape and CRC-32 of the f32 bytes), the vocabulary size

Regenerate: /usr/bin/python3 tools/reference/megatron_torch_dist_mla_checkpoint.py [OUT]
(deterministic: the same bytes each run).
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_torch_dist_checkpoint as td  # noqa: E402
import mla_reference as ref  # noqa: E402

mlm, safetensors_io, TP, split = td.mlm, td.safetensors_io, td.TP, td.split
ITERATION = 9
DR = 4  # the `mla` fixture's rope dim


def golden_weights():
    t, _ = safetensors_io.load(os.path.join(mlm.ROOT, "tests/data/mla/golden.safetensors"))
    w = {k[2:]: torch.from_numpy(np.array(v)) for k, v in t.items() if k.startswith("w.")}
    return w, t


def megatron_row(row, content, block):
    """Megatron-Core's row of megatron-cpp's `row` (rope rows after `content` rows per block)."""
    base, j = row // block * block, row % block - content
    if j < 0:
        return row
    return base + content + (2 * j if j < DR // 2 else 2 * (j - DR // 2) + 1)


def to_megatron_rows(t, content, block):
    out = torch.empty_like(t)
    for r in range(t.shape[0]):
        out[megatron_row(r, content, block)] = t[r]
    return out


def permuted(w):
    """The golden's weights with the rope rows in Megatron-Core's order (module docstring)."""
    out = dict(w)
    for i in range(ref.LAYERS):
        a = f"layers.{i}.self_attention."
        d = ref.QK_DIM + DR
        out[a + "linear_q_up_proj.weight"] = to_megatron_rows(w[a + "linear_q_up_proj.weight"],
                                                              ref.QK_DIM, d)
        kv = a + "linear_kv_down_proj.weight"
        out[kv] = to_megatron_rows(w[kv], ref.KV_LORA, ref.KV_LORA + DR)
    return out


def check_megatron_rope(w, golden):
    """mla_reference's forward with Megatron-Core's MLA rope gives the golden's logits on the
    permuted weights, and not on the unpermuted ones."""
    v = ref.Variant("mla")
    ours = ref.rope

    def megatron_rope(x, variant):  # rope_utils: t[..., 0::2], t[..., 1::2], then rotate_half
        return ours(torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1), variant)

    ids = torch.from_numpy(np.array(golden["input_ids"])).long()
    expected = ref.forward({k: t.double() for k, t in w.items()}, ids, v)
    assert torch.allclose(expected.float(), torch.from_numpy(np.array(golden["logits"])),
                          atol=1e-5), "mla_reference's forward does not give the golden"
    ref.rope = megatron_rope
    try:
        mega = ref.forward({k: t.double() for k, t in permuted(w).items()}, ids, v)
        control = ref.forward({k: t.double() for k, t in w.items()}, ids, v)
    finally:
        ref.rope = ours
    assert (mega - expected).abs().max().item() < 1e-12, "the permuted rows are not Megatron's"
    assert (control - expected).abs().max().item() > 1e-3, "the control does not differ"


def mla_state():
    w, _ = golden_weights()
    m = permuted(w)
    vocab = ref.VOCAB
    vp = mlm.padded_vocab(vocab, TP)
    gen = torch.Generator().manual_seed(43)

    def pad(x):  # Megatron's padding rows hold their random initial values
        return torch.cat([x, torch.randn(vp - vocab, ref.HIDDEN, generator=gen) * 0.02])

    def stack(name):
        return torch.stack([m[f"layers.{i}.{name}"] for i in range(ref.LAYERS)])

    a = "self_attention."
    layer = {  # Megatron-Core's layer key → (megatron-cpp's layer-local name, TP axis)
        "input_layernorm.weight": ("input_layernorm.weight", None),
        "input_layernorm.bias": ("input_layernorm.bias", None),
        a + "linear_q_down_proj.weight": (a + "linear_q_down_proj.weight", None),
        a + "linear_q_up_proj.layer_norm_weight": (a + "q_layernorm.weight", None),
        a + "linear_q_up_proj.layer_norm_bias": (a + "q_layernorm.bias", None),
        a + "linear_q_up_proj.weight": (a + "linear_q_up_proj.weight", 0),
        a + "linear_kv_down_proj.weight": (a + "linear_kv_down_proj.weight", None),
        a + "linear_kv_up_proj.layer_norm_weight": (a + "kv_layernorm.weight", None),
        a + "linear_kv_up_proj.layer_norm_bias": (a + "kv_layernorm.bias", None),
        a + "linear_kv_up_proj.weight": (a + "linear_kv_up_proj.weight", 0),
        a + "linear_proj.weight": (a + "dense.weight", 1),
        a + "linear_proj.bias": (a + "dense.bias", None),
        "mlp.linear_fc1.layer_norm_weight": ("post_attention_layernorm.weight", None),
        "mlp.linear_fc1.layer_norm_bias": ("post_attention_layernorm.bias", None),
        "mlp.linear_fc1.weight": ("mlp.dense_h_to_4h.weight", 0),
        "mlp.linear_fc1.bias": ("mlp.dense_h_to_4h.bias", 0),
        "mlp.linear_fc2.weight": ("mlp.dense_4h_to_h.weight", 1),
        "mlp.linear_fc2.bias": ("mlp.dense_4h_to_h.bias", None),
    }
    tensors = {
        "embedding.word_embeddings.weight": (pad(m["embedding.word_embeddings.weight"]), 0, False),
        "embedding.position_embeddings.weight": (m["embedding.position_embeddings.weight"], None,
                                                 False),
        "decoder.final_layernorm.weight": (m["final_layernorm.weight"], None, False),
        "decoder.final_layernorm.bias": (m["final_layernorm.bias"], None, False),
        "output_layer.weight": (pad(m["output_layer.weight"]), 0, False),
    }
    for key, (name, axis) in layer.items():
        tensors["decoder.layers." + key] = (stack(name), axis, True)
    globals_ = {k: t.float().contiguous() for k, (t, _, _) in tensors.items()}
    chunks = {k: split(globals_[k], k, ax, stacked) for k, (_, ax, stacked) in tensors.items()}
    args = argparse.Namespace(
        num_layers=ref.LAYERS, hidden_size=ref.HIDDEN, ffn_hidden_size=ref.FFN,
        num_attention_heads=ref.HEADS, group_query_attention=False, num_query_groups=1,
        max_position_embeddings=ref.SEQ, seq_length=ref.SEQ,
        position_embedding_type="learned_absolute", normalization="LayerNorm",
        norm_epsilon=ref.EPS, swiglu=False, add_bias_linear=True, add_qkv_bias=False,
        untie_embeddings_and_output_weights=True, bias_gelu_fusion=False, openai_gelu=False,
        hidden_dropout=0.0, attention_dropout=0.0, init_method_std=0.02,
        make_vocab_size_divisible_by=mlm.DIVISIBLE_BY, padded_vocab_size=vp, vocab_size=vocab,
        tokenizer_type="HuggingFaceTokenizer", tensor_model_parallel_size=TP,
        pipeline_model_parallel_size=1, bf16=False, fp16=False, params_dtype=torch.float32,
        iteration=ITERATION, ckpt_format="torch_dist", use_dist_ckpt=True,
        attention_backend=mlm.AttnBackend.auto, multi_latent_attention=True,
        q_lora_rank=ref.Q_LORA, kv_lora_rank=ref.KV_LORA, qk_head_dim=ref.QK_DIM,
        qk_pos_emb_head_dim=DR, v_head_dim=ref.V_DIM, qk_layernorm=True, rope_type="rope",
        rotary_base=int(ref.ROTARY_BASE), rotary_scaling_factor=1.0, mscale=1.0,
        mscale_all_dim=0.0, rotary_interleaved=False)
    return globals_, chunks, {}, args, ITERATION, {}


td.STATES["mla"] = mla_state


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(mlm.ROOT,
                                                             "tests/data/megatron_lm_gpt_tiny")
    w, golden = golden_weights()
    check_megatron_rope(w, golden)
    td.write_checkpoint(out, "mla", 29543)
    expected = {"vocab_size": ref.VOCAB, "tensors": {
        k: {"shape": list(t.shape), "crc32": zlib.crc32(t.float().contiguous().numpy().tobytes())}
        for k, t in sorted(w.items())}}
    with open(os.path.join(out, "torch_dist_mla_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
