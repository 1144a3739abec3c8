// GptModel at TP=1 against the naive double reference (model_reference.h): loss, logits and
// every parameter gradient (central finite differences of the reference loss), with dropout on;
// activation recompute bit-identical to no recompute; dropout masks independent of the
// micro-batch split; the loss independent of the vocabulary padding; bf16 close to f32.
#include <gtest/gtest.h>

#include <cstring>

#include "kernel_test_util.h"
#include "model/gpt_model.h"
#include "model_reference.h"
#include "model_test_util.h"

namespace megatron {
namespace {

GptConfig tiny_config() {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.vocab_size = 37;
  c.padded_vocab_size = 40;
  c.max_position_embeddings = 8;
  c.seq_length = 6;
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.3f;
  return c;
}

// A [b, s] batch of deterministic tokens/labels (labels include id vocab−1) and a loss mask
// with some zeros.
GptBatch make_batch(const GptConfig& c, int64_t b, int64_t first_sample, int64_t iteration) {
  const int64_t s = c.seq_length;
  std::vector<int32_t> tokens(b * s), labels(b * s);
  std::vector<float> mask(b * s);
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < s; ++i) {
      const int64_t g = (first_sample + r) * s + i;  // depends on the global sample only
      tokens[r * s + i] = int32_t((g * 7 + 3) % c.vocab_size);
      labels[r * s + i] = int32_t((g * 11 + 5) % c.vocab_size);
      mask[r * s + i] = (g % 5 == 2) ? 0.0f : 1.0f;
    }
  labels[0] = int32_t(c.vocab_size - 1);
  return {Tensor::from_vector(tokens, {b, s}), Tensor::from_vector(labels, {b, s}),
          Tensor::from_vector(mask, {b, s}), first_sample, iteration};
}

struct TinyGpt {
  explicit TinyGpt(const GptConfig& c, uint64_t seed = 99)
      : ps(test::solo_parallel_state()), store(0, 1), model(c, ps, store) {
    store.allocate();
    model.init_weights(seed);
  }
  ParallelState ps;
  ParameterStore store;
  GptModel model;
};

test::RefGpt ref_of(const GptConfig& c, int64_t b) {
  return {{c.seq_length, b, c.hidden_size, c.num_attention_heads, c.ffn_hidden_size,
           c.layernorm_epsilon, c.gelu == kernels::GeluForm::kTanh},
          c.num_layers,
          c.vocab_size};
}

template <typename T>
std::vector<T> vec(const Tensor& t) {
  return t.to_vector<T>();
}

TEST(ModelGpt, LossAndEveryGradientMatchReference) {
  const GptConfig c = tiny_config();
  TinyGpt g(c);
  test::randomize_parameters(g.store, 3, 0.4);
  g.model.refresh_compute_weights();
  const GptBatch batch = make_batch(c, 2, 10, 7);
  const uint64_t seed = 4321;
  const float grad_scale = 2.0f;
  const float loss = g.model.forward_backward(batch, grad_scale, seed);

  test::RefParams params = test::ref_params_from_store(g.store);
  const test::RefDropout drop{true, seed, batch.iteration, batch.first_sample, 0.2, 0.3};
  const auto tokens = vec<int32_t>(batch.tokens), labels = vec<int32_t>(batch.labels);
  const std::vector<int> tok(tokens.begin(), tokens.end()), lab(labels.begin(), labels.end());
  const auto mask = vec<float>(batch.loss_mask);
  auto ref_loss = [&] { return test::ref_gpt_loss(ref_of(c, 2), params, tok, lab, mask, drop); };
  EXPECT_NEAR(loss, ref_loss(), 1e-5 * std::abs(ref_loss()));
  for (Parameter& p : g.store.params()) {
    std::vector<double> fd = test::finite_differences(params.at(p.spec.name), ref_loss);
    for (double& v : fd) v *= grad_scale;
    EXPECT_LE(test::relative_error(test::to_double(p.grad), fd), 1e-5) << p.spec.name;
  }
  // Padded vocabulary rows are never looked up nor predicted: exactly zero gradient.
  const Tensor& wte = g.store.get("embedding.word_embeddings.weight").grad;
  for (float v : vec<float>(wte.slice(0, c.vocab_size, c.padded_vocab_size))) EXPECT_EQ(v, 0.0f);
}

TEST(ModelGpt, EvaluationLossAndLogitsMatchReference) {
  const GptConfig c = tiny_config();
  TinyGpt g(c);
  test::randomize_parameters(g.store, 5, 0.4);
  g.model.refresh_compute_weights();
  const GptBatch batch = make_batch(c, 3, 0, 1);
  const auto tokens = vec<int32_t>(batch.tokens), labels = vec<int32_t>(batch.labels);
  const std::vector<int> tok(tokens.begin(), tokens.end()), lab(labels.begin(), labels.end());
  const test::RefParams params = test::ref_params_from_store(g.store);
  const double ref =
      test::ref_gpt_loss(ref_of(c, 3), params, tok, lab, vec<float>(batch.loss_mask), {});
  EXPECT_NEAR(g.model.forward_loss(batch), ref, 1e-5 * ref);
  Tensor logits = g.model.forward_logits(batch.tokens);
  ASSERT_EQ(logits.shape(), (Shape{3, c.seq_length, c.vocab_size}));
  EXPECT_LE(
      test::relative_error(vec<float>(logits), test::ref_gpt_logits(ref_of(c, 3), params, tok, {})),
      1e-5);
  // Evaluation leaves the gradients alone.
  for (float v : vec<float>(g.store.flat_grads())) ASSERT_EQ(v, 0.0f);
}

// Full recompute (each layer from its input; or with the block method only the first layer)
// and selective recompute (the attention core) give the losses and gradients of a run that
// keeps every activation, bit for bit.
TEST(ModelGpt, RecomputeIsBitIdentical) {
  for (const char* mode : {"full", "full, block of 1", "selective"}) {
    SCOPED_TRACE(mode);
    GptConfig c = tiny_config();
    TinyGpt plain(c);
    if (std::string(mode) == "selective") {
      c.selective_recompute = true;
    } else {
      c.recompute_activations = true;
      if (std::string(mode) != "full") c.recompute_method = RecomputeMethod::kBlock;
    }
    TinyGpt recompute(c);
    for (int step = 0; step < 2; ++step) {  // accumulate over two micro-batches
      const GptBatch batch = make_batch(c, 2, 2 * step, 3);
      const float a = plain.model.forward_backward(batch, 0.5f, 77);
      const float b = recompute.model.forward_backward(batch, 0.5f, 77);
      EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << a << " vs " << b;
    }
    const Tensor& ga = plain.store.flat_grads();
    const Tensor& gb = recompute.store.flat_grads();
    ASSERT_EQ(ga.numel(), gb.numel());
    EXPECT_EQ(std::memcmp(ga.raw_data(), gb.raw_data(), ga.nbytes()), 0);
  }
}

// Selective recompute of each of Megatron's --recompute-modules regions, alone and together,
// gives the losses and gradients of a run that keeps every activation, bit for bit (dropout
// on: the recomputed regions redraw the same masks). Dense layers (layernorm, mlp), MoE layers
// with a gated shared expert (moe, shared_experts, moe_act) and multi-latent attention
// (mla_up_proj), in one model whose first layer is dense.
TEST(ModelGpt, RecomputeModulesAreBitIdentical) {
  struct Mode {
    const char* name;
    void (*set)(GptConfig&);
  };
  const Mode modes[] = {
      {"layernorm", [](GptConfig& c) { c.recompute_layernorm = true; }},
      {"mlp", [](GptConfig& c) { c.recompute_mlp = true; }},
      {"moe", [](GptConfig& c) { c.recompute_moe = true; }},
      {"shared_experts", [](GptConfig& c) { c.recompute_shared_experts = true; }},
      {"moe_act", [](GptConfig& c) { c.recompute_moe_act = true; }},
      {"mla_up_proj", [](GptConfig& c) { c.recompute_mla_up_proj = true; }},
      {"layernorm mla_up_proj mlp moe_act (the MoE CI configs')",
       [](GptConfig& c) {
         c.recompute_layernorm = c.recompute_mla_up_proj = c.recompute_mlp = true;
         c.recompute_moe_act = true;
       }},
      {"all",
       [](GptConfig& c) {
         c.selective_recompute = c.recompute_layernorm = c.recompute_mla_up_proj = true;
         c.recompute_mlp = c.recompute_moe = c.recompute_shared_experts = true;
         c.recompute_moe_act = true;
       }},
  };
  for (const bool mla : {false, true})
    for (const Mode& mode : modes) {
      SCOPED_TRACE(::testing::Message() << mode.name << (mla ? ", MLA" : ""));
      GptConfig c = tiny_config();
      c.num_layers = 3;
      c.arch.moe.num_experts = 4;
      c.arch.moe.topk = 2;
      c.arch.moe.layer_freq = "([0]+[1]*2)";
      c.arch.moe.shared_expert_ffn = 10;
      c.arch.moe.shared_expert_gate = true;
      if (mla) {
        c.arch.position_embedding = PositionEmbedding::kRope;
        c.arch.mla.enabled = true;
        c.arch.mla.q_lora_rank = 6;
        c.arch.mla.kv_lora_rank = 6;
        c.arch.mla.qk_head_dim = 4;
        c.arch.mla.qk_pos_emb_head_dim = 2;
        c.arch.mla.v_head_dim = 3;
      } else if (std::string(mode.name) == "mla_up_proj") {
        continue;
      }
      TinyGpt plain(c);
      mode.set(c);
      c.recompute_mla_up_proj = c.recompute_mla_up_proj && mla;  // MLA's alone
      TinyGpt recompute(c);
      for (int step = 0; step < 2; ++step) {  // accumulate over two micro-batches
        const GptBatch batch = make_batch(c, 2, 2 * step, 3);
        const float a = plain.model.forward_backward(batch, 0.5f, 77);
        const float b = recompute.model.forward_backward(batch, 0.5f, 77);
        EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << a << " vs " << b;
      }
      const Tensor& ga = plain.store.flat_grads();
      const Tensor& gb = recompute.store.flat_grads();
      ASSERT_EQ(ga.numel(), gb.numel());
      EXPECT_EQ(std::memcmp(ga.raw_data(), gb.raw_data(), ga.nbytes()), 0);
    }
}

TEST(ModelGpt, DropoutMasksIndependentOfMicroBatchSplit) {
  const GptConfig c = tiny_config();
  TinyGpt whole(c), split(c);
  // All-ones mask: then the mean over 4 samples equals the average of two means over 2.
  auto ones = [&](GptBatch b) {
    b.loss_mask =
        Tensor::from_vector(std::vector<float>(b.loss_mask.numel(), 1.0f), b.loss_mask.shape());
    return b;
  };
  const float l4 = whole.model.forward_backward(ones(make_batch(c, 4, 8, 2)), 1.0f, 5);
  const float l2a = split.model.forward_backward(ones(make_batch(c, 2, 8, 2)), 0.5f, 5);
  const float l2b = split.model.forward_backward(ones(make_batch(c, 2, 10, 2)), 0.5f, 5);
  EXPECT_NEAR(l4, 0.5 * (l2a + l2b), 1e-5 * l4);
  EXPECT_LE(test::relative_error(vec<float>(split.store.flat_grads()),
                                 vec<float>(whole.store.flat_grads())),
            1e-5);
}

TEST(ModelGpt, LossIndependentOfVocabularyPadding) {
  GptConfig c = tiny_config();
  TinyGpt a(c);
  c.padded_vocab_size = 64;
  TinyGpt b(c);  // TP-invariant init: the real rows are the same numbers
  const GptBatch batch = make_batch(c, 2, 0, 0);
  const float la = a.model.forward_backward(batch, 1.0f, 1);
  const float lb = b.model.forward_backward(batch, 1.0f, 1);
  EXPECT_NEAR(la, lb, 1e-6 * la);
  const Tensor ga = a.store.get("embedding.word_embeddings.weight").grad;
  const Tensor gb = b.store.get("embedding.word_embeddings.weight").grad.slice(0, 0, 40);
  EXPECT_LE(test::relative_error(vec<float>(gb.clone()), vec<float>(ga)), 1e-6);
}

TEST(ModelGpt, Bf16ComputeTracksF32) {
  GptConfig c = tiny_config();
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 0;
  TinyGpt f32(c);
  c.compute_dtype = DType::BF16;
  TinyGpt bf(c);
  const GptBatch batch = make_batch(c, 2, 0, 0);
  const float lf = f32.model.forward_backward(batch, 1.0f, 9);
  const float lb = bf.model.forward_backward(batch, 1.0f, 9);
  const double grad_error =
      test::relative_error(vec<float>(bf.store.flat_grads()), vec<float>(f32.store.flat_grads()));
  // bf16 keeps 8 significant bits (relative precision 2^-8 ≈ 3.9e-3); statistics stay in f32.
  // Bounds: loss 1e-3 relative, gradients 2e-2 (about 5 bf16 ulps).
  EXPECT_NEAR(lb, lf, 1e-3 * lf);
  EXPECT_LE(grad_error, 2e-2);
  EXPECT_GT(grad_error, 1e-5);  // the bf16 path really ran in bf16
}

TEST(ModelGpt, PaddedVocabSizeFollowsMegatron) {
  EXPECT_EQ(padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 128, 2), 50432);
  EXPECT_EQ(padded_vocab_size(50257, 128, 4), 50688);
  EXPECT_EQ(padded_vocab_size(256, 128, 2), 256);
  EXPECT_THROW(padded_vocab_size(100, 0, 1), Error);
}

TEST(ModelGpt, RejectsBadInput) {
  const GptConfig c = tiny_config();
  TinyGpt g(c);
  GptBatch batch = make_batch(c, 2, 0, 0);
  batch.labels.data<int32_t>()[3] = int32_t(c.vocab_size);  // a padded id
  try {
    g.model.forward_backward(batch, 1.0f, 1);
    FAIL() << "a label in the padding was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("outside the vocabulary [0, 37)"), std::string::npos) << e.message();
  }
  GptConfig bad = c;
  bad.padded_vocab_size = 30;
  ParallelState ps = test::solo_parallel_state();
  ParameterStore store(0, 1);
  EXPECT_THROW(GptModel(bad, ps, store), Error);
}

}  // namespace
}  // namespace megatron
