#include "plan/parameter_count.h"

#include <vector>

namespace megatron::plan {

ParameterCounts count_parameters(const ModelSpec& m, const Layout& l) {
  const double h = double(m.hidden_size), d = double(m.head_dim()),
               a = double(m.num_attention_heads), g = double(m.query_groups()),
               f = double(m.ffn_size());
  const double t = l.tensor_parallel, p = l.pipeline_parallel;
  const bool rmsnorm = m.arch.normalization == Normalization::kRMSNorm;
  const bool learned_positions = m.arch.position_embedding == PositionEmbedding::kLearnedAbsolute;
  const double norm = rmsnorm ? h : 2.0 * h;  // weight (+ bias)
  const double bias = m.arch.add_bias_linear ? 1.0 : 0.0;
  const double qkv_bias = m.qkv_bias() ? 1.0 : 0.0;
  const double gated = m.arch.swiglu ? 2.0 : 1.0;  // fc1 produces gate and value halves

  ParameterCounts c;
  // Attention: fused QKV h → (a + 2g)·d, output projection a·d → h; MLP h → f(·2) → h.
  c.layer_sharded = h * (a + 2 * g) * d + qkv_bias * (a + 2 * g) * d  // QKV weight, bias
                    + a * d * h                                       // projection weight
                    + gated * h * f + bias * gated * f                // fc1 weight, bias
                    + f * h;                                          // fc2 weight
  c.layer_replicated = 2 * norm + 2 * bias * h;  // two norms; projection and fc2 biases
  if (m.arch.mla.enabled) {  // model/mla_projection.h: its projections replace QKV's
    const MlaOptions& mla = m.arch.mla;
    const double rq = double(mla.q_lora_rank), r = double(mla.kv_lora_rank),
                 dn = double(mla.qk_head_dim), dr = double(mla.qk_pos_emb_head_dim),
                 dv = double(mla.v_head_dim), per_norm = rmsnorm ? 1.0 : 2.0;
    c.layer_sharded += (rq > 0 ? rq : h) * a * (dn + dr)  // linear_q_up_proj / linear_q_proj
                       + r * a * (dn + dv)                // linear_kv_up_proj
                       + a * dv * h                       // projection weight
                       - (h + qkv_bias) * (a + 2 * g) * d - a * d * h;  // QKV's and dense's
    c.layer_replicated += h * rq + per_norm * rq          // linear_q_down_proj, q_layernorm
                          + h * (r + dr) + per_norm * r;  // linear_kv_down_proj, kv_layernorm
  }
  if (m.arch.dsa.enabled) {  // model/dsa_indexer.h: replicated, its k_norm a LayerNorm
    const double rq = double(m.arch.mla.q_lora_rank), heads = double(m.arch.dsa.indexer_heads),
                 dim = double(m.arch.dsa.indexer_head_dim);
    c.layer_replicated += (rq > 0 ? rq : h) * heads * dim  // linear_wq_b
                          + h * dim + 2 * dim              // linear_wk, k_norm
                          + h * heads;                     // linear_weights_proj
  }
  if (m.arch.moe.enabled()) {  // model/moe_layer.h: on its layers the experts replace the MLP
    const MoeOptions& moe = m.arch.moe;
    const double e = double(moe.num_experts), fe = double(m.expert_ffn_size()),
                 fs = double(moe.shared_expert_ffn);
    // Per layer, averaged over the dense and MoE layers (--moe-layer-freq).
    const double share = double(moe.count_moe_layers(m.num_layers)) / double(m.num_layers);
    const double dense = gated * h * f + bias * gated * f + f * h;
    const double shared = gated * h * fs + bias * gated * fs + fs * h;  // the shared expert
    c.layer_sharded += share * (shared - dense);
    c.layer_expert = share * e * (gated * h * fe + bias * gated * fe + fe * h);  // fc1, fc2
    c.layer_expert_bias = share * bias * e * h;                                  // fc2 biases
    // The router; the shared expert's fc2 bias instead of the MLP's; the shared expert's gate.
    c.layer_replicated +=
        share * (e * h + bias * ((fs > 0 ? h : 0.0) - h) + (moe.shared_expert_gate ? h : 0.0));
  }
  const double vocab = double(m.padded_vocab(l.tensor_parallel));
  c.word_embedding = vocab * h;
  c.other_embedding = (learned_positions ? double(m.positions()) * h : 0.0) +
                      (m.family == ModelFamily::kBert ? double(m.num_tokentypes) * h : 0.0);
  c.output_layer = m.arch.untie_embeddings_and_output_weights ? vocab * h : 0.0;
  // Post-LN (BERT, LayerNorm only): the norm moves from after the last layer to the embedding.
  c.embedding_norm = m.embedding_norm() ? norm : 0.0;
  c.final_norm = m.final_norm() ? norm : 0.0;
  c.head_replicated = c.final_norm;
  if (m.family == ModelFamily::kBert) {
    c.head_sharded = vocab;                  // LM-head bias over the vocabulary
    c.head_replicated += h * h + h + 2 * h;  // LM-head dense + LayerNorm
  }
  c.head_sequence_parallel = c.head_replicated;
  // BERT's pooler exists for its sentence-order head only (--bert-no-binary-head drops both).
  if (m.family == ModelFamily::kBert && m.binary_head)
    c.head_replicated += h * h + h + 2 * h + 2;  // pooler, binary head
  const double layers = double(m.num_layers);
  c.total = layers * (c.layer_sharded + c.layer_replicated + c.layer_expert + c.layer_expert_bias) +
            c.word_embedding + c.other_embedding + c.embedding_norm + c.output_layer +
            c.head_sharded + c.head_replicated;

  const double ep = l.expert_parallel, et = l.expert_tp();
  c.stage_expert_rank = layers / p * (c.layer_expert / (ep * et) + c.layer_expert_bias / ep);
  const double stage_layers =
      layers / p * (c.layer_sharded / t + c.layer_replicated) + c.stage_expert_rank;
  const double embedding = c.word_embedding / t + c.other_embedding + c.embedding_norm;
  // The last stage computes the logits with the output layer: its own weights when untied,
  // else (p > 1) a copy of the word embedding kept in sync by the embedding group.
  const double output = m.arch.untie_embeddings_and_output_weights ? c.output_layer / t
                        : p > 1                                    ? c.word_embedding / t
                                                                   : 0.0;
  const double head = c.head_sharded / t + c.head_replicated;
  if (p == 1) {
    c.first_stage_rank = c.last_stage_rank = stage_layers + embedding + output + head;
  } else {
    c.first_stage_rank = stage_layers + embedding;
    c.last_stage_rank = stage_layers + output + head;
  }
  return c;
}

ParameterTensors count_parameter_tensors(const ModelSpec& m, const Layout& l) {
  const bool rmsnorm = m.arch.normalization == Normalization::kRMSNorm;
  const bool learned_positions = m.arch.position_embedding == PositionEmbedding::kLearnedAbsolute;
  const int64_t norm = rmsnorm ? 1 : 2;  // weight (+ bias)
  const int64_t bias = m.arch.add_bias_linear ? 1 : 0;
  const int64_t qkv_bias = m.qkv_bias() ? 1 : 0;
  // Two norms; QKV, projection, fc1 and fc2 weights; their biases.
  int64_t layer = 2 * norm + 4 + qkv_bias + 3 * bias;
  // MLA: q (down, norm, up; or one projection) and kv (down, norm, up) instead of the QKV
  // weight and bias.
  if (m.arch.mla.enabled)
    layer += (m.arch.mla.q_lora_rank > 0 ? 2 + norm : 1) + 2 + norm - 1 - qkv_bias;
  // DSA's indexer: linear_wq_b, linear_wk, k_norm (weight, bias), linear_weights_proj.
  if (m.arch.dsa.enabled) layer += 5;
  const int64_t embedding = 1 + (learned_positions ? 1 : 0) +
                            (m.family == ModelFamily::kBert ? 1 : 0) +
                            (m.embedding_norm() ? norm : 0);
  // Untied output weights, or (p > 1) the last stage's copy of the tied embedding.
  const int64_t output =
      m.arch.untie_embeddings_and_output_weights || l.pipeline_parallel > 1 ? 1 : 0;
  int64_t head = m.final_norm() ? norm : 0;
  if (m.family == ModelFamily::kBert) {
    head += 1 + 2 + 2;             // LM-head vocabulary bias, dense weight and bias, LayerNorm
    if (m.binary_head) head += 4;  // pooler and binary head, weights and biases
  }
  // A MoE layer (model/moe_layer.h) has, instead of the MLP's fc1 and fc2 weights and biases,
  // the router's weight, the experts' fc1 and fc2 weights (and biases), the shared expert's
  // (and its gate).
  const MoeOptions& moe = m.arch.moe;
  const int64_t moe_extra = moe.enabled() ? 1 + (moe.shared_expert_ffn > 0 ? 2 + 2 * bias : 0) +
                                                (moe.shared_expert_gate ? 1 : 0)
                                          : 0;
  const int p = l.pipeline_parallel;
  // The layers of pipeline rank r: its model chunks' (virtual stage c·p + r) runs of layers.
  const std::vector<int> stage_layers = l.virtual_stage_layers(m.num_layers);
  auto rank_tensors = [&](int rank) {
    int64_t tensors = 0;
    int first = 0;
    for (size_t stage = 0; stage < stage_layers.size(); ++stage) {
      if (int(stage) % p == rank)
        for (int i = first; i < first + stage_layers[stage]; ++i)
          tensors += layer + (moe.is_moe_layer(i, m.num_layers) ? moe_extra : 0);
      first += stage_layers[stage];
    }
    return tensors;
  };
  const int64_t first_layers = rank_tensors(0);
  const int64_t last_layers = rank_tensors(p - 1);
  ParameterTensors t;
  if (p == 1) {
    t.first_stage_rank = t.last_stage_rank = first_layers + embedding + output + head;
  } else {
    t.first_stage_rank = first_layers + embedding;
    t.last_stage_rank = last_layers + output + head;
  }
  return t;
}

SequenceParallelGradients sequence_parallel_gradients(const ModelSpec& m, const Layout& l,
                                                      Implementation impl) {
  SequenceParallelGradients g;
  if (!l.sequence_parallel) return g;
  const ParameterCounts c = count_parameters(m, l);
  const int p = l.pipeline_parallel;
  const double first_layers = l.rank_layers(m.num_layers, 0) * c.layer_replicated;
  const double last_layers = l.rank_layers(m.num_layers, p - 1) * c.layer_replicated;
  const double first = c.embedding_norm;
  const double last =
      impl == Implementation::kMegatronCpp ? c.final_norm : c.head_sequence_parallel;
  g.first_stage_rank = first_layers + first + (p == 1 ? last : 0.0);
  g.last_stage_rank = last_layers + last + (p == 1 ? first : 0.0);
  return g;
}

}  // namespace megatron::plan
