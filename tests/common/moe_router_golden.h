// The PyTorch float64 goldens of the MoE router alone (tests/data/moe_router/<name>, written by
// tools/reference/moe_router_reference.py), and a harness that runs one MoeRouter on them:
//   softmax  top-3 post-softmax, 5 groups (3 chosen), aux_loss, seq_aux_loss, z-loss (fp64)
//   sigmoid  top-4 sigmoid, expert bias, 4 groups (2 chosen), scaling 2.5, aux_loss,
//            seq_aux_loss (fp64)
//   tie      top-2 post-softmax where an f32 GEMM rounds two logits to a tie (fp64)
//   global   top-2 softmax, global_aux_loss 1e-2, 2 data-parallel ranks x 2 micro-batches
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "../common/gpt2_golden.h"  // max_relative_error, SafetensorsReader, source_dir
#include "model/moe_router.h"
#include "parallel/full_tensors.h"

namespace megatron::testing {

inline TransformerConfig moe_router_golden_config(const std::string& name, bool fp64) {
  TransformerConfig c;
  c.num_layers = 1;
  c.num_attention_heads = 1;
  MoeOptions& m = c.arch.moe;
  m.router_fp64 = fp64;
  if (name == "softmax") {
    c.hidden_size = 13;
    m.num_experts = 10;
    m.topk = 3;
    m.num_groups = 5;
    m.group_topk = 3;
    m.aux_loss_coeff = 1e-2;
    m.seq_aux_loss_coeff = 3e-2;
    m.z_loss_coeff = 1e-3;
  } else if (name == "sigmoid") {
    c.hidden_size = 11;
    m.num_experts = 12;
    m.topk = 4;
    m.score_function = MoeScoreFunction::kSigmoid;
    m.expert_bias = true;
    m.num_groups = 4;
    m.group_topk = 2;
    m.topk_scaling_factor = 2.5;
    m.aux_loss_coeff = 2e-2;
    m.seq_aux_loss_coeff = 1e-2;
  } else if (name == "tie") {
    c.hidden_size = 4;
    m.num_experts = 4;
    m.topk = 2;
  } else {
    c.hidden_size = 9;
    m.num_experts = 6;
    m.topk = 2;
    m.global_aux_loss_coeff = 1e-2;
  }
  c.ffn_hidden_size = 4 * c.hidden_size;
  return c;
}

inline std::unique_ptr<SafetensorsReader> load_moe_router_golden(const std::string& name) {
  return std::make_unique<SafetensorsReader>(source_dir() + "/tests/data/moe_router/" + name +
                                             "/golden.safetensors");
}

// One router "router" on `device` with the weight w f32 [E, h] (and, with the config's expert
// bias, its bias f32 [E]); gradients accumulate over calls of run().
class MoeRouterHarness {
 public:
  struct Result {
    Tensor indices, probs, dx;  // on the CPU
    MoeLosses losses;
  };

  MoeRouterHarness(const TransformerConfig& c, const ParallelState& ps, const Tensor& w,
                   const Tensor& bias, Device device)
      : store_(0, 1, device), weights_(store_, DType::F32), arena_(device), device_(device) {
    router_ = std::make_unique<MoeRouter>("router", c, ps, store_, weights_);
    store_.allocate();
    assign_from_full_tensors({{"router.weight", w}}, store_);
    weights_.refresh();
    for (Buffer& b : store_.buffers())
      if (b.spec.name == "router.expert_bias") b.value.copy_from(bias.to(device));
    store_.zero_grads();
  }

