// Conformance of the communicators: every operation and dtype, checked against values computed
// here from rank numbers alone (rank r's input element i is value(r, i), so the expected
// reduction is a plain loop over r in double precision), on each path that moves tensors
// (transport_test_util.h): CPU tensors over MPI, CUDA tensors staged through host memory over
// MPI, CUDA tensors over NCCL. The device paths skip themselves without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "distributed/mpi_communicator.h"
#include "mpi_test_util.h"
#include "transport_test_util.h"

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

// Rank r's tensor of `shape` holding value(r, i) at flat index i (plus `offset` to i), on
// `device`.
template <typename T>
Tensor rank_tensor(int r, const Shape& shape, Device device = Device::CPU, int64_t offset = 0) {
  std::vector<T> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = Elem<T>::from(Elem<T>::value(r, int64_t(i) + offset));
  return Tensor::from_vector(v, shape).to(device);
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

// Checks one reduced element. Exact, except that NCCL sums bf16/f16 in 16 bits (rounding after
// each partial sum, nccl_communicator.h): with more than two ranks its result may differ from
// the once-rounded sum by the rounding of each of the n-1 additions.
template <typename T>
void expect_reduced(double got, int n, int64_t i, ReduceOp op, test::Path path,
                    const std::string& where) {
  const double expected = Elem<T>::to(expected_reduce<T>(n, i, op));
  constexpr bool half = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
  if (half && path == test::Path::kNccl && op == ReduceOp::SUM && n > 2) {
    const double relative = std::is_same_v<T, bf16> ? 0x1p-8 : 0x1p-11;
    EXPECT_NEAR(got, expected, (n - 1) * std::abs(expected) * relative) << where;
  } else {
    EXPECT_EQ(got, expected) << where;
  }
}

template <typename T>
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out;
  for (T v : t.to_vector<T>()) out.push_back(Elem<T>::to(v));
  return out;
}

// --- Every operation, as a function of the communicator and the tensors' device ----------

template <typename T>
void check_all_reduce(Communicator& comm, Device device, test::Path path) {
  const int n = comm.size(), me = comm.rank();
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    // 13 x 3: an odd size that no vector width divides.
    Tensor t = rank_tensor<T>(me, {13, 3}, device);
    comm.all_reduce(t, op);
    EXPECT_EQ(t.device(), device);
    std::vector<double> got = as_doubles<T>(t);
    for (int64_t i = 0; i < t.numel(); ++i) {
      expect_reduced<T>(got[size_t(i)], n, i, op, path,
                        "element " + std::to_string(i) + (op == ReduceOp::SUM ? " SUM" : " MAX"));
    }
  }
}

template <typename T>
void check_all_gather(Communicator& comm, Device device) {
  const int n = comm.size(), me = comm.rank();
  const Shape chunk{3, 5};
  Tensor in = rank_tensor<T>(me, chunk, device);
  Tensor out = Tensor::empty({3 * n, 5}, dtype_of<T>(), device);
  comm.all_gather(in, out);
  std::vector<double> got = as_doubles<T>(out);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < 15; ++i) {
      EXPECT_EQ(got[size_t(r * 15 + i)], Elem<T>::to(Elem<T>::from(Elem<T>::value(r, i))))
          << "block of rank " << r << ", element " << i;
    }
  }
}

template <typename T>
void check_reduce_scatter(Communicator& comm, Device device, test::Path path) {
  const int n = comm.size(), me = comm.rank();
  const int64_t rows = 7, cols = 2, block = rows * cols;
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    Tensor in = rank_tensor<T>(me, {rows * n, cols}, device);
    Tensor out = Tensor::empty({rows, cols}, dtype_of<T>(), device);
    comm.reduce_scatter(in, out, op);
    std::vector<double> got = as_doubles<T>(out);
    for (int64_t i = 0; i < block; ++i) {
      expect_reduced<T>(got[size_t(i)], n, me * block + i, op, path,
                        "element " + std::to_string(i) + (op == ReduceOp::SUM ? " SUM" : " MAX"));
    }
  }
}

