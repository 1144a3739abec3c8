#!/usr/bin/python3
"""Megatron-LM `torch`-format checkpoints of the tiny GPT-2 (tests/data/gpt2_tiny/hf), written by
PyTorch's own torch.save, for tests/unit/convert_megatron_lm_test.cpp and
tests/e2e/convert_megatron_lm.sh.

Megatron-LM is not imported (nor needed): the dictionaries are built here the way its
checkpointing saves them (read from its source, megatron/training/checkpointing.py and the legacy
and Megatron-Core GPT models), from the HF weights by an independent mapping:

* HF Conv1D weights [in, out] are transposed to Megatron's [out, in];
* c_attn's output columns [Q; K; V] ([3, heads, d]) become Megatron's per-head
  query_key_value rows [heads, 3, d] (checkpoint_version 3.0);
* column-parallel weights (QKV, dense_h_to_4h, the word embedding padded to
  args.padded_vocab_size with random rows, as Megatron initialises them) are split along dim 0
  over the TP ranks, row-parallel weights (dense, dense_4h_to_h) along dim 1;
* layers are numbered per pipeline stage (local indices, as Megatron's state dicts are).

Writes, under OUT (default tests/data/megatron_lm_gpt_tiny):
  legacy_tp2_pp2/   legacy model names (language_model.encoder.layers.N...), TP 2 x PP 2,
                    iteration 10, the FP32 Adam optimizer's state, RNG states, scheduler, args;
                    the last stage also holds word_embeddings_for_head
  mcore_tp1/        Megatron-Core names (decoder.layers.N.self_attention.linear_qkv...), TP 1 x
                    PP 1, iteration 7, with Transformer Engine's `_extra_state` entries (None,
                    a BytesIO as older TE saved them, an empty byte tensor as newer TE does),
                    no optimizer (--no-save-optim)
  qwen2_core_tp2/   Megatron-Core names, TP 2, iteration 3, a --bf16 run's files (bf16 weights,
                    params_dtype torch.bfloat16) of the tiny Qwen2 (tests/data/qwen2_tiny/hf):
                    RoPE, RMSNorm, SwiGLU (linear_fc1 per rank [gate_r; up_r]), grouped-query
                    attention (linear_qkv per query group [q heads, k, v]; one group per rank),
                    QKV biases without linear biases, an untied output layer
  qwen2_expected.json  its CRC-32s as expected.json (of the bf16-rounded values)
  legacy_bf16_tp2/  legacy names, TP 2, iteration 4, a --bf16 run's files: bf16 weights and the
                    MixedPrecisionOptimizer's state (Adam's, and fp32_from_fp16_params)
  legacy_optimizer_expected.json  both checkpoints' Adam moments (and fp32 main params) in
                    megatron-cpp's names (CRC-32s; a replicated parameter's from TP rank 0)
  expected.json     CRC-32 (zlib's) of every tensor's float32 bytes in megatron-cpp's names
                    (full, the real vocabulary's rows), from the HF weights directly: what
                    loading either checkpoint must give

Regenerate: /usr/bin/python3 tools/reference/megatron_lm_checkpoint.py [OUT]
(deterministic: the same bytes each run).
"""
import argparse
import collections
import enum
import io
import json
import os
import random
import sys
import types
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TP, PP = 2, 2
DIVISIBLE_BY = 64

# Megatron-Core's AttnBackend enum as args.attention_backend holds it (pickled by reference).
for _name in ("megatron", "megatron.core", "megatron.core.transformer"):
    sys.modules[_name] = types.ModuleType(_name)
_enums = types.ModuleType("megatron.core.transformer.enums")
sys.modules["megatron.core.transformer.enums"] = _enums
sys.modules["megatron.core.transformer"].enums = _enums


class AttnBackend(enum.Enum):
    flash = 1
    fused = 2
    unfused = 3
    local = 4
    auto = 5


AttnBackend.__module__ = "megatron.core.transformer.enums"
_enums.AttnBackend = AttnBackend


