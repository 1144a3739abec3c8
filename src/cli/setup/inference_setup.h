// What `generate`, `serve` and `bench --mode generate` share: the flags that locate a GPT
// checkpoint and its tokenizer, and loading the model at the job's tensor-parallel size.
//
// The model's shape comes from the checkpoint's state.json ("model": layers, hidden size,
// heads, FFN size, padded vocabulary, positions), so no shape flag is needed. The tokenizer
// flags default to the ones the checkpoint was trained with (state.json "args"); an HF import
// records none, so they are given on the command line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenizers/tokenizer.h"
#include "distributed/parallel_state.h"
#include "model/gpt_model.h"
#include "parallel/parameter.h"

namespace CLI {
class App;
}

namespace megatron::cli {

struct InferenceArgs {
  std::string load;
  int64_t load_iteration = -1;
  int tensor_model_parallel_size = 0;  // 0: the world size
  std::string device;                  // as --device of training (cli/setup/device_setup.h)
  std::string distributed_backend;     // as --distributed-backend of training
  bool bf16 = false;
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model, tiktoken_pattern;
  int64_t tiktoken_num_special_tokens = 0;  // 0: the checkpoint's
  int64_t vocab_size = 0;
  int64_t max_tokens_to_oom = 12000;  // Megatron's --max-tokens-to-oom
  uint64_t seed = 1234;
};

void add_inference_args(CLI::App& app, InferenceArgs& args);

struct InferenceModel {
  ParallelState ps;
  std::unique_ptr<ParameterStore> store;
  std::unique_ptr<GptModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t iteration = 0;
  std::string description;  // one line: layers, hidden, heads, vocabulary, TP, device
};

// Binds the device, builds the TP group over the whole world (TP = world size), reads the
// checkpoint's shape and tokenizer arguments, loads the weights (resharding as needed) and
// builds the tokenizer. Throws Error naming the flag or field at fault.
// With `data_parallel` (evaluation), TP may be any divisor of the world size and the
// world / TP replicas form the data-parallel group.
InferenceModel load_inference_model(InferenceArgs& args, bool data_parallel = false);

}  // namespace megatron::cli