template <typename T>
void check_broadcast(Communicator& comm, Device device) {
  for (int root = 0; root < comm.size(); ++root) {
    Tensor t = rank_tensor<T>(comm.rank(), {11}, device);
    comm.broadcast(t, root);
    std::vector<double> got = as_doubles<T>(t);
    for (int64_t i = 0; i < 11; ++i) {
      EXPECT_EQ(got[size_t(i)], Elem<T>::to(Elem<T>::from(Elem<T>::value(root, i))))
          << "root " << root << ", element " << i;
    }
  }
}

// Needs at least two ranks.
template <typename T>
void check_send_recv_ring(Communicator& comm, Device device) {
  const int n = comm.size(), me = comm.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  Tensor out = rank_tensor<T>(me, {2, 9}, device);
  Tensor in = Tensor::empty({2, 9}, dtype_of<T>(), device);
  // Even ranks send first, odd ranks receive first: no reliance on eager buffering.
  if (me % 2 == 0) {
    comm.send(out, next, /*tag=*/7);
    comm.recv(in, prev, /*tag=*/7);
  } else {
    comm.recv(in, prev, /*tag=*/7);
    comm.send(out, next, /*tag=*/7);
  }
  std::vector<double> got = as_doubles<T>(in);
  for (int64_t i = 0; i < 18; ++i) {
    EXPECT_EQ(got[size_t(i)], Elem<T>::to(Elem<T>::from(Elem<T>::value(prev, i))))
        << "element " << i << " from rank " << prev;
  }
}

// Two non-blocking all-reduces in flight at once, given progress, waited in reverse order.
template <typename T>
void check_iall_reduce(Communicator& comm, Device device, test::Path path) {
  const int n = comm.size(), me = comm.rank();
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    const std::string name = op == ReduceOp::SUM ? " SUM" : " MAX";
    Tensor a = rank_tensor<T>(me, {13, 3}, device);
    Tensor b = rank_tensor<T>(me, {5}, device, /*offset=*/100);
    std::unique_ptr<CommRequest> ra = comm.iall_reduce(a, op);
    std::unique_ptr<CommRequest> rb = comm.iall_reduce(b, op);
    ra->progress();
    rb->progress();
    rb->wait();
    ra->wait();
    ra->wait();  // waiting again does nothing
    const std::vector<double> got_a = as_doubles<T>(a), got_b = as_doubles<T>(b);
    for (int64_t i = 0; i < a.numel(); ++i)
      expect_reduced<T>(got_a[size_t(i)], n, i, op, path, "a[" + std::to_string(i) + "]" + name);
    for (int64_t i = 0; i < b.numel(); ++i)
      expect_reduced<T>(got_b[size_t(i)], n, 100 + i, op, path,
                        "b[" + std::to_string(i) + "]" + name);
  }
}

// Uneven counts with an empty segment: (3r + 1) mod 5 elements for rank r (1, 4, 2, 0 at np 4).
// In place: each rank's own segment of the tensor receives its reduced segment.
template <typename T>
void check_ireduce_scatter(Communicator& comm, Device device, test::Path path) {
  const int n = comm.size(), me = comm.rank();
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back((3 * r + 1) % 5);
  int64_t total = 0, mine_first = 0;
  for (int r = 0; r < n; ++r) {
    if (r < me) mine_first += counts[size_t(r)];
    total += counts[size_t(r)];
  }
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    Tensor t = rank_tensor<T>(me, {total}, device);
    std::unique_ptr<CommRequest> request = comm.ireduce_scatter(t, counts, op);
    request->progress();
    request->wait();
    const std::vector<double> got =
        as_doubles<T>(t.slice(0, mine_first, mine_first + counts[size_t(me)]));
    for (size_t i = 0; i < got.size(); ++i)
      expect_reduced<T>(got[i], n, mine_first + int64_t(i), op, path,
                        "element " + std::to_string(mine_first + int64_t(i)) +
                            (op == ReduceOp::SUM ? " SUM" : " MAX"));
  }
}

