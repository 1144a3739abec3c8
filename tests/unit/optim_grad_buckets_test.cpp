// make_grad_buckets (optim/grad_buckets.h): buckets from the end of the flat buffer, cut at a
// parameter boundary once they hold bucket_elements, a tied parameter alone in its bucket, and
// together they tile the flat buffer in launch order.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/grad_buckets.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

struct Expected {
  size_t first, end;
  int64_t begin, end_element;
  bool tied;
};

void expect_buckets(const std::vector<GradBucket>& got, const std::vector<Expected>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t b = 0; b < got.size(); ++b) {
    EXPECT_EQ(got[b].first_param, want[b].first) << "bucket " << b;
    EXPECT_EQ(got[b].end_param, want[b].end) << "bucket " << b;
    EXPECT_EQ(got[b].range.begin, want[b].begin) << "bucket " << b;
    EXPECT_EQ(got[b].range.end, want[b].end_element) << "bucket " << b;
    EXPECT_EQ(got[b].tied, want[b].tied) << "bucket " << b;
  }
}

// Parameters of `sizes` elements (offsets 0, 5, 12, 15, 26, 28, 34, 38 for the default).
ParameterStore store_of(const std::vector<int64_t>& sizes, int tied = -1) {
  ParameterStore store(0, 1);
  for (size_t p = 0; p < sizes.size(); ++p) {
    // The name is appended, not "p" + to_string: GCC 12 warns falsely (-Wrestrict) on that.
    std::string name = "p";
    name += std::to_string(p);
    ParamSpec spec{name, {sizes[p]}, -1, true};
    if (int(p) == tied) spec.stage_tie = StageTie::kOriginal;
    store.add(spec);
  }
  store.allocate();
  return store;
}

TEST(GradBuckets, CutFromTheEndAtParameterBoundaries) {
  const ParameterStore store = store_of({5, 7, 3, 11, 2, 6, 4});
  // From the end: 4 + 6 + 2 = 12 reaches 12; 11 + 3 = 14; 7 + 5 = 12.
  expect_buckets(make_grad_buckets(store, 12),
                 {{4, 7, 26, 38, false}, {2, 4, 12, 26, false}, {0, 2, 0, 12, false}});
  // One bucket when the size exceeds the buffer; one per element at size 1.
  expect_buckets(make_grad_buckets(store, 1000), {{0, 7, 0, 38, false}});
  EXPECT_EQ(make_grad_buckets(store, 1).size(), 38u);
}

// Expert and dense parameters are reduced over different groups, so a bucket never holds both:
// the run of experts in the middle is cut off on both sides, below the bucket size.
TEST(GradBuckets, ExpertParametersNeverShareABucketWithDenseOnes) {
  ParameterStore store(0, 1);
  const std::vector<std::pair<int64_t, bool>> params = {
      {5, false}, {3, true}, {4, true}, {2, false}};
  for (size_t p = 0; p < params.size(); ++p) {
    std::string name = "p";
    name += std::to_string(p);
    ParamSpec spec{name, {2, params[p].first}, -1, true};
    spec.expert = params[p].second;
    store.add(spec);
  }
  store.allocate();
  // The experts are laid out after the dense parameters: flat offsets 0, 14, 20, 10 (end 28).
  const std::vector<GradBucket> buckets = make_grad_buckets(store, 100);
  expect_buckets(buckets, {{3, 4, 10, 14, false}, {1, 3, 14, 28, false}, {0, 1, 0, 10, false}});
  EXPECT_FALSE(buckets[0].expert);
  EXPECT_TRUE(buckets[1].expert);
  EXPECT_FALSE(buckets[2].expert);
}

// A parameter larger than a bucket is its own buckets, pieces of at most the bucket size cut
// from its end; the parameters around it are cut as before.
TEST(GradBuckets, ParameterLargerThanABucketIsCutIntoPieces) {
  const ParameterStore store = store_of({3, 2, 11, 2});
  // Offsets 0, 3, 5, 16; size 4: p3 (2 elements) is closed alone when p2 (11 > 4) arrives;
  // p2 → [12, 16), [8, 12), [5, 8); then p1 + p0 = 5 ≥ 4 → [0, 5).
  expect_buckets(make_grad_buckets(store, 4), {{3, 4, 16, 18, false},
                                               {2, 3, 12, 16, false},
                                               {2, 3, 8, 12, false},
                                               {2, 3, 5, 8, false},
                                               {0, 2, 0, 5, false}});
}

TEST(GradBuckets, TiedParameterGetsItsOwnBucket) {
  const ParameterStore store = store_of({5, 7, 3, 11, 2, 6, 4}, /*tied=*/1);
  expect_buckets(
      make_grad_buckets(store, 12),
      {{4, 7, 26, 38, false}, {2, 4, 12, 26, false}, {1, 2, 5, 12, true}, {0, 1, 0, 5, false}});
}

TEST(GradBuckets, RejectsANonPositiveSize) {
  const ParameterStore store = store_of({5});
  try {
    make_grad_buckets(store, 0);
    ADD_FAILURE() << "a bucket size of 0 was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--ddp-bucket-size must be positive, got 0"));
  }
}

}  // namespace
}  // namespace megatron
