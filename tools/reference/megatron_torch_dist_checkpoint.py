#!/usr/bin/python3
"""Megatron-LM `torch_dist` checkpoints (Megatron-Core dist_checkpointing over PyTorch Distributed
Checkpoint, DCP) of the tiny GPT-2 and the tiny Qwen2, written by PyTorch 1.13's own DCP writer
(torch.distributed._shard.checkpoint.save_state_dict, FileSystemWriter) from two gloo processes:
tensor-parallel ranks 0 and 1 each save their own chunks. For
tests/unit/convert_megatron_torch_dist_test.cpp and tests/e2e/convert_megatron_lm.sh.

Megatron-LM is not imported: the sharded state dict is built here the way Megatron-Core builds it
(read from its source: GPTModel / TransformerBlock / TransformerLayer sharded_state_dict,
make_sharded_tensors_for_checkpoint, apply_swiglu_sharded_factory,
dist_checkpointing/strategies/torch.py, serialization.py):

* keys are ShardedTensor keys; a transformer layer's tensors are stacked over the layers, with
  the layer as a leading axis of the global shape ("decoder.layers.self_attention.linear_qkv.
  weight" [L, 3h, h]), each rank's chunk [1, ...] at offset (layer, ...);
* column-parallel weights are split along their output rows, row-parallel ones along their
  input columns, replicated tensors saved once (by TP rank 0, the main replica);
* SwiGLU's linear_fc1 is saved as two chunks per rank: the global tensor is [gate of every rank;
  up of every rank], rank r's gate at row r·ffn/t, its up at ffn + r·ffn/t;
* QKV rows are Megatron's per query group [g, q + 2, d] (checkpoint_version 3.0);
* Transformer Engine's `_extra_state` are byte items (torch.save of [state]) keyed
  "<key>/shard_<layer>_<L>", saved by TP rank 0, written as they are (MCoreSavePlanner's
  transform_object; DCP's default planner would torch.save the BytesIO again).

Writes, under OUT (default tests/data/megatron_lm_gpt_tiny):
  torch_dist_gpt2_tp2/     the tiny GPT-2 (HF weights, tests/data/gpt2_tiny/hf), f32, tied
                           embedding, iteration 12; metadata.json with the common backend and the
                           common state in common.pt (Megatron-Core before July 2026); the
                           `.metadata` pickle exactly as PyTorch 1.13 writes it
  torch_dist_qwen2_tp2/    the tiny Qwen2 (tests/data/qwen2_tiny/hf) as a --bf16 run saves it
                           (bf16, RoPE, RMSNorm, SwiGLU, GQA, QKV biases, untied output layer),
                           iteration 5; metadata.json without the common backend and the common
                           state as the DCP byte item "common_state/shard_0_1" (Megatron-Core
                           since July 2026); the `.metadata` pickle as PyTorch 2.x writes it (its
                           classes in torch.distributed.checkpoint.metadata / .filesystem, the
                           TensorProperties state with _MEM_FORMAT_ENCODING, a StorageMeta with a
                           PosixPath, version "1.0.0"), pickled from stand-ins of PyTorch 2.9's
                           dataclasses (same module, names, fields and __getstate__), since only
                           PyTorch 1.13 is installed here
  torch_dist_gpt2_adam_tp2/ the tiny GPT-2 as a --bf16 run saves it after 3 iterations of
                           torch.optim.AdamW with Megatron's non-distributed mixed-precision
                           optimizer (adam_state): bf16 weights, the optimizer state as
                           optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<key>, the step, param
                           groups and opt_param_scheduler in common.pt
  torch_dist_gpt2_adam_dist_tp2/ the same run with --use-distributed-optimizer in its
                           `fully_reshardable` layout (adam_dist_state): the fp32 main params as
                           optimizer.state.param.<key>, the step in the param groups; its import
                           must give what torch_dist_adam_expected.json says too
  torch_dist_adam_expected.json  what its import must give (adam_expected): the optimizer buffers
                           in megatron-cpp's names (CRC-32s), the step, and PyTorch's next AdamW
                           step from that state
  torch_dist_expected.json the dtype, global shape and CRC-32 (zlib's) of the raw bytes of every
                           DCP tensor of both checkpoints, as the script built them: what reading
                           the chunks back must give, bit for bit
The megatron-cpp tensors either import must give are expected.json / qwen2_expected.json (written
by megatron_lm_checkpoint.py from the same HF weights).

Regenerate: /usr/bin/python3 tools/reference/megatron_torch_dist_checkpoint.py [OUT]
(deterministic: the same bytes each run).
"""
import argparse
import dataclasses
import enum
import io
import json
import os
import pathlib
import pickle
import shutil
import sys
import types
import zlib

