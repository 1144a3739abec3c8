// What GptConfig and BertConfig have in common, written once: both name the transformer
// shape, the vocabulary (real and TP-padded), the sequence length and the compute dtype
// alike, so the TransformerConfig fields they share and the checks on them are templates
// over the config type.
#pragma once

#include "core/dtype.h"
#include "core/error.h"
#include "model/transformer_config.h"

namespace megatron {

// The TransformerConfig fields a language-model config carries under the same names; the
// caller sets the model-specific ones (mask type, LayerNorm order, final LayerNorm, ...).
template <typename ModelConfig>
TransformerConfig shared_transformer_config(const ModelConfig& c) {
  TransformerConfig t;
  t.num_layers = c.num_layers;
  t.hidden_size = c.hidden_size;
  t.num_attention_heads = c.num_attention_heads;
  t.ffn_hidden_size = c.ffn_hidden_size;
  t.hidden_dropout = c.hidden_dropout;
  t.attention_dropout = c.attention_dropout;
  t.init_method_std = c.init_method_std;
  t.layernorm_epsilon = c.layernorm_epsilon;
  t.recompute_activations = c.recompute_activations;
  t.recompute_method = c.recompute_method;
  t.recompute_num_layers = c.recompute_num_layers;
  t.selective_recompute = c.selective_recompute;
  t.flash_attention = c.flash_attention;
  t.sequence_parallel = c.sequence_parallel;
  t.gelu = c.gelu;
  return t;
}

// Throws Error naming the offending option when the transformer shape, the vocabulary, its
// padding for `tp_size` ranks, the sequence length (and its split over the TP ranks with
// sequence parallelism) or the compute dtype (f32 or bf16) of `c` is invalid; `model_name`
// (e.g. "GptModel") names the model in the dtype message.
template <typename ModelConfig>
void validate_language_model_config(const ModelConfig& c, int tp_size, const char* model_name) {
  c.transformer_config().validate(tp_size);
  MT_REQUIRE(c.vocab_size > 0, "vocabulary size must be positive, got ", c.vocab_size);
  MT_REQUIRE(c.padded_vocab_size >= c.vocab_size, "padded vocabulary size ", c.padded_vocab_size,
             " is smaller than the vocabulary size ", c.vocab_size);
  MT_REQUIRE(c.padded_vocab_size % tp_size == 0, "padded vocabulary size ", c.padded_vocab_size,
             " is not divisible by --tensor-model-parallel-size ", tp_size);
  MT_REQUIRE(c.seq_length > 0 && c.seq_length <= c.max_position_embeddings, "--seq-length ",
             c.seq_length,
             " must be in [1, --max-position-embeddings = ", c.max_position_embeddings, "]");
  MT_REQUIRE(!c.sequence_parallel || tp_size > 1,
             "--sequence-parallel splits the sequence over the tensor-parallel ranks: it needs "
             "--tensor-model-parallel-size > 1 (drop --sequence-parallel at TP = 1)");
  MT_REQUIRE(!c.sequence_parallel || c.seq_length % tp_size == 0,
             "--sequence-parallel: --seq-length ", c.seq_length,
             " is not divisible by --tensor-model-parallel-size ", tp_size,
             "; choose a sequence length that is a multiple of the TP size");
  MT_REQUIRE(c.compute_dtype == DType::F32 || c.compute_dtype == DType::BF16, "compute dtype ",
             dtype_name(c.compute_dtype), " is not supported by ", model_name,
             " (expected f32 or bf16)");
}

}  // namespace megatron
