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
// Keys and global shapes are Megatron-Core's (checkpoint/megatron_core_keys.h): a layer's tensor
// is stacked over all layers ([L, ...], its chunk at (global layer, ...)) unless MoE and dense
// layers mix (one key per layer); QKV rows per query group; SwiGLU's linear_fc1 [gate of every
// rank; up of every rank], two chunks per rank; an expert tensor [E, ...], each EP rank's experts
// at their global index; MLA's rope rows permuted to Megatron's pairing; the word embedding
// padded as the run pads it. Each element is written
// once (Megatron's main replica): the dense model by the data-parallel rank 0 of each TP × PP
// rank, the experts by the expert-data-parallel rank 0 of each EP × ETP rank, a replicated tensor
// by TP (ETP) rank 0 only, the last stage's copy of a tied embedding never. The optimizer's state
// is the non-distributed optimizer's layout, optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<key>
// of the parameter's global shape; under the distributed optimizer each data-parallel rank writes
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
// `optimizer_buffers` — the first parameter Megatron-Core's GPT has no key for (BERT's), or a
// buffer with no name there (see megatron_lm_torch_dist_chunks) — or "" when it can. Checked before
// training, so a run learns it before its first save.
std::string megatron_lm_torch_dist_unwritable(const ParameterStore& params,
                                              const std::vector<std::string>& optimizer_buffers);

// Which of a rank's tensors it writes — each element once, by its main replica (Megatron's
// replica_id 0) — and how the layers are keyed.
struct TorchDistWrites {
  bool dense = true;    // the dense parameters and persistent buffers (data-parallel rank 0)
  bool experts = true;  // the expert parameters (expert-data-parallel rank 0)
  // false: a parameter's optimizer state is written with its model tensor; true: the distributed
  // optimizer's shard, the part of every parameter the optimizer range covers.
  bool sharded_optimizer = false;
  bool per_layer_keys = false;  // non-homogeneous layers (megatron_core_per_layer_keys)
  MlaOptions mla;               // the model's multi-latent attention (its rope rows: above)
};

// The chunks a rank writes (`writes`): the model's and its part of the optimizer buffers (name →
// f32 [range length], laid out like elements `optimizer_range` of `params`' flat values:
// "exp_avg", "exp_avg_sq" and "fp32_master"), for a model of `num_layers` layers; keys and global
// shapes checkpoint/megatron_core_keys.h's, an expert parameter's experts at their global index
// (EP), the persistent buffers (the routers' expert_bias) as replicated tensors. Views of `params`
// and the buffers where they are contiguous host tensors (else host copies): write them before
// either changes (MLA's rope rows are written from permuted copies). Throws Error naming a
// parameter Megatron-Core's GPT has no key for (BERT's) or a buffer with no torch_dist name
// (Muon's).
std::vector<DcpChunkToWrite> megatron_lm_torch_dist_chunks(
    const ParameterStore& params, const std::map<std::string, Tensor>& optimizer_flat_buffers,
    FlatRange optimizer_range, int64_t num_layers, const TorchDistWrites& writes);

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
