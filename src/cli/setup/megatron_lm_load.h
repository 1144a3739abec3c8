// `--load` of a Megatron-LM torch- or torch_dist-format checkpoint
// (checkpoint/megatron_lm_torch.h, checkpoint/megatron_lm_torch_dist.h) in a training run: its
// weights are converted once into megatron-cpp's format next to it, LOAD.megatron-cpp/
// (convert/megatron_lm_checkpoint.h, at the run's TP size), and the run loads that. A later run
// reuses the copy while it was made from the same directory and iteration. A checkpoint of the
// non-distributed optimizer (either format) carries its Adam state, step, loss scaler, scheduler
// and consumed samples into the copy, and the run resumes at its iteration (the RNG state does not
// cross: the run's --seed keys dropout); from any other only the weights cross, so the run must
// say so: --finetune, or --no-load-optim --no-load-rng.
#pragma once

#include "checkpoint/megatron_lm_torch.h"
#include "cli/args/args.h"

namespace megatron::cli {

// When args.load is a Megatron-LM torch or torch_dist checkpoint: checks the flags above, converts
// it (only when `writer`, e.g. rank 0; the others wait for it in the caller's run_on_all_ranks)
// unless an up-to-date copy exists, and points args.load at the copy. Otherwise leaves args alone.
// `family`: the run's model (a checkpoint of the other family is an Error); `vocab_size`: the
// real vocabulary when the checkpoint's args do not record it (0: args.vocab_size).
void use_megatron_lm_load(Args& args, bool writer, MegatronLmFamily family = MegatronLmFamily::kGpt,
                          int64_t vocab_size = 0);

}  // namespace megatron::cli
