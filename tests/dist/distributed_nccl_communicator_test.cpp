// NcclCommunicator beyond the conformance in distributed_communicator_test.cpp: host tensors
// through its MPI twin, the rank grid built over NCCL (ParallelState's splits), a tensor of another
// GPU, mixed devices, and NCCL's refusal of two ranks on one GPU turned into an error on every
// rank. Every test skips itself without a GPU (and without one GPU per rank where NCCL needs it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "distributed/comm_check.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"
#include "transport_test_util.h"
#ifdef MEGATRON_CUDA
#include "distributed/nccl_communicator.h"
#endif

namespace megatron {
namespace {

using ::testing::HasSubstr;

TEST(NcclCommunicatorTest, HostTensorsTravelThroughTheMpiTwin) {
  SKIP_UNLESS_PATH_AVAILABLE(test::Path::kNccl);
  auto nccl = test::nccl_world();
  const int n = nccl->size(), me = nccl->rank();
  Tensor t = Tensor::from_vector<float>({float(me), 1.0f}, {2});
  nccl->all_reduce(t);
  EXPECT_EQ(t.device(), Device::CPU);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{float(n * (n - 1) / 2), float(n)}));
  EXPECT_NO_THROW(verify_collectives(*nccl));  // comm-check's host-tensor checks, all dtypes
}

TEST(NcclCommunicatorTest, DefaultBackendOnAGpuIsNccl) {
  SKIP_UNLESS_PATH_AVAILABLE(test::Path::kNccl);
  EXPECT_EQ(choose_distributed_backend("", test::gpu()), DistributedBackend::NCCL);
#ifdef MEGATRON_CUDA
  auto nccl = std::dynamic_pointer_cast<NcclCommunicator>(test::nccl_world());
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->device(), test::gpu());
  EXPECT_EQ(nccl->host().size(), nccl->size());
  EXPECT_EQ(nccl->host().rank(), nccl->rank());
#endif
}

// The trainer's groups are splits of the world it is given: over NCCL they are NCCL groups,
// each with an MPI twin over the same members.
TEST(NcclCommunicatorTest, EveryGridOverNcclHasTheMegatronGroups) {
  SKIP_UNLESS_PATH_AVAILABLE(test::Path::kNccl);
  const int n = test::world_size();
  for (int t = 1; t <= n; ++t) {
    for (int p = 1; t * p <= n; ++p) {
      if (n % (t * p) != 0) continue;
      SCOPED_TRACE(::testing::Message() << "tp=" << t << " pp=" << p);
      ParallelState s = ParallelState::create(test::nccl_world(), t, p);
      EXPECT_NO_THROW(verify_groups(s));
#ifdef MEGATRON_CUDA
      EXPECT_NE(dynamic_cast<NcclCommunicator*>(s.tp.get()), nullptr);
      EXPECT_NE(dynamic_cast<NcclCommunicator*>(s.dp.get()), nullptr);
#endif
      // A device all-reduce in each TP group sums its members' tp ranks.
      Tensor tp_sum = Tensor::from_vector<double>({double(s.tp_rank)}, {1}).to(test::gpu());
      s.tp->all_reduce(tp_sum);
      Tensor dp_max = Tensor::from_vector<int32_t>({s.dp_rank}, {1}).to(test::gpu());
      s.dp->all_reduce(dp_max, ReduceOp::MAX);
      EXPECT_EQ(tp_sum.to_vector<double>()[0], t * (t - 1) / 2.0);
      EXPECT_EQ(dp_max.to_vector<int32_t>()[0], s.dp_size - 1);
    }
  }
}

TEST(NcclCommunicatorTest, RefusesATensorOfAnotherGpu) {
  SKIP_UNLESS_PATH_AVAILABLE(test::Path::kNccl);
  auto nccl = test::nccl_world();
  // Never dereferenced: the device check comes first.
  float fake[4] = {};
  const Device other = Device::cuda(test::gpu().index + 1);
  Tensor t = Tensor::from_blob(fake, {4}, DType::F32, other);
  try {
    nccl->all_reduce(t);
    ADD_FAILURE() << "all_reduce accepted a tensor on " << other.str();
  } catch (const Error& e) {
    EXPECT_THAT(e.message(),
                HasSubstr("this NCCL communicator moves tensors of " + test::gpu().str()));
  }
}

// NCCL refuses two ranks of one communicator on one GPU; every rank gets an error naming
// ncclCommInitRank (no rank is left waiting), and the advice to use the MPI backend.
TEST(NcclCommunicatorTest, SharedGpuIsAnErrorOnEveryRank) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible (or a build without CUDA)";
  if (test::world_size() <= cuda_device_count()) GTEST_SKIP() << "every rank has its own GPU here";
  std::string message;
  try {
    make_world_communicator(DistributedBackend::NCCL, test::gpu());
  } catch (const Error& e) {
    message = e.message();
  }
  EXPECT_THAT(message, HasSubstr("NCCL"));
  EXPECT_THAT(message, HasSubstr("rank"));
}

}  // namespace
}  // namespace megatron