def hf_weights():
    t, _ = safetensors_io.load(os.path.join(ROOT, "tests/data/gpt2_tiny/hf/model.safetensors"))
    cfg = json.load(open(os.path.join(ROOT, "tests/data/gpt2_tiny/hf/config.json")))
    return {k: torch.from_numpy(np.array(v)).float() for k, v in t.items()}, cfg


def padded_vocab(vocab, tp):
    multiple = DIVISIBLE_BY * tp
    return (vocab + multiple - 1) // multiple * multiple


def megatron_args(cfg, tp, pp, iteration):
    h = cfg["n_embd"]
    return argparse.Namespace(
        num_layers=cfg["n_layer"], hidden_size=h, ffn_hidden_size=4 * h,
        num_attention_heads=cfg["n_head"], kv_channels=h // cfg["n_head"],
        group_query_attention=False, num_query_groups=1,
        max_position_embeddings=cfg["n_positions"], seq_length=cfg["n_positions"],
        position_embedding_type="learned_absolute", normalization="LayerNorm",
        norm_epsilon=cfg["layer_norm_epsilon"], apply_residual_connection_post_layernorm=False,
        openai_gelu=False, bias_gelu_fusion=True, swiglu=False, squared_relu=False,
        add_bias_linear=True, add_qkv_bias=False, untie_embeddings_and_output_weights=False,
        hidden_dropout=0.0, attention_dropout=0.0, init_method_std=0.02,
        make_vocab_size_divisible_by=DIVISIBLE_BY,
        padded_vocab_size=padded_vocab(cfg["vocab_size"], tp), vocab_size=cfg["vocab_size"],
        tokenizer_type="GPT2BPETokenizer", vocab_file="gpt2-vocab.json",
        merge_file="gpt2-merges.txt",
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        data_parallel_size=1, world_size=tp * pp, sequence_parallel=False,
        micro_batch_size=2, global_batch_size=4, train_iters=20, iteration=iteration,
        consumed_train_samples=4 * iteration, lr=1e-3, min_lr=1e-4, lr_decay_style="cosine",
        weight_decay=0.01, clip_grad=1.0, adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-8,
        seed=1234, fp16=False, bf16=False, params_dtype=torch.float32,
        attention_backend=AttnBackend.auto, ckpt_format="torch", use_dist_ckpt=False,
        recompute_granularity=None, eval_iters=1, data_path=["corpus_text_document"],
        split="949,50,1", rampup_batch_size=None, use_distributed_optimizer=False)


def megatron_full_tensors(w, cfg, vp, gen):
    """Full (unsplit) tensors in Megatron's layout, keyed by a layout-neutral name."""
    h, heads, n = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    d = h // heads
    pad = torch.randn(vp - cfg["vocab_size"], h, generator=gen) * 0.02
    full = {"word": torch.cat([w["wte.weight"], pad]), "pos": w["wpe.weight"]}
    for i in range(n):
        p = f"h.{i}."
        qkv_w = w[p + "attn.c_attn.weight"].t()  # [3h, h], rows [3, heads, d]
        qkv_b = w[p + "attn.c_attn.bias"]
        full[f"{i}.qkv.w"] = qkv_w.reshape(3, heads, d, h).transpose(0, 1).reshape(3 * h, h)
        full[f"{i}.qkv.b"] = qkv_b.reshape(3, heads, d).transpose(0, 1).reshape(3 * h)
        full[f"{i}.proj.w"] = w[p + "attn.c_proj.weight"].t()
        full[f"{i}.proj.b"] = w[p + "attn.c_proj.bias"]
        full[f"{i}.fc1.w"] = w[p + "mlp.c_fc.weight"].t()
        full[f"{i}.fc1.b"] = w[p + "mlp.c_fc.bias"]
        full[f"{i}.fc2.w"] = w[p + "mlp.c_proj.weight"].t()
        full[f"{i}.fc2.b"] = w[p + "mlp.c_proj.bias"]
        for ours, hf in (("ln1", "ln_1"), ("ln2", "ln_2")):
            full[f"{i}.{ours}.w"] = w[p + hf + ".weight"]
            full[f"{i}.{ours}.b"] = w[p + hf + ".bias"]
    full["lnf.w"] = w["ln_f.weight"]
    full["lnf.b"] = w["ln_f.bias"]
    return {k: v.contiguous() for k, v in full.items()}


