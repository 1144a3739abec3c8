#include "data/mock_gpt_dataset.h"

#include "core/error.h"
#include "core/philox.h"

namespace megatron {

MockGptDataset::MockGptDataset(int64_t num_samples, int64_t seq_length, int64_t vocab_size,
                               uint64_t seed)
    : num_samples_(num_samples), seq_length_(seq_length), vocab_size_(vocab_size), seed_(seed) {
  MT_REQUIRE(num_samples > 0, "mock dataset needs at least one sample, got ", num_samples);
  MT_REQUIRE(seq_length > 0, "mock dataset needs --seq-length > 0, got ", seq_length);
  MT_REQUIRE(vocab_size > 0 && vocab_size <= (int64_t(1) << 31),
             "mock dataset needs 0 < --vocab-size <= 2^31, got ", vocab_size);
}

void MockGptDataset::sample(int64_t index, std::vector<int32_t>& tokens) const {
  MT_CHECK(index >= 0 && index < num_samples_, "mock sample index ", index, " out of range [0, ",
           num_samples_, ")");
  PhiloxStream stream(seed_, philox_key({uint64_t(index)}));
  tokens.resize(size_t(seq_length_ + 1));
  const uint64_t v = uint64_t(vocab_size_);
  uint64_t t = stream.u32(0) % v;
  tokens[0] = int32_t(t);
  for (int64_t j = 1; j <= seq_length_; ++j) {
    t = (t + 1 + stream.u32(uint64_t(j)) % 3) % v;
    tokens[size_t(j)] = int32_t(t);
  }
}

}  // namespace megatron
