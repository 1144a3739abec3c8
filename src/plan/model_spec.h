// ModelSpec: the shape of a GPT or BERT model as the planner sees it — the numbers that set
// its parameter count, FLOPs and activation sizes. The shape is the model's own
// LanguageModelConfig (model/language_model_config.h), inherited, not copied: a GptConfig or
// BertConfig slices into it, and `megatron plan` fills it from Megatron-LM's flags. Nothing
// here allocates a model; the planner works from these numbers alone.
//
// Llama-family options are the config's ArchitectureOptions (grouped-query attention, SwiGLU,
// RMSNorm, rotary positions, untied output layer, no linear biases), as megatron-cpp's GPT and
// Megatron-LM run them.
//
// The planner reads the shape, the architecture options, the dropouts and the LayerNorm order.
// How the job runs is the Layout's (plan/layout.h) and not read from the config: its TP size
// pads the vocabulary (padded_vocab(), not padded_vocab_size), and recompute, sequence
// parallelism, flash attention and the precision are layout fields (the config's
// recompute_activations, sequence_parallel, flash_attention and compute_dtype are ignored).
#pragma once

#include <cstdint>
#include <string>

#include "model/language_model_config.h"

namespace megatron::plan {

enum class ModelFamily { kGpt, kBert };

// Where a layer's LayerNorms sit (model/transformer_layer.h, model/bert_config.h), as the
// config's layernorm_order and apply_residual_connection_post_layernorm set it:
enum class NormOrder {
  // x + f(LN(x)) per sub-layer, a final LayerNorm after the last layer: GPT, Megatron-LM, and
  // megatron-cpp's BERT by default.
  kPre,
  // LN(x) + f(LN(x)): the residuals start from the LayerNorm outputs
  // (--apply-residual-connection-post-layernorm).
  kPreResidualFromNorm,
  // LN(x + f(x)), a LayerNorm on the embedding's output, no final LayerNorm (--post-layernorm):
  // the original BERT, as HuggingFace checkpoints import into megatron-cpp.
  kPost,
};

// The inherited fields with Megatron-LM's flags: num_layers (--num-layers, L), hidden_size
// (--hidden-size, h), num_attention_heads (--num-attention-heads, a), ffn_hidden_size
// (--ffn-hidden-size, f; 0 → 4h), seq_length (--seq-length, s), max_position_embeddings
// (0 → s), vocab_size (the tokenizer's vocabulary before padding), hidden_dropout and
// attention_dropout (> 0: dropout masks are kept for backward), and arch: num_query_groups
// (GQA; 0 → a), kv_channels (head dim d; 0 → h / a), swiglu (gated MLP, 3 matrices of h x f),
// normalization, position_embedding, add_bias_linear, add_qkv_bias,
// untie_embeddings_and_output_weights. TransformerConfig's query_groups(), head_dim(),
// qkv_bias() and ffn_size() resolve the defaults. num_layers, seq_length and
// max_position_embeddings are the config's ints: the planner widens them (double, int64_t)
// before any product, so s·s of a 128K sequence or a huge model's counts do not overflow.
struct ModelSpec : LanguageModelConfig {
  ModelFamily family = ModelFamily::kGpt;
  int make_vocab_size_divisible_by = 128;  // --make-vocab-size-divisible-by
  // BERT only (BertConfig's fields and pretrain-bert's --mask-prob): masked-LM rows as a
  // fraction of tokens, token types, the pooler and sentence-order head.
  double mask_prob = 0.15;
  int num_tokentypes = 2;
  bool binary_head = true;  // false with --bert-no-binary-head

  // Derived values (the defaults resolved).
  NormOrder norm_order() const;
  // Sets layernorm_order and apply_residual_connection_post_layernorm to give `order`.
  void set_norm_order(NormOrder order);
  int64_t positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  bool final_norm() const { return norm_order() != NormOrder::kPost; }
  bool embedding_norm() const { return norm_order() == NormOrder::kPost; }
  // Megatron's padding: round up to make_vocab_size_divisible_by x TP.
  int64_t padded_vocab(int tensor_parallel) const;
};

// Checks the numbers on their own (positive sizes, heads dividing the hidden size unless
// --kv-channels is given, groups dividing heads, the post-LayerNorm order for BERT only);
// throws megatron::Error naming the flag.
void validate_model(const ModelSpec& model);

const char* family_name(ModelFamily family);
// "pre-LN", "pre-LN, residuals from the norms", "post-LN".
const char* norm_order_name(NormOrder order);

// "gpt" | "bert" → family; throws naming the accepted values.
ModelFamily family_from_name(const std::string& name);

}  // namespace megatron::plan
