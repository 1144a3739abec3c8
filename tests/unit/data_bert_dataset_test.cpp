// BertDataset: sample layout, segments and SOP labels checked against the source sentences,
// whole-word masking, masking statistics (≈15%, 80/10/10), SOP balance, short sequences, the
// samples mapping, and the BERT loader.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "data/bert_data_loader.h"
#include "data/bert_dataset.h"
#include "data/bert_datasets_factory.h"
#include "data/indexed_dataset_builder.h"
#include "data/random_stream.h"
#include "data_test_util.h"

namespace megatron {
namespace {

using test::TempDir;

constexpr int32_t kPad = 0, kCls = 1, kSep = 2, kMask = 3;
constexpr int32_t kBase = 100;  // token = kBase + 32·(global sentence index) + position

struct Corpus {
  std::string prefix;
  int64_t num_sentences = 0;
  std::vector<int64_t> doc_of_sentence;
  int64_t vocab_size() const { return kBase + 32 * num_sentences; }
  // Every third position starts a word: words of up to 3 pieces.
  std::vector<uint8_t> word_start() const {
    std::vector<uint8_t> w(size_t(vocab_size()), 1);
    for (int64_t id = kBase; id < vocab_size(); ++id) w[size_t(id)] = (id - kBase) % 32 % 3 == 0;
    return w;
  }
};

// `docs` documents; document d has 1 + d % 6 sentences of 3..20 tokens (so every sixth
// document has a single sentence and can never form a sample).
Corpus build_corpus(const std::string& prefix, int64_t docs) {
  Corpus c;
  c.prefix = prefix;
  IndexedDatasetBuilder b(prefix, IndexDType::I32);
  RandomStream rng(99, 1);
  for (int64_t d = 0; d < docs; ++d) {
    for (int64_t k = 0; k < 1 + d % 6; ++k) {
      std::vector<int32_t> sentence(static_cast<size_t>(3 + rng.below(18)));
      for (size_t i = 0; i < sentence.size(); ++i)
        sentence[i] = int32_t(kBase + 32 * c.num_sentences + int64_t(i));
      b.add_item(sentence);
      c.doc_of_sentence.push_back(d);
      ++c.num_sentences;
    }
    b.end_document();
  }
  b.finalize();
  return c;
}

BertDatasetOptions options(const Corpus& c, int64_t s) {
  BertDatasetOptions o;
  o.max_seq_length = s;
  o.seed = 5;
  o.cls = kCls;
  o.sep = kSep;
  o.mask = kMask;
  o.pad = kPad;
  o.vocab_size = c.vocab_size();
  o.word_start = c.word_start();
  return o;
}

int64_t sentence_of(int32_t token) {
  return (token - kBase) / 32;
}

// Checks 3000 samples one by one (layout, segments, SOP, whole-word masking within the
// budget) and then the masking and SOP statistics. With whole_words false every piece is a
// word, so each sample masks exactly floor(budget) pieces and the overall rate is 15%; with
// 3-piece words a sample may stop up to 2 pieces short when no whole word fits the rest.
// The budget is capped by 0.15·(s − 3), so the 15% rate is checked with s large enough that
// the cap rarely binds.
void check_samples(bool whole_words, int64_t s) {
  TempDir dir;
  Corpus c = build_corpus(dir.file("bert"), 300);
  BertDatasetOptions opt = options(c, s);
  if (!whole_words) opt.word_start.clear();
  BertDataset ds(std::make_shared<const IndexedDataset>(c.prefix), 0, 300, 3000, opt);
  ASSERT_GE(ds.size(), 3000);
  const std::vector<uint8_t> word_start = opt.word_start;
  int64_t total_used = 0, total_masked = 0, as_mask = 0, kept = 0, replaced = 0, swapped = 0;
  BertSample sample;
  for (int64_t i = 0; i < 3000; ++i) {
    ds.sample(i, sample);
    ASSERT_EQ(int64_t(sample.tokens.size()), s);
    // The original tokens: labels where masked, the tokens elsewhere.
    std::vector<int32_t> orig(static_cast<size_t>(s));
    for (int64_t k = 0; k < s; ++k)
      orig[size_t(k)] =
          sample.labels[size_t(k)] >= 0 ? sample.labels[size_t(k)] : sample.tokens[size_t(k)];
    int64_t used = 0;
    while (used < s && sample.padding_mask[size_t(used)] == 1.0f) ++used;
    for (int64_t k = used; k < s; ++k) {
      ASSERT_EQ(sample.padding_mask[size_t(k)], 0.0f);
      ASSERT_EQ(sample.tokens[size_t(k)], kPad);
      ASSERT_EQ(sample.token_types[size_t(k)], 0);
      ASSERT_EQ(sample.labels[size_t(k)], -1);
    }
    ASSERT_EQ(orig[0], kCls);
    ASSERT_EQ(orig[size_t(used - 1)], kSep);
    int64_t first_sep = 1;
    while (orig[size_t(first_sep)] != kSep) ++first_sep;
    ASSERT_LT(first_sep, used - 2) << "segment B is empty";
    ASSERT_GT(first_sep, 1) << "segment A is empty";
    ASSERT_LE(used - 3, ds.mapping()[size_t(i)].target_length);
    for (int64_t k = 0; k < used; ++k)
      ASSERT_EQ(sample.token_types[size_t(k)], k <= first_sep ? 0 : 1) << k;
    // Segments are runs of whole consecutive sentences of one document; SOP says which
    // came first.
    std::set<int64_t> a_sent, b_sent;
    for (int64_t k = 1; k < first_sep; ++k) a_sent.insert(sentence_of(orig[size_t(k)]));
    for (int64_t k = first_sep + 1; k < used - 1; ++k) b_sent.insert(sentence_of(orig[size_t(k)]));
    const int64_t doc = c.doc_of_sentence[size_t(*a_sent.begin())];
    for (int64_t x : a_sent) ASSERT_EQ(c.doc_of_sentence[size_t(x)], doc);
    for (int64_t x : b_sent) ASSERT_EQ(c.doc_of_sentence[size_t(x)], doc);
    if (sample.sop_label == 0) {
      ASSERT_LT(*a_sent.rbegin(), *b_sent.begin());
    } else {
      ASSERT_GT(*a_sent.begin(), *b_sent.rbegin());
    }
    swapped += sample.sop_label;
    // Masking: only real non-special tokens, whole words, within the prediction budget.
    int64_t masked = 0;
    std::vector<int64_t> word;  // positions of the current word
    auto check_word = [&] {
      int64_t m = 0;
      for (int64_t p : word) m += sample.labels[size_t(p)] >= 0;
      ASSERT_TRUE(m == 0 || m == int64_t(word.size())) << "partially masked word";
      word.clear();
    };
    for (int64_t k = 0; k < used; ++k) {
      const int32_t t = orig[size_t(k)];
      if (t == kCls || t == kSep) {
        ASSERT_EQ(sample.labels[size_t(k)], -1);
        check_word();
        continue;
      }
      if (word_start.empty() || word_start[size_t(t)]) check_word();
      word.push_back(k);
      if (sample.labels[size_t(k)] < 0) continue;
      ASSERT_EQ(sample.loss_mask[size_t(k)], 1.0f);
      ++masked;
      const int32_t now = sample.tokens[size_t(k)];
      if (now == kMask) {
        ++as_mask;
      } else if (now == t) {
        ++kept;
      } else {
        ++replaced;
      }
    }
    check_word();
    const double budget =
        std::min(0.15 * double(ds.mapping()[size_t(i)].target_length),
                 std::max(1.0, std::nearbyint(0.15 * double(used))));  // Python round: ties to even
    ASSERT_LE(double(masked), budget);
    if (whole_words) {
      ASSERT_GT(double(masked), budget - 3.0);  // words are at most 3 pieces
    } else {
      ASSERT_EQ(masked, int64_t(std::floor(budget)));
    }
    total_used += used;
    total_masked += masked;
  }
  if (!whole_words) {
    EXPECT_NEAR(double(total_masked) / double(total_used), 0.15, 0.01);
  }
  EXPECT_NEAR(double(as_mask) / double(total_masked), 0.8, 0.02);
  EXPECT_NEAR(double(kept) / double(total_masked), 0.1, 0.015);
  EXPECT_NEAR(double(replaced) / double(total_masked), 0.1, 0.015);
  EXPECT_NEAR(double(swapped) / 3000.0, 0.5, 0.035);
}

TEST(DataBertDataset, SamplesHaveTheLayoutSegmentsAndWholeWordMasking) {
  check_samples(true, 48);
}

TEST(DataBertDataset, MaskingRateIsFifteenPercent) {
  check_samples(false, 128);
}

TEST(DataBertDataset, SamplesAreDeterministicPerIndex) {
  TempDir dir;
  Corpus c = build_corpus(dir.file("bert"), 60);
  auto data = std::make_shared<const IndexedDataset>(c.prefix);
  BertDataset x(data, 0, 60, 100, options(c, 32));
  BertDataset y(data, 0, 60, 100, options(c, 32));
  BertSample a, b;
  for (int64_t i : {7, 3, 99, 0}) {
    x.sample(i, a);
    y.sample(i, b);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_EQ(a.sop_label, b.sop_label);
  }
}

TEST(DataBertDataset, MappingSpansAreMultiSentenceRunsOfOneDocument) {
  TempDir dir;
  Corpus c = build_corpus(dir.file("bert"), 120);
  IndexedDataset data(c.prefix);
  std::vector<int64_t> all = data.document_indices();
  std::vector<int64_t> doc_idx(all.begin() + 30, all.begin() + 91);  // documents [30, 90)
  std::vector<int32_t> sizes = data.sequence_lengths();
  auto spans = build_bert_samples_mapping(doc_idx, sizes, 500, 29, 0.0, 3);
  ASSERT_GE(spans.size(), 500u);
  for (const BertSampleSpan& sp : spans) {
    ASSERT_GE(sp.end_sentence - sp.first_sentence, 2);
    const int64_t doc = c.doc_of_sentence[size_t(sp.first_sentence)];
    ASSERT_GE(doc, 30);
    ASSERT_LT(doc, 90);
    ASSERT_NE(doc % 6, 0) << "single-sentence documents give no sample";
    ASSERT_EQ(c.doc_of_sentence[size_t(sp.end_sentence - 1)], doc);
    ASSERT_EQ(sp.target_length, 29);  // short_seq_prob 0: always the full length
  }
  // short_seq_prob 1: every target is uniform in [2, 29].
  auto short_spans = build_bert_samples_mapping(doc_idx, sizes, 2000, 29, 1.0, 3);
  double mean = 0;
  for (const BertSampleSpan& sp : short_spans) {
    ASSERT_GE(sp.target_length, 2);
    ASSERT_LE(sp.target_length, 29);
    mean += double(sp.target_length);
  }
  mean /= double(short_spans.size());
  EXPECT_NEAR(mean, 15.5, 1.0);
  // Documents without two sentences cannot give samples.
  std::vector<int64_t> single{0, 1};
  EXPECT_THAT([&] { build_bert_samples_mapping(single, sizes, 1, 29, 0.1, 3); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--split-sentences")));
}

TEST(DataBertDataset, FactoryAndLoaderServeTheRanksSamples) {
  TempDir dir;
  Corpus c = build_corpus(dir.file("bert"), 100);
  BertDatasets sets = build_bert_datasets({c.prefix}, "8,2,0", options(c, 32), {64, 16, 16});
  ASSERT_NE(sets.train, nullptr);
  ASSERT_NE(sets.valid, nullptr);
  EXPECT_EQ(sets.test, nullptr);
  BertDataLoaderOptions o;
  o.micro_batch = 2;
  o.global_batch = 8;
  o.dp_rank = 1;
  o.dp_size = 2;
  o.consumed_samples = 8;
  BertDataLoader loader(sets.train, o);
  BertMicroBatch mb = loader.next();  // rank 1, first micro-step of the batch at 8: [10, 12)
  EXPECT_EQ(mb.first_sample, 10);
  EXPECT_EQ(mb.tokens.shape(), (Shape{2, 32}));
  EXPECT_EQ(mb.sop_labels.shape(), (Shape{2}));
  BertSample expected;
  for (int64_t j = 0; j < 2; ++j) {
    sets.train->sample(10 + j, expected);
    for (int64_t k = 0; k < 32; ++k) {
      EXPECT_EQ(mb.tokens.data<int32_t>()[j * 32 + k], expected.tokens[size_t(k)]);
      EXPECT_EQ(mb.token_types.data<int32_t>()[j * 32 + k], expected.token_types[size_t(k)]);
      EXPECT_EQ(mb.labels.data<int32_t>()[j * 32 + k], expected.labels[size_t(k)]);
      EXPECT_EQ(mb.loss_mask.data<float>()[j * 32 + k], expected.loss_mask[size_t(k)]);
      EXPECT_EQ(mb.pad_mask.data<uint8_t>()[j * 32 + k], expected.padding_mask[size_t(k)] ? 0 : 1);
    }
    EXPECT_EQ(mb.sop_labels.data<int32_t>()[j], expected.sop_label);
  }
  // The masked positions are the loss-masked (sample, position) pairs as sequence-major rows
  // pos·b + sample, ascending, with their labels and weights.
  const std::vector<int32_t> rows = mb.masked.rows.to_vector<int32_t>();
  const std::vector<int32_t> labels = mb.masked.labels.to_vector<int32_t>();
  const std::vector<float> weights = mb.masked.weights.to_vector<float>();
  int64_t masked = 0;
  for (int64_t i = 0; i < 2 * 32; ++i) masked += mb.loss_mask.data<float>()[i] != 0.0f;
  EXPECT_GT(masked, 0);
  ASSERT_EQ(int64_t(rows.size()), masked);
  ASSERT_EQ(labels.size(), rows.size());
  ASSERT_EQ(weights.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(rows[i - 1], rows[i]);
    }
    const int64_t pos = rows[i] / 2, j = rows[i] % 2;
    EXPECT_EQ(mb.loss_mask.data<float>()[j * 32 + pos], weights[i]);
    EXPECT_EQ(mb.labels.data<int32_t>()[j * 32 + pos], labels[i]);
  }
  loader.next();
  EXPECT_EQ(loader.consumed_samples(), 16);
  EXPECT_THAT(
      [&] {
        build_bert_datasets({"1", c.prefix}, "1", options(c, 32), {1, 0, 0});
      },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("exactly one dataset prefix")));
}

}  // namespace
}  // namespace megatron