// Rank r sends rows(r, q) = (r + 2q + 1) mod 3 rows of 4 to rank q: uneven, some empty, and
// one to itself. Rank r's input element i is value(r, i), so the block rank r sends to rank q
// starts at element 4 · Σ_{q' < q} rows(r, q') of its input; the output is those blocks in
// source-rank order.
template <typename T>
void check_all_to_all_v(Communicator& comm, Device device) {
  const int n = comm.size(), me = comm.rank();
  const int64_t cols = 4;
  auto rows = [](int r, int q) { return int64_t((r + 2 * q + 1) % 3); };
  std::vector<int64_t> send_rows, recv_rows;
  int64_t sent = 0, received = 0;
  for (int q = 0; q < n; ++q) {
    send_rows.push_back(rows(me, q));
    recv_rows.push_back(rows(q, me));
    sent += rows(me, q);
    received += rows(q, me);
  }
  Tensor in = rank_tensor<T>(me, {sent, cols}, device);
  Tensor out = Tensor::empty({received, cols}, dtype_of<T>(), device);
  comm.all_to_all_v(in, send_rows, out, recv_rows);
  EXPECT_EQ(out.device(), device);
  const std::vector<double> got = as_doubles<T>(out);
  size_t k = 0;
  for (int r = 0; r < n; ++r) {
    int64_t first = 0;  // the first row rank r sends to this rank
    for (int q = 0; q < me; ++q) first += rows(r, q);
    for (int64_t i = first * cols; i < (first + rows(r, me)) * cols; ++i, ++k)
      EXPECT_EQ(got[k], Elem<T>::to(Elem<T>::from(Elem<T>::value(r, i))))
          << "from rank " << r << ", its element " << i;
  }
  EXPECT_EQ(k, got.size());
}

// --- Every operation x every dtype x every path ----------------------------------------------

template <typename T, test::Path P>
struct Case {
  using Type = T;
  static constexpr test::Path path = P;
};

struct CaseNames {
  template <typename C>
  static std::string GetName(int) {
    return std::string(dtype_name(dtype_of<typename C::Type>())) + "_" + test::path_name(C::path);
  }
};

template <typename C>
class CommunicatorDtypeTest : public ::testing::Test {
 protected:
  using T = typename C::Type;
  static constexpr test::Path path = C::path;
  void SetUp() override { SKIP_UNLESS_PATH_AVAILABLE(path); }
  std::shared_ptr<Communicator> comm() const { return test::communicator(path); }
  Device device() const { return test::device(path); }
};

using AllCases =
    ::testing::Types<Case<float, test::Path::kHost>, Case<double, test::Path::kHost>,
                     Case<bf16, test::Path::kHost>, Case<f16, test::Path::kHost>,
                     Case<int32_t, test::Path::kHost>, Case<int64_t, test::Path::kHost>,
                     Case<uint8_t, test::Path::kHost>, Case<float, test::Path::kStaged>,
                     Case<double, test::Path::kStaged>, Case<bf16, test::Path::kStaged>,
                     Case<f16, test::Path::kStaged>, Case<int32_t, test::Path::kStaged>,
                     Case<int64_t, test::Path::kStaged>, Case<uint8_t, test::Path::kStaged>,
                     Case<float, test::Path::kNccl>, Case<double, test::Path::kNccl>,
                     Case<bf16, test::Path::kNccl>, Case<f16, test::Path::kNccl>,
                     Case<int32_t, test::Path::kNccl>, Case<int64_t, test::Path::kNccl>,
                     Case<uint8_t, test::Path::kNccl>>;
TYPED_TEST_SUITE(CommunicatorDtypeTest, AllCases, CaseNames);

TYPED_TEST(CommunicatorDtypeTest, AllReduceSumAndMax) {
  check_all_reduce<typename TestFixture::T>(*this->comm(), this->device(), this->path);
}

TYPED_TEST(CommunicatorDtypeTest, AllGatherAlongDim0) {
  check_all_gather<typename TestFixture::T>(*this->comm(), this->device());
}

TYPED_TEST(CommunicatorDtypeTest, ReduceScatterSumAndMax) {
  check_reduce_scatter<typename TestFixture::T>(*this->comm(), this->device(), this->path);
}

TYPED_TEST(CommunicatorDtypeTest, AllToAllWithPerPeerCounts) {
  check_all_to_all_v<typename TestFixture::T>(*this->comm(), this->device());
}

