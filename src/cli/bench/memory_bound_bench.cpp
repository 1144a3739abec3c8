#include "cli/bench/memory_bound_bench.h"

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cli/bench/seconds_per_call.h"
#include "core/tensor.h"
#include "kernels/adamw.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rotary.h"
#include "kernels/softmax.h"
#include "kernels/swiglu.h"

namespace megatron::cli {
namespace {

Tensor filled(const Shape& shape, DType dtype, float value, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  kernels::fill(t, value);
  return t;
}

// One table row: `name` moving `bytes` per call.
class Table {
 public:
  Table(double min_time, Device device, double copy_gbps)
      : min_time_(min_time), device_(device), copy_gbps_(copy_gbps) {}
  void row(const std::string& name, double bytes, const std::function<void()>& fn) const {
    const double gbps = bytes / seconds_per_call(fn, min_time_, device_) * 1e-9;
    std::printf("  %-22s %10.1f %11.0f%%\n", name.c_str(), gbps, 100.0 * gbps / copy_gbps_);
  }

 private:
  double min_time_;
  Device device_;
  double copy_gbps_;
};

void print_header(const std::string& title) {
  std::printf("\n%s\n  %-22s %10s %12s\n", title.c_str(), "kernel", "GB/s", "% copy");
}

}  // namespace

void print_memory_bound_kernels(const KernelBenchOptions& o, DType dt, Device device,
                                double copy_gbps) {
  const int64_t tokens = o.tokens, h = o.hidden, f = o.ffn, v = o.vocab;
  const int64_t b = o.tokens / o.seq_length, s = o.seq_length, heads = o.heads;
  const double e = double(dtype_size(dt));  // bytes per activation element
  const double th = double(tokens * h), tf = double(tokens * f);
  print_header(std::string(dtype_name(dt)) + " memory-bound kernels (T " + std::to_string(tokens) +
               ", h " + std::to_string(h) + ", ffn " + std::to_string(f) + ", V " +
               std::to_string(v) + "), compulsory traffic:");
  const Table table(o.min_time, device, copy_gbps);
  auto tensor = [&](const Shape& shape, DType dtype, float value) {
    return filled(shape, dtype, value, device);
  };

  // LayerNorm [T, h]: forward reads x, writes y; backward reads dy, x, writes dx.
  Tensor x = tensor({tokens, h}, dt, 0.3f), y = tensor({tokens, h}, dt, 0.f);
  Tensor dx = tensor({tokens, h}, dt, 0.f);
  Tensor gamma = tensor({h}, DType::F32, 1.f), beta = tensor({h}, DType::F32, 0.f);
  Tensor dgamma = tensor({h}, DType::F32, 0.f), dbeta = tensor({h}, DType::F32, 0.f);
  Tensor mean = tensor({tokens}, DType::F32, 0.f), rstd = tensor({tokens}, DType::F32, 0.f);
  table.row("layernorm_fwd", 2 * th * e,
            [&] { kernels::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd); });
  table.row("layernorm_bwd", 3 * th * e,
            [&] { kernels::layernorm_backward(y, x, gamma, mean, rstd, dx, dgamma, dbeta); });

  // Llama's kernels: RMSNorm [T, h] (as LayerNorm, without β); RoPE in place on [T, h] as heads
  // of h / heads channels (reads and writes each element once); SwiGLU on [T, 2f] → [T, f].
  table.row("rmsnorm_fwd", 2 * th * e, [&] { kernels::rmsnorm_forward(x, gamma, 1e-5f, y, rstd); });
  table.row("rmsnorm_bwd", 3 * th * e,
            [&] { kernels::rmsnorm_backward(y, x, gamma, rstd, dx, dgamma); });
  const int64_t head_dim = h / heads;
  Tensor rotated = x.view({tokens, heads, head_dim});
  table.row("rotary_fwd", 2 * th * e, [&] {
    kernels::rotary_embedding(
        rotated, 0,
        {.rotary_dim = head_dim, .base = 10000.0f, .seq_interpolation_factor = 1.0f, .llama3 = {}},
        false, rotated);
  });
  Tensor gate_up = tensor({tokens, 2 * f}, dt, 0.3f), dgate_up = tensor({tokens, 2 * f}, dt, 0.f);
  Tensor swiglu_out = tensor({tokens, f}, dt, 0.f);
  table.row("swiglu_fwd", 3 * tf * e, [&] { kernels::swiglu_forward(gate_up, swiglu_out); });
  table.row("swiglu_bwd", 5 * tf * e,
            [&] { kernels::swiglu_backward(swiglu_out, gate_up, dgate_up); });

  // Bias + GeLU [T, f].
  Tensor xf = tensor({tokens, f}, dt, 0.3f), yf = tensor({tokens, f}, dt, 0.f);
  Tensor bias_f = tensor({f}, dt, 0.1f), dbias_f = tensor({f}, DType::F32, 0.f);
  table.row("bias_gelu_fwd", 2 * tf * e,
            [&] { kernels::bias_gelu_forward(xf, bias_f, yf, kernels::GeluForm::kErf); });
  table.row("bias_gelu_bwd", 3 * tf * e, [&] {
    kernels::bias_gelu_backward(yf, xf, bias_f, yf, dbias_f, kernels::GeluForm::kErf);
  });

