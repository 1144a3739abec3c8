// The optimizer state in Megatron-LM's legacy `torch` checkpoints (checkpoint/megatron_lm_torch.h):
// the "optimizer" entry of a rank's model_optim_rng.pt, for the non-distributed optimizers.
//
//   FP32Optimizer (fp32 params):  torch.optim.Adam's state_dict itself
//   MixedPrecisionOptimizer (--bf16 / --fp16):
//     {"optimizer": Adam's state_dict, "grad_scaler": ..., "fp32_from_fp16_params": [[t, ...] per
//      param group]}   the fp32 main params, in each group's order
//   Adam's state_dict: {"state": {id: {"exp_avg", "exp_avg_sq", "step"}},
//                       "param_groups": [{"params": [id, ...], "wd_mult", "weight_decay", ...}]}
//
// The ids number the parameters group after group; a group holds, in the model's parameter order
// (the order the rank's "model" entry is saved in), the parameters Megatron's _get_param_groups
// put there: by default one group for the weight-decayed parameters and one for the others
// (biases and 1-D parameters: no weight decay), in an order that has changed between Megatron
// versions. So the groups are matched by what they say (wd_mult, else weight_decay, > 0) and each
// group's parameters taken in model order; every state tensor must then have its parameter's
// shape. The distributed optimizer saves no "state" here (its own distrib_optim.pt files,
// checkpoint/megatron_lm_distrib_optim.h).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/megatron_lm_torch.h"

namespace megatron {

// Whether rank `rank`'s dict holds Adam's state (a non-distributed optimizer saved it).
bool megatron_lm_rank_has_optimizer_state(const MegatronLmRank& rank);

// Rank `rank`'s optimizer state for `parameters` (megatron_lm_rank_parameters: megatron-cpp's
// names in the model's order, "" for a parameter megatron-cpp's model does not hold, whose state
// is skipped): megatron-cpp's buffer name ("exp_avg", "exp_avg_sq", and "fp32_master" from a
// mixed-precision optimizer) → parameter name → the rank's local tensor. Empty when the rank dict
// has no optimizer state (--no-save-optim, the distributed optimizer). Throws Error naming the
// file and the problem: param groups that the default grouping does not explain (learning-rate
// or weight-decay overrides, several groups of one kind), a group whose size is not its
// parameters' count, a state entry missing or of another shape than its parameter.
std::map<std::string, std::map<std::string, Tensor>> megatron_lm_rank_optimizer(
    const MegatronLmRank& rank, const std::vector<std::pair<std::string, Tensor>>& parameters);

}  // namespace megatron
