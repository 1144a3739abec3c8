// ParallelMLP: h → ffn → h with the first projection column-parallel and the second
// row-parallel, so the pair needs one all-reduce forward and one backward (Megatron-LM §3).
//   x [s, b, h] ─ColumnParallel (skip bias)─→ u [s, b, ffn/t] ─bias+GeLU (fused)─→ g
//   ─RowParallel (input_is_parallel, skip bias)─→ out [s, b, h]
// The output bias is left to the caller (fused bias + dropout + residual).
#pragma once

#include <string>

#include "model/transformer_config.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/row_parallel_linear.h"

namespace megatron {

class ParallelMLP {
 public:
  struct Ctx {
    ColumnParallelLinear::Ctx dense_h_to_4h;
    Tensor pre_activation;  // u [N, ffn/t], before bias and GeLU
    RowParallelLinear::Ctx dense_4h_to_h;
  };

  // Registers "<prefix>.dense_h_to_4h.{weight,bias}" and "<prefix>.dense_4h_to_h.{weight,bias}".
  ParallelMLP(const std::string& prefix, const TransformerConfig& config, const ParallelState& ps,
              ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h] → out [s, b, h] without the output bias.
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dout [s, b, h] → dx [s, b, h].
  Tensor backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const;

  const Tensor& output_bias() const { return dense_4h_to_h_.bias(); }
  Tensor& output_bias_grad() const { return dense_4h_to_h_.bias_grad(); }

 private:
  ColumnParallelLinear dense_h_to_4h_;
  RowParallelLinear dense_4h_to_h_;
};

}  // namespace megatron