TEST(CommunicatorTest, AllToAllCountsMustFitTheTensors) {
  auto comm = test::world();
  const int n = comm->size();
  std::vector<int64_t> ones(size_t(n), 1);
  Tensor in = Tensor::zeros({n, 2}, DType::F32);
  Tensor out = Tensor::zeros({n, 2}, DType::F32);
  try {
    comm->all_to_all_v(in, ones, out, std::vector<int64_t>(size_t(n) + 1, 1));
    ADD_FAILURE() << "accepted " << n + 1 << " receive counts";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("receive counts for a group of " + std::to_string(n)));
  }
  Tensor wide = Tensor::zeros({n, 3}, DType::F32);
  EXPECT_THROW(comm->all_to_all_v(in, ones, wide, ones), Error);
  std::vector<int64_t> twos(size_t(n), 2);
  try {
    comm->all_to_all_v(in, twos, out, ones);
    ADD_FAILURE() << "accepted send counts past the input";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("rows of the send counts"));
  }
}

// The non-blocking reductions take the types gradients and counters have.
template <typename C>
class NonBlockingReductionTest : public CommunicatorDtypeTest<C> {};
using ReductionCases =
    ::testing::Types<Case<float, test::Path::kHost>, Case<double, test::Path::kHost>,
                     Case<int32_t, test::Path::kHost>, Case<int64_t, test::Path::kHost>,
                     Case<float, test::Path::kStaged>, Case<int64_t, test::Path::kStaged>,
                     Case<float, test::Path::kNccl>, Case<double, test::Path::kNccl>,
                     Case<int32_t, test::Path::kNccl>, Case<int64_t, test::Path::kNccl>>;
TYPED_TEST_SUITE(NonBlockingReductionTest, ReductionCases, CaseNames);

TYPED_TEST(NonBlockingReductionTest, IallReduceSumAndMax) {
  check_iall_reduce<typename TestFixture::T>(*this->comm(), this->device(), this->path);
}

TYPED_TEST(NonBlockingReductionTest, IreduceScatterWithCountsSumAndMax) {
  check_ireduce_scatter<typename TestFixture::T>(*this->comm(), this->device(), this->path);
}

TYPED_TEST(CommunicatorDtypeTest, BroadcastFromEveryRoot) {
  check_broadcast<typename TestFixture::T>(*this->comm(), this->device());
}

TYPED_TEST(CommunicatorDtypeTest, SendRecvAroundARing) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  check_send_recv_ring<typename TestFixture::T>(*this->comm(), this->device());
}

// --- Properties checked once per path ----------------------------------------------------

class CommunicatorPathTest : public ::testing::TestWithParam<test::Path> {
 protected:
  void SetUp() override { SKIP_UNLESS_PATH_AVAILABLE(GetParam()); }
  test::Path path() const { return GetParam(); }
  std::shared_ptr<Communicator> comm() const { return test::communicator(GetParam()); }
  Device device() const { return test::device(GetParam()); }
};

