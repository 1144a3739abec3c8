// The transport a run's communicators use (`--distributed-backend`, Megatron's flag name), and
// the world communicator built over it, from which ParallelState splits every group.
//
// - mpi: the world from DistRuntime (MpiCommunicator under a launcher, SoloCommunicator for a
//   process without one). CPU tensors move natively; CUDA tensors are staged through page-locked
//   host memory (correct, slow; works with several ranks per GPU).
// - nccl: a NcclCommunicator over the same processes (CUDA tensors through NCCL, CPU tensors
//   through its MPI twin). Needs a CUDA device and a CUDA build; one GPU per rank.
// The default is nccl when the run's device is a GPU, mpi otherwise.
#pragma once

#include <memory>
#include <string>

#include "core/device.h"
#include "distributed/communicator.h"

namespace megatron {

enum class DistributedBackend { MPI, NCCL };

// The backend for `name` ("nccl", "mpi", or "" for the default) on a run computing on `device`.
// Throws Error for another name, and for nccl with a CPU device.
DistributedBackend choose_distributed_backend(const std::string& name, Device device);
const char* distributed_backend_name(DistributedBackend backend);  // "mpi", "nccl"

// The communicator over every process of the job, over `backend`, for a process computing on
// `device`. Collective (every rank calls it, in the same order as its other collectives); needs
// a DistRuntime. nccl binds the process to `device` (use_device) before NCCL starts.
std::shared_ptr<Communicator> make_world_communicator(DistributedBackend backend, Device device);
// The same from the flag's value (choose_distributed_backend's rules).
std::shared_ptr<Communicator> make_world_communicator(const std::string& backend, Device device);

}  // namespace megatron
