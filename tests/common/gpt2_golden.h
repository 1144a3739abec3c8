// The PyTorch GPT-2 golden fixture (tests/data/gpt2_tiny, written by
// tools/reference/gpt2_reference.py): loading it into a GptModel at any TP rank, and the
// comparisons the golden tests make.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "../common/source_dir.h"
#include "convert/hf_directory.h"
#include "convert/hf_gpt2.h"
#include "core/safetensors.h"
#include "model/gpt_model.h"
#include "parallel/full_tensors.h"

namespace megatron::testing {

inline std::string gpt2_fixture_dir() {
  return source_dir() + "/tests/data/gpt2_tiny";
}

// max |actual - expected| / max |expected|: one number per tensor, scale-aware. Either may be
// f32 or f64 (host tensors).
inline double max_relative_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return INFINITY;
  const auto values = [](const Tensor& t) {
    if (t.dtype() == DType::F64) return t.to_vector<double>();
    const std::vector<float> v = t.to_vector<float>();
    return std::vector<double>(v.begin(), v.end());
  };
  const std::vector<double> a = values(actual), e = values(expected);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(e[i])));
    scale = std::max(scale, std::fabs(double(e[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// The fixture's golden outputs, with the HF-layout gradients also mapped into our layout.
struct Gpt2Golden {
  std::unique_ptr<SafetensorsReader> file;
  GptConfig config;
  HfDirectory hf;
  GptBatch batch;
  TensorMap hf_grads;   // HF name -> gradient
  TensorMap our_grads;  // our name -> gradient (word embedding padded with zero rows)
};

// `padded_vocab`: rows of our word embedding (divisible by the TP size).
inline Gpt2Golden load_gpt2_golden(int64_t padded_vocab) {
  Gpt2Golden g;
  const std::string dir = gpt2_fixture_dir();
  g.file = std::make_unique<SafetensorsReader>(dir + "/golden.safetensors");
  g.hf = read_hf_directory(dir + "/hf");
  g.config = gpt_config_from_hf(g.hf.config, padded_vocab);
  g.config.hidden_dropout = 0.0f;
  g.config.attention_dropout = 0.0f;
  g.batch.tokens = g.file->get("input_ids");
  g.batch.labels = g.file->get("labels");
  g.batch.loss_mask = g.file->get("loss_mask");
  g.config.seq_length = int(g.batch.tokens.size(1));
  for (const std::string& name : g.file->names())
    if (name.rfind("grad.", 0) == 0) g.hf_grads[name.substr(5)] = g.file->get(name);
  g.our_grads = gpt_tensors_from_hf(g.hf_grads, g.config);
  return g;
}

inline double golden_loss(const Gpt2Golden& g) {
  return g.file->get("loss").data<double>()[0];
}

// A GptModel for (ps.tp_rank of ps.tp_size) holding the fixture's weights, on `device`.
struct Gpt2FromFixture {
  ParameterStore store;
  std::unique_ptr<GptModel> model;
  Gpt2FromFixture(const Gpt2Golden& g, const ParallelState& ps, Device device = Device::CPU)
      : store(ps.tp_rank, ps.tp_size, device) {
    model = std::make_unique<GptModel>(g.config, ps, store);
    store.allocate();
    assign_from_full_tensors(gpt_tensors_from_hf(g.hf.tensors, g.config), store);
    model->refresh_compute_weights();
  }
};

}  // namespace megatron::testing
