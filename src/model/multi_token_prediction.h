// MultiTokenPrediction: Megatron-Core's MultiTokenPredictionBlock (DeepSeek-V3 §2.2,
// --mtp-num-layers N), the depths after the decoder of a GPT's last stage. Depth k = 1..N sees
// the input shifted k places (Megatron's roll_tensor: token i + k at place i, token 0 at
// position 0 in the last k places) and predicts the label shifted k places, i.e. token i + k + 1:
//
//   e_k = embedding(tokens shifted k, positions shifted k)      the model's own input embedding
//   x_k = eh_proj([enorm(e_k), hnorm(h_{k−1})])                 [s, b, 2h] → [s, b, h]
//   h_k = final_layernorm(transformer_layer(x_k))               one layer of the decoder's kind
//
// with h_0 the decoder's output after its final norm. The model (model/gpt_model.h) puts each
// h_k through its own LM head and scores it against the labels and loss mask shifted k places;
// this block is the part between. Parameters, depth k − 1 = d (Megatron's names, registered in
// this order): "mtp.layers.<d>.enorm", ".hnorm" (the decoder's norm kind, [h]), ".eh_proj.weight"
// [h, 2h] column-parallel (no bias), ".transformer_layer.*" (the decoder's layer spec: its MLP a
// mixture of experts when the decoder's LAST layer is one, as Megatron builds it from the last
// layer's spec), ".final_layernorm".
//
// Tensor parallelism as Megatron: eh_proj is split by output rows and its output all-gathered
// (every rank then holds x_k); with sequence parallelism the concatenation is this rank's
// sequence shard, eh_proj all-gathers it along the sequence, and x_k is scattered back to the
// shard [s/t, b, h]. The depth's dropout masks are keyed by layer num_layers + d (its embedding's
// with DropoutSite::kEmbedding), so no depth reuses the decoder's. RoPE (and MLA's) rotates by
// the unshifted positions 0..s−1, as Megatron passes the decoder's rotary embedding to the MTP
// layers. The transformer layer keeps its activations (no full recompute; selective recompute is
// the attention's own). No context parallelism.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/input_embedding.h"
#include "model/layer_norm.h"
#include "model/transformer_layer.h"
#include "parallel/column_parallel_linear.h"

namespace megatron {

class MultiTokenPrediction {
 public:
  struct DepthCtx {
    InputEmbedding::Ctx embedding;
    LayerNorm::Ctx enorm, hnorm, final_ln;
    ColumnParallelLinear::Ctx eh_proj;
    TransformerLayer::Ctx layer;
  };
  struct Ctx {
    std::vector<DepthCtx> depths;
    // The depths' own losses in the forward (MoE router losses, DSA's indexer loss), summed.
    MoeLosses moe_losses;
    double aux_loss = 0;
  };

  // `config` is the decoder's (TransformerConfig with arch.mtp.num_layers >= 1).
  MultiTokenPrediction(const TransformerConfig& config, const ParallelState& ps,
                       ParameterStore& store, const ComputeWeights& weights);
  ~MultiTokenPrediction();

  void init_weights(ParameterStore& store, uint64_t seed) const;
  int depths() const { return int(depths_.size()); }
  // The depths' MLPs are mixtures of experts (the decoder's last layer's kind).
  bool moe() const { return moe_; }

  // hidden: the decoder's output after its final norm, [s, b, h] ([s/t, b, h] with sequence
  // parallelism); tokens: the micro-batch's input ids i32 [b, s] on the model's device;
  // embedding: the model's input embedding (its tables are shared). Returns h_1..h_N, each
  // shaped like `hidden`, in `arena` (saved activations there; temporaries in `scratch`).
  std::vector<Tensor> forward(Ctx& ctx, const Tensor& hidden, const Tensor& tokens,
                              const InputEmbedding& embedding, const DropoutScope& scope,
                              Arena& arena, Arena& scratch) const;
  // douts[d]: the gradient of h_{d+1} from its head (consumed). Accumulates the depths' and the
  // embedding tables' gradients; returns the gradient of `hidden` in `arena`. loss_scale: the
  // main loss's gradient scale, which the layers' own losses take (TransformerLayer::backward).
  Tensor backward(Ctx& ctx, std::vector<Tensor> douts, const InputEmbedding& embedding,
                  float loss_scale, Arena& arena, Arena& scratch) const;

 private:
  struct Depth;
  std::vector<std::unique_ptr<Depth>> depths_;
  int num_layers_;  // the decoder's: depth d keys its dropout by layer num_layers_ + d
  int64_t hidden_size_;
  bool sequence_parallel_;
  bool moe_;
  std::shared_ptr<Communicator> tp_;
  ParameterStore* store_;  // told when a depth's gradients are complete
};

// Megatron's roll_tensor along the sequence with zero fill, on a sequence-major [s, b] tensor
// (i32 or f32, contiguous): out[i] = x[i + shift] for i < s − shift, 0 after. In `arena`.
Tensor shift_sequence_left(const Tensor& x, int64_t shift, Arena& arena);

}  // namespace megatron