# Split of each tensor kind: dim 0 (column parallel), 1 (row parallel) or None (replicated).
SPLIT = {"word": 0, "pos": None, "qkv.w": 0, "qkv.b": 0, "proj.w": 1, "proj.b": None,
         "fc1.w": 0, "fc1.b": 0, "fc2.w": 1, "fc2.b": None, "ln1.w": None, "ln1.b": None,
         "ln2.w": None, "ln2.b": None, "lnf.w": None, "lnf.b": None}


def shard(full, key, tp_rank, tp):
    kind = key.split(".", 1)[1] if key[0].isdigit() else key
    dim = SPLIT[kind]
    if dim is None:
        return full[key].clone()
    return full[key].chunk(tp, dim=dim)[tp_rank].clone()


LEGACY = {"qkv.w": "self_attention.query_key_value.weight",
          "qkv.b": "self_attention.query_key_value.bias",
          "proj.w": "self_attention.dense.weight", "proj.b": "self_attention.dense.bias",
          "fc1.w": "mlp.dense_h_to_4h.weight", "fc1.b": "mlp.dense_h_to_4h.bias",
          "fc2.w": "mlp.dense_4h_to_h.weight", "fc2.b": "mlp.dense_4h_to_h.bias",
          "ln1.w": "input_norm.weight", "ln1.b": "input_norm.bias",
          "ln2.w": "post_attention_norm.weight", "ln2.b": "post_attention_norm.bias"}
MCORE = {"qkv.w": "self_attention.linear_qkv.weight", "qkv.b": "self_attention.linear_qkv.bias",
         "proj.w": "self_attention.linear_proj.weight", "proj.b": "self_attention.linear_proj.bias",
         "fc1.w": "mlp.linear_fc1.weight", "fc1.b": "mlp.linear_fc1.bias",
         "fc2.w": "mlp.linear_fc2.weight", "fc2.b": "mlp.linear_fc2.bias",
         "ln1.w": "self_attention.linear_qkv.layer_norm_weight",
         "ln1.b": "self_attention.linear_qkv.layer_norm_bias",
         "ln2.w": "mlp.linear_fc1.layer_norm_weight", "ln2.b": "mlp.linear_fc1.layer_norm_bias"}


def legacy_model(full, n, tp_rank, tp, pp_rank, pp):
    per = n // pp
    model = {}
    lm = {}
    if pp_rank == 0:
        lm["embedding"] = {
            "word_embeddings": collections.OrderedDict(weight=shard(full, "word", tp_rank, tp)),
            "position_embeddings": collections.OrderedDict(weight=shard(full, "pos", tp_rank, tp))}
    enc = collections.OrderedDict()
    for local in range(per):
        i = pp_rank * per + local
        for kind in ("ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b", "ln2.w", "ln2.b",
                     "fc1.w", "fc1.b", "fc2.w", "fc2.b"):
            enc[f"layers.{local}.{LEGACY[kind]}"] = shard(full, f"{i}.{kind}", tp_rank, tp)
    if pp_rank == pp - 1:
        enc["final_norm.weight"] = shard(full, "lnf.w", tp_rank, tp)
        enc["final_norm.bias"] = shard(full, "lnf.b", tp_rank, tp)
    lm["encoder"] = enc
    model["language_model"] = lm
    if pp_rank == pp - 1 and pp > 1:  # the tied output layer's copy on the last stage
        model["word_embeddings_for_head"] = collections.OrderedDict(
            weight=shard(full, "word", tp_rank, tp))
    return model


