// ColumnParallelLinear: y = x Aᵀ + b with A [out, in] split along its rows (the output
// dimension) across the tensor-parallel group: rank r holds A_r [out/t, in] and b_r [out/t].
//
//   forward   x [..., in] ─f─→ y_r = x A_rᵀ (+ b_r) [..., out/t] ─(gather_output)→ [..., out]
//   backward  dy ─(split if gathered)→ dA_r += dy_rᵀ x, db_r += Σ dy_r, dx = dy_r A_r ─f'─→
//             all-reduce of dx over the group
// With sequence_parallel the input is this rank's sequence shard x [s/t, ..., in]: f becomes
// ḡ (parallel/mappings.h), an all-gather to [s, ..., in] forward and a reduce-scatter of dx
// back to [s/t, ..., in] backward; the output covers the whole sequence.
// skip_bias_add leaves the bias out of the forward (and its gradient out of the backward) so
// the caller can fuse it into the next kernel (bias+GeLU); bias()/bias_index() give it.
// stacked_blocks = k > 1 stacks k independent output blocks of out/k rows each (SwiGLU's gate
// and up projections): the weight's full shape is [k, out/k, in] split along dim 1, so every
// rank holds matching slices of all k blocks, [k, out/(k·t), in] = its local [out/t, in] rows,
// and the logical tensor does not depend on the TP size.
#pragma once

#include <string>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "parallel/compute_weights.h"

namespace megatron {

struct ColumnParallelLinearConfig {
  std::string name;  // parameter prefix: "<name>.weight", "<name>.bias"
  int64_t input_size = 0;
  int64_t output_size = 0;  // full (unsplit) output size, divisible by the TP size
  bool bias = true;
  bool gather_output = false;
  bool skip_bias_add = false;
  bool sequence_parallel = false;  // input [s/t, ..., in], gathered along the sequence
  float init_std = 0.02f;
  int64_t stacked_blocks = 1;
};

class ColumnParallelLinear {
 public:
  struct Ctx {
    Tensor input;  // x (all-gathered along the sequence with sequence_parallel) as [N, in]
  };

  // Registers "<name>.weight" [out, in] and "<name>.bias" [out], both partition dim 0 (with
  // stacked blocks: [k, out/k, in] and [k, out/k], partition dim 1).
  ColumnParallelLinear(const ColumnParallelLinearConfig& config, const ParallelState& ps,
                       ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [..., in] (contiguous, compute dtype) → [..., out/t], or [..., out] with gather_output;
  // with sequence_parallel x [s/t, ..., in] → [s, ..., out/t].
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dy shaped like the forward output → dx shaped like the forward input, already all-reduced
  // (reduce-scattered with sequence_parallel) over the group.
  // Accumulates the weight gradient, and the bias gradient unless skip_bias_add.
  Tensor backward(const Ctx& ctx, const Tensor& dy, Arena& arena) const;

  const Tensor& bias() const;  // compute dtype [out/t]; requires config.bias
  Tensor& bias_grad() const;   // f32 [out/t]

 private:
  Tensor weight() const;       // compute dtype [out/t, in]
  Tensor weight_grad() const;  // f32 [out/t, in]

  ColumnParallelLinearConfig config_;
  std::shared_ptr<Communicator> tp_;
  const ComputeWeights& weights_;
  size_t weight_index_ = 0, bias_index_ = 0;
};

}  // namespace megatron
