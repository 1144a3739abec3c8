// Conformance of the world MpiCommunicator: every operation and dtype, checked against
// values computed here from rank numbers alone (rank r's input element i is value(r, i),
// so the expected reduction is a plain loop over r in double precision).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "distributed/mpi_communicator.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

// Per-dtype element conversion and test values. Values are small so that integer sums stay
// exact in every type; for bf16/f16 they are 1 + k/128, which the 16-bit types hold
// exactly but whose sums need rounding, so the test sees whether the reduction rounds
// once (f32 semantics) as the contract says.
template <typename T>
struct Elem {
  static T from(double v) { return T(v); }
  static double to(T v) { return double(v); }
  static double value(int r, int64_t i) { return double((r * 7 + i * 3) % 17) - 8.0; }
};
template <>
struct Elem<uint8_t> {
  static uint8_t from(double v) { return uint8_t(v); }
  static double to(uint8_t v) { return v; }
  static double value(int r, int64_t i) { return double((r * 7 + i * 3) % 17); }
};
template <>
struct Elem<bf16> {
  static bf16 from(double v) { return bf16(float(v)); }
  static double to(bf16 v) { return float(v); }
  static double value(int r, int64_t i) { return 1.0 + double((r * 7 + i * 3) % 17) / 128.0; }
};
template <>
struct Elem<f16> {
  static f16 from(double v) { return f16(float(v)); }
  static double to(f16 v) { return float(v); }
  static double value(int r, int64_t i) { return 1.0 + double((r * 7 + i * 3) % 17) / 128.0; }
};

// Rank r's tensor of `shape` holding value(r, i) at flat index i (plus `offset` to i).
template <typename T>
Tensor rank_tensor(int r, const Shape& shape, int64_t offset = 0) {
  std::vector<T> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = Elem<T>::from(Elem<T>::value(r, int64_t(i) + offset));
  return Tensor::from_vector(v, shape);
}

// The reduction over ranks 0..n-1 of value(r, i), in double, rounded once to T.
template <typename T>
T expected_reduce(int n, int64_t i, ReduceOp op) {
  double acc = op == ReduceOp::SUM ? 0.0 : -INFINITY;
  for (int r = 0; r < n; ++r) {
    const double v = Elem<T>::to(Elem<T>::from(Elem<T>::value(r, i)));
    acc = op == ReduceOp::SUM ? acc + v : std::max(acc, v);
  }
  return Elem<T>::from(acc);
}

template <typename T>
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out;
  for (T v : t.to_vector<T>()) out.push_back(Elem<T>::to(v));
  return out;
}

template <typename T>
class CommunicatorDtypeTest : public ::testing::Test {};
using AllDtypes = ::testing::Types<float, double, bf16, f16, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(CommunicatorDtypeTest, AllDtypes);

TYPED_TEST(CommunicatorDtypeTest, AllReduceSumAndMax) {
  using T = TypeParam;
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    // 13 x 3: an odd size that no vector width divides.
    Tensor t = rank_tensor<T>(me, {13, 3});
    world->all_reduce(t, op);
    std::vector<double> got = as_doubles<T>(t);
    for (int64_t i = 0; i < t.numel(); ++i) {
      EXPECT_EQ(got[size_t(i)], Elem<T>::to(expected_reduce<T>(n, i, op)))
          << "element " << i << (op == ReduceOp::SUM ? " SUM" : " MAX");
    }
  }
}

TYPED_TEST(CommunicatorDtypeTest, AllGatherAlongDim0) {
  using T = TypeParam;
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  const Shape chunk{3, 5};
  Tensor in = rank_tensor<T>(me, chunk);
  Tensor out = Tensor::empty({3 * n, 5}, dtype_of<T>());
  world->all_gather(in, out);
  std::vector<double> got = as_doubles<T>(out);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < 15; ++i) {
      EXPECT_EQ(got[size_t(r * 15 + i)], Elem<T>::to(Elem<T>::from(Elem<T>::value(r, i))))
          << "block of rank " << r << ", element " << i;
    }
  }
}

TYPED_TEST(CommunicatorDtypeTest, ReduceScatterSumAndMax) {
  using T = TypeParam;
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  const int64_t rows = 7, cols = 2, block = rows * cols;
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    Tensor in = rank_tensor<T>(me, {rows * n, cols});
    Tensor out = Tensor::empty({rows, cols}, dtype_of<T>());
    world->reduce_scatter(in, out, op);
    std::vector<double> got = as_doubles<T>(out);
    for (int64_t i = 0; i < block; ++i) {
      EXPECT_EQ(got[size_t(i)], Elem<T>::to(expected_reduce<T>(n, me * block + i, op)))
          << "element " << i << (op == ReduceOp::SUM ? " SUM" : " MAX");
    }
  }
}

