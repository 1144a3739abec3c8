#include "plan/flops.h"

namespace megatron::plan {

IterationFlops iteration_flops(const ModelSpec& m, const Layout& l, Implementation impl) {
  const double B = double(l.effective_global_batch()), s = double(m.seq_length),
               L = double(m.num_layers), h = double(m.hidden_size),
               a = double(m.num_attention_heads), g = double(m.query_groups()),
               d = double(m.head_dim()), f = double(m.ffn_size());
  const double V = double(m.padded_vocab(l.tensor_parallel));
  const double gated = m.arch.swiglu ? 1.5 : 1.0;
  const double ratio = a * d / h;  // query projection / hidden size
  const double base = 12.0 * B * s * L * h * h;
  // Per iteration, all layers: the attention's token-linear GEMMs, its QKᵀ and AV products, the
  // MLP's GEMMs (forward + backward = 3 x 2 FLOPs per multiply-add).
  double attention_linear = base * (1 + g / a) * ratio, qk = base * (s / h) * ratio / 2.0, av = qk;
  if (m.arch.mla.enabled) {  // Megatron-LM's MLA count (model/mla_projection.h)
    const MlaOptions& mla = m.arch.mla;
    const double rq = double(mla.q_lora_rank), r = double(mla.kv_lora_rank),
                 dn = double(mla.qk_head_dim), dr = double(mla.qk_pos_emb_head_dim),
                 dv = double(mla.v_head_dim);
    const double q_term = rq > 0 ? rq * (h + a * (dn + dr) + 1) : h * a * (dn + dr);
    attention_linear =
        6.0 * B * s * L * (q_term + r * (h + a * (dn + dv) + 1) + h * dr + a * dv * h);
    qk = 3.0 * B * s * s * L * a * (dn + dr);
    av = 3.0 * B * s * s * L * a * dv;
  }
  // MoE layers (Megatron's count): each token through k experts of the expert width and the
  // shared expert, plus the router's h x E projection.
  double mlp = base * f / h * gated;
  if (m.arch.moe.enabled()) {
    const MoeOptions& moe = m.arch.moe;
    const double share = double(moe.count_moe_layers(m.num_layers)) / L;
    const double routed =
        double(moe.topk) * double(m.expert_ffn_size()) + double(moe.shared_expert_ffn);
    const double router = 6.0 * B * s * L * h * double(moe.num_experts);
    mlp = (1 - share) * mlp + share * (base * routed / h * gated + router);
  }
  const double layers = attention_linear + qk + av + mlp;
  IterationFlops r;
  r.model = layers + base * V / (2.0 * L * h);
  // One forward of a layer is a third of its forward + backward; block recompute re-runs a
  // share of the layers.
  if (l.recompute == Recompute::kFull) {
    r.hardware = r.model + layers / 3.0 * l.recomputed_layer_fraction(m.num_layers);
  } else if (l.recompute == Recompute::kSelective) {
    // QKᵀ and AV forward again (megatron-cpp: QKᵀ only).
    r.hardware = r.model + (impl == Implementation::kMegatronCpp ? qk : qk + av) / 3.0;
  } else {
    r.hardware = r.model;
  }
  return r;
}

}  // namespace megatron::plan
