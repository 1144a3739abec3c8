// LayerNorm, ParallelAttention and ParallelMLP modules (TP = 1) one by one against the naive
// double reference (model_reference.h): outputs, input gradients and parameter gradients by
// central finite differences of the reference. (The whole layer is checked in
// model_layer_test.cpp; these isolate a failure to one module.)
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "model/attention.h"
#include "model/layer_norm.h"
#include "model/mlp.h"
#include "model_reference.h"
#include "model_test_util.h"

namespace megatron {
namespace {

constexpr int64_t kS = 5, kB = 2, kH = 8, kHeads = 2, kFfn = 12;

TransformerConfig module_config() {
  TransformerConfig c;
  c.num_layers = 3;
  c.hidden_size = kH;
  c.num_attention_heads = kHeads;
  c.ffn_hidden_size = kFfn;
  c.attention_dropout = 0.25f;
  return c;
}

// Runs forward (fwd(ctx, x) → y) and backward (bwd(ctx, dy) → dx) of a module with
// loss = Σ y ⊙ r, and compares y, dx and every parameter gradient with the reference.
template <typename Fwd, typename Bwd, typename Ref>
void check_module(ParameterStore& store, Fwd fwd, Bwd bwd, Ref ref) {
  Tensor x = test::random_tensor({kS, kB, kH}, DType::F32, 21);
  Tensor r = test::random_tensor({kS, kB, kH}, DType::F32, 22);
  Tensor y = fwd(x);
  Tensor dx = bwd(r.clone());
  test::RefParams params = test::ref_params_from_store(store);
  std::vector<double> xr = test::to_double(x), rr = test::to_double(r);
  auto loss = [&] {
    test::Act out = ref(params, xr);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * rr[i];
    return l;
  };
  EXPECT_LE(test::relative_error(test::to_double(y), ref(params, xr)), 1e-5) << "output";
  EXPECT_LE(test::relative_error(test::to_double(dx), test::finite_differences(xr, loss)), 1e-5)
      << "input gradient";
  for (Parameter& p : store.params()) {
    std::vector<double> fd = test::finite_differences(params.at(p.spec.name), loss);
    EXPECT_LE(test::relative_error(test::to_double(p.grad), fd), 1e-5) << p.spec.name;
  }
}

struct Fixture {
  ParallelState ps = test::solo_parallel_state();
  ParameterStore store{0, 1};
  ComputeWeights weights{store, DType::F32};
  Arena arena;
  void ready() {
    store.allocate();
    test::randomize_parameters(store, 31, 0.5);
    weights.refresh();
  }
};

TEST(ModelModules, LayerNormMatchesReference) {
  Fixture f;
  LayerNorm ln("ln", kH, 1e-5f, f.store, f.weights);
  f.ready();
  LayerNorm::Ctx ctx;
  check_module(
      f.store, [&](const Tensor& x) { return ln.forward(ctx, x, f.arena); },
      [&](Tensor dy) {
        Tensor dx = f.arena.alloc(dy.shape(), DType::F32);
        ln.backward(ctx, dy, dx, 0.0f);
        return dx;
      },
      [&](const test::RefParams& p, const test::Act& x) {
        return test::ref_layernorm(x, p.at("ln.weight"), p.at("ln.bias"), kH, 1e-5);
      });
}

TEST(ModelModules, CausalAttentionWithDropoutMatchesReference) {
  Fixture f;
  const TransformerConfig c = module_config();
  ParallelAttention attn("attn", /*layer_number=*/2, c, f.ps, f.store, f.weights);
  f.ready();
  const DropoutScope scope{true, 77, 4, 12};
  const test::RefDropout drop{true, 77, 4, 12, 0.0, 0.25};
  ParallelAttention::Ctx ctx;
  check_module(
      f.store,
      [&](const Tensor& x) { return attn.forward(ctx, x, Tensor(), scope, f.arena, f.arena); },
      [&](Tensor dy) { return attn.backward(ctx, dy, f.arena); },
      [&](const test::RefParams& p, const test::Act& x) {
        return test::ref_attention({kS, kB, kH, kHeads, kFfn}, p, "attn.", 2, x, true, {}, drop);
      });
  // The dense bias is the caller's (fused into bias+dropout+residual): untouched here.
  for (float g : f.store.get("attn.dense.bias").grad.to_vector<float>()) EXPECT_EQ(g, 0.0f);
}

// Both GeLU forms: the erf one (Megatron's default) and the tanh one (--openai-gelu).
class MlpGeluTest : public ::testing::TestWithParam<kernels::GeluForm> {};

TEST_P(MlpGeluTest, MatchesReference) {
  Fixture f;
  TransformerConfig c = module_config();
  c.gelu = GetParam();
  ParallelMLP mlp("mlp", c, f.ps, f.store, f.weights);
  f.ready();
  ParallelMLP::Ctx ctx;
  const bool tanh_form = GetParam() == kernels::GeluForm::kTanh;
  check_module(
      f.store, [&](const Tensor& x) { return mlp.forward(ctx, x, f.arena); },
      [&](Tensor dy) { return mlp.backward(ctx, dy, f.arena); },
      [&](const test::RefParams& p, const test::Act& x) {
        return test::ref_mlp({kS, kB, kH, kHeads, kFfn, 1e-5, tanh_form}, p, "mlp.", x);
      });
}

INSTANTIATE_TEST_SUITE_P(Forms, MlpGeluTest,
                         ::testing::Values(kernels::GeluForm::kErf, kernels::GeluForm::kTanh),
                         [](const auto& info) {
                           return std::string(kernels::gelu_form_name(info.param));
                         });

}  // namespace
}  // namespace megatron
