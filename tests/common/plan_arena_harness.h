// What the planner's byte-exact arena tests share (tests/unit/plan_memory_test.cpp at TP 1,
// tests/dist/plan_arena_tp_test.cpp at TP = world size): a tiny GPT, optionally with the Llama
// options, and a tiny BERT in each LayerNorm order, the ModelSpec the planner sees for each,
// one deterministic micro-batch, and each cut into one-layer pipeline stages run forward then
// backward in this process.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/bert_data_loader.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"
#include "model/stage_range.h"
#include "plan/model_spec.h"

namespace megatron::plan {

// h 64, 4 heads, vocabulary 1000 (padded 1024), s 24 (divisible by every TP size tested),
// dropout 0.1. The Llama options: GQA (2 groups of 4 heads), head dim 24, SwiGLU (ffn 96),
// RMSNorm, RoPE, no biases, untied embeddings.
inline GptConfig arena_gpt_config(int num_layers, bool llama) {
  GptConfig gc;
  gc.num_layers = num_layers;
  gc.hidden_size = 64;
  gc.num_attention_heads = 4;
  gc.ffn_hidden_size = llama ? 96 : 0;
  gc.vocab_size = 1000;
  gc.padded_vocab_size = 1024;
  gc.max_position_embeddings = 24;
  gc.seq_length = 24;
  gc.hidden_dropout = gc.attention_dropout = 0.1f;
  if (llama) {
    gc.arch.num_query_groups = 2;
    gc.arch.kv_channels = 24;
    gc.arch.swiglu = true;
    gc.arch.normalization = Normalization::kRMSNorm;
    gc.arch.position_embedding = PositionEmbedding::kRope;
    gc.arch.add_bias_linear = false;
    gc.arch.untie_embeddings_and_output_weights = true;
  }
  return gc;
}

// The planner's description of `gc` (arena_gpt_config as modified since): the config itself,
// sliced, as the theoretical memory report takes it (cli/setup/theoretical_memory.h).
inline ModelSpec arena_model_spec(const GptConfig& gc) {
  ModelSpec m;
  static_cast<LanguageModelConfig&>(m) = gc;
  return m;
}

// b sequences of gc.seq_length tokens (ids i·37 mod V), every position scored.
inline GptBatch arena_batch(const GptConfig& gc, int64_t b) {
  const int64_t s = gc.seq_length;
  std::vector<int32_t> ids(size_t(b * s));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 37 % gc.vocab_size);
  return GptBatch{Tensor::from_vector(ids, {b, s}), Tensor::from_vector(ids, {b, s}),
                  Tensor::from_vector(std::vector<float>(size_t(b * s), 1.0f), {b, s}), 0, 0};
}

// gc (3 layers) as three one-layer stages of this rank, after one micro-batch of b sequences
// went forward through all three and backward through all three.
struct ThreeStages {
  std::vector<std::unique_ptr<ParameterStore>> stores;
  std::vector<std::unique_ptr<GptModel>> stages;
  std::vector<GptModel::StageCtxPtr> ctxs;
};
inline ThreeStages run_three_stages(const GptConfig& gc, const ParallelState& ps, int64_t b) {
  ThreeStages t;
  for (int r = 0; r < 3; ++r) {
    t.stores.push_back(std::make_unique<ParameterStore>(ps.tp_rank, ps.tp_size));
    t.stages.push_back(std::make_unique<GptModel>(
        gc, ps, *t.stores.back(), stage_range({.num_layers = 3, .pipeline_size = 3}, r, 0)));
    t.stores.back()->allocate();
    t.stages.back()->init_weights(7);
  }
  const GptBatch batch = arena_batch(gc, b);
  Tensor x;
  for (auto& stage : t.stages) {
    t.ctxs.push_back(stage->make_stage_ctx());
    x = stage->forward_stage(*t.ctxs.back(), batch, x, true, 11);
  }
  Tensor dx;
  for (int r = 2; r >= 0; --r)
    dx = t.stages[size_t(r)]->backward_stage(*t.ctxs[size_t(r)], dx, 1.0f);
  return t;
}

// The LayerNorm orders of BertConfig (model/bert_config.h), as the planner names them.
inline constexpr NormOrder kBertNormOrders[] = {NormOrder::kPre, NormOrder::kPreResidualFromNorm,
                                                NormOrder::kPost};

