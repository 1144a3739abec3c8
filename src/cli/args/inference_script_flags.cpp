#include "cli/args/inference_script_flags.h"

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace megatron::cli {

namespace {

constexpr const char* kNoEffectGroup =
    "Megatron inference-script flags without effect here (they schedule or instrument Megatron's "
    "engine; the tokens generated are the same)";

}  // namespace

void add_inference_script_flags(CLI::App& app, InferenceScriptArgs& a) {
  app.add_option("--prompts", a.prompts, "prompts (Megatron's inference scripts: nargs +)")
      ->expected(1, CLI::detail::expected_max_vector_size);
  app.add_option("--prompt-file-num-truncate", a.prompt_file_num_truncate,
                 "use only the first N prompts of --prompt-file");
  app.add_option("--stop-words", a.stop_words,
                 "a sequence ends when its generated text ends with one of these (tokenized "
                 "without BOS); they are dropped from the output, as Megatron does")
      ->expected(1, CLI::detail::expected_max_vector_size);
  app.add_option("--output-path", a.output_path,
                 "write Megatron's results JSON: {request id: {input_prompt, generated_text, "
                 "generated_tokens, latency, logprobs...}}");
  app.add_option("--output-every-n-results", a.output_every_n_results,
                 "--output-path keeps every n-th request and the last (default 1: all)");
  app.add_option("--inference-repeat-n", a.inference_repeat_n,
                 "run the whole generation N times (Megatron's benchmarking repeat); the outputs "
                 "of the last run are written, each run's time is logged");
  app.add_option("--inference-max-seq-length", a.inference_max_seq_length,
                 "longest prompt + generated tokens accepted (default: the model's positions)");
  app.add_flag("--skip-prompt-log-probs", a.skip_prompt_log_probs,
               "with --return-log-probs, --output-path leaves out the prompt's log-probabilities");
  app.add_option("--top-n-logprobs", a.top_n_logprobs,
                 "Megatron's top-n log-probabilities per token: not supported (0 only)");
  app.add_option("--model-provider", a.model_provider, "gpt (the only model provider here)");
  app.add_flag("--num-tokens-from-file", a.num_tokens_from_file,
               "per-prompt generation lengths from the prompt file: not supported");
  app.add_option("--num-tokens-to-prompt", a.num_tokens_to_prompt,
                 "lengths of Megatron's synthetic prompts, used only without prompts: give "
                 "--prompts or --prompt-file here")
      ->expected(1, CLI::detail::expected_max_vector_size);

  // Request scheduling, engine modes and instrumentation of Megatron's dynamic engine.
  for (const char* flag :
       {"--incoming-requests-per-step", "--incoming-requests-per-sec",
        "--incoming-requests-duration", "--suspend-resume-interval", "--suspend-timeout",
        "--batch-boundaries", "--coordinator-schedule-output-path", "--coordinator-host",
        "--coordinator-port", "--moe-routing-trace-max-inference-steps"})
    app.add_option(flag, kNoEffectGroup)->group(kNoEffectGroup)->expected(1);
  for (const char* flag :
       {"--inference-ckpt-non-strict", "--use-flashinfer-fused-rope", "--no-record-throughput",
        "--output-request-events", "--throughput-check-only", "--drain-between-batches",
        "--use-coordinator", "--async-mode", "--stream"})
    app.add_flag(flag, kNoEffectGroup)->group(kNoEffectGroup);
}

void check_inference_script_flags(const InferenceScriptArgs& a, bool have_prompts) {
  MT_REQUIRE(a.top_n_logprobs == 0, "--top-n-logprobs ", a.top_n_logprobs,
             ": top-n log-probabilities are not supported; --return-log-probs gives the "
             "log-probability of every chosen token");
  MT_REQUIRE(!a.num_tokens_from_file,
             "--num-tokens-from-file: per-prompt generation lengths are not supported; give "
             "--num-tokens-to-generate");
  MT_REQUIRE(a.model_provider == "gpt", "--model-provider ", a.model_provider,
             ": only gpt models are supported here");
  MT_REQUIRE(have_prompts || a.num_tokens_to_prompt.empty(),
             "--num-tokens-to-prompt: Megatron's synthetic prompts are not supported; give "
             "--prompts or --prompt-file");
  MT_REQUIRE(a.prompt_file_num_truncate == -1 || a.prompt_file_num_truncate >= 1,
             "--prompt-file-num-truncate must be >= 1, got ", a.prompt_file_num_truncate);
  MT_REQUIRE(a.output_every_n_results >= 1, "--output-every-n-results must be >= 1, got ",
             a.output_every_n_results);
  MT_REQUIRE(a.inference_repeat_n >= 1, "--inference-repeat-n must be >= 1, got ",
             a.inference_repeat_n);
  MT_REQUIRE(a.inference_max_seq_length >= 0, "--inference-max-seq-length must be >= 1, got ",
             a.inference_max_seq_length);
  for (const std::string& w : a.stop_words)
    MT_REQUIRE(!w.empty(), "--stop-words: an empty stop word would end every sequence at once");
}

nlohmann::json megatron_results_json(const std::vector<GenerationRecord>& records, int64_t every_n,
                                     bool skip_prompt_log_probs) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < records.size(); ++i) {
    if (int64_t(i) % every_n != 0 && i + 1 != records.size()) continue;
    const GenerationRecord& r = records[i];
    nlohmann::json j = {{"input_prompt", r.prompt},
                        {"generated_text", r.generated_text},
                        {"generated_tokens", r.generated_tokens},
                        {"latency", r.latency_seconds}};
    if (r.with_logprobs) {
      std::vector<float> all = skip_prompt_log_probs ? std::vector<float>{} : r.prompt_logprobs;
      all.insert(all.end(), r.generated_logprobs.begin(), r.generated_logprobs.end());
      j["prompt_logprobs"] =
          skip_prompt_log_probs ? nlohmann::json(nullptr) : nlohmann::json(r.prompt_logprobs);
      j["generated_logprobs"] = r.generated_logprobs;
      j["logprobs"] = all;
    }
    out[std::to_string(i)] = std::move(j);
  }
  return out;
}

}  // namespace megatron::cli