import numpy as np
import torch


def _hashable_tensor_properties():
    """Debian's PyTorch 1.13 predates Python 3.11, whose dataclasses refuse an unhashable
    default: ShardedTensorMetadata's TensorProperties() default fails to import. Making that one
    dataclass hashable (unsafe_hash, which changes neither its fields nor its pickle) lets
    torch.distributed._shard import unchanged otherwise."""
    original = dataclasses.dataclass

    def patched(cls=None, /, **kwargs):
        def wrap(c):
            if c.__name__ == "TensorProperties":
                kwargs["unsafe_hash"] = True
            return original(**kwargs)(c)
        return wrap if cls is None else wrap(cls)

    dataclasses.dataclass = patched
    try:
        import torch.distributed._shard.sharded_tensor  # noqa: F401
    finally:
        dataclasses.dataclass = original


_hashable_tensor_properties()
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed._shard import checkpoint as dcp  # noqa: E402
from torch.distributed._shard.checkpoint.default_planner import DefaultSavePlanner  # noqa: E402
from torch.distributed._shard.metadata import ShardMetadata  # noqa: E402
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardedTensorMetadata  # noqa: E402
from torch.distributed._shard.sharded_tensor.metadata import TensorProperties  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_lm_checkpoint as mlm  # noqa: E402
import safetensors_io  # noqa: E402

TP = 2


# ---- the sharded state dict ------------------------------------------------------------------

@dataclasses.dataclass
class Chunk:
    """One rank's piece of a global tensor: `data` sits at `offset` of `global_shape`."""
    rank: int
    offset: tuple
    data: torch.Tensor


def split(global_tensor, key, axis, stacked_layers):
    """The TP chunks of `global_tensor` ([L, ...] when stacked_layers, the layer axis first):
    split along `axis` (of the per-layer tensor) over the ranks, or whole on rank 0."""
    chunks = []
    layers = range(global_tensor.shape[0]) if stacked_layers else [None]
    for layer in layers:
        t = global_tensor[layer] if layer is not None else global_tensor
        pre = (layer,) if layer is not None else ()
        if axis is None:
            chunks.append(Chunk(0, pre + (0,) * t.dim(), t))
            continue
        step = t.shape[axis] // TP
        for r in range(TP):
            off = [0] * t.dim()
            off[axis] = r * step
            chunks.append(Chunk(r, pre + tuple(off), t.narrow(axis, r * step, step)))
    if stacked_layers:
        for c in chunks:
            c.data = c.data.unsqueeze(0)
    return chunks


def swiglu_chunks(global_tensor):
    """linear_fc1 [L, 2·ffn, ...] = [gate; up]: rank r saves rows r·ffn/t of each half
    (apply_swiglu_sharded_factory)."""
    chunks = []
    ffn = global_tensor.shape[1] // 2
    step = ffn // TP
    for layer in range(global_tensor.shape[0]):
        for r in range(TP):
            for half in (0, 1):
                row = half * ffn + r * step
                rest = (0,) * (global_tensor.dim() - 2)
                chunks.append(Chunk(r, (layer, row) + rest,
                                    global_tensor[layer:layer + 1, row:row + step]))
    return chunks


def extra_states(layers, modules):
    """Transformer Engine's _extra_state ShardedObjects: torch.save([state]) bytes on TP rank 0,
    keyed by their unique key "<key>/shard_<layer>_<L>" (an empty byte tensor: no FP8)."""
    items = {}
    for module in modules:
        for layer in range(layers):
            buf = io.BytesIO()
            torch.save([torch.empty(0, dtype=torch.uint8)], buf)
            items[f"decoder.layers.{module}._extra_state/shard_{layer}_{layers}"] = buf.getvalue()
    return items


TE_MODULES = ("self_attention.core_attention", "self_attention.linear_proj",
              "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")


