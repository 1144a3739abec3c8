// Rotary embedding (contract: kernels/rotary.h): argument checks, then the device's backend.
#include "kernels/rotary.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

void check_rotary_operand(const Tensor& t, const char* what) {
  check_defined(t, what);
  MT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, what, " has dtype ",
           dtype_name(t.dtype()), ", expected f32 or bf16");
  MT_CHECK(t.dim() >= 3 && t.dim() <= 5, what, " must be [s, ..., d] with 1 to 3 middle dims, got ",
           t.describe());
  MT_CHECK(t.stride(-1) == 1, what, " must have unit stride in its last (channel) dim, got ",
           t.describe());
}

}  // namespace

void rotary_embedding(const Tensor& x, int64_t position_start, const RotaryParams& p, bool inverse,
                      Tensor& y) {
  check_rotary_operand(x, "rotary_embedding x");
  check_rotary_operand(y, "rotary_embedding y");
  check_shape(y, x.shape(), "rotary_embedding y");
  check_dtype(y, x.dtype(), "rotary_embedding y");
  const int64_t d = x.size(-1);
  MT_CHECK(p.rotary_dim >= 2 && p.rotary_dim % 2 == 0 && p.rotary_dim <= d,
           "rotary_embedding: rotary dim ", p.rotary_dim, " must be even and in [2, ", d,
           "] (the head dim times --rotary-percent)");
  MT_CHECK(p.base > 0 && p.seq_interpolation_factor > 0, "rotary_embedding: base (", p.base,
           ") and sequence interpolation factor (", p.seq_interpolation_factor,
           ") must be positive");
  const Llama3RopeScaling& l3 = p.llama3;
  MT_CHECK(!l3.enabled() || (l3.factor >= 1 && l3.low_freq_factor > 0 &&
                             l3.high_freq_factor > l3.low_freq_factor &&
                             l3.original_max_position_embeddings > 0),
           "rotary_embedding: Llama 3 RoPE scaling needs factor >= 1 (got ", l3.factor,
           "), 0 < low_freq_factor (", l3.low_freq_factor, ") < high_freq_factor (",
           l3.high_freq_factor, ") and original_max_position_embeddings > 0 (",
           l3.original_max_position_embeddings, ")");
  if (p.yarn) {
    const YarnRopeScaling& yarn = *p.yarn;
    MT_CHECK(!l3.enabled() && p.seq_interpolation_factor == 1.0f && yarn.factor > 0 &&
                 yarn.original_max_position_embeddings > 0 && yarn.beta_fast > 0 &&
                 yarn.beta_slow > 0,
             "rotary_embedding: YaRN needs a positive factor (", yarn.factor,
             "), original_max_position_embeddings (", yarn.original_max_position_embeddings,
             ") and betas (", yarn.beta_fast, ", ", yarn.beta_slow,
             "), and excludes Llama 3 scaling and a sequence interpolation factor");
  }
  MT_CHECK(position_start >= 0, "rotary_embedding: position_start must be >= 0, got ",
           position_start);
  const Device device = operand_device("rotary_embedding", {&x, &y});
  MT_DISPATCH(device, rotary_embedding, x, position_start, p, inverse, y);
}

}  // namespace megatron::kernels
