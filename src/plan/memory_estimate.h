// Per-rank memory of a training job: weights, gradients, optimizer state, activations, the
// transient workspace and the machine's reserved baseline, for the first and the last
// pipeline stage (the two that differ; with PP = 1 they are the same rank).
//
// Bytes per parameter held on a rank (t-split parameters counted once per rank):
//   megatron-cpp      f32: 4 weights + 4 gradients + 8 Adam moments = 16; bf16: 2-byte weights
//                     and a separate f32 master (2 + 4 + 8 + 4 = 18); fp16 keeps f16-rounded
//                     f32 values, a separate f32 master and an f16 scratch (4 + 4 + 8 + 4 + 2 =
//                     22). The distributed optimizer divides the optimizer part (moments,
//                     master, scratch) by d (d·c with context parallelism: its shards span
//                     the gradient group): f32 4 + 4 + 8/d, bf16 2 + 4 + 12/d, as Megatron-LM.
//                     The routed experts' state is divided by the expert-data-parallel size
//                     ed = world / (ETP·EP·PP) instead (the ranks holding the same experts).
//   megatron-lm       bf16/fp16: 2 weights + 4 fp32 main gradients + 12 (fp32 master and two
//                     moments) = 18, or 6 + 12/d with the distributed optimizer — Megatron's
//                     theoretical_memory_usage; fp32: 4 + 4 + 8 (8/d distributed).
//   megatron-lm-2019  fp16: 2 weights + 2 fp16 gradients + 16 (apex fp16 optimizer: fp32
//                     master, its gradient, two moments) = 20.
#pragma once

#include "plan/activation_memory.h"
#include "plan/machine.h"
#include "plan/parameter_count.h"

namespace megatron::plan {

struct RankMemory {
  double parameters = 0;         // count held by this rank
  double expert_parameters = 0;  // of which the routed experts' (EP x ETP shards)
  double weights = 0;            // bytes
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;   // kept between forward and backward
  double workspace = 0;     // transient at the peak
  double step_buffers = 0;  // transient buffers of the step after the backward (megatron-cpp:
                            // padded copies and MPI's temporaries of its gradient collectives)
  double reserved = 0;      // the machine's baseline (runtime, libraries)
  double total() const {
    return weights + gradients + optimizer + activations + workspace + step_buffers + reserved;
  }
};

// Per dense parameter; a routed expert's parameter has the same weights and gradients and
// `expert_optimizer` bytes of optimizer state (the distributed optimizer shards it over the
// expert-data-parallel group instead of d·c).
struct BytesPerParameter {
  double weights = 0, gradients = 0, optimizer = 0;
  double expert_optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
};

struct MemoryEstimate {
  ParameterCounts parameters;
  ActivationMemory activations;
  BytesPerParameter bytes_per_parameter;
  RankMemory first_stage, last_stage;
  const RankMemory& peak_rank() const {
    return first_stage.total() >= last_stage.total() ? first_stage : last_stage;
  }
  double peak() const { return peak_rank().total(); }
};

BytesPerParameter bytes_per_parameter(const Layout& layout, Implementation impl);

MemoryEstimate estimate_memory(const ModelSpec& model, const Layout& layout, const Machine& machine,
                               Implementation impl);

}  // namespace megatron::plan
