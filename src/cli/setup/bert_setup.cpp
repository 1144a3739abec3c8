#include "cli/setup/bert_setup.h"

#include "cli/args/training_config.h"
#include "core/error.h"

namespace megatron::cli {

void add_bert_layernorm_flags(ArgTable& table, BertLayerNormFlags& flags) {
  table.add_flag("--post-layernorm", flags.post_layernorm,
                 "the original BERT LayerNorm order (x -> attn -> +x -> LN -> MLP -> + -> LN, "
                 "embedding LayerNorm, no final LayerNorm); default: pre-LN");
  table.add_flag("--apply-residual-connection-post-layernorm", flags.residual_post_layernorm,
                 "pre-LN layers whose residuals start from the LayerNorm outputs (Megatron)");
}

void check_bert_layernorm_flags(const BertLayerNormFlags& flags) {
  MT_REQUIRE(!(flags.post_layernorm && flags.residual_post_layernorm),
             "--apply-residual-connection-post-layernorm applies to the pre-LayerNorm order "
             "only; drop it or --post-layernorm");
}

BertConfig bert_config(const Args& a, const BertLayerNormFlags& f, bool binary_head,
                       int64_t vocab) {
  BertConfig c;
  static_cast<LanguageModelConfig&>(c) = language_model_config(a, vocab);
  c.layernorm_order =
      f.post_layernorm ? LayerNormOrder::kPostLayerNorm : LayerNormOrder::kPreLayerNorm;
  c.apply_residual_connection_post_layernorm = f.residual_post_layernorm;
  c.binary_head = binary_head;
  return c;
}

}  // namespace megatron::cli
