// The three ways a dist test can move tensors, so that one test body checks all of them:
//   host:   CPU tensors over the world (MpiCommunicator under mpirun);
//   staged: CUDA tensors over the same MpiCommunicator, staged through page-locked host memory
//           (several ranks may share one GPU: np 2 and 4 on a one-GPU machine);
//   nccl:   CUDA tensors over a NcclCommunicator made from the world (one GPU per rank).
// unavailable(path) says why a path cannot run here (no GPU, no CUDA build, fewer GPUs than
// ranks for NCCL); it gives the same answer on every rank of a one-node job, so all ranks skip
// together. The NCCL world is made on first use (collectively, inside a test every rank runs)
// and destroyed after the last test, before MPI ends.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/device_runtime.h"
#include "distributed/backend.h"
#include "distributed/runtime.h"
#include "mpi_test_util.h"

namespace megatron::test {

enum class Path { kHost, kStaged, kNccl };

inline const char* path_name(Path p) {
  return p == Path::kHost ? "host" : p == Path::kStaged ? "staged" : "nccl";
}

// "" when `p` can run here, else the reason to skip.
inline std::string unavailable(Path p) {
  if (p == Path::kHost) return "";
  if (cuda_device_count() == 0) return "no GPU visible (or a build without CUDA)";
  if (p == Path::kStaged && !launched_by_mpi()) return "the staged path needs MPI (mpirun)";
  if (p == Path::kNccl && world_size() > cuda_device_count()) {
    return "NCCL needs one GPU per rank: " + std::to_string(world_size()) + " ranks, " +
           std::to_string(cuda_device_count()) + " GPU(s)";
  }
  return "";
}

// This rank's GPU, bound once: cuda:<local rank mod GPUs>, as a training run picks it.
inline Device gpu() {
  static const Device device = [] {
    const Device d = default_device(local_rank());
    use_device(d);
    return d;
  }();
  return device;
}

inline Device device(Path p) {
  return p == Path::kHost ? Device::CPU : gpu();
}

inline std::shared_ptr<Communicator>& nccl_world_slot() {
  static std::shared_ptr<Communicator> slot;
  return slot;
}

// Ends the NCCL world after the last test, while MPI and the CUDA runtime still run.
class NcclWorldEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { nccl_world_slot().reset(); }
};
inline ::testing::Environment* const kNcclWorldEnvironment =
    ::testing::AddGlobalTestEnvironment(new NcclWorldEnvironment);

inline std::shared_ptr<Communicator> nccl_world() {
  std::shared_ptr<Communicator>& slot = nccl_world_slot();
  if (!slot) slot = make_world_communicator(DistributedBackend::NCCL, gpu());
  return slot;
}

// The communicator of `p` over every rank.
inline std::shared_ptr<Communicator> communicator(Path p) {
  return p == Path::kNccl ? nccl_world() : world();
}

}  // namespace megatron::test

// Skips the current test (or SetUp) when `path` cannot run here.
#define SKIP_UNLESS_PATH_AVAILABLE(path)                                             \
  do {                                                                               \
    if (const std::string why = ::megatron::test::unavailable(path); !why.empty()) { \
      GTEST_SKIP() << ::megatron::test::path_name(path) << ": " << why;              \
    }                                                                                \
  } while (0)
