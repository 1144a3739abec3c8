// `megatron eval --task WIKITEXT103|LAMBADA` — Megatron's zero-shot GPT evaluation
// (tasks/main.py with tasks/zeroshot_gpt/) of a checkpoint at any tensor-parallel size, the
// processes beyond one model replica splitting the samples (data parallel). Prints Megatron's
// result line; --metrics-file appends the full-precision values as one JSON object. See
// docs/tasks.md.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/args/arg_table.h"
#include "cli/args/megatron_flags.h"
#include "cli/setup/inference_setup.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "core/number_format.h"
#include "tasks/zero_shot_eval.h"

namespace megatron::cli {

namespace {

void append_metrics(const std::string& path, const nlohmann::json& record) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  MT_CHECK(!ec, "--metrics-file '", path, "': cannot create its directory: ", ec.message());
  std::ofstream out(path, std::ios::app);
  MT_CHECK(out, "--metrics-file '", path, "' cannot be written");
  out << record.dump() << "\n";
  MT_CHECK(out.flush(), "--metrics-file '", path, "': writing failed");
}

}  // namespace

int run_eval(int argc, char** argv) {
  CLI::App app{
      "Zero-shot evaluation of a GPT checkpoint: WikiText-103 perplexity, LAMBADA "
      "accuracy (Megatron's tasks/main.py)",
      "megatron eval"};
  InferenceArgs ia;
  add_inference_args(app, ia);
  // Generation-only flags do not apply; TP may be any divisor of the processes here.
  app.remove_option(app.get_option("--max-tokens-to-oom"));
  app.remove_option(app.get_option("--seed"));
  app.get_option("--tensor-model-parallel-size")
      ->description(
          "tensor-parallel size (default: the number of processes); the processes / "
          "TP replicas split the samples (data parallel)");
  std::string task, metrics_file;
  std::vector<std::string> valid_data;
  int64_t seq_length = 0, overlapping_eval = 32, micro_batch = 1, log_interval = 100;
  bool strict_lambada = false;
  app.add_option("--task", task, "WIKITEXT103 (perplexity) or LAMBADA (last-word accuracy)")
      ->required()
      ->check(CLI::IsMember({"WIKITEXT103", "LAMBADA"}));
  app.add_option("--valid-data", valid_data,
                 "the raw test file: wikitext-103 'wiki.test.tokens' (its path chooses the "
                 "detokenizer: 'wiki', 'ptb' or 'lambada') or LAMBADA JSONL with \"text\"")
      ->required();
  app.add_option("--seq-length", seq_length,
                 "tokens per sample (default: the checkpoint's --seq-length)");
  app.add_option("--overlapping-eval", overlapping_eval,
                 "WIKITEXT103: stride of the sliding windows; each window after the first "
                 "scores its last N targets (Megatron's default 32)");
  app.add_flag("--strict-lambada", strict_lambada,
               "LAMBADA: the target is the whole last word, tokenized on its own");
  app.add_option("--micro-batch-size", micro_batch, "samples per forward pass on each replica");
  app.add_option("--log-interval", log_interval, "progress line every N micro-batches");
  app.add_option("--metrics-file", metrics_file,
                 "append the result, full precision, as one JSON object");
  // Megatron's zero-shot scripts (examples/evaluate_zeroshot_gpt.sh) pass the model shape and
  // the load switches of its training flags: the model comes from the checkpoint, so model flags
  // are checked against it and training flags change nothing.
  bool use_checkpoint_args = false;
  app.add_flag("--use-checkpoint-args", use_checkpoint_args,
               "model flags given (--num-layers, --hidden-size, ...) yield to the checkpoint's "
               "instead of having to agree with them");
  MegatronFlags megatron_flags(app, FlagContext::kCheckpointModel);
  if (int rc = megatron_flags.parse(argc, argv); rc >= 0) return rc;
  megatron_flags.check();
  MT_CHECK(valid_data.size() == 1, "--valid-data takes exactly one file for ", task, " (got ",
           valid_data.size(), ")");
  MT_CHECK(micro_batch >= 1, "--micro-batch-size must be >= 1, got ", micro_batch);

  InferenceModel m = load_inference_model(ia, /*data_parallel=*/true);
  const GptConfig& config = m.model->config();
  megatron_flags.check_model_flags(config, use_checkpoint_args, ia.load);
  if (seq_length == 0) seq_length = config.seq_length;
  MT_CHECK(seq_length >= 1 && seq_length <= config.max_position_embeddings, "--seq-length ",
           seq_length, " must be in [1, ", config.max_position_embeddings,
           "] (the model's positions)");
  const int32_t eod = m.tokenizer->eod();
  MT_CHECK(eod >= 0, "the tokenizer has no end-of-document token, which pads the samples");
  log_info("eval: ", m.description, "; data-parallel ", m.ps.dp_size);
  const ZeroShotOptions options{micro_batch, log_interval};
  const std::string& path = valid_data[0];

  nlohmann::json record = {{"type", "eval"},  {"task", task},       {"iteration", m.iteration},
                           {"load", ia.load}, {"valid_data", path}, {"seq_length", seq_length}};
  if (task == "WIKITEXT103") {
    const LmCorpus corpus = read_lm_corpus(path, *m.tokenizer);
    log_info(" > number of original tokens: ", corpus.num_original_tokens,
             ", number of detokenized tokens: ", corpus.num_tokenized_tokens);
    const auto windows =
        std::make_shared<LmWindows>(corpus.tokens, seq_length, eod, overlapping_eval);
    const double loss_sum = evaluate_loss_sum(
        *m.model, {windows->size(), [windows](int64_t i) { return (*windows)[i]; }}, options);
    const PerplexityResult r =
        perplexity(loss_sum, corpus.num_tokenized_tokens, corpus.num_original_tokens);
    log_info(perplexity_result_lines(task, r));
    record.update({{"overlapping_eval", overlapping_eval},
                   {"num_windows", windows->size()},
                   {"num_original_tokens", corpus.num_original_tokens},
                   {"num_tokenized_tokens", corpus.num_tokenized_tokens},
                   {"loss_sum", json_number(loss_sum)},
                   {"avg_loss", json_number(r.avg_loss)},
                   {"ppl", json_number(r.ppl)},
                   {"adjusted_ppl", json_number(r.adjusted_ppl)},
                   {"token_ratio", json_number(r.token_ratio)}});
  } else {
    const auto samples = std::make_shared<std::vector<EvalSample>>(
        read_lambada(path, *m.tokenizer, seq_length, strict_lambada));
    log_info(" > found ", samples->size(), " samples.");
    const int64_t total = int64_t(samples->size());
    const int64_t correct = evaluate_num_correct(
        *m.model, {total, [samples](int64_t i) { return (*samples)[size_t(i)]; }}, options);
    log_info(accuracy_result_lines(task, correct, total));
    record.update({{"strict_lambada", strict_lambada},
                   {"num_correct", correct},
                   {"total_examples", total},
                   {"accuracy", json_number(double(correct) / double(total))}});
  }
  if (!metrics_file.empty() && m.ps.world->rank() == 0) append_metrics(metrics_file, record);
  log_info("done :-)");
  return 0;
}

}  // namespace megatron::cli
