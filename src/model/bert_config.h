// BertConfig: the shape and options of a BERT model (Megatron-LM's BertModel), and the
// TransformerConfig it implies.
//
// LayerNorm placement (the study in docs/bert_ln_study.md):
//   pre-LN (default, Megatron-LM): emb → dropout → [x → LN → attn → +x → LN → MLP → +·]×L → LN
//   post-LN (original BERT, HuggingFace): emb → LN → dropout → [x → attn → +x → LN → MLP → +·
//     → LN]×L, no final LayerNorm. The embedding LayerNorm comes with the post-LN order,
//     because that is where the original BERT (and every HF checkpoint) has it.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/transformer_config.h"

namespace megatron {

struct BertConfig {
  int num_layers = 0, hidden_size = 0, num_attention_heads = 0;
  int ffn_hidden_size = 0;        // 0 → 4·hidden_size
  int64_t vocab_size = 0;         // real vocabulary (the tokenizer's size)
  int64_t padded_vocab_size = 0;  // rows of the word embedding; divisible by the TP size
  int max_position_embeddings = 512, seq_length = 512;
  int num_tokentypes = 2;
  float hidden_dropout = 0.1f, attention_dropout = 0.1f, init_method_std = 0.02f,
        layernorm_epsilon = 1e-5f;
  LayerNormOrder layernorm_order = LayerNormOrder::kPreLayerNorm;
  bool apply_residual_connection_post_layernorm = false;  // Megatron's flag (pre-LN only)
  bool binary_head = true;  // pooler + sentence-order head (--bert-no-binary-head: false)
  bool recompute_activations = false;  // full recompute
  // Which layers full recompute re-runs (model/transformer_config.h): every one, or the first
  // recompute_num_layers of each model chunk (block).
  RecomputeMethod recompute_method = RecomputeMethod::kUniform;
  int recompute_num_layers = 1;
  bool selective_recompute = false;  // the attention core only (model/attention.h)
  bool flash_attention = false;      // the fused attention core (model/attention.h)
  // Sequence parallelism (needs TP > 1, seq_length divisible by TP; model/bert_encoder.h).
  bool sequence_parallel = false;
  // The MLPs' and the LM head's GeLU; tanh: --openai-gelu, HF "gelu_new".
  kernels::GeluForm gelu = kernels::GeluForm::kErf;
  DType compute_dtype = DType::F32;  // F32 or BF16

  bool post_layernorm() const { return layernorm_order == LayerNormOrder::kPostLayerNorm; }
  bool embedding_layernorm() const { return post_layernorm(); }
  TransformerConfig transformer_config() const;
  void validate(int tp_size) const;  // throws Error naming the offending option
};

}  // namespace megatron
