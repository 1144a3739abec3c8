// `megatron bench --mode machine`: measures this machine as `megatron plan` describes one —
// GEMM rate over the shapes a transformer layer uses (fitted to the planner's GEMM model),
// memory bandwidth of the element-wise kernels, exp and Philox rates, and, under mpirun, the
// all-reduce bus bandwidth and latency between the processes — and writes the machine JSON
// (docs/plan.md). On the CPU or on a GPU (--device; one process per GPU, the all-reduce over
// NCCL). Every rank measures at the same time, so the file describes one process as it runs
// beside the others (the way a training job shares the cores, or a node's links).
#pragma once

namespace megatron::cli {

// Parses its own flags (argv as given to `megatron bench`); returns the exit code.
int run_machine_bench(int argc, char** argv);

}  // namespace megatron::cli