  // Dropout on [T, h] with a u8 mask; bias-dropout-add reads x, residual, mask, writes y.
  std::vector<kernels::MaskRow> rows;
  for (int64_t r = 0; r < tokens; ++r) rows.push_back({uint64_t(r), 0});
  Tensor mask = Tensor::zeros({tokens, h}, DType::U8, device);
  table.row("dropout_mask", th, [&] { kernels::dropout_mask(7, rows, 0.1f, mask); });
  table.row("dropout_fwd", 2 * th * e + th, [&] { kernels::dropout_forward(x, mask, 0.1f, y); });
  Tensor bias_h = tensor({h}, dt, 0.1f), dbias_h = tensor({h}, DType::F32, 0.f);
  table.row("bias_dropout_add_fwd", 3 * th * e + th,
            [&] { kernels::bias_dropout_add_forward(x, bias_h, x, mask, 0.1f, y); });
  table.row("bias_dropout_add_bwd", 2 * th * e + th,
            [&] { kernels::bias_dropout_add_backward(x, mask, 0.1f, dx, dbias_h); });

  // Causal softmax over [b, heads, s, s] (the unfused attention's).
  const double ss = double(b * heads * s * s);
  Tensor scores = tensor({b, heads, s, s}, dt, 0.5f), probs = tensor({b, heads, s, s}, dt, 0.f);
  table.row("softmax_fwd", 2 * ss * e,
            [&] { kernels::scaled_masked_softmax_forward(scores, 0.125f, true, Tensor(), probs); });
  table.row("softmax_bwd", 3 * ss * e,
            [&] { kernels::scaled_masked_softmax_backward(scores, probs, 0.125f, scores); });

  // Cross-entropy over [T, V] logits: max pass, sum-exp pass, backward in place.
  const double tv = double(tokens * v);
  Tensor logits = tensor({tokens, v}, dt, 0.25f);
  Tensor targets = Tensor::zeros({tokens}, DType::I32, device);
  Tensor row_max = tensor({tokens}, DType::F32, 0.f), sum_exp = tensor({tokens}, DType::F32, 0.f);
  Tensor target_logit = tensor({tokens}, DType::F32, 0.f);
  Tensor dloss = tensor({tokens}, DType::F32, 1.f);
  table.row("ce_row_max", tv * e, [&] { kernels::cross_entropy_row_max(logits, v, row_max); });
  table.row("ce_sum_exp", tv * e, [&] {
    kernels::cross_entropy_sum_exp_target(logits, targets, 0, v, row_max, sum_exp, target_logit);
  });
  table.row("ce_backward", 2 * tv * e, [&] {
    kernels::cross_entropy_backward(logits, targets, 0, v, row_max, sum_exp, dloss, logits);
  });

  // Embedding: a [V, h] table, T ids (reads T rows, writes T rows).
  Tensor embedding_table = tensor({v, h}, dt, 0.2f);
  std::vector<int32_t> id_values;
  for (int64_t r = 0; r < tokens; ++r) id_values.push_back(int32_t((r * 7919) % v));
  Tensor ids = Tensor::empty({tokens}, DType::I32, device);
  ids.copy_from(Tensor::from_vector(id_values, {tokens}));
  table.row("embedding_fwd", 2 * th * e,
            [&] { kernels::embedding_forward(ids, embedding_table, 0, y); });
  Tensor dtable = tensor({v, h}, DType::F32, 0.f);
  table.row("embedding_bwd", th * e + 2 * th * 4,
            [&] { kernels::embedding_backward(x, ids, 0, dtable); });
}

void print_flat_buffer_kernels(const KernelBenchOptions& o, Device device, double copy_gbps) {
  const int64_t n = o.flat_buffer_elements;
  print_header("flat f32 buffers (" + std::to_string(n) + " parameters), compulsory traffic:");
  const Table table(o.min_time, device, copy_gbps);
  Tensor p = filled({n}, DType::F32, 0.1f, device), g = filled({n}, DType::F32, 0.01f, device);
  Tensor m = filled({n}, DType::F32, 0.f, device), v = filled({n}, DType::F32, 0.f, device);
  Tensor half = filled({n}, DType::BF16, 0.f, device);
  table.row("adamw", 7.0 * 4 * double(n), [&] {
    kernels::adamw_update(p, g, m, v, {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10});
  });
  table.row("cast_to_bf16", 6.0 * double(n), [&] { kernels::cast(p, half); });
  table.row("axpy", 12.0 * double(n), [&] { kernels::axpy(0.5f, g, m); });
  // Their results are not needed: the calls (into the kernels library) run all the same.
  table.row("sum_squares", 4.0 * double(n), [&] { kernels::sum_squares(g); });
  table.row("has_inf_or_nan", 4.0 * double(n), [&] { kernels::has_inf_or_nan(g); });
}

}  // namespace megatron::cli
