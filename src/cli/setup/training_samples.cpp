#include "cli/setup/training_samples.h"

#include <limits>

#include "core/error.h"
#include "tasks/generation.h"
#include "tasks/text_api.h"

namespace megatron::cli {

namespace {

// The generation request of these arguments (the prompts tokenized into `ids`), or its error.
std::string prepare(const SampleArgs& s, const Tokenizer& tokenizer, const GptConfig& model,
                    uint64_t seed, int64_t iteration, std::vector<std::vector<int32_t>>& ids,
                    GenerationOptions& options) {
  ApiRequest r;
  r.prompts = s.prompts;
  r.tokens_to_generate = s.tokens;
  r.top_k = s.top_p > 0 ? 0 : 1;  // top_k 1: greedy
  r.top_p = float(s.top_p);
  r.temperature = float(s.temperature);
  // No --max-tokens-to-oom here: the batch is the prompts, checked against the positions.
  return prepare_generation(r, tokenizer, model, /*max_tokens=*/std::numeric_limits<int64_t>::max(),
                            seed, uint64_t(iteration), ids, options);
}

}  // namespace

void add_sample_args(ArgTable& t, SampleArgs& a) {
  t.add("--sample-interval", a.interval,
        "every this many iterations the model being trained continues each --sample-prompt "
        "(printed and in --metrics-file; 0: never)");
  t.add_repeatable("--sample-prompt", a.prompts,
                   "a prompt for --sample-interval (repeatable: one continuation each)");
  t.add("--sample-tokens", a.tokens, "tokens generated per prompt by --sample-interval");
  t.add("--sample-top-p", a.top_p,
        "--sample-interval draws by nucleus sampling with this top-p (0: greedy, the default)");
  t.add("--sample-temperature", a.temperature,
        "--sample-interval's sampling temperature (with --sample-top-p)");
}

void check_sample_args(const SampleArgs& s, const Args& args, const Vocabulary& vocab,
                       const GptConfig& model) {
  if (s.interval == 0) return;
  MT_REQUIRE(s.interval > 0, "--sample-interval must be >= 0 (0: no samples), got ", s.interval);
  MT_REQUIRE(!s.prompts.empty(),
             "--sample-interval needs at least one --sample-prompt TEXT to continue");
  MT_REQUIRE(s.tokens >= 1, "--sample-tokens must be >= 1, got ", s.tokens);
  MT_REQUIRE(s.top_p >= 0 && s.top_p <= 1, "--sample-top-p must be in [0, 1] (0: greedy), got ",
             s.top_p);
  MT_REQUIRE(s.temperature > 0, "--sample-temperature must be > 0, got ", s.temperature);
  MT_REQUIRE(vocab.tokenizer != nullptr,
             "--sample-interval needs a tokenizer to read the prompts and write the text: give "
             "--tokenizer-type (with its files), not --mock-data --vocab-size alone");
  const std::string why =
      " splits the model across ranks in a way that generation (the KV-cache inference of "
      "`megatron generate`) does not take; to see samples, drop --sample-interval and run "
      "`megatron generate --load` on a saved checkpoint";
  MT_REQUIRE(args.pipeline_model_parallel_size == 1,
             "--sample-interval with "
             "--pipeline-model-parallel-size ",
             args.pipeline_model_parallel_size, why);
  MT_REQUIRE(args.context_parallel_size == 1, "--sample-interval with --context-parallel-size ",
             args.context_parallel_size, why);
  MT_REQUIRE(!args.sequence_parallel, "--sample-interval with --sequence-parallel", why);
  std::vector<std::vector<int32_t>> ids;
  GenerationOptions options;
  std::string error = prepare(s, *vocab.tokenizer, model, 0, 0, ids, options);
  if (error.empty()) error = generation_request_error(ids, options, model);
  MT_REQUIRE(error.empty(), "--sample-prompt / --sample-tokens: ", error,
             " (the model has --max-position-embeddings ", model.max_position_embeddings, ")");
}

std::function<nlohmann::json(ModelStep& model, int64_t iteration)> training_sampler(
    const SampleArgs& samples, const Vocabulary& vocab, uint64_t seed) {
  return [samples, tokenizer = vocab.tokenizer, seed](ModelStep& step, int64_t iteration) {
    GptModel* model = step.whole_gpt_model();
    MT_CHECK(model != nullptr, "--sample-interval: this rank does not hold the whole model");
    std::vector<std::vector<int32_t>> ids;
    GenerationOptions options;
    const std::string error =
        prepare(samples, *tokenizer, model->config(), seed, iteration, ids, options);
    MT_CHECK(error.empty(), "--sample-interval: ", error);
    const GenerationOutput out = generate_tokens(*model, ids, options);
    nlohmann::json result = nlohmann::json::array();
    for (size_t i = 0; i < samples.prompts.size(); ++i)
      result.push_back(
          {{"prompt", samples.prompts[i]}, {"text", tokenizer->decode(out.tokens[i])}});
    return result;
  };
}

}  // namespace megatron::cli
