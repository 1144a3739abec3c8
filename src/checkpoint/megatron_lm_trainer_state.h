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

#include "core/pickle_value.h"

namespace megatron {

// The entries above of `root` (the rank dict / common state of the checkpoint in `dir`, with its
// "args" already in megatron_lm_args_json's spelling as `args`). Throws Error naming the entry
// when the optimizer step differs between param groups, or when the scheduler state lacks a
// setting or names a decay style megatron-cpp does not know.
nlohmann::json megatron_lm_trainer_state(const PyValue& root, const nlohmann::json& args,
                                         const std::string& dir);

}  // namespace megatron