def mcore_model(full, n, tp_rank, tp):
    m = collections.OrderedDict()
    m["embedding.word_embeddings.weight"] = shard(full, "word", tp_rank, tp)
    m["embedding.position_embeddings.weight"] = shard(full, "pos", tp_rank, tp)
    for i in range(n):
        for kind in ("ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b", "ln2.w", "ln2.b",
                     "fc1.w", "fc1.b", "fc2.w", "fc2.b"):
            m[f"decoder.layers.{i}.{MCORE[kind]}"] = shard(full, f"{i}.{kind}", tp_rank, tp)
        # Transformer Engine's extra state in its three spellings: None, a BytesIO holding a
        # torch.save (older TE), an empty byte tensor (newer TE, without FP8).
        older_te = io.BytesIO()
        torch.save(None, older_te)
        m[f"decoder.layers.{i}.self_attention.core_attention._extra_state"] = None
        m[f"decoder.layers.{i}.self_attention.linear_proj._extra_state"] = None
        m[f"decoder.layers.{i}.self_attention.linear_qkv._extra_state"] = older_te
        m[f"decoder.layers.{i}.mlp.linear_fc1._extra_state"] = torch.empty(0, dtype=torch.uint8)
        m[f"decoder.layers.{i}.mlp.linear_fc2._extra_state"] = None
    m["decoder.final_layernorm.weight"] = shard(full, "lnf.w", tp_rank, tp)
    m["decoder.final_layernorm.bias"] = shard(full, "lnf.b", tp_rank, tp)
    return m


def tensors_of(model):
    if isinstance(model, torch.Tensor):
        yield model
    elif isinstance(model, dict):
        for v in model.values():
            yield from tensors_of(v)


def adam_state(model, gen, iteration):
    """The FP32 optimizer's state_dict (torch.optim.Adam's): weight-decayed parameters in the
    first group, biases and norms in the second, both indexed in the model's order."""
    params = list(tensors_of(model))
    wd = [i for i, p in enumerate(params) if p.dim() > 1]
    no_wd = [i for i, p in enumerate(params) if p.dim() <= 1]
    order = wd + no_wd
    state = {}
    for new, old in enumerate(order):
        p = params[old]
        state[new] = {"step": torch.tensor(float(iteration)),
                      "exp_avg": torch.randn(p.shape, generator=gen) * 1e-3,
                      "exp_avg_sq": torch.rand(p.shape, generator=gen) * 1e-6}
    group = dict(lr=9.5e-4, betas=(0.9, 0.999), eps=1e-8, amsgrad=False, maximize=False,
                 foreach=None, capturable=False, wd_mult=1.0, lr_mult=1.0,
                 is_expert_parallel=False)
    groups = [dict(group, weight_decay=0.01, params=list(range(len(wd)))),
              dict(group, weight_decay=0.0, wd_mult=0.0,
                   params=list(range(len(wd), len(order))))]
    return {"state": state, "param_groups": groups}


# megatron-cpp's names of the layout-neutral keys' layer kinds.
OURS_KIND = {"qkv.w": "self_attention.query_key_value.weight",
             "qkv.b": "self_attention.query_key_value.bias",
             "proj.w": "self_attention.dense.weight", "proj.b": "self_attention.dense.bias",
             "fc1.w": "mlp.dense_h_to_4h.weight", "fc1.b": "mlp.dense_h_to_4h.bias",
             "fc2.w": "mlp.dense_4h_to_h.weight", "fc2.b": "mlp.dense_4h_to_h.bias",
             "ln1.w": "input_layernorm.weight", "ln1.b": "input_layernorm.bias",
             "ln2.w": "post_attention_layernorm.weight", "ln2.b": "post_attention_layernorm.bias"}


def legacy_param_keys(n, pp_rank, pp):
    """legacy_model's tensors in tensors_of order, as (layout-neutral key, megatron-cpp name);
    the last stage's tied copy of the embedding is ("word", None)."""
    per = n // pp
    keys = [("word", "embedding.word_embeddings.weight"),
            ("pos", "embedding.position_embeddings.weight")] if pp_rank == 0 else []
    for local in range(per):
        i = pp_rank * per + local
        for kind in ("ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b", "ln2.w", "ln2.b",
                     "fc1.w", "fc1.b", "fc2.w", "fc2.b"):
            keys.append((f"{i}.{kind}", f"layers.{i}.{OURS_KIND[kind]}"))
    if pp_rank == pp - 1:
        keys += [("lnf.w", "final_layernorm.weight"), ("lnf.b", "final_layernorm.bias")]
        if pp > 1:
            keys.append(("word", None))
    return keys


