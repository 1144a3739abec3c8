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
  const double per_layer_bracket = (1 + g / a + s / h) * ratio + f / h * gated;
  const double base = 12.0 * B * s * L * h * h;
  IterationFlops r;
  r.model = base * (per_layer_bracket + V / (2.0 * L * h));
  // One forward of a layer is a third of its forward + backward; block recompute re-runs a
  // share of the layers.
  if (l.recompute == Recompute::kFull) {
    r.hardware =
        r.model + base * per_layer_bracket / 3.0 * l.recomputed_layer_fraction(m.num_layers);
  } else if (l.recompute == Recompute::kSelective) {
    // QKᵀ and AV forward again (megatron-cpp: QKᵀ only).
    const double products = impl == Implementation::kMegatronCpp ? 0.5 : 1.0;
    r.hardware = r.model + base * (s / h) * ratio / 3.0 * products;
  } else {
    r.hardware = r.model;
  }
  return r;
}

}  // namespace megatron::plan
