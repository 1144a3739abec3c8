// The distributed optimizer's state in Megatron-LM's legacy `torch` checkpoints
// (--use-distributed-optimizer --ckpt-format torch): Megatron-Core's DistributedOptimizer keeps
// Adam's state and the fp32 main params in flat buffers laid out as its gradient buffers, and
// saves them beside each rank file (checkpoint/megatron_lm_torch.h):
//
//   LOAD/iter_N/mp_rank_TT[_PPP]/distrib_optim.pt   torch.save by DP rank 0 of each (TP, PP)
//     rank (megatron/training/checkpointing.py: get_distributed_optimizer_checkpoint_name,
//     save_checkpoint → DistributedOptimizer.save_parameter_state), of
//     {"buckets_coalesced": True,
//      gbuf_idx (int): {(param_dtype, grad_dtype): {"param", "exp_avg", "exp_avg_sq": f32 [n],
//                                                    "numel_unpadded": n}}}
//     (get_parameter_state_dp_zero): every DP rank's shard of each bucket gathered, the
//     bucket's end padding dropped and the buckets of a buffer concatenated. "param" is the fp32
//     main param (the weight itself in an fp32 run).
//   model_optim_rng.pt's "optimizer": DistributedOptimizer.state_dict() — {"optimizer":
//     {"param_groups": [each group without "params", with "step"]}, "grad_scaler" (fp16)}: no
//     per-parameter state.
//
// A buffer (megatron/core/distributed/param_and_grad_buffer.py, _ParamAndGradBuffer; its layout
// from DistributedOptimizer._compute_per_buffer_param_layout and optimizer/param_layout.py) holds
// the rank's parameters of one (param dtype, grad dtype, expert-parallel) kind — one buffer for a
// dense GPT — in reverse parameter order (the backward's), each parameter starting at a multiple
// of 64 elements. A bucket closes after the parameter that brings it to `bucket_size` elements
// (DistributedDataParallel: --ddp-bucket-size, else max(4e7, 1e6 · DP) with
// --overlap-grad-reduce; none, one bucket, without it and on pipeline stages after the first);
// a parameter marked shared_embedding (the tied word embedding on the first stage and its copy
// on the last, pipeline size > 1: LanguageModule.setup_embeddings_and_output_layer) gets a bucket
// of its own. Each bucket's end is padded to a multiple of lcm(DP, 128), so the next bucket, and
// every parameter offset inside a bucket, does not depend on DP: the coalesced buffer (padding
// between parameters kept, bucket ends dropped) is the same at any DP size.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/megatron_lm_torch.h"
#include "checkpoint/torch_dcp.h"
#include "core/pickle_value.h"
#include "parallel/parameter.h"