def mixed_precision_state(model, gen, iteration):
    """A --bf16 run's MixedPrecisionOptimizer state_dict for the bf16 `model`: adam_state's
    Adam state (fp32 moments) and the fp32 main params per param group, in its order (each the
    bf16 value plus a perturbation below bf16's resolution, as training leaves them)."""
    adam = adam_state(model, gen, iteration)
    params = list(tensors_of(model))
    order = ([i for i, p in enumerate(params) if p.dim() > 1] +
             [i for i, p in enumerate(params) if p.dim() <= 1])
    masters = []
    for group in adam["param_groups"]:
        masters.append([params[order[i]].float() + torch.randn(params[order[i]].shape,
                                                                generator=gen) * 1e-4
                        for i in group["params"]])
    return {"optimizer": adam, "grad_scaler": None, "fp32_from_fp16_params": masters}


def legacy_optimizer_expected(ranks, n, vocab, pp):
    """The Adam state of a legacy-named checkpoint in megatron-cpp's names: each parameter's
    moments (and fp32 main params) put together from the TP ranks' slices (a replicated
    parameter's from TP rank 0; the tied copy's left out), by the ids adam_state gave them;
    CRC-32s of the real vocabulary rows."""
    pieces = {}
    for (pp_rank, tp_rank), sd in ranks:
        keys = legacy_param_keys(n, pp_rank, pp)
        params = list(tensors_of(sd["model"]))
        order = ([i for i, p in enumerate(params) if p.dim() > 1] +
                 [i for i, p in enumerate(params) if p.dim() <= 1])
        optimizer = sd["optimizer"].get("optimizer", sd["optimizer"])
        masters = [t for group in sd["optimizer"].get("fp32_from_fp16_params", []) for t in group]
        for new, old in enumerate(order):
            key, name = keys[old]
            if name is None:
                continue
            for buf in ("exp_avg", "exp_avg_sq"):
                pieces.setdefault((buf, name, key), {})[tp_rank] = optimizer["state"][new][buf]
            if masters:
                pieces.setdefault(("fp32_master", name, key), {})[tp_rank] = masters[new]
    out = {buf: {} for buf, _, _ in pieces}
    for (buf, name, key), by_rank in pieces.items():
        kind = key.split(".", 1)[1] if key[0].isdigit() else key
        dim = SPLIT[kind]
        t = by_rank[0] if dim is None else torch.cat([by_rank[r] for r in range(TP)], dim=dim)
        t = t[:vocab] if name == "embedding.word_embeddings.weight" else t
        out[buf][name] = {"shape": list(t.shape),
                          "crc32": zlib.crc32(t.contiguous().numpy().astype("<f4").tobytes())}
    return {b: {"vocab_size": vocab, "tensors": dict(sorted(t.items()))} for b, t in out.items()}


def rng_state(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
             "torch_rng_state": torch.get_rng_state(),
             "cuda_rng_state": torch.ByteTensor(16).zero_(),
             "rng_tracker_states": {"model-parallel-rng": torch.ByteTensor(16).fill_(seed % 256)}}]


