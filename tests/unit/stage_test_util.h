// Helpers for the pipeline-stage tests (GPT and BERT): a model split into a first and a last
// stage against the same model whole.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/parameter.h"

namespace megatron::test {

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// After one forward + backward of the same micro-batch: every gradient of the two stages but
// the tied word embedding's (`word`) is the whole model's bit for bit. The word embedding lives
// on both stages — the input side's gradient on the first, the head's on the last — and their
// sum (what the embedding-group all-reduce forms) is the whole model's, while the last stage's
// alone is not (it must miss the input side's contribution).
inline void expect_stage_gradients_are_the_whole_models(const ParameterStore& first,
                                                        const ParameterStore& last,
                                                        const ParameterStore& whole,
                                                        const std::string& word) {
  for (const ParameterStore* stage : {&first, &last})
    for (const Parameter& p : stage->params()) {
      if (p.spec.name == word) continue;
      EXPECT_TRUE(bitwise_equal(p.grad, whole.get(p.spec.name).grad)) << p.spec.name;
    }
  const std::vector<float> g0 = first.get(word).grad.to_vector<float>();
  const std::vector<float> g1 = last.get(word).grad.to_vector<float>();
  const std::vector<float> gw = whole.get(word).grad.to_vector<float>();
  double head_only = 0;
  for (size_t i = 0; i < gw.size(); ++i) {
    EXPECT_NEAR(g0[i] + g1[i], gw[i], 1e-6 * (std::abs(gw[i]) + 1e-3)) << "element " << i;
    head_only += std::abs(g1[i] - gw[i]);
  }
  EXPECT_GT(head_only, 0.0) << "the input-side gradient must be missing from the copy";
}

}  // namespace megatron::test
