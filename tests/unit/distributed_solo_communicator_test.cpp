// SoloCommunicator (a world of one) and the single-process paths built on it: identities
// for collectives, the same argument checks as MPI, no peers for send/recv, and
// ParallelState / comm_check over it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "distributed/comm_check.h"
#include "distributed/parallel_state.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

TEST(SoloCommunicatorTest, IsAWorldOfOne) {
  SoloCommunicator solo;
  EXPECT_EQ(solo.rank(), 0);
  EXPECT_EQ(solo.size(), 1);
}

TEST(SoloCommunicatorTest, ReductionsLeaveValuesUnchanged) {
  SoloCommunicator solo;
  const std::vector<float> values{1.5f, -2.0f, 3.25f};
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    Tensor t = Tensor::from_vector(values, {3});
    solo.all_reduce(t, op);
    EXPECT_EQ(t.to_vector<float>(), values);
    EXPECT_EQ(solo.all_reduce_scalar(-4.5, op), -4.5);
  }
}

TEST(SoloCommunicatorTest, NonBlockingReductionsAreDoneWhenPosted) {
  SoloCommunicator solo;
  const std::vector<float> values{1.5f, -2.0f, 3.25f};
  Tensor t = Tensor::from_vector(values, {3});
  std::unique_ptr<CommRequest> reduced = solo.iall_reduce(t);
  reduced->progress();
  reduced->wait();
  EXPECT_EQ(t.to_vector<float>(), values);
  const std::vector<int64_t> counts{3};
  solo.ireduce_scatter(t, counts)->wait();  // one rank: its segment is all of t
  EXPECT_EQ(t.to_vector<float>(), values);
  const std::vector<int64_t> too_many{4};
  EXPECT_THROW(solo.ireduce_scatter(t, too_many), Error);
  Tensor half = Tensor::zeros({3}, DType::F16);
  EXPECT_THROW(solo.iall_reduce(half), Error);
}

TEST(SoloCommunicatorTest, AllToAllCopiesItsOneBlock) {
  SoloCommunicator solo;
  const std::vector<float> values{1, 2, 3, 4, 5, 6};
  Tensor in = Tensor::from_vector(values, {3, 2});
  Tensor out = Tensor::zeros({3, 2}, DType::F32);
  const std::vector<int64_t> three{3}, two{2};
  solo.all_to_all_v(in, three, out, three);
  EXPECT_EQ(out.to_vector<float>(), values);
  EXPECT_THROW(solo.all_to_all_v(in, three, out, two), Error);  // 2 rows cannot fill 3
  Tensor none = Tensor::zeros({0, 2}, DType::F32), nothing = Tensor::zeros({0, 2}, DType::F32);
  const std::vector<int64_t> zero{0};
  solo.all_to_all_v(none, zero, nothing, zero);  // an empty exchange is an exchange
}

TEST(SoloCommunicatorTest, GatherAndScatterCopy) {
  SoloCommunicator solo;
  const std::vector<int32_t> values{1, 2, 3, 4, 5, 6};
  Tensor in = Tensor::from_vector(values, {2, 3});
  Tensor gathered = Tensor::zeros({2, 3}, DType::I32);
  solo.all_gather(in, gathered);
  EXPECT_EQ(gathered.to_vector<int32_t>(), values);
  Tensor scattered = Tensor::zeros({2, 3}, DType::I32);
  solo.reduce_scatter(in, scattered);
  EXPECT_EQ(scattered.to_vector<int32_t>(), values);
}

TEST(SoloCommunicatorTest, BroadcastFromRootZeroOnly) {
  SoloCommunicator solo;
  Tensor t = Tensor::from_vector<double>({7.0}, {1});
  solo.broadcast(t, 0);
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>{7.0});
  try {
    solo.broadcast(t, 1);
    ADD_FAILURE() << "broadcast from root 1 in a world of one";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("root rank 1 is outside the group of size 1"));
  }
}

TEST(SoloCommunicatorTest, SendAndRecvHaveNoPeer) {
  SoloCommunicator solo;
  Tensor t = Tensor::zeros({2}, DType::F32);
  try {
    solo.send(t, 1);
    ADD_FAILURE() << "send in a world of one";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("no peer"));
  }
  EXPECT_THROW(solo.recv(t, 0), Error);
  try {
    solo.isend(t, 1);
    ADD_FAILURE() << "isend in a world of one";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("isend: a world of one process has no peer 1"));
  }
  EXPECT_THROW(solo.irecv(t, 0), Error);
  Tensor none;
  EXPECT_THROW(solo.sendrecv(t, 0, none, 0), Error);
}

