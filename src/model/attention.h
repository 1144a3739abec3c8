// ParallelAttention: multi-head self-attention split by heads across the tensor-parallel
// group (Megatron-LM §3, fig. 3b).
//
//   x [s, b, h] ─ColumnParallel─→ qkv [s, b, heads/t, 3, d]   (fused QKV, rows per head, so
//                                                            a column split gives whole heads)
//   scores[b·heads/t, s, s] = Q Kᵀ; probs = softmax(scores / √d + mask) in f32
//   (causal, or a key-padding mask); probs dropped out (masks keyed by global head);
//   context [s, b, heads/t · d] = probs V ─RowParallel (input_is_parallel)─→ out [s, b, h]
// The output projection's bias is NOT added: the layer fuses it with dropout and the residual.
// Q, K, V and the context are strided per-head views, multiplied with batched GEMMs with no
// layout copies: in [s, b, heads, 3, d] the (b, head) pair has the uniform stride 3d.
#pragma once

#include <string>

#include "model/kv_cache.h"
#include "model/transformer_config.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/random.h"
#include "parallel/row_parallel_linear.h"

namespace megatron {

class ParallelAttention {
 public:
  struct Ctx {
    ColumnParallelLinear::Ctx qkv_linear;
    Tensor qkv;           // [s, b, heads/t, 3, d]
    Tensor pad_mask;      // u8 [b, s] or undefined
    Tensor probs;         // [b, heads/t, s, s] before dropout
    Tensor dropout_mask;  // u8 [b·heads/t·s, s] or undefined (no dropout)
    RowParallelLinear::Ctx dense;
  };

  // Registers "<prefix>.query_key_value.{weight,bias}" and "<prefix>.dense.{weight,bias}".
  ParallelAttention(const std::string& prefix, int layer_number, const TransformerConfig& config,
                    const ParallelState& ps, ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h]; pad_mask u8 [b, s] (1 = padding key) for AttnMaskType::kPadding, else
  // undefined → out [s, b, h] without the dense bias. What backward needs goes to `arena`;
  // the raw scores and the dropped-out probabilities, dead when forward returns, go to
  // `workspace` (may be the same arena). Backward re-derives the dropped-out probabilities
  // from the saved probabilities and mask (one element-wise pass), which saves two
  // [b, heads/t, s, s] buffers per layer.
  Tensor forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask, const DropoutScope& scope,
                 Arena& arena, Arena& workspace) const;
  // dout [s, b, h] → dx [s, b, h]; accumulates the QKV and dense weight gradients (the dense
  // bias gradient is the caller's, via dense_bias_grad()).
  Tensor backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const;

  // Incremental (inference) forward with a KV cache, causal attention only: x [s_new, b, h]
  // holds positions [start, start + s_new); their keys and values are written into `kv`
  // ([b, heads/t, max_s, d]) and the queries attend to positions [0, start + s_new) (Sq ≤ Sk).
  // No dropout, nothing kept for a backward; every temporary goes to `arena`.
  // → out [s_new, b, h] without the dense bias.
  Tensor forward_cached(const Tensor& x, LayerKv& kv, int64_t start, Arena& arena) const;

  const Tensor& dense_bias() const { return dense_.bias(); }
  Tensor& dense_bias_grad() const { return dense_.bias_grad(); }

 private:
  // probs ⊙ mask / (1 − p), in `arena` (probs itself without dropout).
  Tensor dropped_probs(const Ctx& ctx, Arena& arena) const;

  int layer_number_;
  int64_t heads_local_, head_dim_, head_begin_;
  float dropout_p_;
  AttnMaskType mask_type_;
  ColumnParallelLinear query_key_value_;
  RowParallelLinear dense_;
};

}  // namespace megatron
