// Tokenizer throughput on the State of the Union corpus (scripts/fetch_data.sh): what
// `megatron preprocess` spends per document. Reports tokens/s (items) and bytes/s.
//   build/bench/tokenizer_bench [--benchmark_filter=Gpt2]
// "Cold" encodes with a fresh tokenizer (empty BPE cache) each iteration, as one preprocess
// run over a new corpus does; "Warm" reuses one tokenizer whose cache has seen the corpus.
// Threads(n) splits the documents among n threads sharing one tokenizer (preprocess workers).
#include <benchmark/benchmark.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/data_dir.h"
#include "data/tokenizers/make_tokenizer.h"

namespace megatron {
namespace {

// documents: [233] the addresses' texts.
const std::vector<std::string>& documents() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> out;
    std::ifstream in(fetched_data_file("sotu.jsonl"));
    for (std::string line; std::getline(in, line);) {
      out.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    }
    return out;
  }();
  return docs;
}

std::unique_ptr<Tokenizer> make(const std::string& type) {
  TokenizerOptions options;
  options.type = type;
  if (type == "GPT2BPETokenizer") {
    options.vocab_file = fetched_data_file("gpt2-vocab.json");
    options.merge_file = fetched_data_file("gpt2-merges.txt");
  } else {
    options.vocab_file = fetched_data_file("bert-base-uncased-vocab.txt");
  }
  return make_tokenizer(options);
}

// Encodes this thread's share of the documents; returns {tokens, bytes}.
std::pair<int64_t, int64_t> encode_share(const Tokenizer& tokenizer, int thread, int threads) {
  int64_t tokens = 0, bytes = 0;
  const auto& docs = documents();
  for (size_t d = thread; d < docs.size(); d += threads) {
    tokens += static_cast<int64_t>(tokenizer.encode(docs[d]).size());
    bytes += static_cast<int64_t>(docs[d].size());
  }
  return {tokens, bytes};
}

void report(benchmark::State& state, std::pair<int64_t, int64_t> per_iteration) {
  state.SetItemsProcessed(state.iterations() * per_iteration.first);
  state.SetBytesProcessed(state.iterations() * per_iteration.second);
  state.counters["tokens"] = static_cast<double>(per_iteration.first);
}

void BM_Cold(benchmark::State& state, const std::string& type) {
  documents();
  std::pair<int64_t, int64_t> work;
  for (auto _ : state) {
    state.PauseTiming();
    auto tokenizer = make(type);  // loading the vocabulary is not encoding work
    state.ResumeTiming();
    work = encode_share(*tokenizer, 0, 1);
  }
  report(state, work);
}

void BM_Warm(benchmark::State& state, const std::string& type) {
  static std::unique_ptr<Tokenizer> tokenizer;
  if (state.thread_index() == 0 && !tokenizer) {
    tokenizer = make(type);
    encode_share(*tokenizer, 0, 1);  // fill the cache
  }
  std::pair<int64_t, int64_t> work;
  // Google Benchmark starts the timed loop of all threads together, after the setup above.
  for (auto _ : state) work = encode_share(*tokenizer, state.thread_index(), state.threads());
  report(state, work);
}

void BM_Load(benchmark::State& state, const std::string& type) {
  for (auto _ : state) benchmark::DoNotOptimize(make(type));
}

BENCHMARK_CAPTURE(BM_Cold, Gpt2, std::string("GPT2BPETokenizer"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Warm, Gpt2, std::string("GPT2BPETokenizer"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->Threads(1)
    ->Threads(2);
BENCHMARK_CAPTURE(BM_Cold, BertUncased, std::string("BertWordPieceLowerCase"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Load, Gpt2, std::string("GPT2BPETokenizer"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK_CAPTURE(BM_Load, BertUncased, std::string("BertWordPieceLowerCase"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace
}  // namespace megatron
BENCHMARK_MAIN();
