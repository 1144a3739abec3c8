// `megatron generate` — text generation from a checkpoint with a KV cache, at any tensor-parallel
// size (mpirun -np T): prompts from --prompt (repeatable), --prompt-file (one per line, or JSONL
// with a "prompt" or "text" field) or, without either, standard input (interactively, one
// prompt per line, on a terminal). The text is printed as it is generated; --output-file writes
// one JSON object per prompt. A Megatron inference-script command line (examples/inference/*.py:
// its training flags, --prompts, --num-tokens-to-generate, --output-path, ...) runs unchanged
// (cli/args/inference_script_flags.h, cli/args/megatron_flags.h). See docs/inference.md.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/args/arg_table.h"
#include "cli/args/inference_script_flags.h"
#include "cli/args/last_flag_wins.h"
#include "cli/args/megatron_flags.h"
#include "cli/setup/inference_setup.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "core/timer.h"
#include "distributed/broadcast_bytes.h"
#include "tasks/generation.h"
#include "tasks/text_api.h"

namespace megatron::cli {

namespace {

std::vector<std::string> read_prompt_file(const std::string& path) {
  std::ifstream in(path);
  MT_CHECK(in, "--prompt-file '", path, "' cannot be read");
  std::vector<std::string> prompts;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line.front() != '{') {
      prompts.push_back(line);
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      MT_THROW("--prompt-file '", path, "' line ", n, ": not valid JSON (", e.what(), ")");
    }
    const char* key = j.contains("prompt") ? "prompt" : "text";
    MT_CHECK(j.is_object() && j.contains(key) && j[key].is_string(), "--prompt-file '", path,
             "' line ", n, ": expected an object with a string \"prompt\" (or \"text\") field");
    prompts.push_back(j[key].get<std::string>());
  }
  return prompts;
}

// Prints a sequence's text as its tokens arrive: decodes all generated tokens so far and
// prints what is new, holding back a trailing U+FFFD (a character whose bytes are not all
// there yet).
class StreamPrinter {
 public:
  // Prints the prompt's text at once.
  StreamPrinter(const Tokenizer& tokenizer, std::vector<int32_t> prompt)
      : tokenizer_(tokenizer), tokens_(std::move(prompt)) {
    print_new();
  }
  void add(int32_t token) {
    tokens_.push_back(token);
    print_new();
  }

