#!/usr/bin/python3
"""The distributed optimizer's state (--use-distributed-optimizer) in Megatron-LM's legacy `torch`
format, for tests/unit/convert_megatron_lm_distrib_optim_test.cpp and
tests/e2e/convert_megatron_lm.sh. Megatron-LM is not imported (PyTorch 1.13 cannot run it): the
files are built with torch.save by the layout rules read from Megatron's source (the mirror's
HEAD, d98e8a6), each rule beside the function it comes from:

* megatron/training/checkpointing.py: save_checkpoint writes, beside each (TP, PP) rank's
  model_optim_rng.pt, `distrib_optim.pt` (get_distributed_optimizer_checkpoint_name) by
  optimizer.save_parameter_state, which writes on DP rank 0 only; the rank file's "optimizer" is
  DistributedOptimizer.state_dict(): the param groups without "params", with "step", no "state".
* megatron/core/optimizer/distrib_optimizer.py:
  - _compute_per_buffer_param_layout: the parameters of one buffer, in reverse order; each
    starts at a multiple of 64 (param_layout.pad_param_start); a bucket closes after the
    parameter that brings it to bucket_size elements, and a `shared_embedding` parameter gets a
    bucket of its own; a bucket's end is padded to a multiple of lcm(DP, 128)
    (param_layout.pad_bucket_end); per_bucket_numel_unpadded = bucket end - bucket start before
    that padding.
  - _build_model_gbuf_range / _build_model_gbuf_param_range_map: DP rank r owns
    [r·n/DP, (r+1)·n/DP) of each bucket of n (padded) elements, a parameter's piece in it at
    gbuf_local = its overlap with that range, relative to the range's start.
  - get_parameter_state_dp_zero: each DP rank copies its pieces of "param" (the fp32 main param;
    an fp32 run's weight itself), "exp_avg", "exp_avg_sq" into zeroed local shards, DP rank 0
    gathers them, concatenates each bucket's shards, keeps the first numel_unpadded elements and
    puts the buckets one after the other: {"buckets_coalesced": True, gbuf_idx:
    {(param_dtype, grad_dtype): {"param", "exp_avg", "exp_avg_sq", "numel_unpadded"}}}.
* megatron/core/distributed/distributed_data_parallel.py: bucket_size = --ddp-bucket-size, else
  max(4e7, 1e6·DP), with --overlap-grad-reduce only (else one bucket), and none on pipeline
  stages after the first; group_params_for_buffers: one buffer per (param dtype, grad dtype,
  expert-parallel) — one for this dense fp32 GPT.
* megatron/core/models/common/language_module/language_module.py
  (setup_embeddings_and_output_layer): with tied embeddings and PP > 1 the first stage's word
  embedding and the last stage's output_layer copy are `shared_embedding`.

The state is legacy_tp2_pp2's (tools/reference/megatron_lm_checkpoint.py: the tiny GPT-2 at
TP 2 x PP 2, iteration 10, FP32 Adam): the same weights and the same per-parameter Adam moments,
which that checkpoint holds as plain per-parameter tensors (torch.optim.Adam's state), so its
legacy_optimizer_expected.json CRC-32s are what the import of this one must give too. The model
is saved with Megatron-Core's names (what --use-distributed-optimizer runs use), at DP 2 with
--overlap-grad-reduce --ddp-bucket-size 4250, so the first stage's buffer splits into several
buckets (and the word embedding into its own).

Writes, under OUT (default tests/data/megatron_lm_gpt_tiny):
  distrib_tp2_pp2/   iter_0000010/mp_rank_TT_PPP/{model_optim_rng.pt,distrib_optim.pt}
  torch_dist_gpt2_adam_dp_tp2/  torch_dist's dp_reshardable layout (dp_reshardable_state) of
                     megatron_torch_dist_checkpoint.py's torch_dist_gpt2_adam_tp2 run (the tiny
                     GPT-2, --bf16, TP 2, AdamW), at DP 2 with --overlap-grad-reduce
                     --ddp-bucket-size 4000: its import must give torch_dist_adam_expected.json's
                     buffers and step, as that run's other layouts do

Also reads such a checkpoint independently of megatron-cpp, for the tests:
  megatron_lm_distrib_optim.py check OURS_DIR FIXTURE_DIR VOCAB
    every rank's distrib_optim.pt of OURS_DIR (written by megatron-cpp) torch.loads, its
    buffer splits by the layout its args give into per-parameter state equal to FIXTURE_DIR's
    (the word embedding's real rows; Megatron's padding rows are random, megatron-cpp's zero),
    "param" equals the rank's weights (an fp32 run), and the rank file's "optimizer" is the
    distributed optimizer's (param groups with the step, no state).

Regenerate: /usr/bin/python3 tools/reference/megatron_lm_distrib_optim.py [OUT]
(deterministic: the same bytes each run).
"""
import collections
import io
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_lm_checkpoint as mlm  # noqa: E402  (also registers the pickled Megatron enum)