TYPED_TEST(CommunicatorDtypeTest, BroadcastFromEveryRoot) {
  using T = TypeParam;
  auto world = test::world();
  for (int root = 0; root < world->size(); ++root) {
    Tensor t = rank_tensor<T>(world->rank(), {11});
    world->broadcast(t, root);
    std::vector<double> got = as_doubles<T>(t);
    for (int64_t i = 0; i < 11; ++i) {
      EXPECT_EQ(got[size_t(i)], Elem<T>::to(Elem<T>::from(Elem<T>::value(root, i))))
          << "root " << root << ", element " << i;
    }
  }
}

TYPED_TEST(CommunicatorDtypeTest, SendRecvAroundARing) {
  using T = TypeParam;
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  Tensor out = rank_tensor<T>(me, {2, 9});
  Tensor in = Tensor::empty({2, 9}, dtype_of<T>());
  // Even ranks send first, odd ranks receive first: no reliance on eager buffering.
  if (me % 2 == 0) {
    world->send(out, next, /*tag=*/7);
    world->recv(in, prev, /*tag=*/7);
  } else {
    world->recv(in, prev, /*tag=*/7);
    world->send(out, next, /*tag=*/7);
  }
  std::vector<double> got = as_doubles<T>(in);
  for (int64_t i = 0; i < 18; ++i) {
    EXPECT_EQ(got[size_t(i)], Elem<T>::to(Elem<T>::from(Elem<T>::value(prev, i))))
        << "element " << i << " from rank " << prev;
  }
}

// all_reduce, broadcast and send/recv move large tensors in pieces of at most
// max_chunk_elements; a limit of 4 makes a 13-element tensor take 4 pieces (4+4+4+1).
TEST(CommunicatorTest, PiecewiseTransfersGiveTheSameResults) {
  if (!launched_by_mpi()) GTEST_SKIP() << "needs MPI (run under mpirun)";
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  std::unique_ptr<Communicator> pieces = MpiCommunicator::duplicate(MPI_COMM_WORLD, 4);
  std::unique_ptr<Communicator> group = pieces->split(0, me);  // inherits the limit

  Tensor sum = rank_tensor<float>(me, {13});
  pieces->all_reduce(sum);
  Tensor half_max = rank_tensor<bf16>(me, {13});
  group->all_reduce(half_max, ReduceOp::MAX);
  Tensor b = rank_tensor<int64_t>(me, {13});
  pieces->broadcast(b, n - 1);
  Tensor received = Tensor::zeros({13}, DType::F64);
  if (n > 1) {
    if (me == 0) pieces->send(rank_tensor<double>(me, {13}), 1, /*tag=*/5);
    if (me == 1) pieces->recv(received, 0, /*tag=*/5);
  }
  const std::vector<float> got_sum = sum.to_vector<float>();
  const std::vector<double> got_max = as_doubles<bf16>(half_max);
  const std::vector<int64_t> got_b = b.to_vector<int64_t>();
  const std::vector<double> got_received = received.to_vector<double>();
  for (int64_t i = 0; i < 13; ++i) {
    EXPECT_EQ(got_sum[size_t(i)], expected_reduce<float>(n, i, ReduceOp::SUM)) << i;
    EXPECT_EQ(got_max[size_t(i)], Elem<bf16>::to(expected_reduce<bf16>(n, i, ReduceOp::MAX))) << i;
    EXPECT_EQ(got_b[size_t(i)], int64_t(Elem<int64_t>::value(n - 1, i))) << i;
    if (n > 1 && me == 1) {
      EXPECT_EQ(got_received[size_t(i)], Elem<double>::value(0, i)) << i;
    }
  }
  EXPECT_THROW(MpiCommunicator::duplicate(MPI_COMM_WORLD, 0), Error);
}

// Above the threshold the bf16 staging converts with OpenMP threads; same results.
TEST(CommunicatorTest, LargeBf16AllReduce) {
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  const int64_t count = (int64_t(1) << 16) + 3;
  Tensor t = rank_tensor<bf16>(me, {count});
  world->all_reduce(t);
  const std::vector<double> got = as_doubles<bf16>(t);
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i)
    wrong += got[size_t(i)] != Elem<bf16>::to(expected_reduce<bf16>(n, i, ReduceOp::SUM));
  EXPECT_EQ(wrong, 0);
}

TEST(CommunicatorTest, AllGatherInPlaceWhenInputIsOwnBlockOfOutput) {
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  Tensor out = Tensor::zeros({4 * n, 3}, DType::F32);
  Tensor own = out.slice(0, 4 * me, 4 * (me + 1));
  own.copy_from(rank_tensor<float>(me, {4, 3}));
  world->all_gather(own, out);
  std::vector<float> got = out.to_vector<float>();
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(got[size_t(r * 12 + i)], float(Elem<float>::value(r, i))) << "rank " << r;
    }
  }
}

TEST(CommunicatorTest, AllReduceScalar) {
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  EXPECT_EQ(world->all_reduce_scalar(me + 1.0), n * (n + 1) / 2.0);
  EXPECT_EQ(world->all_reduce_scalar(double(me), ReduceOp::MAX), n - 1.0);
  EXPECT_EQ(world->all_reduce_scalar(-double(me) - 0.5, ReduceOp::MAX), -0.5);
}

