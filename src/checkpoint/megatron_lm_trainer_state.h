// The trainer state of a Megatron-LM checkpoint (the legacy torch format's rank dict or the
// torch_dist format's common state: they share these entries) in megatron-cpp's state.json
// spelling (train/trainer.cpp's state_json), so that a run resumes where Megatron-LM stopped.
// Megatron-LM's entry → megatron-cpp's:
//   "iteration" → "iteration"
//   args.consumed_train_samples, args.consumed_valid_samples → "consumed_train_samples",
//     "consumed_valid_samples"
//   the Adam step → "optimizer": {"steps"}; it is "optimizer" → ["optimizer" →] "state" →
//     "common_step" (torch_dist), else param_groups[*]["step"] (Apex / TE FusedAdam), else
//     state[*]["step"] (torch.optim.Adam in the torch format)
//   "optimizer" → "grad_scaler" {scale, growth_tracker, hysteresis_tracker} → "grad_scaler"
//     (a bf16 / fp32 run has none: a constant scale)
//   "opt_param_scheduler" {max_lr, min_lr, lr_warmup_steps, lr_decay_steps, lr_decay_style,
//     start_wd, end_wd, wd_incr_steps, wd_incr_style, num_steps} → "scheduler" {max_lr, min_lr,
//     warmup_steps, decay_steps, decay_style (LrDecayStyle), start_wd, end_wd, wd_incr_steps,
//     wd_incr_style, num_steps}: samples on both sides
// Not carried: "rng_state" (Python's, NumPy's and torch's Mersenne Twister states, the CUDA
// generator and Megatron's CUDA RNG tracker states have no counterpart in megatron-cpp's
// counter-based dropout keying, which needs only the seed: the resumed run draws from its
// --seed).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/pickle_value.h"

namespace megatron {

// The entries above of `root` (the rank dict / common state of the checkpoint in `dir`, with its
// "args" already in megatron_lm_args_json's spelling as `args`). Throws Error naming the entry
// when the optimizer step differs between param groups, or when the scheduler state lacks a
// setting or names a decay style megatron-cpp does not know.
nlohmann::json megatron_lm_trainer_state(const PyValue& root, const nlohmann::json& args,
                                         const std::string& dir);

// The other way, for a checkpoint megatron-cpp writes in a Megatron-LM format:
//
// Megatron's args (megatron-cpp's spelling, for megatron_lm_args_namespace) of the run whose
// state.json is `state`: its "args" with its "model" record, the iteration and consumed samples,
// the tokenizer type, add_position_embedding, and the layout `tp` × `pp` and `ckpt_format`
// ("torch", "torch_dist") of the files written.
nlohmann::json megatron_lm_saved_args(const nlohmann::json& state, int tp, int pp,
                                      const std::string& ckpt_format);
// Adds to `root` (the rank dict / common state) the entries megatron_lm_trainer_state reads back
// from `state`: "iteration", "opt_param_scheduler" (from "scheduler") and "optimizer" (from
// "optimizer" and "grad_scaler") — torch's Adam state dict {"state": {"common_step"},
// "param_groups"} with the AdamW settings of `args` (megatron_lm_saved_args) and, for a 16-bit run
// (`mixed_precision`), wrapped as MixedPrecisionOptimizer saves it ({"optimizer", "grad_scaler"
// when the loss scale is dynamic, "fp32_from_fp16_params"}). `group_sizes`: the parameters of
// the weight-decayed and of the other param group, numbered group after group as Megatron does.
// A state without optimizer or scheduler (--no-save-optim) adds neither.
void add_megatron_lm_trainer_state(PyDict& root, const nlohmann::json& state,
                                   const nlohmann::json& args, bool mixed_precision,
                                   const std::pair<int64_t, int64_t>& group_sizes);

}  // namespace megatron