std::string path_param_name(const ::testing::TestParamInfo<test::Path>& info) {
  return test::path_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(Paths, CommunicatorPathTest,
                         ::testing::Values(test::Path::kHost, test::Path::kStaged,
                                           test::Path::kNccl),
                         path_param_name);

// The MPI paths only (piecewise transfers and message-size checks are MPI's).
class MpiPathTest : public CommunicatorPathTest {};
INSTANTIATE_TEST_SUITE_P(Paths, MpiPathTest,
                         ::testing::Values(test::Path::kHost, test::Path::kStaged),
                         path_param_name);

// A limit of 4 elements per piece makes every operation move its tensors in several pieces:
// on the host all_reduce, broadcast and send/recv (13 elements: 4+4+4+1); staged, every
// operation, all_gather and reduce_scatter included (pieces of each rank's block, copied to and
// from the device as rows one block apart).
TEST_P(MpiPathTest, PiecewiseTransfersGiveTheSameResults) {
  if (!launched_by_mpi()) GTEST_SKIP() << "needs MPI (run under mpirun)";
  const int me = test::world_rank();
  std::shared_ptr<Communicator> pieces = MpiCommunicator::duplicate(MPI_COMM_WORLD, 4);
  std::shared_ptr<Communicator> group = pieces->split(0, me);  // inherits the limit
  for (Communicator* c : {pieces.get(), group.get()}) {
    check_all_reduce<float>(*c, device(), path());
    check_all_reduce<bf16>(*c, device(), path());
    check_all_gather<int64_t>(*c, device());
    check_all_gather<f16>(*c, device());
    check_reduce_scatter<double>(*c, device(), path());
    check_reduce_scatter<bf16>(*c, device(), path());
    check_broadcast<int32_t>(*c, device());
    if (c->size() > 1) check_send_recv_ring<uint8_t>(*c, device());
  }
  EXPECT_THROW(MpiCommunicator::duplicate(MPI_COMM_WORLD, 0), Error);
}

// Above the threshold the bf16 staging converts with OpenMP threads; same results.
TEST_P(CommunicatorPathTest, LargeBf16AllReduce) {
  const int n = comm()->size(), me = comm()->rank();
  const int64_t count = (int64_t(1) << 16) + 3;
  Tensor t = rank_tensor<bf16>(me, {count}, device());
  comm()->all_reduce(t);
  const std::vector<double> got = as_doubles<bf16>(t);
  int64_t wrong = 0;
  // NCCL sums bf16 in bf16 (see expect_reduced): exact up to two ranks.
  const double relative = path() == test::Path::kNccl && n > 2 ? (n - 1) * 0x1p-8 : 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double expected = Elem<bf16>::to(expected_reduce<bf16>(n, i, ReduceOp::SUM));
    wrong += std::abs(got[size_t(i)] - expected) > relative * std::abs(expected);
  }
  EXPECT_EQ(wrong, 0);
}

TEST_P(CommunicatorPathTest, AllGatherInPlaceWhenInputIsOwnBlockOfOutput) {
  const int n = comm()->size(), me = comm()->rank();
  Tensor out = Tensor::zeros({4 * n, 3}, DType::F32, device());
  Tensor own = out.slice(0, 4 * me, 4 * (me + 1));
  own.copy_from(rank_tensor<float>(me, {4, 3}, device()));
  comm()->all_gather(own, out);
  std::vector<float> got = out.to_vector<float>();
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(got[size_t(r * 12 + i)], float(Elem<float>::value(r, i))) << "rank " << r;
    }
  }
}

// all_reduce_scalar reduces a host value: on the NCCL path it travels through the MPI twin.
TEST_P(CommunicatorPathTest, AllReduceScalar) {
  auto c = comm();
  const int n = c->size(), me = c->rank();
  EXPECT_EQ(c->all_reduce_scalar(me + 1.0), n * (n + 1) / 2.0);
  EXPECT_EQ(c->all_reduce_scalar(double(me), ReduceOp::MAX), n - 1.0);
  EXPECT_EQ(c->all_reduce_scalar(-double(me) - 0.5, ReduceOp::MAX), -0.5);
}

TEST_P(CommunicatorPathTest, EmptyTensorsAreNoOps) {
  Tensor t = Tensor::empty({0, 4}, DType::F32, device());
  comm()->all_reduce(t);
  comm()->broadcast(t, 0);
  Tensor out = Tensor::empty({0, 4}, DType::F32, device());
  comm()->all_gather(t, out);
  comm()->reduce_scatter(t, out);
  EXPECT_EQ(out.numel(), 0);
}

TEST_P(CommunicatorPathTest, BarrierReturnsOnEveryRank) {
  comm()->barrier();
  EXPECT_EQ(comm()->all_reduce_scalar(1.0), double(comm()->size()));
}

