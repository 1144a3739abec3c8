// BertConfig: the shape and options of a BERT model (Megatron-LM's BertModel): a language
// model (model/language_model_config.h) with token types and the binary head, and the
// TransformerConfig it implies (a padding mask; pre- or post-LN).
//
// LayerNorm placement (the study in docs/bert_ln_study.md):
//   pre-LN (default, Megatron-LM): emb → dropout → [x → LN → attn → +x → LN → MLP → +·]×L → LN
//   post-LN (original BERT, HuggingFace): emb → LN → dropout → [x → attn → +x → LN → MLP → +·
//     → LN]×L, no final LayerNorm. The embedding LayerNorm comes with the post-LN order,
//     because that is where the original BERT (and every HF checkpoint) has it.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/language_model_config.h"

namespace megatron {

struct BertConfig : LanguageModelConfig {
  BertConfig() { max_position_embeddings = seq_length = 512; }  // BERT's default positions
  int num_tokentypes = 2;
  bool binary_head = true;  // pooler + sentence-order head (--bert-no-binary-head: false)

  bool post_layernorm() const { return layernorm_order == LayerNormOrder::kPostLayerNorm; }
  bool embedding_layernorm() const { return post_layernorm(); }
  TransformerConfig transformer_config() const;
  void validate(int tp_size) const;  // throws Error naming the offending option
};

}  // namespace megatron
