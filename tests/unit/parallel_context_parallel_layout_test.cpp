// ContextParallelLayout: the chunks of Megatron's load-balanced layout, enumerated by hand for
// S = 16 at CP 2 and 4; take_local's columns; the identity at CP 1; and the divisibility rule.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "parallel/context_parallel_layout.h"
#include "parallel/random.h"

namespace megatron {
namespace {

std::vector<int64_t> positions(const ContextParallelLayout& l) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < l.local_seq(); ++i) p.push_back(l.position(i));
  return p;
}

TEST(ContextParallelLayout, RankRHoldsChunksRAndTheirMirror) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(positions(ContextParallelLayout::of(16, 2, 0)), (V{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(positions(ContextParallelLayout::of(16, 2, 1)), (V{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(positions(ContextParallelLayout::of(16, 4, 0)), (V{0, 1, 14, 15}));
  EXPECT_EQ(positions(ContextParallelLayout::of(16, 4, 1)), (V{2, 3, 12, 13}));
  EXPECT_EQ(positions(ContextParallelLayout::of(16, 4, 3)), (V{6, 7, 8, 9}));
  EXPECT_EQ(positions(ContextParallelLayout::of(7, 1, 0)), (V{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ContextParallelLayout::of_local(4, 4, 2).seq, 16);
}

TEST(ContextParallelLayout, TakeLocalPicksTheChunksColumns) {
  std::vector<int32_t> full(2 * 8);
  for (size_t i = 0; i < full.size(); ++i) full[i] = int32_t(i);  // [2, 8]: row·8 + column
  Tensor local = Tensor::empty({2, 4}, DType::I32);
  ContextParallelLayout::of(8, 2, 1).take_local(Tensor::from_vector(full, {2, 8}), local);
  EXPECT_EQ(local.to_vector<int32_t>(), (std::vector<int32_t>{2, 3, 4, 5, 10, 11, 12, 13}));
}

TEST(ContextParallelLayout, SequenceNotDivisibleByTwiceCpNamesTheFlags) {
  try {
    ContextParallelLayout::of(12, 4, 0);
    ADD_FAILURE() << "accepted 12 positions at CP 4";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--seq-length 12"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("--context-parallel-size"), std::string::npos) << e.message();
  }
}

TEST(ContextParallelLayout, HiddenDropoutRowsFollowTheChunks) {
  const DropoutScope scope{true, 1, 2, 3};
  const int64_t batch = 2, hidden = 5;
  const auto whole = hidden_dropout_rows(scope, 1, DropoutSite::kMlpOutput, 16, batch, hidden);
  const ContextParallelLayout layout = ContextParallelLayout::of(16, 4, 1);
  // The second of two sequence shards of the local sequence: local positions 2 and 3.
  const auto mine =
      hidden_dropout_rows(scope, 1, DropoutSite::kMlpOutput, 2, batch, hidden, 2, layout);
  ASSERT_EQ(mine.size(), size_t(2 * batch));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t r = 0; r < batch; ++r) {
      const auto& want = whole[size_t((12 + i) * batch + r)];  // global positions 12, 13
      EXPECT_EQ(mine[size_t(i * batch + r)].key, want.key);
      EXPECT_EQ(mine[size_t(i * batch + r)].counter_base, want.counter_base);
    }
}

}  // namespace
}  // namespace megatron