 private:
  void print_new() {
    std::string text = tokenizer_.decode(tokens_);
    static const std::string kReplacement = "\xEF\xBF\xBD";
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, kReplacement) == 0) return;
    if (text.compare(0, printed_.size(), printed_) == 0) {
      std::fwrite(text.data() + printed_.size(), 1, text.size() - printed_.size(), stdout);
      std::fflush(stdout);
      printed_ = std::move(text);
    }
  }

  const Tokenizer& tokenizer_;
  std::vector<int32_t> tokens_;
  std::string printed_;
};

}  // namespace

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a GPT checkpoint (KV cache, tensor parallel)",
               "megatron generate"};
  InferenceArgs ia;
  add_inference_args(app, ia);
  std::vector<std::string> prompts;
  std::string prompt_file, output_file;
  ApiRequest r;
  int64_t batch = 1;
  bool greedy = false;
  std::vector<int64_t> stop_tokens;
  repeatable(app.add_option("--prompt", prompts, "a prompt (repeatable)"));
  app.add_option("--prompt-file", prompt_file,
                 "prompts, one per line, or JSONL with a \"prompt\" (or \"text\") field");
  app.add_option("--output-file", output_file,
                 "JSONL: per prompt {prompt, generated_text, text, prompt_tokens, "
                 "generated_tokens, logprobs}");
  app.add_option("--tokens-to-generate,--out-seq-length,--num-tokens-to-generate",
                 r.tokens_to_generate,
                 "tokens to generate per prompt (0 with --logprobs: score the prompts)");
  app.add_option("--temperature", r.temperature, "sampling temperature (> 0)");
  app.add_option("--top-k,--top_k", r.top_k, "sample from the k most likely tokens (1: greedy)");
  app.add_option("--top-p,--top_p", r.top_p, "nucleus sampling: the smallest set with mass top-p");
  app.add_flag("--greedy", greedy, "always take the most likely token (= --top-k 1)");
  repeatable(app.add_option("--stop-token,--termination-id", stop_tokens,
                            "token id that ends a sequence (repeatable; default: the "
                            "end-of-document token; -1: none)"));
  app.add_flag("--add-bos", r.add_bos, "start every prompt with the end-of-document token");
  app.add_flag("--logprobs,--return-log-probs", r.logprobs,
               "also compute the log-probability of every token");
  app.add_option("--micro-batch-size", batch,
                 "prompts generated together (1 streams each prompt's text as it is generated)");
  bool use_checkpoint_args = false;
  app.add_flag("--use-checkpoint-args", use_checkpoint_args,
               "model flags given (--num-layers, --hidden-size, ...) yield to the checkpoint's "
               "instead of having to agree with them");
  InferenceScriptArgs script;
  add_inference_script_flags(app, script);
  // Last: the flags of Megatron's training parser, which its inference scripts also take.
  MegatronFlags megatron_flags(app, FlagContext::kCheckpointModel);
  if (int rc = megatron_flags.parse(argc, argv); rc >= 0) return rc;
  megatron_flags.check();
  prompts.insert(prompts.end(), script.prompts.begin(), script.prompts.end());
  check_inference_script_flags(script, !prompts.empty() || !prompt_file.empty());
  MT_CHECK(batch >= 1, "--micro-batch-size must be >= 1, got ", batch);
  if (greedy) {
    MT_CHECK(r.top_p == 0.0f, "--greedy and --top-p cannot be combined");
    r.top_k = 1;
  }

  InferenceModel m = load_inference_model(ia);
  Communicator& world = *m.ps.world;
  const bool root = world.rank() == 0;
  log_info("generate: ", m.description);
  megatron_flags.check_model_flags(m.model->config(), use_checkpoint_args, ia.load);

  if (!prompt_file.empty()) {
    std::vector<std::string> more = read_prompt_file(prompt_file);
    if (script.prompt_file_num_truncate > 0 &&
        int64_t(more.size()) > script.prompt_file_num_truncate)
      more.resize(size_t(script.prompt_file_num_truncate));
    prompts.insert(prompts.end(), more.begin(), more.end());
  }
  std::vector<std::vector<int32_t>> stop_sequences;
  for (const std::string& w : script.stop_words) stop_sequences.push_back(m.tokenizer->encode(w));
  const bool interactive = prompts.empty();
  const bool terminal = root && isatty(STDIN_FILENO);
  std::unique_ptr<std::ofstream> out;
  if (root && !output_file.empty()) {
    out = std::make_unique<std::ofstream>(output_file);
    MT_CHECK(*out, "--output-file '", output_file, "' cannot be written");
  }

  // --inference-repeat-n runs the generation again with the same draws; the last run prints and
  // writes.
  const int64_t runs = interactive ? 1 : script.inference_repeat_n;
  std::vector<GenerationRecord> records;
  for (int64_t run = 1; run <= runs; ++run) {
    const bool last_run = run == runs;
    Timer run_timer;
    run_timer.start();
    int64_t run_tokens = 0;
    uint64_t request = 0;
    size_t next = 0;
    while (true) {
      // The next batch of prompts, the same on every rank.
      std::vector<std::string> texts;
      if (interactive) {
        std::string line;
        bool more = false;
        if (root) {
          if (terminal) std::fprintf(stderr, "prompt> "), std::fflush(stderr);
          more = bool(std::getline(std::cin, line));
        }
        const std::string got = broadcast_string(world, more ? "1" + line : "0", 0);
        if (got[0] == '0') break;
        if (got.size() == 1) continue;  // an empty line
        texts.push_back(got.substr(1));
      } else {
        if (next >= prompts.size()) break;
        for (; next < prompts.size() && int64_t(texts.size()) < batch; ++next)
          texts.push_back(prompts[next]);
      }

      r.prompts = texts;
      std::vector<std::vector<int32_t>> ids;
      GenerationOptions o;
      std::string error = prepare_generation(r, *m.tokenizer, m.model->config(),
                                             ia.max_tokens_to_oom, ia.seed, request++, ids, o);
      if (!stop_tokens.empty()) {
        o.stop_tokens.clear();
        for (int64_t t : stop_tokens)
          if (t >= 0) o.stop_tokens.push_back(int32_t(t));
      }
      o.stop_sequences = stop_sequences;
      for (const std::vector<int32_t>& p : ids)
        if (error.empty() && script.inference_max_seq_length > 0 &&
            o.tokens_to_generate > script.inference_max_seq_length - int64_t(p.size()))
          error = "a prompt of " + std::to_string(p.size()) + " tokens + " +
                  std::to_string(o.tokens_to_generate) +
                  " tokens to generate is longer than --inference-max-seq-length " +
                  std::to_string(script.inference_max_seq_length);
      if (!error.empty()) {
        // Identical on every rank (same inputs): report on rank 0 and go on.
        if (!interactive) MT_THROW(error);
        if (root) std::fprintf(stderr, "error: %s\n", error.c_str());
        continue;
      }
      const bool stream = root && last_run && texts.size() == 1;
      std::optional<StreamPrinter> printer;
      if (stream) printer.emplace(*m.tokenizer, ids[0]);
      GenerationStepCallback on_step;
      if (stream)
        on_step = [&](int64_t, const std::vector<int32_t>& tokens, const std::vector<char>& fresh) {
          if (fresh[0]) printer->add(tokens[0]);
        };
      Timer batch_timer;
      batch_timer.start();
      const GenerationOutput result = generate_tokens(*m.model, ids, o, on_step);
      const double latency = batch_timer.seconds();
      if (!root) continue;
      for (size_t i = 0; i < texts.size(); ++i) {
        const std::vector<int32_t>& all = result.tokens[i];
        const int64_t prompt_length = result.prompt_lengths[i];
        const std::vector<int32_t> prompt_ids(all.begin(), all.begin() + prompt_length);
        const std::vector<int32_t> generated(all.begin() + prompt_length, all.end());
        run_tokens += int64_t(generated.size());
        if (!last_run) continue;
        const std::string generated_text = m.tokenizer->decode(generated);
        const std::string text = m.tokenizer->decode(all);
        if (!stream) std::fputs(text.c_str(), stdout);
        std::printf("\n%s", interactive ? "" : "\n");
        std::fflush(stdout);
        if (out) {
          nlohmann::json j = {{"prompt", texts[i]},
                              {"generated_text", generated_text},
                              {"text", text},
                              {"prompt_tokens", prompt_ids},
                              {"generated_tokens", generated}};
          if (r.logprobs) j["logprobs"] = result.logprobs[i];
          *out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        }
        if (!script.output_path.empty()) {
          GenerationRecord record{texts[i], generated_text, generated, latency, r.logprobs, {}, {}};
          if (r.logprobs) {
            // logprobs[j] scores token j + 1: the prompt's are the first prompt_length - 1.
            const std::vector<float>& lp = result.logprobs[i];
            const auto split = lp.begin() + std::max<int64_t>(prompt_length - 1, 0);
            record.prompt_logprobs.assign(lp.begin(), split);
            record.generated_logprobs.assign(split, lp.end());
          }
          records.push_back(std::move(record));
        }
      }
    }
    if (runs > 1)
      log_info("generate: run ", run, " of ", runs, ": ", run_timer.seconds(), " s, ", run_tokens,
               " tokens generated");
  }
  if (root && !script.output_path.empty()) {
    std::ofstream results(script.output_path);
    MT_REQUIRE(results, "--output-path '", script.output_path, "' cannot be written");
    results << megatron_results_json(records, script.output_every_n_results,
                                     script.skip_prompt_log_probs)
                   .dump(1, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
    MT_REQUIRE(bool(results.flush()), "--output-path '", script.output_path, "': write failed");
  }
  if (out) out->flush();
  return 0;
}

}  // namespace megatron::cli
