#include "model/bert_config.h"

#include "core/error.h"

namespace megatron {

TransformerConfig BertConfig::transformer_config() const {
  TransformerConfig t;
  t.num_layers = num_layers;
  t.hidden_size = hidden_size;
  t.num_attention_heads = num_attention_heads;
  t.ffn_hidden_size = ffn_hidden_size;
  t.hidden_dropout = hidden_dropout;
  t.attention_dropout = attention_dropout;
  t.init_method_std = init_method_std;
  t.layernorm_epsilon = layernorm_epsilon;
  t.attn_mask_type = AttnMaskType::kPadding;
  t.layernorm_order = layernorm_order;
  t.apply_residual_connection_post_layernorm = apply_residual_connection_post_layernorm;
  t.final_layernorm = !post_layernorm();  // post-LN layers already end in a LayerNorm
  t.recompute_activations = recompute_activations;
  return t;
}

void BertConfig::validate(int tp_size) const {
  transformer_config().validate(tp_size);
  MT_CHECK(vocab_size > 0, "vocabulary size must be positive, got ", vocab_size);
  MT_CHECK(padded_vocab_size >= vocab_size, "padded vocabulary size ", padded_vocab_size,
           " is smaller than the vocabulary size ", vocab_size);
  MT_CHECK(padded_vocab_size % tp_size == 0, "padded vocabulary size ", padded_vocab_size,
           " is not divisible by --tensor-model-parallel-size ", tp_size);
  MT_CHECK(seq_length > 0 && seq_length <= max_position_embeddings, "--seq-length ", seq_length,
           " must be in [1, --max-position-embeddings = ", max_position_embeddings, "]");
  MT_CHECK(num_tokentypes > 0, "the number of token types must be positive, got ", num_tokentypes);
  MT_CHECK(compute_dtype == DType::F32 || compute_dtype == DType::BF16, "compute dtype ",
           dtype_name(compute_dtype), " is not supported by BertModel (expected f32 or bf16)");
}

}  // namespace megatron
