// `--ckpt-format torch` in a training run (pretrain-gpt, pretrain-bert): every save is written
// in Megatron-LM's legacy torch format (checkpoint/megatron_lm_torch.h) —
//   SAVE/latest_checkpointed_iteration.txt
//   SAVE/iter_0000010/mp_rank_TT[_PPP]/model_optim_rng.pt   at the run's TP × PP layout
// with Megatron-Core's parameter names (what Megatron-LM writes with --ckpt-format torch), the
// args, the iteration and, unless --no-save-optim, the optimizer state (the non-distributed
// optimizer's; with --use-distributed-optimizer the distributed optimizer's, its distrib_optim.pt
// beside each rank file), the scheduler and the consumed samples
// (convert/megatron_lm_checkpoint.h). The trainer stages the
// save in megatron-cpp's format and rank 0 rewrites it (TrainerConfig::save_as), atomically:
// the rank files are written into SAVE/iter_N.tmp-<nonce>/, moved into place, then the tracker
// (checkpoint/checkpoint.h, CheckpointTransaction). `--load SAVE` detects the format
// (cli/setup/megatron_lm_load.h) and resumes.
#pragma once

#include "checkpoint/megatron_lm_torch.h"
#include "cli/args/args.h"
#include "model/bert_config.h"
#include "model/gpt_model.h"
#include "train/trainer.h"

namespace megatron::cli {

// Sets config.save_as for args.ckpt_format "torch" (the run's `model`, at its layout); leaves
// it empty otherwise. Throws Error, before training, for a model or layout the format does not
// take (convert/megatron_lm_checkpoint.h's check_megatron_lm_exportable; layers that do not
// split evenly over the pipeline stages).
void use_megatron_lm_save(TrainerConfig& config, const Args& args, const GptConfig& model);
void use_megatron_lm_save(TrainerConfig& config, const Args& args, const BertConfig& model);

}  // namespace megatron::cli