def gpt2_state():
    """The tiny GPT-2's global tensors (Megatron-Core keys) and their chunks, and its args."""
    w, cfg = mlm.hf_weights()
    gen = torch.Generator().manual_seed(38)
    n = cfg["n_layer"]
    vp = mlm.padded_vocab(cfg["vocab_size"], TP)
    full = mlm.megatron_full_tensors(w, cfg, vp, gen)

    def stack(kind):
        return torch.stack([full[f"{i}.{kind}"] for i in range(n)])

    axis = {"qkv.w": 0, "qkv.b": 0, "proj.w": 1, "fc1.w": 0, "fc1.b": 0, "fc2.w": 1}
    tensors = {"embedding.word_embeddings.weight": (full["word"], 0, False),
               "embedding.position_embeddings.weight": (full["pos"], None, False)}
    for kind, name in mlm.MCORE.items():
        tensors["decoder.layers." + name] = (stack(kind), axis.get(kind), True)
    tensors["decoder.final_layernorm.weight"] = (full["lnf.w"], None, False)
    tensors["decoder.final_layernorm.bias"] = (full["lnf.b"], None, False)
    chunks = {k: split(t, k, ax, stacked) for k, (t, ax, stacked) in tensors.items()}
    globals_ = {k: t for k, (t, _, _) in tensors.items()}
    args = mlm.megatron_args(cfg, TP, 1, 12)
    args.ckpt_format = "torch_dist"
    args.use_dist_ckpt = True
    args.transformer_impl = "transformer_engine"
    return globals_, chunks, extra_states(n, TE_MODULES), args, 12, {}


def qwen2_state():
    """The tiny Qwen2 in bf16: Megatron's global tensors, their chunks, and its args."""
    d = os.path.join(mlm.ROOT, "tests/data/qwen2_tiny/hf")
    t, _ = safetensors_io.load(os.path.join(d, "model.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {k: torch.from_numpy(np.array(v)).bfloat16() for k, v in t.items()}
    h, heads, groups = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh, ffn, vocab = h // heads, cfg["intermediate_size"], cfg["vocab_size"]
    vp = mlm.padded_vocab(vocab, TP)
    gen = torch.Generator().manual_seed(39)
    q_per_group = heads // groups

    def grouped(q, k, v):  # rows [g, q + 2, d]: each query group's q heads, its key, its value
        rest = q.shape[1:]
        return torch.cat([q.reshape(groups, q_per_group * dh, *rest),
                          k.reshape(groups, dh, *rest), v.reshape(groups, dh, *rest)],
                         dim=1).reshape(-1, *rest)

    def pad(x):  # Megatron's padding rows hold their random initial values
        return torch.cat([x, (torch.randn(vp - vocab, h, generator=gen) * 0.02).bfloat16()])

    p, a = "model.layers.0.", "model.layers.0.self_attn."
    one = lambda x: x.unsqueeze(0).contiguous()  # noqa: E731 -- the stacked layer axis (L = 1)
    tensors = {
        "embedding.word_embeddings.weight": (pad(w["model.embed_tokens.weight"]), 0, False),
        "decoder.layers.self_attention.linear_qkv.layer_norm_weight":
            (one(w[p + "input_layernorm.weight"]), None, True),
        "decoder.layers.self_attention.linear_qkv.weight": (one(grouped(
            w[a + "q_proj.weight"], w[a + "k_proj.weight"], w[a + "v_proj.weight"])), 0, True),
        "decoder.layers.self_attention.linear_qkv.bias": (one(grouped(
            w[a + "q_proj.bias"], w[a + "k_proj.bias"], w[a + "v_proj.bias"])), 0, True),
        "decoder.layers.self_attention.linear_proj.weight": (one(w[a + "o_proj.weight"]), 1, True),
        "decoder.layers.mlp.linear_fc1.layer_norm_weight":
            (one(w[p + "post_attention_layernorm.weight"]), None, True),
        "decoder.layers.mlp.linear_fc2.weight": (one(w[p + "mlp.down_proj.weight"]), 1, True),
        "decoder.final_layernorm.weight": (w["model.norm.weight"], None, False),
        "output_layer.weight": (pad(w["lm_head.weight"]), 0, False),
    }
    chunks = {k: split(t, k, ax, stacked) for k, (t, ax, stacked) in tensors.items()}
    globals_ = {k: t for k, (t, _, _) in tensors.items()}
    fc1 = one(torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]))
    globals_["decoder.layers.mlp.linear_fc1.weight"] = fc1
    chunks["decoder.layers.mlp.linear_fc1.weight"] = swiglu_chunks(fc1)
    args = argparse.Namespace(
        num_layers=cfg["num_hidden_layers"], hidden_size=h, ffn_hidden_size=ffn,
        num_attention_heads=heads, kv_channels=dh, group_query_attention=True,
        num_query_groups=groups, max_position_embeddings=cfg["max_position_embeddings"],
        seq_length=cfg["max_position_embeddings"], position_embedding_type="rope",
        rotary_base=int(cfg["rope_theta"]), rotary_percent=1.0, normalization="RMSNorm",
        norm_epsilon=cfg["rms_norm_eps"], swiglu=True, add_bias_linear=False, add_qkv_bias=True,
        untie_embeddings_and_output_weights=True, bias_gelu_fusion=False, openai_gelu=False,
        hidden_dropout=0.0, attention_dropout=0.0, init_method_std=0.02,
        make_vocab_size_divisible_by=mlm.DIVISIBLE_BY, padded_vocab_size=vp, vocab_size=vocab,
        tokenizer_type="HuggingFaceTokenizer", tensor_model_parallel_size=TP,
        pipeline_model_parallel_size=1, bf16=True, fp16=False, params_dtype=torch.bfloat16,
        iteration=5, ckpt_format="torch_dist", use_dist_ckpt=True,
        attention_backend=mlm.AttnBackend.auto)
    return globals_, chunks, extra_states(1, TE_MODULES), args, 5, {}


ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
ADAM_STEPS = 3  # iterations of global batch 2: the fixture is iteration 3, 6 samples consumed
ADAM_GBS = 2
ADAM_TRAIN_ITERS = 5