  // A training forward and backward of x [n, h] (rows in [s, b] order) with the upstream
  // gradient dprobs [n, k] (undefined: zeros) and the losses' gradient scale.
  Result run(const Tensor& x, int64_t batch, const Tensor& dprobs, float loss_scale) {
    arena_.reset();
    MoeRouter::Ctx ctx;
    router_->forward(ctx, x.to(device_), batch, /*train=*/true, arena_);
    Tensor dp = arena_.zeros(ctx.probs.shape(), DType::F32);
    if (dprobs.defined()) dp.copy_from(dprobs.to(device_));
    Tensor dx = arena_.zeros(x.shape(), DType::F32);
    router_->backward(ctx, dp, loss_scale, dx, arena_);
    return {ctx.indices.to(Device::CPU), ctx.probs.to(Device::CPU), dx.to(Device::CPU), ctx.losses};
  }

  // The router weight's gradient f32 [E, h] (device tensor).
  Tensor& grad() { return store_.params().front().grad; }
  // The trainer's step start: the routers' running counts restart.
  void reset_step() { reset_moe_token_counts(store_); }

 private:
  ParameterStore store_;
  ComputeWeights weights_;
  std::unique_ptr<MoeRouter> router_;
  Arena arena_;
  Device device_;
};

// The fp64 fixture `name` through the router at `fp64` on `device`: the chosen experts and
// their weights, the losses, and the gradients of the weight and of the input.
struct MoeRouterRun {
  MoeRouterHarness::Result result;
  Tensor grad_w;  // on the CPU
};

inline MoeRouterRun run_moe_router_golden(const SafetensorsReader& g, const std::string& name,
                                          bool fp64, const ParallelState& ps, Device device) {
  const Tensor x3 = g.get("x");
  const int64_t batch = x3.size(1), hidden = x3.size(2);
  const Tensor x = x3.view({x3.size(0) * batch, hidden});
  MoeRouterHarness h(moe_router_golden_config(name, fp64), ps, g.get("w"),
                     g.contains("bias") ? g.get("bias") : Tensor(), device);
  MoeRouterRun run;
  run.result = h.run(x, batch, g.get("dprobs"), 1.0f);
  run.grad_w = h.grad().to(Device::CPU);
  return run;
}

// The run against the float64 golden: the same experts, weights (f32, <= 1e-6 relative), losses
// (<= 1e-12: computed in double from f64 logits), gradients (<= 1e-6: f32 results of f64 sums).
inline void expect_matches_moe_router_golden(const SafetensorsReader& g, const MoeRouterRun& run) {
  EXPECT_EQ(run.result.indices.to_vector<int32_t>(), g.get("indices").to_vector<int32_t>());
  EXPECT_LE(max_relative_error(run.result.probs, g.get("probs")), 1e-6);
  const MoeLosses& l = run.result.losses;
  for (const auto& [key, value] : {std::pair{"loss.load_balancing", l.load_balancing},
                                   std::pair{"loss.seq_load_balancing", l.seq_load_balancing},
                                   std::pair{"loss.z_loss", l.z_loss}}) {
    SCOPED_TRACE(key);
    const double expected = g.contains(key) ? g.get(key).to_vector<double>().at(0) : 0.0;
    EXPECT_NEAR(value, expected, 1e-12 * std::fabs(expected));
  }
  EXPECT_LE(max_relative_error(run.grad_w, g.get("grad.w")), 1e-6);
  EXPECT_LE(max_relative_error(run.result.dx, g.get("grad.x")), 1e-6);
}

// The global fixture's micro-batch m at one data-parallel rank: both ranks' sequences side by
// side [s, 2b, h] (the loss sums over tokens, so their order does not matter), as rows
// [s·2b, h].
inline Tensor global_micro_batch_at_one_rank(const SafetensorsReader& g, int64_t m) {
  const Tensor x = g.get("x");  // [ranks, micro, s, b, h]
  const int64_t ranks = x.size(0), s = x.size(2), b = x.size(3), h = x.size(4);
  Tensor out = Tensor::empty({s, ranks * b, h}, DType::F32);
  for (int64_t r = 0; r < ranks; ++r)
    out.slice(1, r * b, (r + 1) * b).copy_from(x.select(0, r).select(0, m));
  return out.view({s * ranks * b, h});
}

}  // namespace megatron::testing
