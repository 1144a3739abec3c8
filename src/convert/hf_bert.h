// HuggingFace BERT (BertForPreTraining) <-> our BERT parameters: config and tensor layouts
// (no file I/O).
//
// HF BERT is the original post-LN BERT, so an import is a BertConfig with the post-LN order
// (embedding LayerNorm, no final LayerNorm). HF keeps query, key and value as three [h, h]
// Linears; we fuse them into one [3h, h] with rows per head [heads, 3, head_dim], so that a
// row split gives each tensor-parallel rank whole heads. The word embedding and the MLM bias
// are padded with zeros to the padded vocabulary on import and truncated on export; the MLM
// decoder is tied to the word embedding on both sides.
//
//   HF (prefix "bert." inside BertForPreTraining)     ours
//   embeddings.word_embeddings.weight [V, h]    -> embedding.word_embeddings.weight [Vp, h]
//   embeddings.position_embeddings.weight       -> embedding.position_embeddings.weight
//   embeddings.token_type_embeddings.weight     -> embedding.tokentype_embeddings.weight
//   embeddings.LayerNorm.{weight,bias}          -> embedding.layernorm.{weight,bias}
//   encoder.layer.i.attention.self.{query,key,value}.{weight,bias}
//                                               -> layers.i.self_attention.query_key_value.*
//   encoder.layer.i.attention.output.dense.*    -> layers.i.self_attention.dense.*
//   encoder.layer.i.attention.output.LayerNorm.* -> layers.i.post_attention_layernorm.*
//   encoder.layer.i.intermediate.dense.*        -> layers.i.mlp.dense_h_to_4h.*
//   encoder.layer.i.output.dense.*              -> layers.i.mlp.dense_4h_to_h.*
//   encoder.layer.i.output.LayerNorm.*          -> layers.i.post_mlp_layernorm.*
//   pooler.dense.*                              -> pooler.dense.*            (binary head only)
//   cls.predictions.transform.dense.*           -> lm_head.dense.*
//   cls.predictions.transform.LayerNorm.*       -> lm_head.layernorm.*
//   cls.predictions.bias [V]                    -> lm_head.bias [Vp]
//   cls.seq_relationship.{weight,bias}          -> binary_head.*             (binary head only)
// A pre-LayerNorm BERT (Megatron-LM's, megatron-cpp's default) is HF's MegatronBertForPreTraining
// (model_type "megatron-bert"): the same names but no embeddings.LayerNorm and, per layer,
// attention.ln (-> layers.i.input_layernorm) and ln (-> layers.i.post_attention_layernorm, the
// LayerNorm before the MLP) instead of attention.output.LayerNorm and output.LayerNorm, plus
// bert.encoder.ln (-> final_layernorm).
// Accepted on import and ignored: bert.embeddings.position_ids (a buffer),
// cls.predictions.decoder.{weight,bias} (tied copies; checked equal), the TF-era LayerNorm
// names gamma/beta for weight/bias.
// GeLU: hidden_act "gelu" (HF's default) imports as the erf form, "gelu_new" as the tanh form
// (convert/hf_gelu.h), and each exports back under its name.
#pragma once

#include <nlohmann/json.hpp>

#include "convert/hf_tensor.h"
#include "model/bert_config.h"

namespace megatron {

// BertConfig from an HF BERT config.json (num_hidden_layers, hidden_size,
// num_attention_heads, intermediate_size, vocab_size, max_position_embeddings,
// type_vocab_size, layer_norm_eps, hidden_dropout_prob, attention_probs_dropout_prob,
// hidden_act, position_embedding_type). binary_head: whether the HF weights include the
// pooler and cls.seq_relationship. seq_length is set to max_position_embeddings.
BertConfig bert_config_from_hf(const nlohmann::json& hf_config, int64_t padded_vocab_size,
                               bool binary_head);
// BertForPreTraining's config for a post-LN model, MegatronBertForPreTraining's for a pre-LN one.
nlohmann::json hf_config_from_bert(const BertConfig& config);

// True when HF tensors (names as stored) hold the pooler and the sentence-order head.
bool hf_bert_has_binary_head(const TensorMap& hf);

// HF tensors (any float dtype; "bert."-prefixed or not) -> our full logical f32 tensors.
// Throws one Error listing every missing, unexpected and wrongly shaped tensor.
TensorMap bert_tensors_from_hf(const TensorMap& hf, const BertConfig& config);
// Our full logical tensors (values or gradients, f32) -> HF BertForPreTraining tensors.
TensorMap hf_tensors_from_bert(const TensorMap& ours, const BertConfig& config);

}  // namespace megatron