TEST_P(CommunicatorPathTest, SplitFormsGroupsByColorOrderedByKey) {
  const int n = comm()->size(), me = comm()->rank();
  // Color: parity of the rank. Key: minus the rank, so each group is in reverse rank order.
  std::unique_ptr<Communicator> group = comm()->split(/*color=*/me % 2, /*key=*/-me);
  std::vector<int64_t> expected_members;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == me % 2) expected_members.push_back(r);

  Tensor mine = Tensor::from_vector<int64_t>({me}, {1}).to(device());
  Tensor members = Tensor::empty({group->size()}, DType::I64, device());
  group->all_gather(mine, members);
  EXPECT_EQ(group->size(), int(expected_members.size()));
  EXPECT_EQ(members.to_vector<int64_t>(), expected_members);
  const auto position = std::find(expected_members.begin(), expected_members.end(), me);
  EXPECT_EQ(group->rank(), int(position - expected_members.begin()));
  // A reduction inside the group sees only its members, on the device and on the host.
  double member_sum = 0;
  for (int64_t r : expected_members) member_sum += double(r);
  Tensor sum = Tensor::from_vector<double>({double(me)}, {1}).to(device());
  group->all_reduce(sum);
  EXPECT_EQ(sum.to_vector<double>()[0], member_sum);
  EXPECT_EQ(group->all_reduce_scalar(double(me)), member_sum);
}

TEST_P(CommunicatorPathTest, SplitOfASplit) {
  auto all = comm()->split(0, comm()->rank());
  auto singles = all->split(all->rank(), 0);
  EXPECT_EQ(all->size(), comm()->size());
  EXPECT_EQ(all->rank(), comm()->rank());
  EXPECT_EQ(singles->size(), 1);
  Tensor t = Tensor::from_vector<float>({comm()->rank() + 2.0f}, {1}).to(device());
  singles->all_reduce(t);
  EXPECT_EQ(t.to_vector<float>()[0], comm()->rank() + 2.0f);
  EXPECT_EQ(singles->all_reduce_scalar(comm()->rank() + 2.0), comm()->rank() + 2.0);
}

// Argument errors are detected before any transfer, identically on every rank, so every rank
// throws and no collective is left half-entered.
TEST_P(CommunicatorPathTest, RejectsWrongShapesDtypesDevicesAndRanks) {
  auto world = comm();
  const int n = world->size();
  Tensor in = Tensor::zeros({2, 3}, DType::F32, device());
  Tensor bad_out = Tensor::zeros({2 * n + 1, 3}, DType::F32, device());
  try {
    world->all_gather(in, bad_out);
    ADD_FAILURE() << "all_gather accepted a wrong output shape";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("all_gather: output must have shape"));
  }
  Tensor wrong_dtype = Tensor::zeros({2 * n, 3}, DType::F64, device());
  EXPECT_THROW(world->all_gather(in, wrong_dtype), Error);
  Tensor scattered = Tensor::zeros({3, 3}, DType::F32, device());
  try {
    world->reduce_scatter(Tensor::zeros({3 * n + 1, 3}, DType::F32, device()), scattered);
    ADD_FAILURE() << "reduce_scatter accepted a wrong input shape";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("reduce_scatter: input must have shape"));
  }
  Tensor strided = Tensor::zeros({4, 4}, DType::F32, device()).transpose(0, 1);
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
  if (!device().is_cpu()) {
    // One call, one device: a host input with a device output (and the reverse) is refused.
    Tensor host_out = Tensor::zeros({2 * n, 3}, DType::F32);
    try {
      world->all_gather(in, host_out);
      ADD_FAILURE() << "all_gather accepted tensors on two devices";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("must be on the same device"));
    }
    EXPECT_THROW(world->reduce_scatter(Tensor::zeros({3 * n, 3}, DType::F32), scattered), Error);
  }
  EXPECT_THROW(world->send(in, -1), Error);
  EXPECT_THROW(world->recv(in, n), Error);
  EXPECT_THROW(world->split(-1, 0), Error);
}

