// FimDataset (--fim-data, data/fim_dataset.h) against the independent reference of
// tools/reference/fim_reference.py (tests/data/fim/golden.json): windows of GPT-2 tokens over
// real text (the corpus, multi-byte characters, an empty document) rearranged with GPT-2's
// vocabulary plus the four FIM sentinels, for PSM/SPM mixtures, fragments cut at a split token,
// --fim-no-prefix, and nothing rearranged (a vanished empty document's EOD, then padding). Also:
// a sample depends on its index only (any order, any thread, as on any data-parallel layout), and
// a vocabulary without a sentinel is an error naming the flag that sets it.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "data/fim_dataset.h"
#include "data/tokenizers/gpt2_bpe_tokenizer.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

using namespace megatron::testing;
using nlohmann::json;

// The sample windows of one golden case, served by index.
class WindowSource final : public GptSampleSource {
 public:
  WindowSource(std::vector<std::vector<int32_t>> windows, int64_t seq_length)
      : windows_(std::move(windows)), seq_length_(seq_length) {}
  int64_t size() const override { return int64_t(windows_.size()); }
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override {
    tokens = windows_.at(size_t(index));
  }

 private:
  std::vector<std::vector<int32_t>> windows_;
  int64_t seq_length_;
};

json load_golden() {
  std::ifstream in(source_file("tests/data/fim/golden.json"));
  return json::parse(in);
}

// GPT-2's vocabulary with the golden's sentinels appended (ids 50257...), as a FIM vocabulary.
std::shared_ptr<const Tokenizer> fim_tokenizer(const TempDir& dir, const json& golden) {
  std::ifstream in(fetched_file("gpt2-vocab.json"));
  json vocab = json::parse(in);
  for (const json& token : golden["sentinels"]) vocab[token.get<std::string>()] = vocab.size();
  return std::make_shared<GPT2BPETokenizer>(dir.write("vocab.json", vocab.dump()),
                                            fetched_file("gpt2-merges.txt"));
}

FimOptions options_of(const json& o, const Tokenizer& tokenizer) {
  FimOptions options;
  options.rate = o["rate"];
  options.spm_rate = o["spm_rate"];
  options.tokens = resolve_fim_tokens(tokenizer, {});
  if (o.contains("split_sample")) {
    options.split_token = tokenizer.token_to_id(o["split_sample"].get<std::string>());
    options.fragment_rate = o["fragment_rate"];
  }
  if (o.contains("no_prefix")) options.no_prefix = o["no_prefix"].get<std::string>();
  return options;
}

struct Case {
  std::shared_ptr<FimDataset> dataset;
  std::vector<std::vector<int32_t>> inputs, outputs;
};

Case load_case(const json& golden, const json& c, std::shared_ptr<const Tokenizer> tokenizer) {
  Case out;
  for (const json& s : c["samples"]) {
    out.inputs.push_back(s["input"].get<std::vector<int32_t>>());
    out.outputs.push_back(s["output"].get<std::vector<int32_t>>());
  }
  const int64_t seq = golden["seq_length"];
  out.dataset = std::make_shared<FimDataset>(std::make_shared<WindowSource>(out.inputs, seq),
                                             tokenizer, options_of(c["options"], *tokenizer),
                                             golden["seed"].get<uint64_t>());
  return out;
}

TEST(FimDataset, MatchesTheReference) {
  const json golden = load_golden();
  TempDir dir;
  const auto tokenizer = fim_tokenizer(dir, golden);
  int rearranged = 0, padded = 0;
  for (const json& c : golden["cases"]) {
    SCOPED_TRACE(c["options"].dump());
    const Case k = load_case(golden, c, tokenizer);
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      std::vector<int32_t> tokens;
      k.dataset->sample(int64_t(i), tokens);
      EXPECT_EQ(tokens, k.outputs[i]) << "sample " << i;
      rearranged += tokens != k.inputs[i];
      padded += tokens.back() == resolve_fim_tokens(*tokenizer, {}).pad;
    }
  }
  // The fixture covers both: samples rearranged, and padding after a vanished EOD.
  EXPECT_GE(rearranged, 20);
  EXPECT_GE(padded, 1);
}

// Each sample is a function of its index: read backwards and from several threads at once,
// the samples are those read in order (a data-parallel rank reads only its own indices).
TEST(FimDataset, SamplesDependOnTheirIndexOnly) {
  const json golden = load_golden();
  TempDir dir;
  const auto tokenizer = fim_tokenizer(dir, golden);
  const Case k = load_case(golden, golden["cases"][0], tokenizer);
  const size_t n = k.inputs.size();
  std::vector<std::vector<int32_t>> backwards(n), threaded(n);
  for (size_t i = n; i-- > 0;) k.dataset->sample(int64_t(i), backwards[i]);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < n; i += 3) k.dataset->sample(int64_t(i), threaded[i]);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(backwards, k.outputs);
  EXPECT_EQ(threaded, k.outputs);
}

TEST(FimDataset, MissingSentinelNamesItsFlag) {
  const auto tokenizer = std::make_shared<GPT2BPETokenizer>(fetched_file("gpt2-vocab.json"),
                                                            fetched_file("gpt2-merges.txt"));
  try {
    resolve_fim_tokens(*tokenizer, {});
    FAIL() << "GPT-2's own vocabulary has no FIM sentinels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'<fim_prefix>' (--fim-prefix-token)"), std::string::npos)
        << e.what();
  }
  // Naming tokens it has resolves them.
  const FimTokens t = resolve_fim_tokens(
      *tokenizer,
      {.prefix = "a", .middle = "b", .suffix = "c", .pad = "d", .eod = "<|endoftext|>"});
  EXPECT_EQ(t.eod, tokenizer->eod());
  EXPECT_EQ(t.prefix, tokenizer->token_to_id("a"));
}

TEST(FimDataset, RatesMustBeProbabilities) {
  FimOptions o;
  o.rate = 1.5;
  EXPECT_THROW(validate_fim_options(o), Error);
  o.rate = 0.5;
  o.spm_rate = -0.1;
  EXPECT_THROW(validate_fim_options(o), Error);
}

}  // namespace
}  // namespace megatron
