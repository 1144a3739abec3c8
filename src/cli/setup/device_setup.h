// Which device a training process computes on (--device), by DESIGN.md's rule: one rank per
// GPU, the GPU chosen by the rank's local rank on its node.
#pragma once

#include <string>

#include "core/device.h"

namespace megatron::cli {

// The device for --device `flag`:
//   ""        cuda:<local rank mod GPUs> when the build has CUDA and a GPU is visible, else cpu
//   "cpu"     the host
//   "cuda"    cuda:<local rank mod GPUs> (one rank per GPU)
//   "cuda:N"  GPU N as this process sees it
// Throws Error naming the flag when CUDA is asked for and this binary has no CUDA, no GPU is
// visible, or N is not a visible GPU.
Device resolve_device(const std::string& flag, int local_rank);

// resolve_device(flag, local_rank()) — the local rank of distributed/runtime.h, from the
// launcher (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) or an MPI shared-memory split — then
// binds this process to it (core/device_runtime.h use_device) before anything allocates there.
// On the CPU, warns (rank 0) when the GEMM library runs slower kernels than the CPU allows.
// Needs a DistRuntime.
Device select_device(const std::string& flag);

}  // namespace megatron::cli
