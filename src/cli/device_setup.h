// Which device a training process computes on (--device), by DESIGN.md's rule: one rank per
// GPU, the GPU chosen by the rank's local rank on its node.
#pragma once

#include <string>

#include "core/device.h"

namespace megatron::cli {

// This process's rank among the processes of its node, from the launcher's environment:
// OMPI_COMM_WORLD_LOCAL_RANK (OpenMPI's mpirun), SLURM_LOCALID (srun), MPI_LOCALRANKID
// (MPICH/Hydra); 0 when none is set (a single process).
int local_rank_from_environment();

// The device for --device `flag`:
//   ""        cuda:<local rank mod GPUs> when the build has CUDA and a GPU is visible, else cpu
//   "cpu"     the host
//   "cuda"    cuda:<local rank mod GPUs> (one rank per GPU)
//   "cuda:N"  GPU N as this process sees it
// Throws Error naming the flag when CUDA is asked for and this binary has no CUDA, no GPU is
// visible, or N is not a visible GPU.
Device resolve_device(const std::string& flag, int local_rank);

// resolve_device(flag, local_rank_from_environment()), then binds this process to it
// (core/device_runtime.h use_device) before anything allocates there.
Device select_device(const std::string& flag);

}  // namespace megatron::cli