def adam_gradients(globals_, seed):
    """One synthetic gradient per tensor (standing in for a backward pass: the optimizer state
    does not depend on where the gradients came from)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(t.shape, generator=gen) * 0.01 for k, t in sorted(globals_.items())}


def adam_state():
    """The tiny GPT-2 as a --bf16 run with Megatron's non-distributed mixed-precision optimizer
    saves it after ADAM_STEPS iterations: torch.optim.AdamW (Megatron's Adam with decoupled weight
    decay) stepped on fp32 main params (weight decay on the matrices only, Megatron's
    no-wd rule for biases and norms), the bf16 model params their copies; the optimizer state
    under Megatron-Core's keys optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<model key>
    (MixedPrecisionOptimizer.sharded_state_dict), chunked as the model's tensors."""
    globals_, chunks, extras, args, _, _ = gpt2_state()
    main = {k: t.clone().requires_grad_(True) for k, t in globals_.items()}
    stacked = lambda k: k.startswith("decoder.layers.")  # noqa: E731 -- the layer axis
    no_wd = [k for k in sorted(main) if main[k].dim() - stacked(k) == 1]
    wd = [k for k in sorted(main) if k not in no_wd]
    opt = torch.optim.AdamW([{"params": [main[k] for k in wd]},
                             {"params": [main[k] for k in no_wd], "weight_decay": 0.0}], **ADAM)
    for step in range(ADAM_STEPS):
        grads = adam_gradients(globals_, 100 + step)
        for k, p in main.items():
            p.grad = grads[k]
        opt.step()
    model, optim = {}, {}
    for k, p in main.items():
        state = opt.state[p]
        model[k] = p.detach().bfloat16()
        optim["optimizer.state.exp_avg." + k] = state["exp_avg"]
        optim["optimizer.state.exp_avg_sq." + k] = state["exp_avg_sq"]
        optim["optimizer.state.fp32_param." + k] = p.detach().clone()
    out_globals, out_chunks = {}, {}
    for k, t in {**model, **optim}.items():
        model_key = k.split(".", 3)[3] if k.startswith("optimizer.") else k
        out_globals[k] = t
        out_chunks[k] = [Chunk(c.rank, c.offset, t[tuple(slice(o, o + n) for o, n in
                                                        zip(c.offset, c.data.shape))])
                         for c in chunks[model_key]]
    args.bf16 = True
    args.params_dtype = torch.bfloat16
    args.iteration = ADAM_STEPS
    args.global_batch_size = ADAM_GBS
    args.train_iters = ADAM_TRAIN_ITERS
    args.consumed_train_samples = ADAM_STEPS * ADAM_GBS
    args.lr_decay_style = "linear"
    args.min_lr = 0.0
    param_groups = [{"lr": ADAM["lr"], "betas": ADAM["betas"], "eps": ADAM["eps"],
                     "weight_decay": wd_, "amsgrad": False, "maximize": False, "foreach": None,
                     "capturable": False, "differentiable": False, "fused": None,
                     "wd_mult": float(wd_ > 0), "lr_mult": 1.0, "is_expert_parallel": False,
                     "is_decoupled_lr": False, "params": list(range(first, first + n))}
                    for wd_, first, n in ((ADAM["weight_decay"], 0, len(wd)),
                                          (0.0, len(wd), len(no_wd)))]
    common = {"optimizer": {"optimizer": {"state": {"common_step": torch.tensor(
        float(ADAM_STEPS))}, "param_groups": param_groups},
        "fp32_from_fp16_params": [[], []]},
        "opt_param_scheduler": {"max_lr": ADAM["lr"], "lr_warmup_steps": 0,
                                "num_steps": ADAM_STEPS * ADAM_GBS, "lr_decay_style": "linear",
                                "lr_decay_steps": ADAM_TRAIN_ITERS * ADAM_GBS, "min_lr": 0.0,
                                "start_wd": ADAM["weight_decay"],
                                "end_wd": ADAM["weight_decay"], "wd_incr_style": "constant",
                                "wd_incr_steps": ADAM_TRAIN_ITERS * ADAM_GBS}}
    return out_globals, out_chunks, extras, args, ADAM_STEPS, common


