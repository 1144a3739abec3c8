// preprocess: loose JSON (one document per line) -> tokenized indexed datasets, the engine
// of `megatron preprocess` (Megatron's tools/preprocess_data.py).
//
// For each JSON key K, writes PREFIX_K_document.bin/.idx, or PREFIX_K_sentence.bin/.idx with
// split_sentences (one sequence per sentence, one document per line). A key may hold a list of
// strings instead of a string: pre-split sentences, one sequence each (as Megatron). A sequence
// that tokenizes to nothing is dropped; append_eod adds the EOD id to a document's last
// sequence.
//
// Lines are tokenized by `workers` threads in batches and written in input order, so the
// output is byte-identical for any worker count. A line that is not a JSON object, lacks a
// key, has a value that is neither a string nor a list of strings or fails to tokenize is an error
// naming its line number: the run stops and no output file is left behind (they are written
// atomically, see AtomicFile) — unless keep_going, which skips and counts such lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizers/tokenizer.h"

namespace megatron {

struct PreprocessOptions {
  std::string input;                           // --input
  std::vector<std::string> json_keys{"text"};  // --json-keys
  std::string output_prefix;                   // --output-prefix
  bool append_eod = false;                     // --append-eod
  bool split_sentences = false;                // --split-sentences
  int workers = 1;                             // --workers
  bool keep_going = false;                     // --keep-going
  int64_t log_interval = 10000;                // --log-interval: progress every N documents
  // Megatron's --partitions N: its output holds the input's lines dealt round-robin into N
  // partitions, partition after partition (lines 0, N, 2N, ..., then 1, N+1, ...); with
  // --keep-sequential-samples the partitions are contiguous, i.e. the input order.
  int partitions = 1;
  bool keep_sequential_samples = false;
};

struct PreprocessResult {
  int64_t documents = 0;                     // lines written
  int64_t skipped_lines = 0;                 // malformed lines skipped under keep_going
  int64_t bytes = 0;                         // input bytes read
  std::vector<std::string> output_prefixes;  // one per JSON key, PREFIX_K_{document|sentence}
};

// Throws Error (naming the file and line) on bad input; see the header comment.
PreprocessResult preprocess(const PreprocessOptions& options, const Tokenizer& tokenizer);

}  // namespace megatron
