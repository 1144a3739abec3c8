#include "distributed/backend.h"

#include "core/error.h"
#include "distributed/runtime.h"
#ifdef MEGATRON_CUDA
#include "distributed/nccl_communicator.h"
#endif

namespace megatron {

DistributedBackend choose_distributed_backend(const std::string& name, Device device) {
  if (name.empty()) return device.is_cuda() ? DistributedBackend::NCCL : DistributedBackend::MPI;
  if (name == "mpi") return DistributedBackend::MPI;
  MT_CHECK(name == "nccl", "--distributed-backend must be nccl or mpi, got '", name, "'");
  MT_CHECK(device.is_cuda(),
           "--distributed-backend nccl moves CUDA tensors, but this run's device is ", device.str(),
           "; use --distributed-backend mpi (the default on the CPU) or run on a GPU");
  return DistributedBackend::NCCL;
}

const char* distributed_backend_name(DistributedBackend backend) {
  return backend == DistributedBackend::NCCL ? "nccl" : "mpi";
}

std::shared_ptr<Communicator> make_world_communicator(DistributedBackend backend, Device device) {
  std::shared_ptr<Communicator> world = world_communicator();
  if (backend == DistributedBackend::MPI) return world;
  MT_CHECK(device.is_cuda(),
           "--distributed-backend nccl moves CUDA tensors, but this run's device is ", device.str(),
           "; use --distributed-backend mpi");
#ifdef MEGATRON_CUDA
  // The NCCL world's MPI twin is a duplicate of the world (split with one color keeps the order),
  // owned by the NCCL communicator.
  return NcclCommunicator::create(world->split(/*color=*/0, /*key=*/world->rank()), device);
#else
  MT_THROW(
      "--distributed-backend nccl needs a binary built with CUDA (cmake -DMEGATRON_CUDA=ON, "
      "nvcc and NCCL required); this build has mpi only");
#endif
}

std::shared_ptr<Communicator> make_world_communicator(const std::string& backend, Device device) {
  return make_world_communicator(choose_distributed_backend(backend, device), device);
}

}  // namespace megatron
