// The trainer state of a Megatron-LM checkpoint (the legacy torch format's rank dict or the
// torch_dist format's common state: they share these entries) in megatron-cpp's state.json
// spelling (train/trainer.cpp's state_json), so that a run resumes where Megatron-LM stopped:
//
//   Megatron-LM                                  megatron-cpp state.json
//   "iteration"                                  "iteration"
//   args.consumed_train_samples / _valid_        "consumed_train_samples" /
//   "consumed_valid_samples" optimizer step: "optimizer" → ["optimizer"]  "optimizer": {"steps"}
//     → "state" → "common_step" (torch.optim),
//     else param_groups[*]["step"] (Apex / TE FusedAdam)
//   "optimizer" → "grad_scaler"                  "grad_scaler": {scale, growth_tracker,
//     {scale, growth_tracker, hysteresis_tracker}                 hysteresis_tracker}
//   "opt_param_scheduler" {max_lr, min_lr,       "scheduler" {max_lr, min_lr, warmup_steps,
//     lr_warmup_steps, lr_decay_steps,             decay_steps, decay_style (LrDecayStyle),
//     lr_decay_style, start_wd, end_wd,            start_wd, end_wd, wd_incr_steps,
//     wd_incr_steps, wd_incr_style, num_steps}     wd_incr_style, num_steps} — all in samples
//                                                  on both sides
// Not carried: "rng_state" (Python's, NumPy's, torch's CPU and CUDA generators and Megatron's
// CUDA RNG tracker states are Mersenne Twister / Philox generator states with no counterpart in
// megatron-cpp's counter-based dropout keying, which needs only the seed: the resumed run draws
// from its --seed).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/pickle_value.h"

namespace megatron {

// The entries above of `root` (the rank dict / common state of the checkpoint in `dir`, with its
// "args" already in megatron_lm_args_json's spelling as `args`). Throws Error naming the entry
// when the optimizer step differs between param groups, or when the scheduler state lacks a
// setting or names a decay style megatron-cpp does not know.
nlohmann::json megatron_lm_trainer_state(const PyValue& root, const nlohmann::json& args,
                                         const std::string& dir);

}  // namespace megatron