def save_checkpoint(directory, iteration, ranks):
    it_dir = os.path.join(directory, f"iter_{iteration:07d}")
    for name, sd in ranks:
        os.makedirs(os.path.join(it_dir, name), exist_ok=True)
        torch.save(sd, os.path.join(it_dir, name, "model_optim_rng.pt"))
    with open(os.path.join(directory, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


def ours_expected(w, cfg):
    """CRC-32 of the float32 bytes of every tensor megatron-cpp must load, in its names, from
    the HF weights directly (its QKV layout is Megatron's per-head one)."""
    h, heads, n = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    d = h // heads
    t = {"embedding.word_embeddings.weight": w["wte.weight"],
         "embedding.position_embeddings.weight": w["wpe.weight"],
         "final_layernorm.weight": w["ln_f.weight"], "final_layernorm.bias": w["ln_f.bias"]}
    for i in range(n):
        p, q = f"h.{i}.", f"layers.{i}."
        t[q + "self_attention.query_key_value.weight"] = (
            w[p + "attn.c_attn.weight"].t().reshape(3, heads, d, h).transpose(0, 1).reshape(-1, h))
        t[q + "self_attention.query_key_value.bias"] = (
            w[p + "attn.c_attn.bias"].reshape(3, heads, d).transpose(0, 1).reshape(-1))
        t[q + "self_attention.dense.weight"] = w[p + "attn.c_proj.weight"].t()
        t[q + "self_attention.dense.bias"] = w[p + "attn.c_proj.bias"]
        t[q + "mlp.dense_h_to_4h.weight"] = w[p + "mlp.c_fc.weight"].t()
        t[q + "mlp.dense_h_to_4h.bias"] = w[p + "mlp.c_fc.bias"]
        t[q + "mlp.dense_4h_to_h.weight"] = w[p + "mlp.c_proj.weight"].t()
        t[q + "mlp.dense_4h_to_h.bias"] = w[p + "mlp.c_proj.bias"]
        for ours, hf in (("input_layernorm", "ln_1"), ("post_attention_layernorm", "ln_2")):
            t[q + ours + ".weight"] = w[p + hf + ".weight"]
            t[q + ours + ".bias"] = w[p + hf + ".bias"]
    return {k: {"shape": list(v.shape),
                "crc32": zlib.crc32(v.contiguous().numpy().astype("<f4").tobytes())}
            for k, v in sorted(t.items())}


def qwen2_checkpoint(out, gen):
    """The tiny Qwen2 as a Megatron-Core --bf16 run at TP 2 saves it, and the CRC-32s of the
    tensors megatron-cpp must load (its layout: QKV rows per query group [q heads, k, v], the
    SwiGLU weight stacked [2, ffn, h] = [gate; up])."""
    d = os.path.join(ROOT, "tests/data/qwen2_tiny/hf")
    t, _ = safetensors_io.load(os.path.join(d, "model.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {k: torch.from_numpy(np.array(v)).bfloat16() for k, v in t.items()}
    h, heads, groups = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh, ffn, vocab, tp = h // heads, cfg["intermediate_size"], cfg["vocab_size"], TP
    vp = padded_vocab(vocab, tp)
    q_per_group = heads // groups

    def grouped(q, k, v):  # [heads*d, ...], [g*d, ...] x2 -> rows [g, q + 2, d]
        rest = q.shape[1:]
        q = q.reshape(groups, q_per_group * dh, *rest)
        k = k.reshape(groups, dh, *rest)
        v = v.reshape(groups, dh, *rest)
        return torch.cat([q, k, v], dim=1).reshape(-1, *rest)

    def pad(x):
        return torch.cat([x, (torch.randn(vp - vocab, h, generator=gen) * 0.02).bfloat16()])

    ours = {"embedding.word_embeddings.weight": w["model.embed_tokens.weight"],
            "output_layer.weight": w["lm_head.weight"],
            "final_layernorm.weight": w["model.norm.weight"]}
    p = "model.layers.0."
    ours["layers.0.input_layernorm.weight"] = w[p + "input_layernorm.weight"]
    ours["layers.0.post_attention_layernorm.weight"] = w[p + "post_attention_layernorm.weight"]
    a = p + "self_attn."
    ours["layers.0.self_attention.query_key_value.weight"] = grouped(
        w[a + "q_proj.weight"], w[a + "k_proj.weight"], w[a + "v_proj.weight"])
    ours["layers.0.self_attention.query_key_value.bias"] = grouped(
        w[a + "q_proj.bias"], w[a + "k_proj.bias"], w[a + "v_proj.bias"])
    ours["layers.0.self_attention.dense.weight"] = w[a + "o_proj.weight"]
    gate, up = w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]
    ours["layers.0.mlp.dense_h_to_4h.weight"] = torch.stack([gate, up])
    ours["layers.0.mlp.dense_4h_to_h.weight"] = w[p + "mlp.down_proj.weight"]

    ranks = []
    for r in range(tp):
        def col(x):
            return x.chunk(tp, dim=0)[r].clone()
        qkv_w = ours["layers.0.self_attention.query_key_value.weight"].reshape(groups, -1, h)
        qkv_b = ours["layers.0.self_attention.query_key_value.bias"].reshape(groups, -1)
        m = collections.OrderedDict()
        m["embedding.word_embeddings.weight"] = col(pad(ours["embedding.word_embeddings.weight"]))
        pre = "decoder.layers.0."
        m[pre + "self_attention.linear_qkv.layer_norm_weight"] = ours[
            "layers.0.input_layernorm.weight"].clone()
        m[pre + "self_attention.linear_qkv.weight"] = qkv_w.chunk(tp)[r].reshape(-1, h).clone()
        m[pre + "self_attention.linear_qkv.bias"] = qkv_b.chunk(tp)[r].reshape(-1).clone()
        m[pre + "self_attention.linear_proj.weight"] = ours[
            "layers.0.self_attention.dense.weight"].chunk(tp, dim=1)[r].clone()
        m[pre + "mlp.linear_fc1.layer_norm_weight"] = ours[
            "layers.0.post_attention_layernorm.weight"].clone()
        m[pre + "mlp.linear_fc1.weight"] = torch.cat([col(gate), col(up)])
        m[pre + "mlp.linear_fc2.weight"] = ours[
            "layers.0.mlp.dense_4h_to_h.weight"].chunk(tp, dim=1)[r].clone()
        for module in ("self_attention.core_attention", "self_attention.linear_proj",
                       "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2"):
            m[pre + module + "._extra_state"] = None
        m["decoder.final_layernorm.weight"] = ours["final_layernorm.weight"].clone()
        m["output_layer.weight"] = col(pad(ours["output_layer.weight"]))
        args = argparse.Namespace(
            num_layers=cfg["num_hidden_layers"], hidden_size=h, ffn_hidden_size=ffn,
            num_attention_heads=heads, kv_channels=dh, group_query_attention=True,
            num_query_groups=groups, max_position_embeddings=cfg["max_position_embeddings"],
            seq_length=cfg["max_position_embeddings"], position_embedding_type="rope",
            rotary_base=int(cfg["rope_theta"]), rotary_percent=1.0, normalization="RMSNorm",
            norm_epsilon=cfg["rms_norm_eps"], swiglu=True, add_bias_linear=False,
            add_qkv_bias=True, untie_embeddings_and_output_weights=True, bias_gelu_fusion=False,
            openai_gelu=False, hidden_dropout=0.0, attention_dropout=0.0, init_method_std=0.02,
            make_vocab_size_divisible_by=DIVISIBLE_BY, padded_vocab_size=vp, vocab_size=vocab,
            tokenizer_type="HuggingFaceTokenizer", tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=1, bf16=True, fp16=False, params_dtype=torch.bfloat16,
            iteration=3, ckpt_format="torch")
        ranks.append((f"mp_rank_{r:02d}", {"args": args, "checkpoint_version": 3.0,
                                           "iteration": 3, "model": m,
                                           "num_floating_point_operations_so_far": 0}))
    save_checkpoint(os.path.join(out, "qwen2_core_tp2"), 3, ranks)
    with open(os.path.join(out, "qwen2_expected.json"), "w") as f:
        json.dump({"vocab_size": vocab, "tensors": {
            k: {"shape": list(v.shape),
                "crc32": zlib.crc32(v.float().contiguous().numpy().astype("<f4").tobytes())}
            for k, v in sorted(ours.items())}}, f, indent=1)
        f.write("\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/data/megatron_lm_gpt_tiny")
    w, cfg = hf_weights()
    gen = torch.Generator().manual_seed(37)
    n = cfg["n_layer"]

    # Legacy model, TP 2 x PP 2, with the optimizer.
    vp = padded_vocab(cfg["vocab_size"], TP)
    full = megatron_full_tensors(w, cfg, vp, gen)
    ranks = []
    for pp_rank in range(PP):
        for tp_rank in range(TP):
            model = legacy_model(full, n, tp_rank, TP, pp_rank, PP)
            sd = {"args": megatron_args(cfg, TP, PP, 10), "checkpoint_version": 3.0,
                  "iteration": 10, "model": model,
                  "optimizer": adam_state(model, gen, 10),
                  "opt_param_scheduler": {"max_lr": 1e-3, "lr_warmup_steps": 8, "num_steps": 40,
                                          "lr_decay_style": "cosine", "lr_decay_steps": 80,
                                          "min_lr": 1e-4, "start_wd": 0.01, "end_wd": 0.01,
                                          "wd_incr_style": "constant", "wd_incr_steps": 80},
                  "rng_state": rng_state(1234 + 100 * pp_rank + tp_rank),
                  "num_floating_point_operations_so_far": 123456789}
            ranks.append((f"mp_rank_{tp_rank:02d}_{pp_rank:03d}", sd))
    save_checkpoint(os.path.join(out, "legacy_tp2_pp2"), 10, ranks)
    coords = [(pp_rank, tp_rank) for pp_rank in range(PP) for tp_rank in range(TP)]
    expected_optimizer = {"legacy_tp2_pp2": legacy_optimizer_expected(
        [(c, sd) for c, (_, sd) in zip(coords, ranks)], n, cfg["vocab_size"], PP)}

    # Legacy names, TP 2, a --bf16 run's files: bf16 weights, the mixed-precision optimizer.
    bf16_gen = torch.Generator().manual_seed(41)
    full_bf16 = {k: v.bfloat16() for k, v in megatron_full_tensors(w, cfg, vp, bf16_gen).items()}
    bf16_ranks = []
    for tp_rank in range(TP):
        model = legacy_model(full_bf16, n, tp_rank, TP, 0, 1)
        args = megatron_args(cfg, TP, 1, 4)
        args.bf16, args.params_dtype = True, torch.bfloat16
        sd = {"args": args, "checkpoint_version": 3.0, "iteration": 4, "model": model,
              "optimizer": mixed_precision_state(model, bf16_gen, 4),
              "opt_param_scheduler": {"max_lr": 1e-3, "lr_warmup_steps": 8, "num_steps": 16,
                                      "lr_decay_style": "cosine", "lr_decay_steps": 80,
                                      "min_lr": 1e-4, "start_wd": 0.01, "end_wd": 0.01,
                                      "wd_incr_style": "constant", "wd_incr_steps": 80},
              "rng_state": rng_state(4321 + tp_rank), "num_floating_point_operations_so_far": 0}
        bf16_ranks.append((f"mp_rank_{tp_rank:02d}", sd))
    save_checkpoint(os.path.join(out, "legacy_bf16_tp2"), 4, bf16_ranks)
    expected_optimizer["legacy_bf16_tp2"] = legacy_optimizer_expected(
        [((0, r), sd) for r, (_, sd) in enumerate(bf16_ranks)], n, cfg["vocab_size"], 1)
    with open(os.path.join(out, "legacy_optimizer_expected.json"), "w") as f:
        json.dump(expected_optimizer, f, indent=1)
        f.write("\n")

    # Megatron-Core names, TP 1 x PP 1 (its padded vocabulary is shorter), no optimizer.
    full = megatron_full_tensors(w, cfg, padded_vocab(cfg["vocab_size"], 1), gen)
    sd = {"args": megatron_args(cfg, 1, 1, 7), "checkpoint_version": 3.0, "iteration": 7,
          "model": mcore_model(full, n, 0, 1), "rng_state": rng_state(99),
          "num_floating_point_operations_so_far": 0}
    save_checkpoint(os.path.join(out, "mcore_tp1"), 7, [("mp_rank_00", sd)])

    qwen2_checkpoint(out, gen)

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"vocab_size": cfg["vocab_size"], "tensors": ours_expected(w, cfg)}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
