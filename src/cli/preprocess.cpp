// `megatron preprocess` — loose JSON -> indexed dataset, with Megatron's
// tools/preprocess_data.py flags. The work is done by data/preprocess.h.
#include "data/preprocess.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/args/arg_table.h"
#include "cli/args/training_flags.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/tokenizers/make_tokenizer.h"

namespace megatron::cli {

int run_preprocess(int argc, char** argv) {
  CLI::App app{"Tokenize loose JSON (one document per line) into Megatron indexed datasets",
               "megatron preprocess"};
  PreprocessOptions opt;
  TokenizerOptions tok;
  app.add_option("--input", opt.input, "input file: one JSON object per line")->required();
  app.add_option("--json-keys", opt.json_keys, "keys to extract from each JSON object")
      ->default_str("text");
  ArgTable tokenizer_args(app);
  add_tokenizer_args(tokenizer_args, tok.type, tok.vocab_file, tok.merge_file, tok.model_file,
                     tok.vocab_size, tok.tiktoken_pattern, tok.tiktoken_num_special_tokens);
  app.get_option("--tokenizer-type")->required();
  app.add_flag("--append-eod", opt.append_eod, "append the end-of-document token");
  app.add_flag("--split-sentences", opt.split_sentences,
               "one sequence per sentence (rule-based English splitter)");
  app.add_option("--output-prefix", opt.output_prefix,
                 "writes PREFIX_{key}_{document|sentence}.bin/.idx")
      ->required();
  app.add_option("--workers", opt.workers, "tokenizer threads (output does not depend on it)")
      ->default_val(1);
  app.add_flag("--keep-going", opt.keep_going,
               "skip (and count) malformed lines instead of stopping");
  app.add_option("--log-interval", opt.log_interval, "report progress every N documents")
      ->default_val(10000);
  app.add_option("--partitions", opt.partitions,
                 "Megatron's input partitions: the output takes lines round-robin, partition "
                 "after partition (the input order with --keep-sequential-samples)")
      ->default_val(1);
  app.add_flag("--keep-sequential-samples", opt.keep_sequential_samples,
               "with --partitions: keep the input order");
  std::string lang = "english";
  bool keep_newlines = false;
  app.add_option("--lang", lang, "sentence-splitting language (only english)")
      ->default_str("english");
  app.add_flag("--keep-newlines", keep_newlines,
               "keep newlines between split sentences (not supported: rejected)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  MT_REQUIRE(lang == "english", "--lang ", lang,
             ": the sentence splitter knows English only (data/sentence_splitter.h)");
  MT_REQUIRE(!keep_newlines,
             "--keep-newlines is not supported: split sentences never keep the newlines "
             "between them (data/sentence_splitter.h)");
  std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tok);
  Timer timer;
  timer.start();
  PreprocessResult r = preprocess(opt, *tokenizer);
  const double s = timer.seconds();
  std::fprintf(stderr, "Done: %lld documents, %lld skipped lines, %.2f MB in %.2f s (%.2f MB/s).\n",
               static_cast<long long>(r.documents), static_cast<long long>(r.skipped_lines),
               double(r.bytes) / 1e6, s, double(r.bytes) / 1e6 / s);
  for (const std::string& p : r.output_prefixes)
    std::printf("%s.bin %s.idx\n", p.c_str(), p.c_str());
  return 0;
}

}  // namespace megatron::cli
