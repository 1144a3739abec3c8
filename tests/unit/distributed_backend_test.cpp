// --distributed-backend's rules (choose_distributed_backend), the world it makes in a single
// process, and the clear errors for NCCL without a GPU or without a CUDA build.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/device_runtime.h"
#include "core/error.h"
#include "distributed/backend.h"
#include "distributed/runtime.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

TEST(DistributedBackendTest, DefaultFollowsTheDevice) {
  EXPECT_EQ(choose_distributed_backend("", Device::CPU), DistributedBackend::MPI);
  EXPECT_EQ(choose_distributed_backend("", Device::cuda(0)), DistributedBackend::NCCL);
  EXPECT_EQ(choose_distributed_backend("", Device::cuda(3)), DistributedBackend::NCCL);
}

TEST(DistributedBackendTest, ExplicitChoices) {
  EXPECT_EQ(choose_distributed_backend("mpi", Device::CPU), DistributedBackend::MPI);
  EXPECT_EQ(choose_distributed_backend("mpi", Device::cuda(0)), DistributedBackend::MPI);
  EXPECT_EQ(choose_distributed_backend("nccl", Device::cuda(1)), DistributedBackend::NCCL);
  EXPECT_STREQ(distributed_backend_name(DistributedBackend::MPI), "mpi");
  EXPECT_STREQ(distributed_backend_name(DistributedBackend::NCCL), "nccl");
}

TEST(DistributedBackendTest, NcclOnTheCpuIsAClearError) {
  try {
    choose_distributed_backend("nccl", Device::CPU);
    ADD_FAILURE() << "nccl accepted for a CPU run";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--distributed-backend nccl moves CUDA tensors"));
    EXPECT_THAT(e.message(), HasSubstr("device is cpu"));
    EXPECT_THAT(e.message(), HasSubstr("--distributed-backend mpi"));
  }
}

TEST(DistributedBackendTest, UnknownNameIsAnError) {
  try {
    choose_distributed_backend("gloo", Device::CPU);
    ADD_FAILURE() << "gloo accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--distributed-backend must be nccl or mpi, got 'gloo'"));
  }
}

class BackendWorldTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("MEGATRON_FORCE_MPI", "0", 1); }
  void TearDown() override { unsetenv("MEGATRON_FORCE_MPI"); }
  int argc_ = 1;
  char arg0_[9] = "megatron";
  char* argv0_[2] = {arg0_, nullptr};
  char** argv_ = argv0_;
};

TEST_F(BackendWorldTest, MpiIsTheRuntimesWorld) {
  DistRuntime runtime(argc_, argv_);
  EXPECT_EQ(make_world_communicator("mpi", Device::CPU), world_communicator());
  EXPECT_EQ(make_world_communicator("", Device::CPU), world_communicator());
  EXPECT_EQ(runtime.local_rank(), 0);
  EXPECT_EQ(local_rank(), 0);
}

TEST_F(BackendWorldTest, NcclWithoutCudaNamesTheBuild) {
  if (cuda_built()) GTEST_SKIP() << "this build has CUDA";
  DistRuntime runtime(argc_, argv_);
  try {
    make_world_communicator(DistributedBackend::NCCL, Device::cuda(0));
    ADD_FAILURE() << "nccl accepted by a build without CUDA";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("needs a binary built with CUDA"));
  }
}

TEST_F(BackendWorldTest, NcclWorldOfOneOnAGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible (or a build without CUDA)";
  DistRuntime runtime(argc_, argv_);
  const Device gpu = default_device(local_rank());
  std::shared_ptr<Communicator> world = make_world_communicator("", gpu);
  EXPECT_NE(world, world_communicator());
  EXPECT_EQ(world->size(), 1);
  Tensor t = Tensor::from_vector<float>({1.5f, -2.0f}, {2}).to(gpu);
  world->all_reduce(t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  std::unique_ptr<Communicator> group = world->split(0, 0);
  Tensor out = Tensor::zeros({2}, DType::F32, gpu);
  group->all_gather(t, out);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(world->all_reduce_scalar(4.0), 4.0);
}

}  // namespace
}  // namespace megatron