// A small BERT (h 32, 4 heads, vocabulary 500 padded to 512, s 16) in the LayerNorm order
// `order`, and the planner's ModelSpec of it.
inline BertConfig arena_bert_config(int num_layers, bool dropout,
                                    NormOrder order = NormOrder::kPre) {
  BertConfig bc;
  bc.num_layers = num_layers;
  bc.hidden_size = 32;
  bc.num_attention_heads = 4;
  bc.vocab_size = 500;
  bc.padded_vocab_size = 512;
  bc.max_position_embeddings = 16;
  bc.seq_length = 16;
  bc.hidden_dropout = bc.attention_dropout = dropout ? 0.1f : 0.0f;
  bc.layernorm_order =
      order == NormOrder::kPost ? LayerNormOrder::kPostLayerNorm : LayerNormOrder::kPreLayerNorm;
  bc.apply_residual_connection_post_layernorm = order == NormOrder::kPreResidualFromNorm;
  return bc;
}

inline ModelSpec arena_bert_spec(const BertConfig& bc) {
  ModelSpec m;
  static_cast<LanguageModelConfig&>(m) = bc;
  m.family = ModelFamily::kBert;
  m.num_tokentypes = bc.num_tokentypes;
  m.binary_head = bc.binary_head;
  m.mask_prob = 0.25;  // arena_bert_batch scores every fourth row
  return m;
}

// b sequences (ids i·13 mod V, segment A only, no padding), every fourth row scored.
inline BertBatch arena_bert_batch(const BertConfig& bc, int64_t b) {
  const int64_t s = bc.seq_length;
  std::vector<int32_t> ids(size_t(b * s)), types(size_t(b * s), 0), sop(size_t(b), 0);
  std::vector<uint8_t> pad(size_t(b * s), 0);
  std::vector<float> mask(size_t(b * s), 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 13 % bc.vocab_size);
  for (size_t i = 0; i < mask.size(); i += 4) mask[i] = 1.0f;
  for (size_t i = 1; i < sop.size(); i += 2) sop[i] = 1;
  BertBatch batch;
  batch.tokens = Tensor::from_vector(ids, {b, s});
  batch.token_types = Tensor::from_vector(types, {b, s});
  batch.pad_mask = Tensor::from_vector(pad, {b, s});
  const BertMaskedPositions masked =
      bert_masked_positions(Tensor::from_vector(ids, {b, s}), Tensor::from_vector(mask, {b, s}));
  batch.masked_rows = masked.rows;
  batch.masked_labels = masked.labels;
  batch.masked_weights = masked.weights;
  batch.sop_labels = Tensor::from_vector(sop, {b});
  return batch;
}

// bc (2 layers) as two one-layer stages of this rank, after one micro-batch of b sequences went
// forward through both and backward through both.
struct TwoBertStages {
  std::vector<std::unique_ptr<ParameterStore>> stores;
  std::vector<std::unique_ptr<BertModel>> stages;
  std::vector<BertModel::StageCtxPtr> ctxs;
};
inline TwoBertStages run_two_bert_stages(const BertConfig& bc, const ParallelState& ps, int64_t b) {
  TwoBertStages t;
  for (int r = 0; r < 2; ++r) {
    t.stores.push_back(std::make_unique<ParameterStore>(ps.tp_rank, ps.tp_size));
    t.stages.push_back(std::make_unique<BertModel>(
        bc, ps, *t.stores.back(), stage_range({.num_layers = 2, .pipeline_size = 2}, r, 0)));
    t.stores.back()->allocate();
    t.stages.back()->init_weights(7);
  }
  const BertBatch batch = arena_bert_batch(bc, b);
  Tensor x;
  for (auto& stage : t.stages) {
    t.ctxs.push_back(stage->make_stage_ctx());
    x = stage->forward_stage(*t.ctxs.back(), batch, x, true, 3);
  }
  const Tensor dx = t.stages[1]->backward_stage(*t.ctxs[1], Tensor(), 1.0f);
  t.stages[0]->backward_stage(*t.ctxs[0], dx, 1.0f);
  return t;
}

}  // namespace megatron::plan
