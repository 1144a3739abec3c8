// RowParallelLinear: y = x Aᵀ + b with A [out, in] split along its columns (the input
// dimension): rank r holds A_r [out, in/t]; the bias b [out] is replicated and added once,
// after the all-reduce.
//
//   forward   x ─(scatter unless input_is_parallel)→ x_r [..., in/t] → x_r A_rᵀ [..., out]
//             ─g→ all-reduce → (+ b)
//   backward  dy (identical on all ranks) → db += Σ dy, dA_r += dyᵀ x_r, dx_r = dy A_r
//             ─(gather unless input_is_parallel)→ dx
// skip_bias_add leaves the bias to the caller (fused bias+dropout+residual).
// With sequence_parallel g becomes g̅ (parallel/mappings.h): the partial products [s, ..., out]
// are reduce-scattered to this rank's sequence shard [s/t, ..., out] (the bias added there), and
// backward all-gathers dy [s/t, ..., out] first. The bias gradient is then a partial sum over
// the shards: the bias is registered sequence_parallel (ParamSpec), summed over TP per step.
#pragma once

#include <string>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "parallel/compute_weights.h"

namespace megatron {

struct RowParallelLinearConfig {
  std::string name;        // parameter prefix: "<name>.weight", "<name>.bias"
  int64_t input_size = 0;  // full (unsplit) input size, divisible by the TP size
  int64_t output_size = 0;
  bool bias = true;
  bool input_is_parallel = false;
  bool skip_bias_add = false;
  bool sequence_parallel = false;  // output [s/t, ..., out], reduce-scattered along the sequence
  float init_std = 0.02f;
};

class RowParallelLinear {
 public:
  struct Ctx {
    Tensor input;  // x_r viewed as [N, in/t]
  };

  // Registers "<name>.weight" [out, in] partition dim 1 and "<name>.bias" [out] replicated.
  RowParallelLinear(const RowParallelLinearConfig& config, const ParallelState& ps,
                    ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [..., in/t] with input_is_parallel, else [..., in] → y [..., out] (all-reduced); with
  // sequence_parallel x [s, ..., in/t] → y [s/t, ..., out] (reduce-scattered).
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dy shaped like the forward output → dx shaped like the forward input. Accumulates weight
  // (and bias) grads.
  Tensor backward(const Ctx& ctx, const Tensor& dy, Arena& arena) const;

  const Tensor& bias() const;  // compute dtype [out]; requires config.bias
  Tensor& bias_grad() const;   // f32 [out]

 private:
  RowParallelLinearConfig config_;
  std::shared_ptr<Communicator> tp_;
  const ComputeWeights& weights_;
  size_t weight_index_ = 0, bias_index_ = 0;
};

}  // namespace megatron
