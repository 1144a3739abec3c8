#!/usr/bin/python3
"""Megatron-LM `torch`-format checkpoints of a tiny BERT, written by PyTorch's own torch.save, for
tests/unit/convert_megatron_lm_bert_test.cpp and tests/e2e/convert_megatron_lm_bert.sh.

Megatron-LM is not imported: the dictionaries are built the way its checkpointing saves the
legacy BertModel (megatron/legacy/model/bert_model.py and language_model.py, before their
removal) and Megatron-Core's BertModel (megatron/core/models/bert/bert_model.py: the block is
`encoder`, the LM head's vocabulary bias is output_layer.bias). The values are the tiny HF BERT's
(tests/data/bert_tiny/hf) put into Megatron's pre-LayerNorm model by an independent mapping
(a pre-LN model has other LayerNorms than HF's post-LN one; their values are taken as: layer i's
input_norm <- attention.output.LayerNorm, post_attention_norm <- output.LayerNorm, the final
norm <- embeddings.LayerNorm):

* Q, K, V ([h, h] each) become Megatron's per-head query_key_value rows [heads, 3, d];
* column-parallel tensors (QKV, dense_h_to_4h, the word embedding and the LM head's bias,
  padded to args.padded_vocab_size with random rows) split along dim 0, row-parallel weights
  (dense, dense_4h_to_h) along dim 1; the rest (norms, token types, positions, the pooler, the
  LM head's dense layer and norm, the binary head) replicated;
* layers are numbered per pipeline stage.

Writes, under OUT (default tests/data/megatron_lm_bert_tiny):
  legacy_tp2_pp2/  legacy names (language_model / lm_head / binary_head /
                   word_embeddings_for_head), TP 2 x PP 2, iteration 10, with the FP32 Adam
                   optimizer's state (ids in Megatron's parameter order: language model, the last
                   stage's embedding copy, lm_head with its bias first, binary_head; param groups
                   sorted as current Megatron sorts them: no weight decay first), scheduler, RNG
                   states and args without vocab_size (as Megatron saves a WordPiece run's)
  mcore_tp1/       Megatron-Core names (encoder.layers.N..., lm_head.layer_norm, output_layer.bias,
                   pooler), TP 1, iteration 7, Transformer Engine `_extra_state` entries, no
                   optimizer (--no-save-optim)
  expected.json    CRC-32 of every tensor megatron-cpp must load (its names; the real
                   vocabulary's rows), from the HF weights directly
  optimizer_expected.json  legacy_tp2_pp2's Adam moments in megatron-cpp's names (CRC-32s)
  vocab.txt        a 100-token WordPiece vocabulary (the specials, characters and their ##
                   continuations, a few words) with which pretrain-bert trains this model on
                   real text

Regenerate: /usr/bin/python3 tools/reference/megatron_lm_bert_checkpoint.py [OUT]
(deterministic: the same bytes each run).
"""
import argparse
import collections
import io
import json
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_lm_checkpoint as gpt  # noqa: E402  (save_checkpoint, rng_state, AttnBackend)
import safetensors_io  # noqa: E402

ROOT = gpt.ROOT
TP, PP = 2, 2
DIVISIBLE_BY = 64


def vocabulary():
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    punct = list(".,'-;:!?\"()$%&")
    words = ["the", "and", "of", "to", "in", "we", "our", "that", "is"]
    v = specials + chars + ["##" + c for c in chars] + punct + words
    assert len(v) == 100, len(v)
    return v


