#include "model/bert_config.h"

#include "core/error.h"
#include "model/language_model_config.h"

namespace megatron {

TransformerConfig BertConfig::transformer_config() const {
  TransformerConfig t = shared_transformer_config(*this);
  t.attn_mask_type = AttnMaskType::kPadding;
  t.layernorm_order = layernorm_order;
  t.apply_residual_connection_post_layernorm = apply_residual_connection_post_layernorm;
  t.final_layernorm = !post_layernorm();  // post-LN layers already end in a LayerNorm
  return t;
}

void BertConfig::validate(int tp_size) const {
  validate_language_model_config(*this, tp_size, "BertModel");
  MT_CHECK(num_tokentypes > 0, "the number of token types must be positive, got ", num_tokentypes);
}

}  // namespace megatron
