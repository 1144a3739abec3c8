// --decoupled-lr: AdamW updates the parameters marked ParamSpec::embedding_or_output (the word
// embedding, the untied output layer) with the decoupled learning rate and every other
// parameter with the step's, against a hand-written double-precision AdamW (torch.optim.AdamW's
// update) over three steps; the mark sits on the word embedding and the output layer only.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distributed/solo_communicator.h"
#include "model/gpt_model.h"
#include "optim/optimizer.h"

namespace megatron {
namespace {

TEST(DecoupledLr, MarkedParametersStepWithTheirOwnLearningRate) {
  ParameterStore store(0, 1);
  store.add({.name = "embedding.word_embeddings.weight",
             .full_shape = {4, 3},
             .partition_dim = 0,
             .embedding_or_output = true});
  store.add({.name = "w", .full_shape = {3, 3}, .partition_dim = 0});
  store.add({.name = "b", .full_shape = {3}, .partition_dim = -1, .weight_decay = false});
  store.allocate();
  const int64_t n = store.flat_values().numel();  // 12 + 9 + 3
  float* values = store.flat_values().data<float>();
  for (int64_t i = 0; i < n; ++i) values[i] = 0.1f * float(i % 7) - 0.3f;
  std::vector<double> p(values, values + n), m(size_t(n), 0.0), v(size_t(n), 0.0);
  const AdamWConfig config{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  AdamW adam(store, config);
  const double lr = 1e-2, decoupled = 3e-2;
  for (int step = 1; step <= 3; ++step) {
    float* g = store.flat_grads().data<float>();
    for (int64_t i = 0; i < n; ++i) g[i] = 0.01f * float((i * 5 + step) % 9) - 0.04f;
    adam.set_decoupled_lr(decoupled);
    adam.step(lr);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = size_t(i);
      const bool embedding = i < 12, decay = i < 21;
      const double r = embedding ? decoupled : lr;
      if (decay) p[k] *= 1 - r * config.weight_decay;
      m[k] = config.beta1 * m[k] + (1 - config.beta1) * double(g[i]);
      v[k] = config.beta2 * v[k] + (1 - config.beta2) * double(g[i]) * double(g[i]);
      const double mhat = m[k] / (1 - std::pow(config.beta1, step));
      const double vhat = v[k] / (1 - std::pow(config.beta2, step));
      p[k] -= r * mhat / (std::sqrt(vhat) + config.eps);
    }
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(values[i], p[size_t(i)], 1e-6) << "step " << step << " element " << i;
  }
}

TEST(DecoupledLr, MarksTheWordEmbeddingAndTheUntiedOutputLayerOnly) {
  GptConfig c;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.vocab_size = 32;
  c.padded_vocab_size = 32;
  c.max_position_embeddings = 8;
  c.seq_length = 8;
  c.arch.untie_embeddings_and_output_weights = true;
  ParallelState ps = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  ParameterStore store(0, 1);
  GptModel model(c, ps, store);
  std::vector<std::string> marked;
  for (const Parameter& p : store.params())
    if (p.spec.embedding_or_output) marked.push_back(p.spec.name);
  EXPECT_EQ(marked,
            (std::vector<std::string>{"embedding.word_embeddings.weight", "output_layer.weight"}));
}

}  // namespace
}  // namespace megatron
