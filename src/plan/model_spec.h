// ModelSpec: the shape of a GPT or BERT model as the planner sees it — the numbers that set
// its parameter count, FLOPs and activation sizes, with Megatron-LM's flag names in comments.
// Nothing here allocates a model; the planner works from these numbers alone.
//
// Llama-family options are part of the spec (grouped-query attention, SwiGLU, RMSNorm, rotary
// positions, untied output layer, no linear biases), as megatron-cpp's GPT and Megatron-LM
// run them.
#pragma once

#include <cstdint>
#include <string>

namespace megatron::plan {

enum class ModelFamily { kGpt, kBert };

// Where a layer's LayerNorms sit (model/transformer_layer.h, model/bert_config.h):
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

struct ModelSpec {
  ModelFamily family = ModelFamily::kGpt;
  int64_t num_layers = 0;               // --num-layers, L
  int64_t hidden_size = 0;              // --hidden-size, h
  int64_t num_attention_heads = 0;      // --num-attention-heads, a
  int64_t num_query_groups = 0;         // --num-query-groups (GQA); 0 → a (multi-head)
  int64_t kv_channels = 0;              // --kv-channels, head dim d; 0 → h / a
  int64_t ffn_hidden_size = 0;          // --ffn-hidden-size, f; 0 → 4h
  int64_t seq_length = 0;               // --seq-length, s
  int64_t max_position_embeddings = 0;  // 0 → s
  int64_t vocab_size = 0;               // tokenizer vocabulary before padding
  int make_vocab_size_divisible_by = 128;
  bool swiglu = false;  // --swiglu: gated MLP, 3 matrices of h x f
  bool untie_embeddings_and_output_weights = false;
  bool rmsnorm = false;                     // --normalization RMSNorm (no bias)
  bool learned_position_embeddings = true;  // false with --position-embedding-type rope
  bool add_bias_linear = true;              // false with --disable-bias-linear
  bool add_qkv_bias = false;                // --add-qkv-bias: QKV biases without linear biases
  double hidden_dropout = 0.1;              // > 0: dropout masks are kept for backward
  double attention_dropout = 0.1;
  // BERT only: masked-LM rows as a fraction of tokens (--mask-prob), token types, heads.
  double mask_prob = 0.15;
  int64_t num_tokentypes = 2;
  bool bert_binary_head = true;
  NormOrder norm_order = NormOrder::kPre;

  // Derived values (the defaults above resolved).
  int64_t heads() const { return num_attention_heads; }
  int64_t query_groups() const { return num_query_groups > 0 ? num_query_groups : heads(); }
  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / heads(); }
  bool qkv_bias() const { return add_bias_linear || add_qkv_bias; }
  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int64_t positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  bool final_norm() const { return norm_order != NormOrder::kPost; }
  bool embedding_norm() const { return norm_order == NormOrder::kPost; }
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