TEST_P(CommunicatorPathTest, NonBlockingReductionsRejectHalfTypesAndWrongCounts) {
  auto world = comm();
  const int n = world->size();
  Tensor half = Tensor::zeros({4}, DType::BF16, device());
  try {
    world->iall_reduce(half);
    ADD_FAILURE() << "iall_reduce accepted bf16";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("iall_reduce: reduces f32, f64, i32 or i64 tensors"));
  }
  const std::vector<int64_t> too_few(size_t(n + 1), 1);
  Tensor in = Tensor::zeros({n + 1}, DType::F32, device());
  try {
    world->ireduce_scatter(in, too_few);
    ADD_FAILURE() << "ireduce_scatter accepted " << n + 1 << " counts for " << n << " ranks";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("counts for a group of"));
  }
  const std::vector<int64_t> ones(size_t(n), 1);
  try {
    world->ireduce_scatter(in, ones);
    ADD_FAILURE() << "ireduce_scatter accepted a tensor longer than the counts";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("the tensor must be 1-D with the"));
  }
}

TEST_P(MpiPathTest, RecvOfAShorterMessageNamesBothSizes) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = comm();
  const int me = world->rank();
  std::string message;
  if (me == 0) {
    world->send(Tensor::zeros({5}, DType::F32, device()), 1, /*tag=*/3);
  } else if (me == 1) {
    Tensor t = Tensor::zeros({7}, DType::F32, device());
    try {
      world->recv(t, 0, /*tag=*/3);
    } catch (const Error& e) {
      message = e.message();
    }
    EXPECT_THAT(message, HasSubstr("expected 7 elements of f32 from rank 0"));
    EXPECT_THAT(message, HasSubstr("received 5"));
  }
}

TEST_P(MpiPathTest, RecvOfALongerMessageIsAnError) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = comm();
  const int me = world->rank();
  if (me == 0) {
    world->send(Tensor::zeros({9}, DType::F32, device()), 1, /*tag=*/4);
  } else if (me == 1) {
    Tensor t = Tensor::zeros({3}, DType::F32, device());
    try {
      world->recv(t, 0, /*tag=*/4);
      ADD_FAILURE() << "recv accepted a message longer than the tensor";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("recv: MPI error"));
    }
  }
}

// --- Non-blocking point-to-point ---------------------------------------------------------

// `t` holds rank r's rank_tensor (compared whole: one failure message, not millions).
template <typename T>
void expect_equal_to_rank(const Tensor& t, int r) {
  const Tensor expected = rank_tensor<T>(r, t.shape());
  EXPECT_TRUE(as_doubles<T>(t.to(Device::CPU)) == as_doubles<T>(expected))
      << "the received tensor is not rank " << r << "'s";
}

// Every rank sends a large tensor (far above any eager limit, so a blocking send would wait for
// its receiver) to its ring successor and receives from its predecessor; even ranks post the
// send first, odd ranks the receive, and nobody waits before both are posted. Blocking calls
// in this order would deadlock; the non-blocking ones must not.
TEST_P(CommunicatorPathTest, IsendIrecvRingInEitherOrderDoesNotDeadlock) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = comm();
  const int me = world->rank(), n = world->size();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const Shape shape = {int64_t(1) << 21};  // 8 MiB of f32
  Tensor out = rank_tensor<float>(me, shape, device());
  Tensor in = Tensor::zeros(shape, DType::F32, device());
  std::unique_ptr<CommRequest> sent, received;
  if (me % 2 == 0) {
    sent = world->isend(out, next, /*tag=*/7);
    received = world->irecv(in, prev, /*tag=*/7);
  } else {
    received = world->irecv(in, prev, /*tag=*/7);
    sent = world->isend(out, next, /*tag=*/7);
  }
  received->wait();
  sent->wait();
  sent->wait();  // a second wait does nothing
  expect_equal_to_rank<float>(in, prev);
}

// Two messages to one peer with different tags are matched by tag, not by arrival order.
TEST_P(CommunicatorPathTest, IrecvMatchesByTag) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  if (path() == test::Path::kNccl) GTEST_SKIP() << "NCCL has no tags";
  auto world = comm();
  const int me = world->rank();
  if (me > 1) return;
  const int peer = 1 - me;
  Tensor a = rank_tensor<float>(me, {1000}, device()),
         b = rank_tensor<float>(me + 2, {1000}, device());
  Tensor got_a = Tensor::zeros({1000}, DType::F32, device());
  Tensor got_b = Tensor::zeros({1000}, DType::F32, device());
  auto sa = world->isend(a, peer, /*tag=*/1);
  auto sb = world->isend(b, peer, /*tag=*/2);
  auto rb = world->irecv(got_b, peer, /*tag=*/2);  // posted in the other order
  auto ra = world->irecv(got_a, peer, /*tag=*/1);
  rb->wait();
  ra->wait();
  sa->wait();
  sb->wait();
  expect_equal_to_rank<float>(got_a, peer);
  expect_equal_to_rank<float>(got_b, peer + 2);
}