TP, PP, DP, ITERATION = 2, 2, 2, 10
BUCKET_SIZE = 4250
KEYS = ("param", "exp_avg", "exp_avg_sq")
# A layer's parameters in Megatron-Core's order (named_parameters: module registration order),
# as layout-neutral kinds (mlm.MCORE's keys): megatron/core/transformer/attention.py's
# SelfAttention.__init__ creates linear_qkv after Attention.__init__ created linear_proj; then
# pre_mlp_layernorm (fused into linear_fc1 with Transformer Engine), linear_fc1, linear_fc2.
LAYER_KINDS = ("proj.w", "proj.b", "ln1.w", "ln1.b", "qkv.w", "qkv.b", "ln2.w", "ln2.b",
               "fc1.w", "fc1.b", "fc2.w", "fc2.b")
# Megatron-Core names of the GPT's parameters every TP rank holds whole.
REPLICATED = ("position_embeddings.weight", "layer_norm_weight", "layer_norm_bias",
              "linear_proj.bias", "linear_fc2.bias", "final_layernorm.weight",
              "final_layernorm.bias")


def bucket_size_of(args, pp_rank):
    """DistributedDataParallel.__init__'s bucket size (None: one bucket)."""
    if not getattr(args, "overlap_grad_reduce", False) or pp_rank > 0:
        return None
    size = getattr(args, "ddp_bucket_size", None)
    return size if size is not None else max(40000000, 1000000 * getattr(args, "data_parallel_size", 1))


