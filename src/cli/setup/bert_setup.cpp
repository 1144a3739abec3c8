#include "cli/setup/bert_setup.h"

#include "core/error.h"
#include "model/gpt_model.h"

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
  c.num_layers = a.num_layers;
  c.hidden_size = a.hidden_size;
  c.num_attention_heads = a.num_attention_heads;
  c.ffn_hidden_size = a.effective_ffn_hidden_size();
  c.vocab_size = vocab;
  c.padded_vocab_size =
      padded_vocab_size(vocab, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
  c.max_position_embeddings = a.max_position_embeddings;
  c.seq_length = a.seq_length;
  c.hidden_dropout = float(a.hidden_dropout);
  c.attention_dropout = float(a.attention_dropout);
  c.init_method_std = float(a.init_method_std);
  c.layernorm_epsilon = float(a.layernorm_epsilon);
  c.layernorm_order =
      f.post_layernorm ? LayerNormOrder::kPostLayerNorm : LayerNormOrder::kPreLayerNorm;
  c.apply_residual_connection_post_layernorm = f.residual_post_layernorm;
  c.binary_head = binary_head;
  c.recompute_activations = a.full_recompute();
  c.recompute_method = a.recompute_method_or_default();
  c.recompute_num_layers = a.recompute_num_layers_or_default();
  c.selective_recompute = a.selective_recompute();
  c.flash_attention = a.flash_attention();
  c.sequence_parallel = a.sequence_parallel;
  c.gelu = a.gelu_form();
  c.compute_dtype = a.bf16 ? DType::BF16 : DType::F32;
  return c;
}

}  // namespace megatron::cli