def hf_weights():
    d = os.path.join(ROOT, "tests/data/bert_tiny/hf")
    t, _ = safetensors_io.load(os.path.join(d, "model.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    return {k: torch.from_numpy(np.array(v)).float() for k, v in t.items()}, cfg


def padded_vocab(vocab, tp):
    multiple = DIVISIBLE_BY * tp
    return (vocab + multiple - 1) // multiple * multiple


def megatron_args(cfg, tp, pp, iteration):
    h = cfg["hidden_size"]
    return argparse.Namespace(
        num_layers=cfg["num_hidden_layers"], hidden_size=h,
        ffn_hidden_size=cfg["intermediate_size"], num_attention_heads=cfg["num_attention_heads"],
        kv_channels=h // cfg["num_attention_heads"], group_query_attention=False,
        num_query_groups=1, max_position_embeddings=cfg["max_position_embeddings"],
        seq_length=cfg["max_position_embeddings"], position_embedding_type="learned_absolute",
        normalization="LayerNorm", norm_epsilon=1e-5,
        apply_residual_connection_post_layernorm=False, openai_gelu=False,
        bias_gelu_fusion=False, swiglu=False, squared_relu=False, add_bias_linear=True,
        add_qkv_bias=False, untie_embeddings_and_output_weights=False, bert_binary_head=True,
        hidden_dropout=0.0, attention_dropout=0.0, init_method_std=0.02,
        make_vocab_size_divisible_by=DIVISIBLE_BY, padded_vocab_size=padded_vocab(
            cfg["vocab_size"], tp), vocab_size=None, tokenizer_type="BertWordPieceLowerCase",
        vocab_file="vocab.txt", tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        data_parallel_size=1, world_size=tp * pp, sequence_parallel=False, micro_batch_size=2,
        global_batch_size=4, train_iters=20, iteration=iteration,
        consumed_train_samples=4 * iteration, consumed_valid_samples=0, lr=1e-3, min_lr=1e-4,
        lr_decay_style="cosine", weight_decay=0.01, clip_grad=1.0, adam_beta1=0.9,
        adam_beta2=0.999, adam_eps=1e-8, seed=1234, fp16=False, bf16=False,
        params_dtype=torch.float32, attention_backend=gpt.AttnBackend.auto, ckpt_format="torch",
        use_dist_ckpt=False, mask_prob=0.15, short_seq_prob=0.1, data_path=["corpus"],
        split="949,50,1", use_distributed_optimizer=False)


def full_tensors(w, cfg, vp, gen):
    """Megatron's full tensors under megatron-cpp's names (the vocabulary padded randomly)."""
    h, heads, n, vocab = (cfg["hidden_size"], cfg["num_attention_heads"],
                          cfg["num_hidden_layers"], cfg["vocab_size"])
    d = h // heads
    b = "bert."
    t = {"embedding.word_embeddings.weight": torch.cat(
             [w[b + "embeddings.word_embeddings.weight"],
              torch.randn(vp - vocab, h, generator=gen) * 0.02]),
         "embedding.position_embeddings.weight": w[b + "embeddings.position_embeddings.weight"],
         "embedding.tokentype_embeddings.weight": w[b + "embeddings.token_type_embeddings.weight"],
         "final_layernorm.weight": w[b + "embeddings.LayerNorm.weight"],
         "final_layernorm.bias": w[b + "embeddings.LayerNorm.bias"],
         "pooler.dense.weight": w[b + "pooler.dense.weight"],
         "pooler.dense.bias": w[b + "pooler.dense.bias"],
         "lm_head.dense.weight": w["cls.predictions.transform.dense.weight"],
         "lm_head.dense.bias": w["cls.predictions.transform.dense.bias"],
         "lm_head.layernorm.weight": w["cls.predictions.transform.LayerNorm.weight"],
         "lm_head.layernorm.bias": w["cls.predictions.transform.LayerNorm.bias"],
         "lm_head.bias": torch.cat([w["cls.predictions.bias"],
                                    torch.randn(vp - vocab, generator=gen) * 0.02]),
         "binary_head.weight": w["cls.seq_relationship.weight"],
         "binary_head.bias": w["cls.seq_relationship.bias"]}
    for i in range(n):
        p, q = f"{b}encoder.layer.{i}.", f"layers.{i}."
        a = p + "attention.self."
        for kind in ("weight", "bias"):
            qkv = torch.stack([w[a + x + "." + kind] for x in ("query", "key", "value")])
            # [3, heads, d, ...] -> rows [heads, 3, d]
            t[q + "self_attention.query_key_value." + kind] = qkv.reshape(
                3, heads, d, *qkv.shape[2:]).transpose(0, 1).reshape(3 * h, *qkv.shape[2:])
            t[q + "self_attention.dense." + kind] = w[p + "attention.output.dense." + kind]
            t[q + "input_layernorm." + kind] = w[p + "attention.output.LayerNorm." + kind]
            t[q + "post_attention_layernorm." + kind] = w[p + "output.LayerNorm." + kind]
            t[q + "mlp.dense_h_to_4h." + kind] = w[p + "intermediate.dense." + kind]
            t[q + "mlp.dense_4h_to_h." + kind] = w[p + "output.dense." + kind]
    return {k: v.contiguous() for k, v in t.items()}


def split_dim(name):
    """Megatron's split of a parameter over TP: 0 (column / vocabulary parallel), 1 (row
    parallel) or None (replicated)."""
    if name in ("embedding.word_embeddings.weight", "lm_head.bias"):
        return 0
    if ".query_key_value." in name or ".dense_h_to_4h." in name:
        return 0
    if name.endswith("self_attention.dense.weight") or name.endswith("dense_4h_to_h.weight"):
        return 1
    return None


def shard(t, name, tp_rank, tp):
    dim = split_dim(name)
    return t.clone() if dim is None else t.chunk(tp, dim=dim)[tp_rank].clone()


LAYER_LEGACY = [("input_layernorm", "input_norm"),
                ("self_attention.query_key_value", "self_attention.query_key_value"),
                ("self_attention.dense", "self_attention.dense"),
                ("post_attention_layernorm", "post_attention_norm"),
                ("mlp.dense_h_to_4h", "mlp.dense_h_to_4h"), ("mlp.dense_4h_to_h", "mlp.dense_4h_to_h")]
LAYER_CORE = [("input_layernorm", "self_attention.linear_qkv.layer_norm_"),
              ("self_attention.query_key_value", "self_attention.linear_qkv."),
              ("self_attention.dense", "self_attention.linear_proj."),
              ("post_attention_layernorm", "mlp.linear_fc1.layer_norm_"),
              ("mlp.dense_h_to_4h", "mlp.linear_fc1."), ("mlp.dense_4h_to_h", "mlp.linear_fc2.")]


def legacy_rank(full, n, tp_rank, tp, pp_rank, pp):
    """A rank's legacy "model" dict and its parameters in Megatron's parameter order, as
    (megatron-cpp name or None for the embedding copy, tensor)."""
    per, first, last = n // pp, pp_rank == 0, pp_rank == pp - 1
    order = []

    def take(name):
        t = shard(full[name], name, tp_rank, tp)
        order.append((name, t))
        return t

    lm = {}
    if first:
        lm["embedding"] = {
            e: collections.OrderedDict(weight=take(f"embedding.{e}.weight"))
            for e in ("word_embeddings", "position_embeddings", "tokentype_embeddings")}
    enc = collections.OrderedDict()
    for local in range(per):
        i = pp_rank * per + local
        for ours, legacy in LAYER_LEGACY:
            for kind in ("weight", "bias"):
                enc[f"layers.{local}.{legacy}.{kind}"] = take(f"layers.{i}.{ours}.{kind}")
    if last:
        enc["final_norm.weight"] = take("final_layernorm.weight")
        enc["final_norm.bias"] = take("final_layernorm.bias")
    lm["encoder"] = enc
    if last:
        lm["pooler"] = collections.OrderedDict(
            [("dense.weight", take("pooler.dense.weight")),
             ("dense.bias", take("pooler.dense.bias"))])
    model = {"language_model": lm}
    copy = None
    if last and pp > 1:  # the tied LM head's copy of the embedding, after the language model
        copy = shard(full["embedding.word_embeddings.weight"], "embedding.word_embeddings.weight",
                     tp_rank, tp)
        order.append((None, copy))
    if last:
        model["lm_head"] = collections.OrderedDict(
            [("bias", take("lm_head.bias")), ("dense.weight", take("lm_head.dense.weight")),
             ("dense.bias", take("lm_head.dense.bias")),
             ("norm.weight", take("lm_head.layernorm.weight")),
             ("norm.bias", take("lm_head.layernorm.bias"))])
        model["binary_head"] = collections.OrderedDict(
            [("weight", take("binary_head.weight")), ("bias", take("binary_head.bias"))])
    if copy is not None:  # saved last (state_dict_for_save_checkpoint)
        model["word_embeddings_for_head"] = collections.OrderedDict(weight=copy)
    return model, order


def adam_state(order, moments, tp_rank, tp, gen, iteration):
    """torch.optim.Adam's state_dict over `order`: the no-weight-decay group (biases, 1-D)
    first, as Megatron sorts its groups now; each parameter's moments are the TP rank's slices
    of `moments` (the embedding copy's its own random values)."""
    no_wd = [i for i, (name, t) in enumerate(order)
             if t.dim() == 1 or (name or "").endswith(".bias")]
    wd = [i for i in range(len(order)) if i not in no_wd]
    state = {}
    for new, old in enumerate(no_wd + wd):
        name, p = order[old]
        if name is None:
            m = [torch.randn(p.shape, generator=gen), torch.rand(p.shape, generator=gen)]
        else:
            m = [shard(moments[b][name], name, tp_rank, tp) for b in ("exp_avg", "exp_avg_sq")]
        state[new] = {"step": torch.tensor(float(iteration)), "exp_avg": m[0], "exp_avg_sq": m[1]}
    group = dict(lr=9.5e-4, betas=(0.9, 0.999), eps=1e-8, amsgrad=False, maximize=False,
                 foreach=None, capturable=False, lr_mult=1.0, is_expert_parallel=False,
                 is_decoupled_lr=False)
    return {"state": state,
            "param_groups": [dict(group, weight_decay=0.0, wd_mult=0.0,
                                  params=list(range(len(no_wd)))),
                             dict(group, weight_decay=0.01, wd_mult=1.0,
                                  params=list(range(len(no_wd), len(order))))]}


def mcore_model(full, n):
    m = collections.OrderedDict()
    for e in ("word_embeddings", "position_embeddings", "tokentype_embeddings"):
        m[f"embedding.{e}.weight"] = full[f"embedding.{e}.weight"].clone()
    for i in range(n):
        for ours, core in LAYER_CORE:
            for kind in ("weight", "bias"):
                m[f"encoder.layers.{i}.{core}{kind}"] = full[f"layers.{i}.{ours}.{kind}"].clone()
        older_te = io.BytesIO()
        torch.save(None, older_te)
        m[f"encoder.layers.{i}.self_attention.core_attention._extra_state"] = None
        m[f"encoder.layers.{i}.self_attention.linear_proj._extra_state"] = older_te
        m[f"encoder.layers.{i}.self_attention.linear_qkv._extra_state"] = None
        m[f"encoder.layers.{i}.mlp.linear_fc1._extra_state"] = torch.empty(0, dtype=torch.uint8)
        m[f"encoder.layers.{i}.mlp.linear_fc2._extra_state"] = None
    m["encoder.final_layernorm.weight"] = full["final_layernorm.weight"].clone()
    m["encoder.final_layernorm.bias"] = full["final_layernorm.bias"].clone()
    for ours, core in (("lm_head.dense.weight", "lm_head.dense.weight"),
                       ("lm_head.dense.bias", "lm_head.dense.bias"),
                       ("lm_head.layernorm.weight", "lm_head.layer_norm.weight"),
                       ("lm_head.layernorm.bias", "lm_head.layer_norm.bias"),
                       ("lm_head.bias", "output_layer.bias"),
                       ("binary_head.weight", "binary_head.weight"),
                       ("binary_head.bias", "binary_head.bias"),
                       ("pooler.dense.weight", "pooler.dense.weight"),
                       ("pooler.dense.bias", "pooler.dense.bias")):
        m[core] = full[ours].clone()
    return m


def crcs(tensors, vocab):
    out = {}
    for k, v in sorted(tensors.items()):
        if k in ("embedding.word_embeddings.weight", "lm_head.bias"):
            v = v[:vocab]
        out[k] = {"shape": list(v.shape),
                  "crc32": zlib.crc32(v.contiguous().numpy().astype("<f4").tobytes())}
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/data/megatron_lm_bert_tiny")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocabulary()) + "\n")
    w, cfg = hf_weights()
    n, vocab = cfg["num_hidden_layers"], cfg["vocab_size"]
    gen = torch.Generator().manual_seed(53)

    vp = padded_vocab(vocab, TP)
    full = full_tensors(w, cfg, vp, gen)
    moments = {"exp_avg": {k: torch.randn(v.shape, generator=gen) * 1e-3 for k, v in full.items()},
               "exp_avg_sq": {k: torch.rand(v.shape, generator=gen) * 1e-6
                              for k, v in full.items()}}
    ranks = []
    for pp_rank in range(PP):
        for tp_rank in range(TP):
            model, order = legacy_rank(full, n, tp_rank, TP, pp_rank, PP)
            sd = {"args": megatron_args(cfg, TP, PP, 10), "checkpoint_version": 3.0,
                  "iteration": 10, "model": model,
                  "optimizer": adam_state(order, moments, tp_rank, TP, gen, 10),
                  "opt_param_scheduler": {"max_lr": 1e-3, "lr_warmup_steps": 8, "num_steps": 40,
                                          "lr_decay_style": "linear", "lr_decay_steps": 80,
                                          "min_lr": 1e-4, "start_wd": 0.01, "end_wd": 0.01,
                                          "wd_incr_style": "constant", "wd_incr_steps": 80},
                  "rng_state": gpt.rng_state(77 + 10 * pp_rank + tp_rank),
                  "num_floating_point_operations_so_far": 4242}
            ranks.append((f"mp_rank_{tp_rank:02d}_{pp_rank:03d}", sd))
    gpt.save_checkpoint(os.path.join(out, "legacy_tp2_pp2"), 10, ranks)

    full1 = full_tensors(w, cfg, padded_vocab(vocab, 1), gen)
    sd = {"args": megatron_args(cfg, 1, 1, 7), "checkpoint_version": 3.0, "iteration": 7,
          "model": mcore_model(full1, n), "rng_state": gpt.rng_state(5),
          "num_floating_point_operations_so_far": 0}
    gpt.save_checkpoint(os.path.join(out, "mcore_tp1"), 7, [("mp_rank_00", sd)])

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"vocab_size": vocab, "tensors": crcs(full, vocab)}, f, indent=1)
        f.write("\n")
    with open(os.path.join(out, "optimizer_expected.json"), "w") as f:
        json.dump({b: {"vocab_size": vocab, "tensors": crcs(m, vocab)} for b, m in moments.items()},
                  f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
