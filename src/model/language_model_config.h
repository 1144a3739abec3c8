// LanguageModelConfig: what GptConfig and BertConfig have in common, written once — the
// transformer (one TransformerConfig, inherited, not copied) plus the vocabulary (real and
// TP-padded), the positions, the sequence length and the compute dtype. A model config adds
// its own fields and fixes the transformer options its family allows (transformer_config()).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/transformer_config.h"

namespace megatron {

struct LanguageModelConfig : TransformerConfig {
  int64_t vocab_size = 0;         // real vocabulary (the tokenizer's size)
  int64_t padded_vocab_size = 0;  // rows of the word embedding; divisible by the TP size
  int max_position_embeddings = 0, seq_length = 0;
  DType compute_dtype = DType::F32;  // F32 or BF16

  // Throws Error naming the offending option when the transformer shape, the vocabulary, its
  // padding for `tp_size` ranks, the sequence length (and its split over the TP ranks with
  // sequence parallelism) or the compute dtype (f32 or bf16) is invalid; `model_name` (e.g.
  // "GptModel") names the model in the dtype message. `transformer` is the model's
  // transformer_config().
  void validate_language_model(const TransformerConfig& transformer, int tp_size,
                               const char* model_name) const;
};

}  // namespace megatron