def buffer_layout(numels, shared, bucket_size, dp):
    """_compute_per_buffer_param_layout: per parameter (model order) its (start, end, bucket) in
    the padded buffer; per bucket (start, end padded, numel_unpadded)."""
    divisor = math.lcm(dp, 128)
    index, buckets = {}, []
    start = bucket_start = 0
    open_params = 0

    def close(end):
        padded = -(-end // divisor) * divisor
        buckets.append((bucket_start, padded, end - bucket_start))
        return padded

    end = 0
    for i in reversed(range(len(numels))):
        start = -(-start // 64) * 64
        if shared[i] and open_params:
            bucket_start = start = close(start)
            open_params = 0
        end = start + numels[i]
        index[i] = (start, end, len(buckets))
        open_params += 1
        if (bucket_size is not None and end - bucket_start >= bucket_size) or shared[i]:
            bucket_start = start = close(end)
            open_params = 0
        else:
            start = end
    if open_params:
        close(end)
    return index, buckets


def dp_zero_state(tensors, index, buckets, dp):
    """get_parameter_state_dp_zero for per-parameter `tensors` ({key: [flat tensor per param]}):
    every DP rank's local shards of every bucket, gathered and coalesced."""
    world = {k: [] for k in KEYS}
    for b, (b_start, b_end, unpadded) in enumerate(buckets):
        local = (b_end - b_start) // dp
        for key in KEYS:
            shards = []
            for r in range(dp):
                shard = torch.zeros(local)
                lo, hi = b_start + r * local, b_start + (r + 1) * local
                for i, (s, e, pb) in index.items():
                    if pb != b or e <= lo or s >= hi:
                        continue
                    a, z = max(s, lo), min(e, hi)  # the piece rank r owns
                    shard[a - lo:z - lo] = tensors[key][i][a - s:z - s]
                shards.append(shard)
            world[key].append(torch.cat(shards)[:unpadded])
    state = {k: torch.cat(v) for k, v in world.items()}
    state["numel_unpadded"] = sum(u for _, _, u in buckets)
    return state


def read_per_parameter(rank_file, vocab_rows=None):
    """Our independent reader: a rank's (model key → {param, exp_avg, exp_avg_sq}) from its
    distrib_optim.pt and the layout its args give."""
    sd = torch.load(rank_file)
    args = sd["args"]
    m = re.search(r"mp_rank_(\d+)(?:_(\d+))?$", os.path.dirname(rank_file))
    pp_rank = int(m.group(2) or 0)
    named = [(k, v) for k, v in sd["model"].items() if isinstance(v, torch.Tensor)]
    tied = not getattr(args, "untie_embeddings_and_output_weights", False)
    pp = args.pipeline_model_parallel_size
    shared = [tied and pp > 1 and k in ("embedding.word_embeddings.weight", "output_layer.weight")
              for k, _ in named]
    index, buckets = buffer_layout([v.numel() for _, v in named], shared,
                                   bucket_size_of(args, pp_rank),
                                   getattr(args, "data_parallel_size", 1))
    optim = torch.load(os.path.join(os.path.dirname(rank_file), "distrib_optim.pt"))
    assert optim["buckets_coalesced"] is True
    assert [k for k in optim if k != "buckets_coalesced"] == [0], optim.keys()
    (dtypes, state), = optim[0].items()
    assert dtypes[0] in (torch.float32, torch.bfloat16, torch.float16), dtypes
    # Inside the buffer, bucket by bucket with the end padding dropped.
    coalesced_start, offset = [], 0
    for b_start, _, unpadded in buckets:
        coalesced_start.append(offset - b_start)
        offset += unpadded
    assert state["numel_unpadded"] == offset, (rank_file, state["numel_unpadded"], offset)
    out = {}
    for i, (k, v) in enumerate(named):
        s, e, b = index[i]
        out[k] = {key: state[key][coalesced_start[b] + s:coalesced_start[b] + e].view(v.shape)
                  for key in KEYS}
        if dtypes[0] == torch.float32:  # an fp32 run's main params are its weights
            assert torch.equal(out[k]["param"], v), (rank_file, k)
    return sd, out


def check(ours_dir, fixture_dir, vocab):
    files, fixture = mlm_rank_files(ours_dir), mlm_rank_files(fixture_dir)
    assert files.keys() == fixture.keys(), (files.keys(), fixture.keys())
    checked = 0
    for name in sorted(files):
        sd, ours = read_per_parameter(files[name])
        _, theirs = read_per_parameter(fixture[name])
        assert ours.keys() == theirs.keys(), (name, set(ours) ^ set(theirs))
        opt = sd["optimizer"]["optimizer"]
        assert "state" not in opt and all("params" not in g for g in opt["param_groups"])
        assert all(g["step"] == sd["iteration"] for g in opt["param_groups"])
        tp_rank = int(re.match(r"mp_rank_(\d+)", name).group(1))
        # The last stage's tied output-layer copy: Megatron's embedding all-reduce keeps its
        # moments equal to the word embedding's, which megatron-cpp writes for it (the fixture's
        # copy has moments of its own, which an import skips): compared with the first stage's.
        tied_copy = (sd["args"].pipeline_model_parallel_size > 1 and
                     not getattr(sd["args"], "untie_embeddings_and_output_weights", False) and
                     "output_layer.weight" in ours)
        if tied_copy:
            first = re.sub(r"_\d+$", "_000", name)
            embedding = read_per_parameter(files[first])[1]["embedding.word_embeddings.weight"]
            theirs["output_layer.weight"] = {
                "param": theirs["output_layer.weight"]["param"],
                **{key: embedding[key] for key in KEYS if key != "param"}}
        # A TP-replicated parameter's state: Megatron's ranks keep it equal (the same gradients),
        # megatron-cpp writes TP rank 0's (the fixture's ranks have their own): compared with that.
        rank0 = read_per_parameter(fixture[re.sub(r"^mp_rank_\d+", "mp_rank_00", name)])[1]
        for k in ours:
            if k.endswith(REPLICATED):
                theirs[k] = rank0[k]
            for key in KEYS:
                x, y = ours[k][key], theirs[k][key]
                if "word_embeddings" in k or k == "output_layer.weight":
                    rows = x.shape[0]
                    real = max(0, min(rows, vocab - tp_rank * rows))
                    x, y = x[:real], y[:real]
                assert torch.equal(x, y), (name, k, key)
                checked += 1
    print(f"{ours_dir}: {len(files)} distrib_optim.pt load in PyTorch {torch.__version__}; "
          f"{checked} per-parameter tensors equal to {fixture_dir}'s")


def mlm_rank_files(d):
    found = {}
    for root, _, names in os.walk(d):
        if "model_optim_rng.pt" in names:
            found[os.path.basename(root)] = os.path.join(root, "model_optim_rng.pt")
    return found


def core_name(key, pp_rank, per_stage):
    """Megatron-Core's name of a layout-neutral key of legacy_param_keys."""
    if key == "word":
        return "embedding.word_embeddings.weight" if pp_rank == 0 else "output_layer.weight"
    if key == "pos":
        return "embedding.position_embeddings.weight"
    if key in ("lnf.w", "lnf.b"):
        return "decoder.final_layernorm." + ("weight" if key == "lnf.w" else "bias")
    layer, kind = key.split(".", 1)
    return f"decoder.layers.{int(layer) - pp_rank * per_stage}.{mlm.MCORE[kind]}"


def build(out):
    src = os.path.join(out, "legacy_tp2_pp2", f"iter_{ITERATION:07d}")
    dst_dir = os.path.join(out, "distrib_tp2_pp2")
    it_dir = os.path.join(dst_dir, f"iter_{ITERATION:07d}")
    for pp_rank in range(PP):
        for tp_rank in range(TP):
            rank = f"mp_rank_{tp_rank:02d}_{pp_rank:03d}"
            sd = torch.load(os.path.join(src, rank, "model_optim_rng.pt"))
            n = sd["args"].num_layers
            keys = mlm.legacy_param_keys(n, pp_rank, PP)
            params = list(mlm.tensors_of(sd["model"]))
            # adam_state's ids: the weight-decayed parameters first, then the others.
            order = ([i for i, p in enumerate(params) if p.dim() > 1] +
                     [i for i, p in enumerate(params) if p.dim() <= 1])
            adam = sd["optimizer"]
            state = {old: adam["state"][new] for new, old in enumerate(order)}
            # Megatron-Core's parameter order (LAYER_KINDS within a layer), which its model
            # dict is saved in and its buffer laid out by.
            def rank_of(i):
                key = keys[i][0]
                if key in ("word", "pos"):
                    return (0 if i < len(keys) - 1 or pp_rank == 0 else 3, 0, i)
                if key in ("lnf.w", "lnf.b"):
                    return (2, 0, i)
                layer, kind = key.split(".", 1)
                return (1, int(layer), LAYER_KINDS.index(kind))
            permutation = sorted(range(len(keys)), key=rank_of)
            keys = [keys[i] for i in permutation]
            params = [params[i] for i in permutation]
            state = {new: state[old] for new, old in enumerate(permutation)}
            model = collections.OrderedDict()
            for i, (key, _) in enumerate(keys):
                model[core_name(key, pp_rank, n // PP)] = params[i]
            names = list(model)
            args = sd["args"]
            args.use_distributed_optimizer = True
            args.data_parallel_size, args.world_size = DP, TP * PP * DP
            args.overlap_grad_reduce, args.ddp_bucket_size = True, BUCKET_SIZE
            shared = [k in ("embedding.word_embeddings.weight", "output_layer.weight")
                      for k in names]
            index, buckets = buffer_layout([p.numel() for p in params], shared,
                                           bucket_size_of(args, pp_rank), DP)
            tensors = {"param": [p.flatten() for p in params],
                       "exp_avg": [state[i]["exp_avg"].flatten() for i in range(len(params))],
                       "exp_avg_sq": [state[i]["exp_avg_sq"].flatten()
                                      for i in range(len(params))]}
            optim = {"buckets_coalesced": True,
                     0: {(torch.float32, torch.float32): dp_zero_state(tensors, index, buckets,
                                                                        DP)}}
            groups = [{k: v for k, v in g.items() if k != "params"} for g in adam["param_groups"]]
            for g in groups:
                g["step"] = ITERATION  # Transformer Engine's / Apex's FusedAdam: an int
            rank_sd = {"args": args, "checkpoint_version": 3.0, "iteration": ITERATION,
                       "model": model, "optimizer": {"optimizer": {"param_groups": groups}},
                       "opt_param_scheduler": sd["opt_param_scheduler"],
                       "rng_state": sd["rng_state"],
                       "num_floating_point_operations_so_far": 0}
            os.makedirs(os.path.join(it_dir, rank), exist_ok=True)
            torch.save(rank_sd, os.path.join(it_dir, rank, "model_optim_rng.pt"))
            torch.save(optim, os.path.join(it_dir, rank, "distrib_optim.pt"))
            print(rank, "buckets (start, padded end, unpadded):", buckets)
    with open(os.path.join(dst_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(ITERATION))


# ---- torch_dist: the dp_reshardable layout ----------------------------------------------------

DP_BUCKET_SIZE = 4000


def dp_reshardable_state():
    """megatron_torch_dist_checkpoint.adam_state's run (the tiny GPT-2, --bf16, TP 2 x PP 1, 3
    AdamW steps) saved by the distributed optimizer at DP 2 in torch_dist's dp_reshardable layout
    (DistributedOptimizer.sharded_param_state_dp_reshardable): per model-parallel rank r (its
    data_parallel_group_idx, the TP rank here), buffer and bucket one DCP tensor per state
    "optimizer.distributed.dp_group_idx_<r>.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32).
    bucket_idx_<k>.<param|exp_avg|exp_avg_sq>" of global shape [the bucket's numel_unpadded],
    whose chunks are each DP rank's pieces of its shard (its parameters' gbuf_local ranges and
    the padding between them, cut at numel_unpadded); "per_bucket_numel" and
    "per_bucket_numel_unpadded" as ShardedObjects; the common state's optimizer entry
    DistributedOptimizer.state_dict's with param_state_sharding_type "dp_reshardable". The
    chunks of both DP ranks of TP rank r are written by process r (PyTorch 1.13's DCP writer
    here runs one process per TP rank; where a chunk is stored does not change the tensors)."""
    import megatron_torch_dist_checkpoint as tdc
    globals_, chunks, extras, args, iteration, common = tdc.adam_state()
    model_keys = [k for k in globals_ if not k.startswith("optimizer.")]
    n = args.num_layers
    # Megatron-Core's GPT parameter order (module registration): embeddings, each layer's
    # parameters (LAYER_KINDS), the final norm.
    stacked = ["decoder.layers." + mlm.MCORE[kind] for kind in LAYER_KINDS]
    order = ([("embedding.word_embeddings.weight", None),
              ("embedding.position_embeddings.weight", None)] +
             [(k, i) for i in range(n) for k in stacked] +
             [("decoder.final_layernorm.weight", None), ("decoder.final_layernorm.bias", None)])
    assert sorted({k for k, _ in order}) == sorted(model_keys)

    def local(global_t, key, rank, layer):
        """TP rank `rank`'s tensor of `key` (its chunk; a replicated one's whole tensor)."""
        mine = [c for c in chunks[key] if c.rank == rank and
                (layer is None or c.offset[0] == layer)]
        if not mine:  # replicated: saved by TP rank 0 only, held whole by every rank
            return global_t if layer is None else global_t[layer]
        c, = mine
        t = global_t[tuple(slice(o, o + d) for o, d in zip(c.offset, c.data.shape))]
        return t[0] if layer is not None else t

    args.use_distributed_optimizer = True
    args.data_parallel_size, args.world_size = DP, tdc.TP * DP
    args.overlap_grad_reduce, args.ddp_bucket_size = True, DP_BUCKET_SIZE
    dtypes = (torch.bfloat16, torch.float32)  # --bf16: fp32 gradient accumulation
    source = {"param": "optimizer.state.fp32_param.", "exp_avg": "optimizer.state.exp_avg.",
              "exp_avg_sq": "optimizer.state.exp_avg_sq."}
    out_globals = {k: globals_[k] for k in model_keys}
    out_chunks = {k: chunks[k] for k in model_keys}
    extras = dict(extras)
    for r in range(tdc.TP):
        tensors = {key: [local(globals_[prefix + k], k, r, layer).flatten()
                         for k, layer in order] for key, prefix in source.items()}
        index, buckets = buffer_layout([t.numel() for t in tensors["param"]],
                                       [False] * len(order), bucket_size_of(args, 0), DP)
        prefix = f"optimizer.distributed.dp_group_idx_{r}"
        for b, (b_start, b_end, unpadded) in enumerate(buckets):
            shard = (b_end - b_start) // DP
            members = sorted((s - b_start, e - b_start) for s, e, pb in index.values() if pb == b)
            for key in KEYS:
                world = torch.zeros(b_end - b_start)
                for i, (s, e, pb) in index.items():
                    if pb == b:
                        world[s - b_start:e - b_start] = tensors[key][i]
                name = f"{prefix}.gbuf_idx_0.dtype_{dtypes}.bucket_idx_{b}.{key}"
                out_globals[name] = world[:unpadded].clone()
                pieces = []
                for d in range(DP):
                    lo, hi = d * shard, min((d + 1) * shard, unpadded)
                    # The shard's parameter pieces and the padding between them.
                    cuts = {lo, hi} | {min(max(x, lo), hi) for se in members for x in se}
                    cuts = sorted(cuts)
                    pieces += [tdc.Chunk(r, (a,), world[a:z].clone())
                               for a, z in zip(cuts, cuts[1:]) if z > a]
                out_chunks[name] = pieces
        for what, numels in (("per_bucket_numel", [e - s for s, e, _ in buckets]),
                             ("per_bucket_numel_unpadded", [u for _, _, u in buckets])):
            buf = io.BytesIO()
            torch.save([[{dtypes: numels}]], buf)
            extras[f"{prefix}.{what}/shard_0_1"] = buf.getvalue()
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "step": iteration}
              for g in common["optimizer"]["optimizer"]["param_groups"]]
    common = {**common, "optimizer": {"optimizer": {"param_groups": groups},
                                      "param_state_sharding_type": "dp_reshardable"},
              "content_metadata": {"singleton_local_shards": False,
                                   "chained_optim_avoid_prefix": True,
                                   "distrib_optim_sharding_type": "dp_reshardable"}}
    return out_globals, out_chunks, extras, args, iteration, common


def write_dp_reshardable(out):
    import megatron_torch_dist_checkpoint as tdc
    tdc.write_checkpoint(out, "gpt2_adam_dp", 29541)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(mlm.ROOT,
                                                             "tests/data/megatron_lm_gpt_tiny")
    build(out)
    write_dp_reshardable(out)


# The DCP writer's processes look the state up by name (megatron_torch_dist_checkpoint.STATES);
# they import this file as their main module, so the entry is made here, at import.
def _register():
    import megatron_torch_dist_checkpoint as tdc
    tdc.STATES["gpt2_adam_dp"] = dp_reshardable_state


_register()


if __name__ == "__main__":
    main()
