// Writing Megatron-LM's `torch_dist` format (checkpoint/megatron_lm_torch_dist.h describes and
// reads it) for GPT-family models: a training run's --save with --ckpt-format torch_dist, and
// `megatron convert --to megatron-lm-core --ckpt-format torch_dist`.
//
//   SAVE/latest_checkpointed_iteration.txt      written last (after the rename)
//   SAVE/iter_0000010/__R_0.distcp             rank R's chunks (R the global rank)
//   SAVE/iter_0000010/.metadata                DCP's Metadata of every rank's chunks
//   SAVE/iter_0000010/common.pt                the common state: args, checkpoint_version 3.0,
//                                              iteration, optimizer step and param groups,
//                                              opt_param_scheduler, the loss scaler, ...
//   SAVE/iter_0000010/metadata.json            {"sharded_backend": "torch_dist", ...}
// written into SAVE/iter_0000010.tmp-<nonce>/ and renamed into place (a failed save leaves the
// previous checkpoint and tracker as they were; checkpoint/checkpoint.h's transaction).
//
// Keys and global shapes are Megatron-Core's (megatron_lm_torch_dist.h): a layer's tensor is
// stacked over all layers ([L, ...], its chunk at (global layer, ...)); QKV rows per query
// group; SwiGLU's linear_fc1 [gate of every rank; up of every rank], two chunks per rank; the
// word embedding padded as the run pads it. Each element is written once (Megatron's main
// replica): the model by the data-parallel rank 0 of each TP × PP rank, a replicated tensor by
// TP rank 0 only, the last stage's copy of a tied embedding never. The optimizer's state is the
// non-distributed optimizer's layout, optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<key> of
// the parameter's global shape; under the distributed optimizer each data-parallel rank writes
// the boxes its shard covers (a shard cuts a parameter's slice anywhere: checkpoint/regions.h),
// so the files hold the same global tensors at every DP size and need no gather.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/shards.h"
#include "checkpoint/torch_dcp_writer.h"
#include "core/pickle_value.h"
#include "distributed/parallel_state.h"
#include "parallel/flat_range.h"
#include "parallel/parameter.h"

namespace megatron {

// Why Megatron-LM's torch_dist format cannot hold `params` with the optimizer buffers named
// `optimizer_buffers` — the first parameter Megatron-Core's GPT has no key for, or a buffer with
// no name there (see megatron_lm_torch_dist_chunks) — or "" when it can. Checked before
// training, so a run learns it before its first save.
std::string megatron_lm_torch_dist_unwritable(const ParameterStore& params,
                                              const std::vector<std::string>& optimizer_buffers);

// The chunks a rank writes: the model's (when `write_model`) and its part of the optimizer
// buffers (name → f32 [range length], laid out like elements `optimizer_range` of `params`'
// flat values: "exp_avg", "exp_avg_sq" and "fp32_master"), for a model of `num_layers` layers.
// Views of `params` and the buffers where they are contiguous host tensors (else host copies):
// write them before either changes. Throws Error naming a parameter Megatron-Core's GPT has no key
// for (MoE, MLA, QK norms, multi-token prediction, BERT's) or a buffer with no torch_dist name
// (Muon's).
std::vector<DcpChunkToWrite> megatron_lm_torch_dist_chunks(
    const ParameterStore& params, const std::map<std::string, Tensor>& optimizer_flat_buffers,
    FlatRange optimizer_range, int64_t num_layers, bool write_model);

// The common state of the checkpoint whose trainer state is `state` (state.json; its "model"
// gives the shape), written at `tp` × `pp`: args, checkpoint_version 3.0, iteration,
// num_floating_point_operations_so_far, content_metadata, and the optimizer / scheduler entries
// (megatron_lm_trainer_state.h), MixedPrecisionOptimizer's when the optimizer state has fp32
// master weights (`mixed_precision`); `params` (rank 0's) numbers the param groups.
PyValue megatron_lm_torch_dist_common_state(const nlohmann::json& state,
                                            const ParameterStore& params, int tp, int pp,
                                            bool mixed_precision);

// Writes common.pt (torch.save of `common`) and metadata.json into `iteration_dir`, fsync'ed.
void write_megatron_lm_torch_dist_common(const std::string& iteration_dir, const PyValue& common);

// Saves iteration `iteration` to `save_dir` in the torch_dist format; collective over ps.world,
// arguments as save_checkpoint's (checkpoint/checkpoint.h): `state` is this rank's state.json.
// On failure on any rank every rank throws Error and the previous checkpoint stays.
void save_megatron_lm_torch_dist(const std::string& save_dir, int64_t iteration,
                                 const ParameterStore& params,
                                 const std::map<std::string, Tensor>& optimizer_flat_buffers,
                                 const nlohmann::json& state, const ParallelState& ps,
                                 const OptimizerShard& optimizer_shard = {});

}  // namespace megatron