def adam_dist_state():
    """The same run with --use-distributed-optimizer, saved in the distributed optimizer's
    `fully_reshardable` layout (DistributedOptimizer.sharded_param_state_fully_reshardable): its
    DP buffers gathered and cut back into tensors of each parameter's global shape, the fp32 main
    params as optimizer.state.param.<key> (the state key "param"), the moments as for the
    non-distributed optimizer; in the common state DistributedOptimizer.state_dict's entries — no
    "state", every param group without "params" and with the step (Apex / TE FusedAdam), and
    "param_state_sharding_type"."""
    globals_, chunks, extras, args, iteration, common = adam_state()
    rename = lambda k: k.replace("optimizer.state.fp32_param.", "optimizer.state.param.")  # noqa
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "step": ADAM_STEPS}
              for g in common["optimizer"]["optimizer"]["param_groups"]]
    common = {**common, "optimizer": {"optimizer": {"param_groups": groups},
                                      "param_state_sharding_type": "fully_reshardable"}}
    args.use_distributed_optimizer = True
    return ({rename(k): v for k, v in globals_.items()},
            {rename(k): v for k, v in chunks.items()}, extras, args, iteration, common)


def common_state(args, iteration, extra):
    """The non-sharded part Megatron's generate_state_dict leaves after the sharded tensors are
    taken out."""
    return {"args": args, "checkpoint_version": 3.0, "iteration": iteration,
            "num_floating_point_operations_so_far": 0,
            "content_metadata": {"singleton_local_shards": False,
                                 "chained_optim_avoid_prefix": True}, **extra}


# ---- saving with PyTorch's DCP ----------------------------------------------------------------

def sharded_tensor(global_shape, chunks, rank):
    """A torch ShardedTensor of `rank`'s chunks, as Megatron's
    sharded_tensor_to_torch_sharded_tensor builds it (every chunk listed in the metadata)."""
    local = [Shard.from_tensor_and_offsets(c.data.contiguous(), list(c.offset), rank)
             for c in chunks if c.rank == rank]
    meta = ShardedTensorMetadata(
        shards_metadata=[ShardMetadata(list(c.offset), list(c.data.shape), f"rank:{c.rank}/cpu")
                         for c in chunks],
        size=torch.Size(global_shape),
        tensor_properties=TensorProperties(dtype=chunks[0].data.dtype, layout=torch.strided,
                                           requires_grad=False,
                                           memory_format=torch.contiguous_format,
                                           pin_memory=False))
    return ShardedTensor._init_from_local_shards_and_global_metadata(local, meta)


class MCoreSavePlanner(DefaultSavePlanner):
    """Megatron-Core's planner as far as the files go: its objects are already torch.save'd
    into BytesIO, so they are written as they are (DCP's default would torch.save them again)."""

    def transform_object(self, write_item, object):
        return object


def save_rank(rank, port, which, directory):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=TP)
    globals_, chunks, extras, args, iteration, common = STATES[which]()
    state = {k: sharded_tensor(globals_[k].shape, chunks[k], rank) for k in sorted(globals_)}
    if rank == 0:
        for k, v in extras.items():
            state[k] = io.BytesIO(v)
        if which == "qwen2":  # the common state as a DCP byte item (Megatron-Core >= July 2026)
            buf = io.BytesIO()
            torch.save([common_state(args, iteration, common)], buf)
            state["common_state/shard_0_1"] = buf
    dcp.save_state_dict(state, dcp.FileSystemWriter(directory, single_file_per_rank=True),
                        planner=MCoreSavePlanner())
    dist.barrier()
    dist.destroy_process_group()


