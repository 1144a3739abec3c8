// fill_positions / first_out_of_range against plain loops, on odd sizes, plus their error paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/indexing.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

// The message of the Error fn throws ("" and a test failure when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

TEST(FillPositions, MatchesSeqMajorLoop) {
  for (int64_t s : {1, 13, 17}) {
    for (int64_t b : {1, 3, 11}) {
      for (int64_t start : {0, 5, 1023}) {
        Tensor ids = Tensor::empty({s * b}, DType::I32);
        kernels::fill_positions(ids, b, start);
        const auto got = ids.to_vector<int32_t>();
        for (int64_t si = 0; si < s; ++si)
          for (int64_t bi = 0; bi < b; ++bi)
            ASSERT_EQ(got[size_t(si * b + bi)], start + si)
                << "s " << s << " b " << b << " start " << start << " at [" << si << ", " << bi
                << "]";
      }
    }
  }
}

TEST(FillPositions, AcceptsATwoDimensionalBlock) {
  Tensor ids = Tensor::empty({13, 3}, DType::I32);  // [s, b]
  kernels::fill_positions(ids, 3, 2);
  const auto got = ids.to_vector<int32_t>();
  for (int64_t i = 0; i < 13 * 3; ++i) EXPECT_EQ(got[size_t(i)], 2 + i / 3) << i;
}

TEST(FillPositions, RejectsBadArguments) {
  Tensor f = Tensor::empty({12}, DType::F32);
  EXPECT_THAT(error_of([&] { kernels::fill_positions(f, 3, 0); }),
              HasSubstr("fill_positions ids has dtype f32, expected i32"));
  Tensor ids = Tensor::empty({13}, DType::I32);
  EXPECT_THAT(error_of([&] { kernels::fill_positions(ids, 3, 0); }),
              HasSubstr("not a whole number of rows of batch 3"));
  EXPECT_THAT(error_of([&] { kernels::fill_positions(ids, 0, 0); }),
              HasSubstr("fill_positions batch must be >= 1"));
  EXPECT_THAT(error_of([&] { kernels::fill_positions(ids, 1, -1); }), HasSubstr("fit i32"));
  EXPECT_THAT(error_of([&] { kernels::fill_positions(ids, 1, int64_t(1) << 31); }),
              HasSubstr("fit i32"));
  Tensor strided = Tensor::empty({13, 2}, DType::I32).slice(1, 0, 1);
  EXPECT_THAT(error_of([&] { kernels::fill_positions(strided, 1, 0); }),
              HasSubstr("fill_positions ids must be contiguous"));
  Tensor undefined;
  EXPECT_THAT(error_of([&] { kernels::fill_positions(undefined, 1, 0); }),
              HasSubstr("fill_positions ids is undefined"));
}

// The naive answer: the first index whose id is outside [lo, hi), or −1.
int64_t naive_first_out_of_range(const std::vector<int32_t>& ids, int64_t lo, int64_t hi) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < lo || ids[i] >= hi) return int64_t(i);
  return -1;
}

TEST(FirstOutOfRange, MatchesPlainLoop) {
  std::mt19937 gen(7);
  for (int64_t n : {0, 1, 13, 17, 1000, 100003}) {
    std::uniform_int_distribution<int32_t> inside(-3, 50 - 1);  // [lo, hi) = [-3, 50)
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = inside(gen);
    // None outside, then bad ids planted late, early and at both ends (several per vector, so
    // the lowest index must win whatever chunk or thread finds which).
    std::vector<std::vector<int64_t>> plants = {{}};
    if (n > 0) plants.push_back({n - 1});
    if (n > 0) plants.push_back({0, n - 1});
    if (n > 17) plants.push_back({n - 2, 16, n / 2});
    if (n > 1000) plants.push_back({n - 1, 999, 998, 70000 % n});
    for (const auto& where : plants) {
      std::vector<int32_t> w = v;
      for (size_t k = 0; k < where.size(); ++k) w[size_t(where[k])] = k % 2 ? -4 : 50;
      const Tensor ids = Tensor::from_vector(w, {n});
      const int64_t want = naive_first_out_of_range(w, -3, 50);
      EXPECT_EQ(kernels::first_out_of_range(ids, -3, 50), want) << "n " << n;
      // The answer does not depend on the thread count.
      const int threads = omp_get_max_threads();
      omp_set_num_threads(4);
      EXPECT_EQ(kernels::first_out_of_range(ids, -3, 50), want) << "n " << n << ", 4 threads";
      omp_set_num_threads(threads);
    }
  }
}

TEST(FirstOutOfRange, AnyContiguousShapeAndFullI32Range) {
  const std::vector<int32_t> v = {0, 2147483647, -2147483647 - 1, 5, 6, 7};
  const Tensor ids = Tensor::from_vector(v, {2, 3});
  EXPECT_EQ(kernels::first_out_of_range(ids, -2147483648LL, 2147483648LL), -1);
  EXPECT_EQ(kernels::first_out_of_range(ids, 0, 2147483648LL), 2);
  EXPECT_EQ(kernels::first_out_of_range(ids, 0, 8), 1);
  EXPECT_EQ(kernels::first_out_of_range(ids, 1, 8), 0);
}

TEST(FirstOutOfRange, RejectsBadArguments) {
  Tensor i64 = Tensor::zeros({13}, DType::I64);
  EXPECT_THAT(error_of([&] { kernels::first_out_of_range(i64, 0, 1); }),
              HasSubstr("first_out_of_range ids has dtype i64, expected i32"));
  Tensor strided = Tensor::zeros({13, 2}, DType::I32).slice(1, 1, 2);
  EXPECT_THAT(error_of([&] { kernels::first_out_of_range(strided, 0, 1); }),
              HasSubstr("first_out_of_range ids must be contiguous"));
  EXPECT_THAT(error_of([&] { kernels::first_out_of_range(Tensor(), 0, 1); }),
              HasSubstr("first_out_of_range ids is undefined"));
}

}  // namespace
}  // namespace megatron
