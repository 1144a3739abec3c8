// Muon (--optimizer muon, optim/muon.h) beside AdamW against PyTorch: the fixtures of
// tools/reference/muon_reference.py (float64) — three steps at three learning rates from random
// gradients, on parameters named and laid out as the models register them: a split fused QKV
// (2 query groups of 2 queries), SwiGLU's stacked fc1, two experts' fc1 and fc2, the router, the
// learned position embedding (Muon's, as in Megatron), the word embedding and output layer
// (AdamW with weight decay), a norm and a bias (AdamW without). Case "ci" has the flags of
// Megatron's MoE Muon CI configs, case "variant" Nesterov, unit_rms_norm, 9 Polar Express steps
// and the QKV orthogonalised whole. The weights after step 3 and Muon's momentum match in f32
// and with bf16 parameters (the fp32 master weights).
#include <gtest/gtest.h>

#include <cmath>

#include "../common/source_dir.h"
#include "core/safetensors.h"
#include "optim/optimizer.h"
#include "parallel/full_tensors.h"

namespace megatron {
namespace {

using megatron::testing::source_dir;

// The reference script's shapes (its constants).
constexpr int64_t kHidden = 16, kGroups = 2, kQueries = 2, kHeadDim = 4, kFfn = 24, kExperts = 2,
                  kExpertFfn = 12, kVocab = 32, kMaxPos = 8;
constexpr int64_t kQkvRows = kGroups * (kQueries + 2) * kHeadDim;
constexpr double kWeightDecay = 0.1;

ParameterStore make_store(DType values) {
  ParameterStore store(0, 1);
  store.set_expert_grid(0, 1, 0, 1);
  store.add({.name = "embedding.word_embeddings.weight",
             .full_shape = {kVocab, kHidden},
             .partition_dim = 0,
             .embedding_or_output = true,
             .embedding = true});
  store.add({.name = "embedding.position_embeddings.weight",
             .full_shape = {kMaxPos, kHidden},
             .embedding = true});
  store.add(
      {.name = "layers.0.input_layernorm.weight", .full_shape = {kHidden}, .weight_decay = false});
  store.add({"layers.0.self_attention.query_key_value.weight", {kQkvRows, kHidden}, 0});
  store.add({"layers.0.self_attention.query_key_value.bias", {kQkvRows}, 0, false});
  store.add({"layers.0.self_attention.linear_proj.weight", {kHidden, kHidden}, 1});
  store.add({"layers.0.mlp.linear_fc1.weight", {2, kFfn, kHidden}, 1});
  store.add({"layers.0.mlp.linear_fc2.weight", {kHidden, kFfn}, 1});
  store.add({"layers.1.mlp.router.weight", {kExperts, kHidden}, -1});
  store.add({.name = "layers.1.mlp.experts.linear_fc1.weight",
             .full_shape = {kExperts, 2, kExpertFfn, kHidden},
             .partition_dim = 2,
             .expert = true});
  store.add({.name = "layers.1.mlp.experts.linear_fc2.weight",
             .full_shape = {kExperts, kHidden, kExpertFfn},
             .partition_dim = 2,
             .expert = true});
  store.add({.name = "output_layer.weight",
             .full_shape = {kVocab, kHidden},
             .partition_dim = 0,
             .embedding_or_output = true,
             .embedding = true});
  store.allocate(1, values);
  return store;
}

std::map<std::string, Tensor> with_prefix(const SafetensorsReader& file, const std::string& p) {
  std::map<std::string, Tensor> out;
  for (const std::string& name : file.names())
    if (name.rfind(p, 0) == 0) out[name.substr(p.size())] = file.get(name);
  return out;
}

double max_abs_difference(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  EXPECT_EQ(g.size(), w.size());
  double worst = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i)
    worst = std::max(worst, std::abs(double(g[i]) - double(w[i])));
  return worst;
}

// Three steps of the fixture `name` with `muon`; the store's values in `values`.
void check_case(const std::string& name, const MuonConfig& muon, DType values) {
  SCOPED_TRACE(name + (values == DType::BF16 ? " (bf16 parameters)" : " (f32)"));
  const SafetensorsReader file(source_dir() + "/tests/data/muon/" + name + ".safetensors");
  ParameterStore store = make_store(values);
  const auto initial = with_prefix(file, "w0.");
  if (values == DType::F32) assign_from_full_tensors(initial, store);
  AdamWConfig config;
  config.beta1 = 0.9;
  config.beta2 = 0.95;
  config.eps = 1e-8;
  config.weight_decay = kWeightDecay;
  config.muon = muon;
  config.muon->qkv = {kGroups, kQueries, kHeadDim};
  AdamW optimizer(store, config);
  if (values == DType::BF16)  // the exact weights as the fp32 master (as after a resume)
    for (const Parameter& p : store.params()) {
      Tensor master = optimizer.flat_buffers().at(kMasterWeightsBuffer);
      Tensor slot = master.slice(0, p.flat_offset, p.flat_offset + p.grad.numel());
      slot.copy_from(initial.at(p.spec.name).flatten());
    }
  const std::vector<double> lrs = file.get("lr").to_vector<double>();
  for (size_t step = 1; step <= lrs.size(); ++step) {
    const auto grads = with_prefix(file, std::string("g").append(std::to_string(step)) + ".");
    for (Parameter& p : store.params()) p.grad.copy_from(grads.at(p.spec.name));
    optimizer.step(lrs[step - 1]);
  }
  const auto buffers = optimizer.flat_buffers();
  const Tensor master =
      values == DType::F32 ? store.flat_values() : buffers.at(kMasterWeightsBuffer);
  const Tensor& momentum = buffers.at(kMuonMomentumBuffer);
  const auto want = with_prefix(file, "w3.");
  const auto want_momentum = with_prefix(file, "m3.");
  for (const Parameter& p : store.params()) {
    SCOPED_TRACE(p.spec.name);
    const int64_t n = p.grad.numel();
    // f32 against float64: the Newton–Schulz GEMMs (sums of <= 48 products of O(1) values,
    // 5 to 9 steps) and AdamW round at ~1e-7 of O(1) weights; a wrong coefficient, scale,
    // split or momentum moves them by >= 1e-4.
    EXPECT_LT(
        max_abs_difference(master.slice(0, p.flat_offset, p.flat_offset + n), want.at(p.spec.name)),
        2e-6);
    const Tensor m = momentum.slice(0, p.flat_offset, p.flat_offset + n);
    if (want_momentum.count(p.spec.name)) {
      EXPECT_TRUE(is_muon_matrix(p.spec));
      EXPECT_LT(max_abs_difference(m, want_momentum.at(p.spec.name)), 1e-6);
    } else {
      EXPECT_FALSE(is_muon_matrix(p.spec));
      EXPECT_EQ(max_abs_difference(m, Tensor::zeros({n}, DType::F32)), 0.0);
    }
  }
}

MuonConfig ci_flags() {
  MuonConfig c;
  c.momentum = 0.9;
  c.scale_mode = MuonScaleMode::kSpectral;
  c.extra_scale_factor = 0.2;
  return c;
}

MuonConfig variant_flags() {
  MuonConfig c;
  c.momentum = 0.8;
  c.nesterov = true;
  c.split_qkv = false;
  c.scale_mode = MuonScaleMode::kUnitRmsNorm;
  c.coefficient_type = "polar_express";
  c.num_ns_steps = 9;
  return c;
}

TEST(MuonPytorchGolden, CiFlagsMatchTorch) {
  check_case("ci", ci_flags(), DType::F32);
}

TEST(MuonPytorchGolden, CiFlagsWithBf16ParametersMatchTorchInTheMaster) {
  check_case("ci", ci_flags(), DType::BF16);
}

TEST(MuonPytorchGolden, NesterovUnitRmsNormWholeQkvMatchTorch) {
  check_case("variant", variant_flags(), DType::F32);
}

TEST(MuonCoefficients, CycleOrRepeatTheLastAsMegatron) {
  const auto quintic = newton_schulz_coefficients("quintic", 7);
  EXPECT_EQ(quintic[5], quintic[0]);  // cycles
  EXPECT_EQ(quintic[6], quintic[1]);
  const auto polar = newton_schulz_coefficients("polar_express", 10);
  EXPECT_EQ(polar[9], polar[7]);  // repeats its last
  EXPECT_NE(polar[9], polar[1]);
  EXPECT_THROW(newton_schulz_coefficients("custom", 5), Error);
  EXPECT_THROW(newton_schulz_coefficients("cubic5", 6), Error);
  EXPECT_THROW(newton_schulz_coefficients("quintic", 0), Error);
  EXPECT_THROW(muon_scale_mode_from_name("spectal"), Error);
}

TEST(MuonScale, ModesFollowTheShape) {
  EXPECT_DOUBLE_EQ(muon_scale(48, 16, MuonScaleMode::kSpectral), std::sqrt(48.0));
  EXPECT_DOUBLE_EQ(muon_scale(16, 48, MuonScaleMode::kSpectral), std::sqrt(48.0));
  EXPECT_DOUBLE_EQ(muon_scale(48, 16, MuonScaleMode::kUnitRmsNorm), std::sqrt(3.0));
  EXPECT_DOUBLE_EQ(muon_scale(16, 48, MuonScaleMode::kShapeScaling), 1.0);
  EXPECT_DOUBLE_EQ(muon_scale(48, 16, MuonScaleMode::kShapeScaling), std::sqrt(3.0));
}

}  // namespace
}  // namespace megatron
