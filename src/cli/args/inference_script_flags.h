// The flags of Megatron-LM's inference scripts (megatron/inference/utils.py add_inference_args,
// used by examples/inference/*.py) that are not in its training parser, on `megatron generate`:
// a Megatron inference command line runs with only its launcher replaced. Each is implemented,
// accepted without effect (it only schedules or instruments Megatron's engine), or refused by
// name; see docs/inference.md.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace megatron::cli {

struct InferenceScriptArgs {
  std::vector<std::string> prompts;       // --prompts (nargs +)
  int64_t prompt_file_num_truncate = -1;  // --prompt-file-num-truncate: first N of --prompt-file
  std::vector<std::string> stop_words;    // --stop-words
  std::string output_path;                // --output-path: Megatron's results JSON
  int64_t output_every_n_results = 1;     // --output-every-n-results
  int64_t inference_repeat_n = 1;         // --inference-repeat-n: the generation N times
  int64_t inference_max_seq_length = 0;   // --inference-max-seq-length (0: the model's)
  bool skip_prompt_log_probs = false;     // --skip-prompt-log-probs
  int64_t top_n_logprobs = 0;             // --top-n-logprobs (refused above 0)
  std::string model_provider = "gpt";     // --model-provider
  bool num_tokens_from_file = false;      // --num-tokens-from-file (refused)
  std::vector<int64_t> num_tokens_to_prompt;  // --num-tokens-to-prompt: synthetic prompts only
};

// Registers the flags; the ones without effect are registered in their own help group.
void add_inference_script_flags(CLI::App& app, InferenceScriptArgs& args);

// After parsing: refuses the values this command cannot honour, naming the flag and what to do.
// `have_prompts`: --prompt, --prompts or --prompt-file gave prompts.
void check_inference_script_flags(const InferenceScriptArgs& args, bool have_prompts);

// One generated sequence, for Megatron's results file.
struct GenerationRecord {
  std::string prompt;
  std::string generated_text;
  std::vector<int32_t> generated_tokens;
  double latency_seconds = 0;
  bool with_logprobs = false;
  std::vector<float> prompt_logprobs, generated_logprobs;  // with_logprobs
};

// Megatron's --output-path JSON (examples/inference/advanced/gpt_dynamic_inference.py): an
// object keyed by request id ("0", "1", ...) holding every n-th request and the last, each with
// input_prompt, generated_text, generated_tokens, latency and, with log-probabilities,
// prompt_logprobs, generated_logprobs and logprobs (the two joined; without the prompt's under
// --skip-prompt-log-probs).
nlohmann::json megatron_results_json(const std::vector<GenerationRecord>& records, int64_t every_n,
                                     bool skip_prompt_log_probs);

}  // namespace megatron::cli