// sendrecv with both neighbours of a ring, and with one direction left out.
TEST_P(CommunicatorPathTest, SendrecvRing) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = comm();
  const int me = world->rank(), n = world->size();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  Tensor out = rank_tensor<float>(me, {int64_t(1) << 20}, device());
  Tensor in = Tensor::zeros({int64_t(1) << 20}, DType::F32, device());
  world->sendrecv(out, next, in, prev, /*tag=*/5);
  expect_equal_to_rank<float>(in, prev);
  // A line instead of a ring: rank 0 only sends, the last rank only receives.
  Tensor none;
  Tensor line_in = Tensor::zeros({17}, DType::F32, device());
  Tensor line_out = rank_tensor<float>(me, {17}, device());
  world->sendrecv(me + 1 < n ? line_out : none, next, me > 0 ? line_in : none, prev, /*tag=*/6);
  if (me > 0) expect_equal_to_rank<float>(line_in, prev);
}

TEST_P(MpiPathTest, IrecvOfAShorterMessageNamesBothSizes) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  auto world = comm();
  const int me = world->rank();
  std::string message;
  if (me == 0) {
    world->isend(Tensor::zeros({5}, DType::F32, device()), 1, /*tag=*/8)->wait();
  } else if (me == 1) {
    Tensor t = Tensor::zeros({7}, DType::F32, device());
    try {
      world->irecv(t, 0, /*tag=*/8)->wait();
    } catch (const Error& e) {
      message = e.message();
    }
    EXPECT_THAT(message, HasSubstr("irecv: expected 7 elements of f32 from rank 0"));
    EXPECT_THAT(message, HasSubstr("received 5"));
  }
}

// Sums of f32 that round: every rank must end with the same bits (data-parallel replicas stay
// identical), whichever rank's segment an element fell in, and the sum must be the sum. Three
// reductions in flight on one communicator, completed in another order than posted.
TEST_P(CommunicatorPathTest, IallReduceOfRoundingSumsGivesEveryRankTheSameBits) {
  auto world = comm();
  const int n = world->size(), me = world->rank();
  constexpr int64_t kElements = 1001;
  auto value = [](int rank, int64_t i, int which) {
    return float(std::sin(0.37 * double(i) + 1.3 * rank + which)) / float(3 + rank);
  };
  std::vector<Tensor> tensors;
  std::vector<std::unique_ptr<CommRequest>> requests;
  for (int which = 0; which < 3; ++which) {
    std::vector<float> v(kElements);
    for (int64_t i = 0; i < kElements; ++i) v[size_t(i)] = value(me, i, which);
    tensors.push_back(Tensor::from_vector(v, {kElements}).to(device()));
    requests.push_back(world->iall_reduce(tensors.back()));
  }
  requests[1]->wait();
  requests[2]->progress();
  requests[2]->wait();
  requests[0]->wait();
  for (int which = 0; which < 3; ++which) {
    Tensor gathered = Tensor::zeros({n * kElements}, DType::F32, device());
    world->all_gather(tensors[size_t(which)], gathered);
    const std::vector<float> all = gathered.to(Device::CPU).to_vector<float>();
    for (int r = 1; r < n; ++r)
      ASSERT_EQ(0, std::memcmp(&all[0], &all[size_t(r * kElements)], kElements * sizeof(float)))
          << "rank " << r << " holds other bits than rank 0 (reduction " << which << ")";
    for (int64_t i = 0; i < kElements; ++i) {
      double want = 0.0;
      for (int r = 0; r < n; ++r) want += double(value(r, i, which));
      EXPECT_NEAR(all[size_t(i)], want, 4e-7 * n) << "element " << i << " of reduction " << which;
    }
  }
}

}  // namespace
}  // namespace megatron
