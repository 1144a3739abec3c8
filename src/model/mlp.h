// ParallelMLP: h → ffn → h with the first projection column-parallel and the second
// row-parallel, so the pair needs one all-reduce forward and one backward (Megatron-LM §3).
//   x [s, b, h] ─ColumnParallel (skip bias)─→ u [s, b, ffn/t] ─bias+GeLU (fused)─→ g
//   ─RowParallel (input_is_parallel, skip bias)─→ out [s, b, h]
// With --swiglu the first projection is gated (Llama): fc1 stacks the gate and up projections
// ([2, ffn, h], each TP rank holding matching slices of both, see ColumnParallelLinear's
// stacked blocks), its bias (if any) is added by the linear, and
//   [a | u] [s, b, 2·ffn/t] ─SwiGLU: silu(a) ⊙ u─→ g [s, b, ffn/t] ─RowParallel─→ out
// With sequence parallelism x and out are sequence shards [s/t, b, h]: fc1 all-gathers its
// input, fc2 reduce-scatters its output (ColumnParallelLinear, RowParallelLinear).
// With --squared-relu the activation is relu(u + bias)² (kernels/squared_relu.h) instead of GeLU.
// The output bias is left to the caller (fused bias + dropout + residual); without linear
// biases (--disable-bias-linear) there is none.
#pragma once

#include <string>

#include "model/transformer_config.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/row_parallel_linear.h"

namespace megatron {

// The MLP's width and layer names, when not the dense MLP's (a MoE layer's shared expert:
// Megatron-Core's linear_fc1 / linear_fc2 of --moe-shared-expert-intermediate-size).
struct MlpShape {
  int64_t ffn = 0;  // 0: TransformerConfig::ffn_size()
  const char* fc1 = "dense_h_to_4h";
  const char* fc2 = "dense_4h_to_h";
};

class ParallelMLP {
 public:
  struct Ctx {
    ColumnParallelLinear::Ctx dense_h_to_4h;
    Tensor pre_activation;  // u [N, ffn/t] before bias and GeLU, or [a | u] [N, 2·ffn/t]
    RowParallelLinear::Ctx dense_4h_to_h;
  };

  // Registers "<prefix>.dense_h_to_4h.{weight,bias}" and "<prefix>.dense_4h_to_h.{weight,bias}"
  // (shape.fc1 and shape.fc2).
  ParallelMLP(const std::string& prefix, const TransformerConfig& config, const ParallelState& ps,
              ParameterStore& store, const ComputeWeights& weights, const MlpShape& shape = {});

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h] → out [s, b, h] without the output bias (both [s/t, b, h] with sequence
  // parallelism).
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dout [s, b, h] → dx [s, b, h].
  Tensor backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const;

  // Undefined without linear biases.
  const Tensor& output_bias() const;
  Tensor& output_bias_grad() const;

 private:
  bool swiglu_, squared_relu_, bias_;
  kernels::GeluForm gelu_;
  mutable Tensor no_bias_;  // undefined: the "bias" of a bias-free layer
  ColumnParallelLinear dense_h_to_4h_;
  RowParallelLinear dense_4h_to_h_;
};

}  // namespace megatron