TEST(SoloCommunicatorTest, ChecksArgumentsLikeMpi) {
  SoloCommunicator solo;
  Tensor in = Tensor::zeros({2, 3}, DType::F32);
  Tensor wrong_rows = Tensor::zeros({3, 3}, DType::F32);
  try {
    solo.all_gather(in, wrong_rows);
    ADD_FAILURE() << "all_gather accepted output [3, 3] for input [2, 3]";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("output must have shape [2, 3]"));
  }
  Tensor wrong_dtype = Tensor::zeros({2, 3}, DType::BF16);
  EXPECT_THROW(solo.reduce_scatter(in, wrong_dtype), Error);
  Tensor strided = Tensor::zeros({3, 2}, DType::F32).transpose(0, 1);
  EXPECT_THROW(solo.all_reduce(strided), Error);
  Tensor undefined;
  EXPECT_THROW(solo.all_reduce(undefined), Error);
  EXPECT_THROW(solo.split(-1, 0), Error);
}

TEST(SoloCommunicatorTest, SplitGivesAnotherWorldOfOne) {
  SoloCommunicator solo;
  std::unique_ptr<Communicator> sub = solo.split(3, 5);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->rank(), 0);
}

TEST(SoloCommunicatorTest, ParallelStateOfOneProcess) {
  auto solo = std::make_shared<SoloCommunicator>();
  ParallelState s = ParallelState::create(solo, 1, 1);
  EXPECT_EQ(s.world_size, 1);
  EXPECT_EQ(s.tp_size * s.dp_size * s.pp_size, 1);
  EXPECT_EQ(s.tp->size(), 1);
  EXPECT_EQ(s.mp->size(), 1);
  verify_groups(s);
  try {
    ParallelState::create(solo, 2, 1);
    ADD_FAILURE() << "tensor parallel 2 accepted in a world of one";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--tensor-model-parallel-size 2"));
  }
}

TEST(CommCheckTest, PassesOnACorrectCommunicator) {
  SoloCommunicator solo;
  EXPECT_NO_THROW(verify_collectives(solo));
}

// A communicator whose all_reduce is off by one in element 1: comm-check must notice.
class OffByOneCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(Tensor& t, ReduceOp) override {
    if (t.numel() > 1 && t.dtype() == DType::F32) t.data<float>()[1] += 1.0f;
  }
  void all_gather(const Tensor& in, Tensor& out) override { solo_.all_gather(in, out); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    solo_.reduce_scatter(in, out, op);
  }
  void broadcast(Tensor& t, int root) override { solo_.broadcast(t, root); }
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                    std::span<const int64_t> recv_rows) override {
    solo_.all_to_all_v(in, send_rows, out, recv_rows);
  }
  void send(const Tensor& t, int dst, int tag) override { solo_.send(t, dst, tag); }
  void recv(Tensor& t, int src, int tag) override { solo_.recv(t, src, tag); }
  std::unique_ptr<CommRequest> isend(const Tensor& t, int dst, int tag) override {
    return solo_.isend(t, dst, tag);
  }
  std::unique_ptr<CommRequest> irecv(Tensor& t, int src, int tag) override {
    return solo_.irecv(t, src, tag);
  }
  std::unique_ptr<CommRequest> iall_reduce(Tensor& t, ReduceOp op) override {
    return solo_.iall_reduce(t, op);
  }
  std::unique_ptr<CommRequest> ireduce_scatter(Tensor& t, std::span<const int64_t> counts,
                                               ReduceOp op) override {
    return solo_.ireduce_scatter(t, counts, op);
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key) override {
    return solo_.split(color, key);
  }

 private:
  SoloCommunicator solo_;
};

TEST(CommCheckTest, NamesTheWrongElement) {
  OffByOneCommunicator broken;
  try {
    verify_collectives(broken);
    ADD_FAILURE() << "comm-check accepted a wrong all_reduce";
  } catch (const Error& e) {
    // Rank 0's element 1 is (0·7 + 1·3) % 17 - 8 = -5; the broken sum makes it -4.
    EXPECT_THAT(e.message(),
                HasSubstr("all_reduce SUM of f32 on rank 0: element 1 is -4, expected -5"));
  }
}

}  // namespace
}  // namespace megatron
