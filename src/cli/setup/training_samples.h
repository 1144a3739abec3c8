// --sample-interval (pretrain-gpt): every N iterations the model being trained continues the
// --sample-prompt prompts (greedy, or nucleus sampling with --sample-top-p), so that a run shows
// what its model writes as it learns. The text is printed after that iteration's log line and
// evaluation and written to --metrics-file as {"type":"samples","iteration":N,"samples":
// [{"prompt","text"}]} (train/log/training_log.h). Generation runs on the training ranks
// themselves, as `megatron generate` does: every tensor-parallel rank holds its slice of the
// model and each step is a collective over the TP group (data-parallel replicas generate the
// same text; rank 0 prints it). It draws from its own generator and leaves the training state
// (weights, data order, dropout keys) untouched, so the losses are those of a run without it.
// It needs the whole model on each rank: pipeline and context parallelism and
// --sequence-parallel (whose layout the KV-cache inference does not take) are refused.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/setup/gpt_setup.h"
#include "model/gpt_model.h"
#include "train/model_step.h"

namespace megatron::cli {

struct SampleArgs {
  int64_t interval = 0;  // 0: no samples
  std::vector<std::string> prompts;
  int64_t tokens = 32;       // tokens generated per prompt
  double top_p = 0;          // 0: greedy
  double temperature = 1.0;  // with --sample-top-p
};

void add_sample_args(ArgTable& table, SampleArgs& args);

// Before training: an Error naming the flag and the fix when samples are asked for but cannot
// be generated — no prompt, a prompt that does not fit the model's positions with --sample-tokens
// more, no tokenizer (--mock-data --vocab-size), pipeline or context parallelism,
// --sequence-parallel, or a bad top-p / temperature.
void check_sample_args(const SampleArgs& samples, const Args& args, const Vocabulary& vocab,
                       const GptConfig& model);

// TrainerConfig::sample for these arguments: the continuation of every prompt, one batch,
// drawn with `seed` and keyed by the iteration.
std::function<nlohmann::json(ModelStep& model, int64_t iteration)> training_sampler(
    const SampleArgs& samples, const Vocabulary& vocab, uint64_t seed);

}  // namespace megatron::cli
