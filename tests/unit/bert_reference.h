// A naive double-precision BERT reference for the BERT model tests, written from the
// definitions (Megatron-LM's BertModel / the original BERT) on top of the transformer
// reference in model_reference.h: embeddings (word + position + token type, LayerNorm in the
// post-LN order), the transformer with a key-padding mask, the MLM head (dense → GeLU → LN →
// tied logits + bias), the pooler and the sentence-order head, and the two losses.
#pragma once

#include "model_reference.h"

namespace megatron::test {

struct RefBert {
  RefShape shape;
  int layers = 0;
  int64_t vocab = 0;  // real vocabulary
  bool post_ln = false;
  bool binary_head = true;
};

struct RefBertInput {
  std::vector<int> tokens, types;  // [b, s]
  std::vector<int> pad;            // [b, s], 1 = padding
  std::vector<int> labels;         // [b, s]
  std::vector<float> loss_mask;    // [b, s]
  std::vector<int> sop;            // [b]
};

// Final hidden states [s, b, h].
inline Act ref_bert_hidden(const RefBert& m, const RefParams& p, const RefBertInput& in,
                           const RefDropout& drop) {
  const RefShape& sh = m.shape;
  const auto& wte = p.at("embedding.word_embeddings.weight");
  const auto& wpe = p.at("embedding.position_embeddings.weight");
  const auto& wtt = p.at("embedding.tokentype_embeddings.weight");
  Act x(sh.s * sh.b * sh.h);
  for (int64_t pos = 0; pos < sh.s; ++pos)
    for (int64_t r = 0; r < sh.b; ++r)
      for (int64_t c = 0; c < sh.h; ++c)
        x[(pos * sh.b + r) * sh.h + c] = wte[in.tokens[r * sh.s + pos] * sh.h + c] +
                                         wpe[pos * sh.h + c] +
                                         wtt[in.types[r * sh.s + pos] * sh.h + c];
  if (m.post_ln)
    x = ref_layernorm(x, p.at("embedding.layernorm.weight"), p.at("embedding.layernorm.bias"), sh.h,
                      sh.eps);
  for (int64_t pos = 0; pos < sh.s; ++pos)
    for (int64_t r = 0; r < sh.b; ++r)
      for (int64_t c = 0; c < sh.h; ++c)
        x[(pos * sh.b + r) * sh.h + c] *= drop.hidden(0, 1, r, pos, c, sh.h);
  const LayerNormOrder order =
      m.post_ln ? LayerNormOrder::kPostLayerNorm : LayerNormOrder::kPreLayerNorm;
  for (int l = 0; l < m.layers; ++l)
    x = ref_layer(sh, p, "", l, x, order, false, false, in.pad, drop);
  if (!m.post_ln)
    x = ref_layernorm(x, p.at("final_layernorm.weight"), p.at("final_layernorm.bias"), sh.h,
                      sh.eps);
  return x;
}

// MLM logits of one hidden row [h] → [vocab].
inline std::vector<double> ref_bert_mlm_logits(const RefBert& m, const RefParams& p,
                                               const double* row) {
  const int64_t h = m.shape.h;
  Act x(row, row + h);
  Act u = ref_linear(x, p.at("lm_head.dense.weight"), &p.at("lm_head.dense.bias"), h, h);
  for (double& v : u) v = ref_gelu(v, m.shape.tanh_gelu);
  u = ref_layernorm(u, p.at("lm_head.layernorm.weight"), p.at("lm_head.layernorm.bias"), h,
                    m.shape.eps);
  const auto& wte = p.at("embedding.word_embeddings.weight");
  const auto& bias = p.at("lm_head.bias");
  std::vector<double> logits(m.vocab);
  for (int64_t v = 0; v < m.vocab; ++v) {
    double acc = bias[v];
    for (int64_t c = 0; c < h; ++c) acc += wte[v * h + c] * u[c];
    logits[v] = acc;
  }
  return logits;
}

inline std::vector<double> ref_bert_sop_logits(const RefBert& m, const RefParams& p,
                                               const Act& hidden, int64_t r) {
  const int64_t h = m.shape.h;
  Act cls(hidden.begin() + r * h, hidden.begin() + (r + 1) * h);  // position 0, sample r
  Act pooled = ref_linear(cls, p.at("pooler.dense.weight"), &p.at("pooler.dense.bias"), h, h);
  for (double& v : pooled) v = std::tanh(v);
  return ref_linear(pooled, p.at("binary_head.weight"), &p.at("binary_head.bias"), h, 2);
}

inline double ref_cross_entropy(const std::vector<double>& logits, int target) {
  double mx = -INFINITY, sum = 0;
  for (double v : logits) mx = std::max(mx, v);
  for (double v : logits) sum += std::exp(v - mx);
  return std::log(sum) + mx - logits[target];
}

struct RefBertLosses {
  double lm = 0, sop = 0;
};

inline RefBertLosses ref_bert_losses(const RefBert& m, const RefParams& p, const RefBertInput& in,
                                     const RefDropout& drop) {
  const RefShape& sh = m.shape;
  Act hidden = ref_bert_hidden(m, p, in, drop);
  RefBertLosses out;
  double weighted = 0, total = 0;
  for (int64_t r = 0; r < sh.b; ++r)
    for (int64_t pos = 0; pos < sh.s; ++pos) {
      const float w = in.loss_mask[r * sh.s + pos];
      if (w == 0.0f) continue;
      auto logits = ref_bert_mlm_logits(m, p, &hidden[(pos * sh.b + r) * sh.h]);
      weighted += w * ref_cross_entropy(logits, in.labels[r * sh.s + pos]);
      total += w;
    }
  out.lm = weighted / total;
  if (m.binary_head) {
    for (int64_t r = 0; r < sh.b; ++r)
      out.sop += ref_cross_entropy(ref_bert_sop_logits(m, p, hidden, r), in.sop[r]);
    out.sop /= double(sh.b);
  }
  return out;
}

}  // namespace megatron::test
