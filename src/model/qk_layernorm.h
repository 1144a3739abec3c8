// QkLayerNorm (--qk-layernorm): each attention head's query and key normalised over the head's
// d channels after the QKV projection and before RoPE, one gain (and with LayerNorm one bias)
// of [d] shared by all query heads and one by all key heads (Megatron-Core's q_layernorm and
// k_layernorm; HF Qwen3's q_norm and k_norm with RMSNorm).
//   qkv [s, b, gl, q + 2, d] (model/qkv_projection.h's layout): the gl·q query heads and the gl
//   key heads of every position are normalised in place; the values are untouched.
// The kind (--normalization), epsilon and --apply-layernorm-1p are the transformer's. The
// parameters are replicated over TP but each rank normalises only its own heads, so each rank's
// gradient is a part of the whole: they are registered as TP-partial (ParamSpec::
// sequence_parallel) and summed over the TP group once per step, as Megatron sums them.
#pragma once

#include <string>

#include "model/layer_norm.h"

namespace megatron {

class QkLayerNorm {
 public:
  struct Ctx {
    LayerNorm::Ctx q, k;  // inputs: the heads gathered contiguous, [s·b·gl·q, d] and [s·b·gl, d]
  };

  // Registers "<prefix>.q_layernorm.*" and "<prefix>.k_layernorm.*" ([d], replicated).
  QkLayerNorm(const std::string& prefix, const TransformerConfig& config, ParameterStore& store,
              const ComputeWeights& weights);

  void init_weights(ParameterStore& store) const;

  // qkv [s, b, gl, q + 2, d]: Q and K normalised in place; inputs kept in `ctx` (in `arena`).
  void forward(Ctx& ctx, Tensor& qkv, Arena& arena) const;
  // Without a backward (decoding): the same, nothing kept.
  void forward_inference(Tensor& qkv, Arena& arena) const;
  // dqkv [s, b, gl, q + 2, d]: the Q and K gradients replaced, in place, by those w.r.t. the
  // normalisation's inputs; accumulates the gains' (and biases') gradients.
  void backward(const Ctx& ctx, Tensor& dqkv, Arena& arena) const;

 private:
  int64_t head_dim_;
  LayerNorm q_norm_, k_norm_;
};

}  // namespace megatron
