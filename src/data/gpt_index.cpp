#include "data/gpt_index.h"

#include "core/error.h"
#include "data/random_stream.h"

namespace megatron {

namespace {

// Stream keys: one per shuffle, so changing one part never shifts the draws of another.
enum : uint64_t { kKeyDocsFirst = 0x6770740001, kKeyDocsLast, kKeySamplesFirst, kKeySamplesLast };

// `epochs` copies of `documents`, shuffled together.
std::vector<int64_t> shuffled_epochs(std::span<const int64_t> documents, int64_t epochs,
                                     uint64_t seed, uint64_t key) {
  std::vector<int64_t> out;
  out.reserve(documents.size() * size_t(epochs));
  for (int64_t e = 0; e < epochs; ++e) out.insert(out.end(), documents.begin(), documents.end());
  RandomStream(seed, key).shuffle(out);
  return out;
}

// Megatron's helpers.cpp build_sample_idx: walks the documents in doc_idx order cutting
// samples of seq_length + 1 tokens whose last token is the next sample's first.
std::vector<int64_t> build_sample_idx(std::span<const int32_t> sizes,
                                      const std::vector<int64_t>& doc_idx, int64_t seq_length,
                                      int64_t num_samples) {
  std::vector<int64_t> sample_idx;
  sample_idx.reserve(size_t(num_samples + 1) * 2);
  sample_idx.push_back(0);
  sample_idx.push_back(0);
  int64_t doc_pos = 0;  // position in doc_idx
  int64_t offset = 0;   // token offset in doc_idx[doc_pos]
  for (int64_t k = 1; k <= num_samples; ++k) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      const int64_t doc_length = sizes[size_t(doc_idx[size_t(doc_pos)])] - offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        // The sample ends inside this document; its last token is at offset + doc_length
        // + remaining - 1, which the next sample starts on.
        offset += remaining + doc_length - 1;
        remaining = 0;
      } else {
        ++doc_pos;
        offset = 0;
      }
    }
    sample_idx.push_back(doc_pos);
    sample_idx.push_back(offset);
  }
  return sample_idx;
}

std::vector<int64_t> shuffled_range(int64_t begin, int64_t end, uint64_t seed, uint64_t key) {
  std::vector<int64_t> v;
  v.reserve(size_t(end - begin));
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  RandomStream(seed, key).shuffle(v);
  return v;
}

}  // namespace

int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
  MT_REQUIRE(tokens_per_epoch > 0, "the dataset split has no tokens");
  int64_t epochs = 0;
  int64_t tokens = 0;
  while (true) {
    ++epochs;
    tokens += tokens_per_epoch;
    if ((tokens - 1) / seq_length >= num_samples) return epochs;
  }
}

GptIndex build_gpt_index(std::span<const int64_t> documents, std::span<const int32_t> sizes,
                         int64_t seq_length, int64_t num_samples, uint64_t seed) {
  MT_CHECK(seq_length >= 1, "seq_length must be >= 1, got ", seq_length);
  MT_CHECK(num_samples >= 1, "num_samples must be >= 1, got ", num_samples);
  MT_REQUIRE(!documents.empty(), "the dataset split has no documents");
  int64_t tokens_per_epoch = 0;
  for (int64_t d : documents) {
    MT_CHECK(d >= 0 && size_t(d) < sizes.size(), "document ", d, " out of range");
    tokens_per_epoch += sizes[size_t(d)];
  }
  GptIndex index;
  index.num_epochs = gpt_num_epochs(tokens_per_epoch, seq_length, num_samples);

  int64_t samples_before_last_epoch = 0;
  if (index.num_epochs > 1) {
    samples_before_last_epoch = ((index.num_epochs - 1) * tokens_per_epoch - 1) / seq_length;
    const int64_t last_epoch_samples = num_samples - samples_before_last_epoch;
    const int64_t samples_per_epoch = (tokens_per_epoch - 1) / seq_length;
    MT_CHECK(last_epoch_samples >= 0 && last_epoch_samples <= samples_per_epoch + 1,
             "inconsistent epoch arithmetic: ", last_epoch_samples, " samples in the last epoch");
    // int(0.80 · samples_per_epoch) as Megatron computes it.
    index.separate_last_epoch = last_epoch_samples < int64_t(0.80 * double(samples_per_epoch));
  }

  if (index.separate_last_epoch) {
    index.doc_idx = shuffled_epochs(documents, index.num_epochs - 1, seed, kKeyDocsFirst);
    std::vector<int64_t> last = shuffled_epochs(documents, 1, seed, kKeyDocsLast);
    index.doc_idx.insert(index.doc_idx.end(), last.begin(), last.end());
  } else {
    index.doc_idx = shuffled_epochs(documents, index.num_epochs, seed, kKeyDocsFirst);
  }

  const int64_t total = (index.num_epochs * tokens_per_epoch - 1) / seq_length;
  index.sample_idx = build_sample_idx(sizes, index.doc_idx, seq_length, total);

  const int64_t first = index.separate_last_epoch ? samples_before_last_epoch : total;
  index.shuffle_idx = shuffled_range(0, first, seed, kKeySamplesFirst);
  std::vector<int64_t> last = shuffled_range(first, total, seed, kKeySamplesLast);
  index.shuffle_idx.insert(index.shuffle_idx.end(), last.begin(), last.end());
  return index;
}

}  // namespace megatron
