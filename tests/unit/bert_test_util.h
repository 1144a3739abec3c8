// Shared by the BERT model tests (unit and dist): a tiny BERT configuration, a deterministic
// batch with padding, masked positions and both sentence-order labels, and its conversion to
// the model's BertBatch.
#pragma once

#include <random>

#include "bert_reference.h"
#include "data/bert_data_loader.h"
#include "model/bert_model.h"

namespace megatron::test {

inline BertConfig tiny_bert_config(bool post_ln, int64_t vocab, int64_t padded_vocab) {
  BertConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.vocab_size = vocab;
  c.padded_vocab_size = padded_vocab;
  c.max_position_embeddings = 12;
  c.seq_length = 8;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.layernorm_order = post_ln ? LayerNormOrder::kPostLayerNorm : LayerNormOrder::kPreLayerNorm;
  return c;
}

inline RefBert ref_bert_of(const BertConfig& c, int64_t b) {
  RefBert m;
  m.shape = {c.seq_length,
             b,
             c.hidden_size,
             c.num_attention_heads,
             int64_t(4) * c.hidden_size,
             double(c.layernorm_epsilon),
             c.gelu == kernels::GeluForm::kTanh};
  m.layers = c.num_layers;
  m.vocab = c.vocab_size;
  m.post_ln = c.post_layernorm();
  m.binary_head = c.binary_head;
  return m;
}

// b samples of s tokens: sample r has its last 2·r positions padded, segment B starts at s/2,
// every third unpadded position (after [CLS]) is masked, sop labels alternate.
inline RefBertInput make_bert_input(int64_t b, int64_t s, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> token(0, int(vocab) - 1);
  RefBertInput in;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t real = s - 2 * r;
    for (int64_t pos = 0; pos < s; ++pos) {
      const bool padded = pos >= real;
      in.tokens.push_back(padded ? 0 : token(gen));
      in.types.push_back(!padded && pos >= s / 2 ? 1 : 0);
      in.pad.push_back(padded ? 1 : 0);
      const bool masked = !padded && pos > 0 && pos % 3 == 1;
      in.labels.push_back(masked ? token(gen) : -1);
      in.loss_mask.push_back(masked ? 1.0f : 0.0f);
    }
    in.sop.push_back(int(r % 2));
  }
  return in;
}

inline BertBatch to_bert_batch(const RefBertInput& in, int64_t b, int64_t s) {
  BertBatch batch;
  batch.tokens =
      Tensor::from_vector(std::vector<int32_t>(in.tokens.begin(), in.tokens.end()), {b, s});
  batch.token_types =
      Tensor::from_vector(std::vector<int32_t>(in.types.begin(), in.types.end()), {b, s});
  batch.pad_mask = Tensor::from_vector(std::vector<uint8_t>(in.pad.begin(), in.pad.end()), {b, s});
  // Megatron's masked positions, chosen on the host as the data loader does.
  const BertMaskedPositions masked = bert_masked_positions(
      Tensor::from_vector(std::vector<int32_t>(in.labels.begin(), in.labels.end()), {b, s}),
      Tensor::from_vector(in.loss_mask, {b, s}));
  batch.masked_rows = masked.rows;
  batch.masked_labels = masked.labels;
  batch.masked_weights = masked.weights;
  batch.sop_labels = Tensor::from_vector(std::vector<int32_t>(in.sop.begin(), in.sop.end()), {b});
  batch.first_sample = 5;
  batch.iteration = 3;
  return batch;
}

}  // namespace megatron::test
