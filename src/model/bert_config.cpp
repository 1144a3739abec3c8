#include "model/bert_config.h"

#include "core/error.h"

namespace megatron {

TransformerConfig BertConfig::transformer_config() const {
  TransformerConfig t = *this;
  t.attn_mask_type = AttnMaskType::kPadding;
  t.final_layernorm = !post_layernorm();  // post-LN layers already end in a LayerNorm
  return t;
}

void BertConfig::validate(int tp_size) const {
  validate_language_model(transformer_config(), tp_size, "BertModel");
  MT_CHECK(num_tokentypes > 0, "the number of token types must be positive, got ", num_tokentypes);
}

}  // namespace megatron
