// TransformerLayer (LayerNorm, attention, MLP, fused bias/dropout/residual) at TP=1 against the
// naive double reference of model_reference.h: outputs, and input and parameter gradients
// against central finite differences of the reference, with dropout ON (the reference draws
// its masks from PhiloxStream with the documented keys). Covers pre-LN (GPT), pre-LN with
// --apply-residual-connection-post-layernorm, and post-LN with a padding mask (BERT order).
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "model/transformer_layer.h"
#include "model_reference.h"
#include "model_test_util.h"

namespace megatron {
namespace {

struct LayerCase {
  LayerNormOrder order;
  bool residual_post_ln;
  AttnMaskType mask;
};

void check_layer(const LayerCase& lc) {
  const int64_t s = 5, b = 2, h = 8, heads = 2, ffn = 12;
  const int layer_number = 1;
  TransformerConfig config;
  config.num_layers = 2;
  config.hidden_size = h;
  config.num_attention_heads = heads;
  config.ffn_hidden_size = ffn;
  config.hidden_dropout = 0.2f;
  config.attention_dropout = 0.3f;
  config.layernorm_order = lc.order;
  config.apply_residual_connection_post_layernorm = lc.residual_post_ln;
  config.attn_mask_type = lc.mask;

  ParallelState ps = test::solo_parallel_state();
  ParameterStore store(0, 1);
  ComputeWeights weights(store, DType::F32);
  TransformerLayer layer(layer_number, config, ps, store, weights);
  store.allocate();
  test::randomize_parameters(store, 7, 0.5);
  weights.refresh();

  const DropoutScope scope{true, 1234, 5, 40};
  std::vector<int> pad;
  Tensor pad_mask;
  if (lc.mask == AttnMaskType::kPadding) {
    pad = {0, 0, 0, 0, 0, /* sample 1: */ 0, 0, 0, 1, 1};  // [b, s]
    pad_mask = Tensor::empty({b, s}, DType::U8);
    for (int i = 0; i < b * s; ++i) pad_mask.data<uint8_t>()[i] = uint8_t(pad[i]);
  }
  Tensor x = test::random_tensor({s, b, h}, DType::F32, 11);
  Tensor r = test::random_tensor({s, b, h}, DType::F32, 12);  // loss = Σ y ⊙ r

  Arena arena;
  TransformerLayer::Ctx ctx;
  Tensor y = layer.forward(ctx, x, pad_mask, scope, arena, arena);
  Tensor dy = r.clone();
  Tensor dx = layer.backward(ctx, dy, 1.0f, arena);

  test::RefShape sh{s, b, h, heads, ffn, 1e-5};
  test::RefDropout drop{true, scope.seed, scope.iteration, scope.first_sample, 0.2, 0.3};
  test::RefParams params = test::ref_params_from_store(store);
  std::vector<double> xr = test::to_double(x), rr = test::to_double(r);
  const bool causal = lc.mask == AttnMaskType::kCausal;
  auto run = [&] {
    return test::ref_layer(sh, params, "", layer_number, xr, lc.order, lc.residual_post_ln, causal,
                           pad, drop);
  };
  auto loss = [&] {
    test::Act out = run();
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * rr[i];
    return l;
  };
  EXPECT_LE(test::relative_error(test::to_double(y), run()), 1e-5);
  EXPECT_LE(test::relative_error(test::to_double(dx), test::finite_differences(xr, loss)), 1e-5)
      << "input gradient";
  for (Parameter& p : store.params()) {
    std::vector<double> fd = test::finite_differences(params.at(p.spec.name), loss);
    EXPECT_LE(test::relative_error(test::to_double(p.grad), fd), 1e-5) << p.spec.name;
  }
}

TEST(ModelTransformerLayer, PreLayerNormCausalMatchesReference) {
  check_layer({LayerNormOrder::kPreLayerNorm, false, AttnMaskType::kCausal});
}

TEST(ModelTransformerLayer, ResidualFromLayerNormOutputMatchesReference) {
  check_layer({LayerNormOrder::kPreLayerNorm, true, AttnMaskType::kCausal});
}

TEST(ModelTransformerLayer, PostLayerNormPaddingMaskMatchesReference) {
  check_layer({LayerNormOrder::kPostLayerNorm, false, AttnMaskType::kPadding});
}

TEST(ModelTransformerLayer, RejectsBadShapes) {
  TransformerConfig config;
  config.num_layers = 1;
  config.hidden_size = 10;
  config.num_attention_heads = 4;
  ParallelState ps = test::solo_parallel_state();
  ParameterStore store(0, 1);
  ComputeWeights weights(store, DType::F32);
  try {
    TransformerLayer layer(0, config, ps, store, weights);
    FAIL() << "hidden 10 with 4 heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--hidden-size 10 is not divisible by --num-attention-heads 4"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace megatron