STATES = {"gpt2": gpt2_state, "qwen2": qwen2_state, "gpt2_adam": adam_state,
          "gpt2_adam_dist": adam_dist_state}


# megatron-cpp's names of the GPT-2's Megatron-Core keys (the layer-local part of a stacked key).
OURS = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
        "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
        "self_attention.linear_qkv.weight": "self_attention.query_key_value.weight",
        "self_attention.linear_qkv.bias": "self_attention.query_key_value.bias",
        "self_attention.linear_proj.weight": "self_attention.dense.weight",
        "self_attention.linear_proj.bias": "self_attention.dense.bias",
        "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
        "mlp.linear_fc1.layer_norm_bias": "post_attention_layernorm.bias",
        "mlp.linear_fc1.weight": "mlp.dense_h_to_4h.weight",
        "mlp.linear_fc1.bias": "mlp.dense_h_to_4h.bias",
        "mlp.linear_fc2.weight": "mlp.dense_4h_to_h.weight",
        "mlp.linear_fc2.bias": "mlp.dense_4h_to_h.bias"}


def ours(globals_):
    """Megatron-Core global tensors → megatron-cpp's names (each layer of a stacked one apart)."""
    out = {}
    for k, t in globals_.items():
        if k.startswith("decoder.layers."):
            for i in range(t.shape[0]):
                out[f"layers.{i}.{OURS[k[len('decoder.layers.'):]]}"] = t[i]
        elif k.startswith("decoder."):
            out[k[len("decoder."):]] = t
        else:
            out[k] = t
    return out


def next_step_gradient(numel):
    """The gradient of the next step, element j of a tensor (row-major, megatron-cpp's layout):
    an integer formula both sides compute exactly (float64, rounded once to float32)."""
    j = np.arange(numel, dtype=np.int64)
    return torch.from_numpy((((j * 7919) % 2001 - 1000) * 1e-5).astype(np.float32))


def fused_adamw_step(p, g, m, v, step, lr, wd):
    """One AdamW step in float32 as the fused optimizers Megatron-LM trains with compute it (Apex
    FusedAdam's multi_tensor_adam, ADAM_MODE_1, read from its source; TE's FusedAdam is the same
    kernel): the betas and 1 - beta in float32, bias corrections in double on the host, then
    p - lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * p). Returns the new p."""
    f32 = torch.float32
    b1, b2 = torch.tensor(ADAM["betas"][0], dtype=f32), torch.tensor(ADAM["betas"][1], dtype=f32)
    bc1 = torch.tensor(1 - ADAM["betas"][0] ** step, dtype=f32)
    bc2 = torch.tensor(1 - ADAM["betas"][1] ** step, dtype=f32)
    eps, lr_, wd_ = (torch.tensor(x, dtype=f32) for x in (ADAM["eps"], lr, wd))
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = (m / bc1) / (torch.sqrt(v / bc2) + eps) + wd_ * p
    return p - lr_ * update


