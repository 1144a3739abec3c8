// The training state of a rank file of Megatron-LM's legacy `torch` format
// (checkpoint/megatron_lm_torch.h), written from megatron-cpp's: the inverse of what
// checkpoint/megatron_lm_torch_optimizer.h and checkpoint/megatron_lm_trainer_state.h read, so that
// a megatron-cpp run saved in Megatron-LM's format (--ckpt-format torch, `convert --to
// megatron-lm`) resumes from it, here or in Megatron-LM.
//
//   "optimizer"  the non-distributed optimizer's state_dict:
//     fp32 run (FP32Optimizer): torch.optim.Adam's state_dict itself
//       {"state": {id: {"step": f32 scalar tensor, "exp_avg", "exp_avg_sq"}},
//        "param_groups": [{"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize",
//                          "foreach", "capturable", "differentiable", "fused", "wd_mult",
//                          "lr_mult", "is_expert_parallel", "is_decoupled_lr", "params": [id]}]}
//     --bf16 / --fp16 run (Float16OptimizerWithFloat16Params):
//       {"optimizer": Adam's state_dict, "fp32_from_fp16_params": [[f32 main param] per group]}
//       plus "grad_scaler" {"scale": f32 scalar tensor, "growth_tracker", "hysteresis_tracker"}
//       with --fp16 (a bf16 run has none)
//     Two groups, as Megatron's _get_param_groups makes them (sorted by wd_mult, as current
//     Megatron sorts them): the parameters without weight decay (biases and 1-D ones,
//     wd_mult 0), then those with (wd_mult 1); ids number them group after group, each group in
//     Megatron's parameter order.
//   With args.use_distributed_optimizer, DistributedOptimizer.state_dict(): {"optimizer":
//     {"param_groups": [the two groups, without "params", with "step": the step]}, plus
//     "grad_scaler" with --fp16}; the per-parameter state goes to distrib_optim.pt
//     (checkpoint/megatron_lm_distrib_optim.h).
//   "opt_param_scheduler"  {"max_lr", "lr_warmup_steps", "num_steps", "lr_decay_style",
//     "lr_decay_steps", "min_lr", "start_wd", "end_wd", "wd_incr_style", "wd_incr_steps"}
//     (OptimizerParamScheduler.state_dict: samples, as megatron-cpp's scheduler counts).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/pickle_value.h"
#include "parallel/parameter.h"

namespace megatron {

// The "optimizer" entry of a rank holding `order` (Megatron's parameter order,
// megatron_lm_model_entry), from `buffers` (buffer name → parameter name → the rank's slice:
// "exp_avg", "exp_avg_sq", and with args.bf16 / args.fp16 "fp32_master"), the checkpoint's
// state.json `state` (optimizer.steps, grad_scaler) and its `args` (lr, adam_beta1, adam_beta2,
// adam_eps, weight_decay, bf16, fp16). Throws Error naming a missing buffer or step.
PyValue megatron_lm_optimizer_entry(
    const std::vector<const Parameter*>& order,
    const std::map<std::string, std::map<std::string, Tensor>>& buffers,
    const nlohmann::json& state, const nlohmann::json& args);

// The "optimizer" entry of a rank of a --use-distributed-optimizer run: the param groups and the
// step (state.json's optimizer.steps), the loss scaler with args.fp16.
PyValue megatron_lm_distributed_optimizer_entry(const nlohmann::json& state,
                                                const nlohmann::json& args);

// The "opt_param_scheduler" entry from state.json's "scheduler" of the checkpoint in `dir`.
PyValue megatron_lm_scheduler_entry(const nlohmann::json& state, const std::string& dir);

}  // namespace megatron
