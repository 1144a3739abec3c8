// Machine: what the planner knows about the hardware — per device peak FLOP/s and GEMM
// efficiency per dtype, memory size and bandwidth, devices per node, and the intra-node and
// inter-node links — read from a small JSON file (examples/machines/*.json, docs/plan.md).
//
// Units inside the struct are SI: bytes, bytes/s, FLOP/s, seconds. The JSON file uses the
// units its keys name (GiB, GB/s = 1e9 bytes/s, TFLOP/s, µs).
//
// GEMM time model: a [M x K]·[K x N] product takes
//     2·M·N·K / (peak · efficiency) · (1 + c/M + c/N + c/K)
// where `efficiency` is what a large GEMM reaches and c ("gemm_half_dim") the dimension at
// which one thin side halves it (tile edges, pipeline fill, the operands' memory traffic).
// `megatron bench --mode machine` fits both from measured shapes; GPU files take c from the
// operands' roofline, c = efficiency·peak·bytes / (2·memory bandwidth), unless given.
#pragma once

#include <string>

#include "plan/layout.h"

namespace megatron::plan {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // bytes

struct ComputeSpec {
  double peak_flops = 0;       // per device, FLOP/s (0: this dtype is not supported)
  double gemm_efficiency = 0;  // fraction of peak a large GEMM reaches
  double gemm_half_dim = 0;    // c in the GEMM time model above (elements)
};

struct LinkSpec {
  double bandwidth = 0;   // bytes/s in one direction: intra-node per device, inter-node per node
  double latency = 0;     // seconds per message step
  double efficiency = 1;  // fraction of `bandwidth` a large collective reaches (bus bandwidth)
};

struct Machine {
  std::string name;
  std::string source;  // where the numbers come from (spec sheet, measurement command)
  ComputeSpec fp32, bf16, fp16;
  double memory_bytes = 0;       // per device
  double reserved_bytes = 0;     // taken before the model: CUDA context / process baseline
  double memory_bandwidth = 0;   // bytes/s per device
  double memory_efficiency = 1;  // fraction reached by memory-bound kernels
  double kernel_overhead = 0;    // seconds per element-wise kernel call (launch, fork/join)
  // Host time to issue one framework operation (a PyTorch op: dispatch and kernel launch). A
  // GPU hides it while kernels are queued; it is paid where the host waits for the device
  // between operations (a loop that reads a result back per tensor).
  double host_op = 0;
  double host_sync = 0;    // one such wait: the queued kernels' latency and a small copy back
  double exp_rate = 0;     // exp/tanh element evaluations per second (0: never limits)
  double random_rate = 0;  // dropout-mask draws per second (0: never limits)
  int devices_per_node = 1;
  LinkSpec intra_node;          // between devices of one node (NVLink/NVSwitch, shared memory)
  LinkSpec inter_node;          // between nodes, all NICs of a node together
  double overlap_slowdown = 0;  // compute lost per second of communication overlapping it

  // The ComputeSpec of the dtype GEMMs run in for this precision; throws naming the file's
  // missing entry when the machine has none.
  const ComputeSpec& compute(Precision precision) const;
};

// Parses and checks a machine description; `origin` names it in errors (a file path).
// Unknown keys are errors (typos must not pass silently), except keys starting with '_'.
Machine machine_from_json_text(const std::string& text, const std::string& origin);
Machine load_machine(const std::string& path);
// The JSON text of a machine, in the file format (used by `bench --mode machine`).
std::string machine_to_json_text(const Machine& machine);

}  // namespace megatron::plan