def adam_expected(globals_, common, vocab):
    """What the import of torch_dist_gpt2_adam_tp2 must give: CRC-32s of each optimizer buffer in
    megatron-cpp's names (the real vocabulary rows of the embedding), the step and the schedule;
    and the next AdamW step from that state (fused_adamw_step, checked against torch.optim.AdamW;
    the learning rate Megatron's linear decay gives at the checkpoint's sample count,
    next_step_gradient as the gradient): the sum of every tensor's update (the word embedding's
    real rows) and its first elements'."""
    buffers = {}
    for state, buffer in (("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq"),
                          ("fp32_param", "fp32_master")):
        prefix = f"optimizer.state.{state}."
        tensors = ours({k[len(prefix):]: t for k, t in globals_.items() if k.startswith(prefix)})
        buffers[buffer] = tensors
    sched = common["opt_param_scheduler"]
    ratio = sched["num_steps"] / sched["lr_decay_steps"]
    lr = sched["min_lr"] + (1 - ratio) * (sched["max_lr"] - sched["min_lr"])
    names = sorted(buffers["fp32_master"])
    params = {n: buffers["fp32_master"][n].clone().requires_grad_(True) for n in names}
    wd = [params[n] for n in names if params[n].dim() > 1]
    no_wd = [params[n] for n in names if params[n].dim() == 1]
    opt = torch.optim.AdamW([{"params": wd}, {"params": no_wd, "weight_decay": 0.0}],
                            **{**ADAM, "lr": lr})
    for n in names:
        p = params[n]
        opt.state[p] = {"step": torch.tensor(float(ADAM_STEPS)),
                        "exp_avg": buffers["exp_avg"][n].clone(),
                        "exp_avg_sq": buffers["exp_avg_sq"][n].clone()}
        p.grad = next_step_gradient(p.numel()).reshape(p.shape)
    opt.step()
    updates = {}
    for n in names:  # the word embedding's real rows only (the import zeroes the padding)
        p0 = buffers["fp32_master"][n]
        fused = fused_adamw_step(p0, params[n].grad, buffers["exp_avg"][n],
                                 buffers["exp_avg_sq"][n], ADAM_STEPS + 1, lr,
                                 ADAM["weight_decay"] if p0.dim() > 1 else 0.0)
        torch_u = params[n].detach().double() - p0.double()
        u = fused.double() - p0.double()
        # torch.optim.AdamW forms 1 - beta in double, Apex in float32 (1 - 0.999f is 1.3e-5 off
        # 0.001): the two updates agree to that, relative to the update, and to the rounding of
        # the new weight (2 ulps: the two apply the weight decay in another order).
        tolerance = 3e-5 * u.abs() + 2 * p0.double().abs() * 2.0 ** -23
        assert ((u - torch_u).abs() <= tolerance).all(), n
        u = (u[:vocab] if n == "embedding.word_embeddings.weight" else u).flatten()
        updates[n] = {"sum": u.sum().item(), "first": u[:4].tolist()}

    def crcs(tensors):
        out = {}
        for n, t in sorted(tensors.items()):
            t = t[:vocab] if n == "embedding.word_embeddings.weight" else t
            out[n] = {"shape": list(t.shape),
                      "crc32": zlib.crc32(t.contiguous().numpy().tobytes())}
        return out

    return {"vocab_size": vocab, "iteration": ADAM_STEPS, "steps": ADAM_STEPS,
            "consumed_train_samples": ADAM_STEPS * ADAM_GBS, "scheduler_num_steps":
            sched["num_steps"], "buffers": {b: {"vocab_size": vocab, "tensors": crcs(t)}
                                            for b, t in buffers.items()},
            "next_step": {"lr": lr, "updates": updates}}