namespace megatron {

// One parameter of a rank as the buffer lays it out, in the model's parameter order.
struct MegatronLmBufferParam {
  int64_t numel = 0;
  bool shared_embedding = false;
};

// Where each parameter lies in the rank's coalesced buffer and how the buffer splits into buckets.
struct MegatronLmBufferLayout {
  std::vector<int64_t> offset;  // per parameter (the input's order): its start, coalesced
  std::vector<int> bucket;      // per parameter: its bucket
  std::vector<int64_t> bucket_numel_unpadded;  // per bucket: its elements, end padding dropped
  std::vector<int64_t> bucket_numel;           // per bucket: padded to a multiple of lcm(DP, 128)
  int64_t numel_unpadded = 0;                  // the sum of bucket_numel_unpadded
};

// The layout of `params` with buckets of `bucket_size` elements (none: one bucket) over
// `dp_size` data-parallel ranks (the header's rules).
MegatronLmBufferLayout megatron_lm_buffer_layout(const std::vector<MegatronLmBufferParam>& params,
                                                 std::optional<int64_t> bucket_size,
                                                 int64_t dp_size);

// The bucket size Megatron's DDP used on pipeline rank `pp_rank` of a run with `args` (Megatron's
// names: overlap_grad_reduce, ddp_bucket_size, data_parallel_size).
std::optional<int64_t> megatron_lm_bucket_size(const nlohmann::json& args, int pp_rank);

// Whether parameter `name` (megatron-cpp's; "" for the last stage's copy of the tied word
// embedding) is marked shared_embedding in a model of `pp_size` stages.
bool megatron_lm_shared_embedding(const std::string& name, bool tied_embeddings, int pp_size);

// The distrib_optim.pt beside rank `rank`'s file ("" when there is none).
std::string megatron_lm_distrib_optim_path(const MegatronLmRank& rank);

// The state distrib_optim.pt at `path` holds for the rank's `parameters`
// (megatron_lm_rank_parameters: the model's order, "" for the tied copy, whose state is skipped),
// as megatron_lm_rank_optimizer returns it: "exp_avg", "exp_avg_sq", and with args bf16 / fp16
// "fp32_master" (the fp32 main params) → parameter name → the rank's local tensor. `args`
// (megatron_lm_args_json) give the bucket size and the shared embeddings. Throws Error naming
// the file for one that is not the coalesced dict above (the pre-2024 per-bucket lists, several
// buffers: MoE's expert buffers, a chained optimizer's list), a buffer whose length is not the
// layout's the model and args give, or a state tensor of another length.
std::map<std::string, std::map<std::string, Tensor>> megatron_lm_distrib_optim_state(
    const std::string& path, int pp_rank, int pp_size,
    const std::vector<std::pair<std::string, Tensor>>& parameters, const nlohmann::json& args);

// The state of the rank's `parameters` (as above) in `flat`, a rank's coalesced buffer by state
// key ("param", "exp_avg", "exp_avg_sq": f32 [n]); `where` names it in errors.
std::map<std::string, std::map<std::string, Tensor>> megatron_lm_coalesced_state(
    const std::map<std::string, Tensor>& flat, const std::string& where, int pp_rank, int pp_size,
    const std::vector<std::pair<std::string, Tensor>>& parameters, const nlohmann::json& args);

// torch_dist's dp_reshardable layout (DistributedOptimizer.sharded_param_state_dp_reshardable,
// Megatron-Core's default for the distributed optimizer): every bucket of model-parallel rank
// `mp_rank` (tp_rank + TP · pp_rank, Megatron's data_parallel_group_idx) is a DCP tensor
//   optimizer.distributed.dp_group_idx_<mp_rank>.gbuf_idx_<b>.dtype_<(param dtype, grad
//   dtype)>.bucket_idx_<k>.<param|exp_avg|exp_avg_sq>   f32 [the bucket's numel_unpadded]
// whose chunks are each DP rank's pieces of the bucket (and the padding between them): the
// bucket as distrib_optim.pt keeps it. Returns the buckets of each state concatenated — the
// coalesced buffer — or nothing when the checkpoint has no such tensors for `mp_rank`. Throws
// Error naming the checkpoint for several buffers or a missing bucket.
std::map<std::string, Tensor> megatron_lm_dp_reshardable_buffers(const DcpCheckpoint& dcp,
                                                                 int mp_rank);

// The distrib_optim.pt Megatron-LM saves for a rank holding `order` (Megatron's parameter
// order, megatron_lm_model_entry) of a `pp_size`-stage model, from `buffers` (buffer name →
// parameter name → the rank's slice: exp_avg, exp_avg_sq, and with args bf16 / fp16
// fp32_master; the weights themselves are the fp32 run's main params) and `args` (state.json's,
// Megatron's names). Throws Error naming a missing buffer or slice.
PyValue megatron_lm_distrib_optim_file(
    const std::vector<const Parameter*>& order, int pp_rank, int pp_size,
    const std::map<std::string, std::map<std::string, Tensor>>& buffers,
    const nlohmann::json& args);

}  // namespace megatron