TEST(CommunicatorTest, EmptyTensorsAreNoOps) {
  auto world = test::world();
  Tensor t = Tensor::empty({0, 4}, DType::F32);
  world->all_reduce(t);
  world->broadcast(t, 0);
  Tensor out = Tensor::empty({0, 4}, DType::F32);
  world->all_gather(t, out);
  world->reduce_scatter(t, out);
  EXPECT_EQ(out.numel(), 0);
}

TEST(CommunicatorTest, BarrierReturnsOnEveryRank) {
  auto world = test::world();
  world->barrier();
  EXPECT_EQ(world->all_reduce_scalar(1.0), double(world->size()));
}

TEST(CommunicatorTest, SplitFormsGroupsByColorOrderedByKey) {
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  // Color: parity of the rank. Key: minus the rank, so each group is in reverse rank order.
  std::unique_ptr<Communicator> group = world->split(/*color=*/me % 2, /*key=*/-me);
  std::vector<int64_t> expected_members;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == me % 2) expected_members.push_back(r);

  Tensor mine = Tensor::from_vector<int64_t>({me}, {1});
  Tensor members = Tensor::empty({group->size()}, DType::I64);
  group->all_gather(mine, members);
  EXPECT_EQ(group->size(), int(expected_members.size()));
  EXPECT_EQ(members.to_vector<int64_t>(), expected_members);
  const auto position = std::find(expected_members.begin(), expected_members.end(), me);
  EXPECT_EQ(group->rank(), int(position - expected_members.begin()));
  // A reduction inside the group sees only its members.
  double member_sum = 0;
  for (int64_t r : expected_members) member_sum += double(r);
  EXPECT_EQ(group->all_reduce_scalar(double(me)), member_sum);
}

TEST(CommunicatorTest, SplitOfASplit) {
  auto world = test::world();
  auto all = world->split(0, world->rank());
  auto singles = all->split(all->rank(), 0);
  EXPECT_EQ(all->size(), world->size());
  EXPECT_EQ(all->rank(), world->rank());
  EXPECT_EQ(singles->size(), 1);
  EXPECT_EQ(singles->all_reduce_scalar(world->rank() + 2.0), world->rank() + 2.0);
}

// Argument errors are detected before any MPI call, identically on every rank, so every
// rank throws and no collective is left half-entered.
TEST(CommunicatorTest, RejectsWrongShapesDtypesAndRanks) {
  auto world = test::world();
  const int n = world->size();
  Tensor in = Tensor::zeros({2, 3}, DType::F32);
  Tensor bad_out = Tensor::zeros({2 * n + 1, 3}, DType::F32);
  try {
    world->all_gather(in, bad_out);
    ADD_FAILURE() << "all_gather accepted a wrong output shape";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("all_gather: output must have shape"));
  }
  Tensor wrong_dtype = Tensor::zeros({2 * n, 3}, DType::F64);
  EXPECT_THROW(world->all_gather(in, wrong_dtype), Error);
  Tensor scattered = Tensor::zeros({3, 3}, DType::F32);
  try {
    world->reduce_scatter(Tensor::zeros({3 * n + 1, 3}, DType::F32), scattered);
    ADD_FAILURE() << "reduce_scatter accepted a wrong input shape";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("reduce_scatter: input must have shape"));
  }
  Tensor strided = Tensor::zeros({4, 4}, DType::F32).transpose(0, 1);
  try {
    world->all_reduce(strided);
    ADD_FAILURE() << "all_reduce accepted a non-contiguous tensor";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("must be contiguous"));
  }
  try {
    world->broadcast(in, n);
    ADD_FAILURE() << "broadcast accepted root " << n;
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("root rank"));
  }
  EXPECT_THROW(world->send(in, -1), Error);
  EXPECT_THROW(world->recv(in, n), Error);
  EXPECT_THROW(world->split(-1, 0), Error);
}

TEST(CommunicatorTest, RecvOfAShorterMessageNamesBothSizes) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = test::world();
  const int me = world->rank();
  std::string message;
  if (me == 0) {
    world->send(Tensor::zeros({5}, DType::F32), 1, /*tag=*/3);
  } else if (me == 1) {
    Tensor t = Tensor::zeros({7}, DType::F32);
    try {
      world->recv(t, 0, /*tag=*/3);
    } catch (const Error& e) {
      message = e.message();
    }
    EXPECT_THAT(message, HasSubstr("expected 7 elements of f32 from rank 0"));
    EXPECT_THAT(message, HasSubstr("received 5"));
  }
}

TEST(CommunicatorTest, RecvOfALongerMessageIsAnError) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = test::world();
  const int me = world->rank();
  if (me == 0) {
    world->send(Tensor::zeros({9}, DType::F32), 1, /*tag=*/4);
  } else if (me == 1) {
    Tensor t = Tensor::zeros({3}, DType::F32);
    try {
      world->recv(t, 0, /*tag=*/4);
      ADD_FAILURE() << "recv accepted a message longer than the tensor";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("recv: MPI error"));
    }
  }
}

}  // namespace
}  // namespace megatron
