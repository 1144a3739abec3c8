#include "data/preprocess.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "data/atomic_file.h"
#include "data/indexed_dataset_builder.h"
#include "data/sentence_splitter.h"

namespace megatron {

namespace {

constexpr size_t kBatchLines = 1024;

// One input line, tokenized: for each JSON key its sequences, or the reason it is malformed.
struct Document {
  std::vector<std::vector<std::vector<int32_t>>> sequences;  // [key][sequence][token]
  std::optional<std::string> error;
};

Document tokenize_line(const std::string& line, const PreprocessOptions& opt,
                       const Tokenizer& tokenizer) {
  Document doc;
  nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    doc.error = "malformed JSON";
    return doc;
  }
  if (!json.is_object()) {
    doc.error = "expected a JSON object, got " + std::string(json.type_name());
    return doc;
  }
  for (const std::string& key : opt.json_keys) {
    auto it = json.find(key);
    if (it == json.end()) {
      doc.error = "no key \"" + key + "\" (--json-keys)";
      return doc;
    }
    const bool sentence_list =
        it->is_array() &&
        std::all_of(it->begin(), it->end(), [](const nlohmann::json& x) { return x.is_string(); });
    if (!it->is_string() && !sentence_list) {
      doc.error = "key \"" + key + "\" holds a " + it->type_name() +
                  ", expected a string or a list of strings";
      return doc;
    }
    std::vector<std::vector<int32_t>> sequences;
    try {
      auto add = [&](std::string_view piece) {
        std::vector<int32_t> ids = tokenizer.encode(piece);
        if (!ids.empty()) sequences.push_back(std::move(ids));
      };
      if (sentence_list) {  // already split: one sequence per element, as Megatron
        for (const nlohmann::json& sentence : *it) add(sentence.get_ref<const std::string&>());
      } else if (opt.split_sentences) {
        for (std::string_view sentence : split_sentences(it->get_ref<const std::string&>()))
          add(sentence);
      } else {
        add(it->get_ref<const std::string&>());
      }
    } catch (const Error& e) {
      doc.error = "cannot tokenize key \"" + key + "\": " + e.message();
      return doc;
    }
    if (opt.append_eod && !sequences.empty()) sequences.back().push_back(tokenizer.eod());
    doc.sequences.push_back(std::move(sequences));
  }
  return doc;
}

// Tokenizes lines[i] into docs[i] on `workers` threads.
void tokenize_batch(const std::vector<std::string>& lines, std::vector<Document>& docs,
                    const PreprocessOptions& opt, const Tokenizer& tokenizer) {
  docs.assign(lines.size(), Document{});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < lines.size(); i = next++)
      docs[i] = tokenize_line(lines[i], opt, tokenizer);
  };
  std::vector<std::jthread> threads;
  for (int t = 1; t < opt.workers; ++t) threads.emplace_back(work);
  work();
}

void report_progress(int64_t docs, int64_t bytes, double seconds) {
  std::fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n",
               static_cast<long long>(docs), double(docs) / seconds, double(bytes) / seconds / 1e6);
}

}  // namespace

PreprocessResult preprocess(const PreprocessOptions& opt, const Tokenizer& tokenizer) {
  MT_REQUIRE(!opt.input.empty(), "--input is required");
  MT_REQUIRE(!opt.output_prefix.empty(), "--output-prefix is required");
  MT_REQUIRE(!opt.json_keys.empty(), "--json-keys needs at least one key");
  MT_REQUIRE(opt.workers >= 1, "--workers must be >= 1, got ", opt.workers);
  MT_REQUIRE(!opt.append_eod || tokenizer.eod() >= 0,
             "--append-eod needs a tokenizer with an end-of-document token");
  MT_REQUIRE(opt.partitions >= 1, "--partitions must be >= 1, got ", opt.partitions);
  MT_REQUIRE(std::ifstream(opt.input, std::ios::binary).good(), "cannot open --input '", opt.input,
             "'");

  PreprocessResult result;
  const IndexDType dtype = optimal_index_dtype(tokenizer.vocab_size());
  const std::string level = opt.split_sentences ? "sentence" : "document";
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const std::string& key : opt.json_keys) {
    result.output_prefixes.push_back(opt.output_prefix + "_" + key + "_" + level);
    builders.push_back(
        std::make_unique<IndexedDatasetBuilder>(result.output_prefixes.back(), dtype));
  }

  Timer timer;
  timer.start();
  int64_t line_number = 0;
  int64_t next_report = opt.log_interval > 0 ? opt.log_interval : -1;  // -1: never
  std::string first_skipped;
  std::vector<std::string> lines;
  std::vector<int64_t> numbers;  // each line's number in the input
  std::vector<Document> docs;
  // One pass per round-robin partition (see PreprocessOptions::partitions).
  const int passes = opt.keep_sequential_samples ? 1 : opt.partitions;
  for (int pass = 0; pass < passes; ++pass) {
    std::ifstream in(opt.input, std::ios::binary);
    MT_REQUIRE(in.good(), "cannot open --input '", opt.input, "'");
    line_number = 0;
    while (in) {
      lines.clear();
      numbers.clear();
      std::string line;
      while (lines.size() < kBatchLines && std::getline(in, line)) {
        if (line_number++ % passes != pass) continue;
        lines.push_back(std::move(line));
        numbers.push_back(line_number);
      }
      tokenize_batch(lines, docs, opt, tokenizer);
      for (size_t i = 0; i < docs.size(); ++i) {
        result.bytes += int64_t(lines[i].size()) + 1;
        if (docs[i].error) {
          const std::string where =
              "'" + opt.input + "' line " + std::to_string(numbers[i]) + ": " + *docs[i].error;
          MT_REQUIRE(opt.keep_going, where, " (use --keep-going to skip such lines)");
          if (result.skipped_lines++ == 0) first_skipped = where;
          continue;
        }
        for (size_t k = 0; k < builders.size(); ++k) {
          for (const std::vector<int32_t>& seq : docs[i].sequences[k]) builders[k]->add_item(seq);
          builders[k]->end_document();
        }
        if (++result.documents == next_report) {
          report_progress(result.documents, result.bytes, timer.seconds());
          next_report += opt.log_interval;
        }
      }
    }
    MT_REQUIRE(!in.bad(), "error reading --input '", opt.input, "'");
  }
  // An empty dataset would only fail later, at training time: refuse it now (the builders'
  // temporary files are removed as they go).
  MT_REQUIRE(result.documents > 0, "--input '", opt.input, "' holds no documents (", line_number,
             " line", line_number == 1 ? "" : "s",
             result.skipped_lines > 0 ? ", all skipped as malformed" : "",
             "); expected one JSON object per line. Nothing was written");
  for (auto& b : builders) b->finalize();
  // Temporary files of an earlier preprocess of the same prefix that was killed.
  int stale = 0;
  for (const std::string& prefix : result.output_prefixes)
    stale += remove_stale_temporaries(prefix + ".bin") + remove_stale_temporaries(prefix + ".idx");
  if (stale > 0)
    std::fprintf(stderr, "Removed %d stale temporary file(s) of an interrupted preprocess.\n",
                 stale);
  if (result.skipped_lines > 0) {
    std::fprintf(stderr, "Skipped %lld malformed line(s); the first: %s\n",
                 static_cast<long long>(result.skipped_lines), first_skipped.c_str());
  }
  return result;
}

}  // namespace megatron