def write_checkpoint(out, which, port):
    globals_, _, _, args, iteration, common = STATES[which]()
    root = os.path.join(out, f"torch_dist_{which}_tp2")
    shutil.rmtree(root, ignore_errors=True)
    it_dir = os.path.join(root, f"iter_{iteration:07d}")
    mp.spawn(save_rank, args=(port, which, it_dir), nprocs=TP, join=True)
    config = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
    if which != "qwen2":  # Megatron-Core before July 2026: common.pt and the common backend
        config.update(common_backend="torch", common_backend_version=1)
        torch.save(common_state(args, iteration, common), os.path.join(it_dir, "common.pt"))
    with open(os.path.join(it_dir, "metadata.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    return globals_, it_dir, common


# ---- PyTorch 2.x's .metadata ----------------------------------------------------------------

def pytorch2_classes():
    """Stand-ins of PyTorch 2.9's torch/distributed/checkpoint/metadata.py and filesystem.py
    dataclasses (module, name, field order, __getstate__ as there), importable by those names so
    that pickle writes what PyTorch 2.x's pickle.dump(metadata) writes."""
    names = ["torch.distributed.checkpoint", "torch.distributed.checkpoint.metadata",
             "torch.distributed.checkpoint.filesystem"]
    mods = {n: sys.modules.setdefault(n, types.ModuleType(n)) for n in names}
    md, fs = mods[names[1]], mods[names[2]]

    class _MEM_FORMAT_ENCODING(enum.Enum):
        TORCH_CONTIGUOUS_FORMAT = 0
        TORCH_CHANNELS_LAST = 1
        TORCH_PRESERVE_FORMAT = 2

    @dataclasses.dataclass
    class ChunkStorageMetadata:
        offsets: torch.Size
        sizes: torch.Size

    @dataclasses.dataclass
    class TensorProperties:
        dtype: torch.dtype = None
        layout: torch.layout = torch.strided
        requires_grad: bool = False
        memory_format: torch.memory_format = torch.contiguous_format
        pin_memory: bool = False

        def __getstate__(self):
            return (self.dtype, self.layout, self.requires_grad,
                    _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

        def __setstate__(self, state):  # as PyTorch's: the encoded memory format decoded
            self.dtype, self.layout, self.requires_grad, encoding, self.pin_memory = state
            self.memory_format = {
                _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT: torch.contiguous_format,
                _MEM_FORMAT_ENCODING.TORCH_CHANNELS_LAST: torch.channels_last,
                _MEM_FORMAT_ENCODING.TORCH_PRESERVE_FORMAT: torch.preserve_format}[encoding]

    @dataclasses.dataclass
    class TensorStorageMetadata:
        properties: TensorProperties
        size: torch.Size
        chunks: list

    @dataclasses.dataclass
    class BytesStorageMetadata:
        pass

    @dataclasses.dataclass
    class StorageMeta:
        checkpoint_id: object = None
        save_id: object = None
        load_id: object = None
        modules: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class Metadata:
        state_dict_metadata: dict
        planner_data: object = None
        storage_data: object = None
        storage_meta: object = None
        version: object = None

    @dataclasses.dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: object = None
        index: object = dataclasses.field(hash=False, compare=False, default=None)

    @dataclasses.dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int
        transform_descriptors: object = None

        def __getstate__(self):
            return {k: v for k, v in self.__dict__.items() if v is not None}

    for cls in (_MEM_FORMAT_ENCODING, ChunkStorageMetadata, TensorProperties,
                TensorStorageMetadata, BytesStorageMetadata, StorageMeta, Metadata,
                MetadataIndex):
        cls.__module__ = md.__name__
        cls.__qualname__ = cls.__name__
        setattr(md, cls.__name__, cls)
    _StorageInfo.__module__ = fs.__name__
    _StorageInfo.__qualname__ = "_StorageInfo"
    fs._StorageInfo = _StorageInfo
    return md, fs


def as_pytorch2(metadata, checkpoint_id):
    """PyTorch 1.13's Metadata object → the object graph PyTorch 2.x pickles for it."""
    md, fs = pytorch2_classes()
    sdm = {}
    for fqn, m in metadata.state_dict_metadata.items():
        if hasattr(m, "chunks"):
            sdm[fqn] = md.TensorStorageMetadata(
                md.TensorProperties(dtype=m.properties.dtype), m.size,
                [md.ChunkStorageMetadata(c.offsets, c.sizes) for c in m.chunks])
        else:
            sdm[fqn] = md.BytesStorageMetadata()
    storage = {md.MetadataIndex(i.fqn, i.offset, i.index): fs._StorageInfo(
        s.relative_path, s.offset, s.length) for i, s in metadata.storage_data.items()}
    return md.Metadata(sdm, None, storage,
                       md.StorageMeta(pathlib.PosixPath(checkpoint_id),
                                      "5d2c3a8e-5f1b-4e84-9a56-0c1f2d3e4b5a"),
                       "1.0.0")


def expected(globals_):
    return {k: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                "crc32": zlib.crc32(t.contiguous().view(torch.uint8).numpy().tobytes())
                if t.dtype != torch.bfloat16 else
                zlib.crc32(t.contiguous().view(torch.int16).numpy().tobytes())}
            for k, t in sorted(globals_.items())}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(mlm.ROOT,
                                                             "tests/data/megatron_lm_gpt_tiny")
    result = {}
    gpt2, _, _ = write_checkpoint(out, "gpt2", 29537)
    result["torch_dist_gpt2_tp2"] = expected(gpt2)
    qwen2, it_dir, _ = write_checkpoint(out, "qwen2", 29538)
    result["torch_dist_qwen2_tp2"] = expected(qwen2)
    adam, _, adam_common = write_checkpoint(out, "gpt2_adam", 29539)
    result["torch_dist_gpt2_adam_tp2"] = expected(adam)
    adam_dist, _, _ = write_checkpoint(out, "gpt2_adam_dist", 29540)
    result["torch_dist_gpt2_adam_dist_tp2"] = expected(adam_dist)
    with open(os.path.join(out, "torch_dist_adam_expected.json"), "w") as f:
        json.dump(adam_expected(adam, adam_common, mlm.hf_weights()[1]["vocab_size"]), f,
                  indent=1)
        f.write("\n")
    path = os.path.join(it_dir, ".metadata")
    with open(path, "rb") as f:
        metadata = pickle.load(f)
    converted = as_pytorch2(metadata, "/checkpoints/qwen2/iter_0000005")
    with open(path, "wb") as f:
        pickle.dump(converted, f)
    with open(os.path.join(out, "torch_dist_expected.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
