// The GPT pieces that `pretrain-gpt` and `bench --mode step` both build from validated Args:
// the vocabulary (tokenizer or --vocab-size), the sample sources (indexed datasets or
// --mock-data) and the GPT model step's configuration.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/args/args.h"
#include "cli/args/training_config.h"
#include "data/gpt_datasets_factory.h"
#include "data/tokenizers/tokenizer.h"
#include "train/gpt_step.h"

namespace megatron::cli {

struct Vocabulary {
  int64_t size = 0;                            // real entries, before padding
  int32_t eod = -1;                            // -1: none
  nlohmann::json identity;                     // tokenizer_identity(); null with --mock-data
  std::shared_ptr<const Tokenizer> tokenizer;  // null with --mock-data --vocab-size
};

Vocabulary build_vocabulary(const Args& args);

// Train / valid / test sources with Megatron's sample counts for these arguments; with
// --fim-data each is a FimDataset over them (Megatron's GPTFIMDataset serves every split).
GptDatasets build_gpt_data(const Args& args, const Vocabulary& vocab);

// The model and its data options (the loop's are trainer_config(), args.h).
GptStepConfig gpt_step_config(const Args& args, const Vocabulary& vocab, bool eod_mask_loss);

}  // namespace megatron::cli
