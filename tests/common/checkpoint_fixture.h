// A small parameter set with every kind of split (rows, columns, 1-D, replicated), whose
// values are a fixed function of (parameter, full-tensor element index): any rank at any
// tensor-parallel size can fill its slice and check what it loaded, independently of the
// checkpoint code.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "parallel/parameter.h"

namespace megatron::testing {

inline std::vector<ParamSpec> fixture_specs() {
  return {
      {"embedding.word_embeddings.weight", {16, 8}, 0, true},
      {"embedding.position_embeddings.weight", {12, 8}, -1, true},
      {"layers.0.self_attention.query_key_value.weight", {24, 8}, 0, true},
      {"layers.0.self_attention.query_key_value.bias", {24}, 0, false},
      {"layers.0.self_attention.dense.weight", {8, 8}, 1, true},
      {"layers.0.self_attention.dense.bias", {8}, -1, false},
      {"layers.0.mlp.dense_4h_to_h.weight", {8, 32}, 1, true},
      {"final_layernorm.weight", {8}, -1, false},
  };
}

// The position of parameter `name` in fixture_specs() (stable when a store holds a subset).
inline size_t fixture_id(const std::string& name) {
  const std::vector<ParamSpec> specs = fixture_specs();
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return i;
  ADD_FAILURE() << "not a fixture parameter: " << name;
  return 0;
}

// The value of element `full_index` of parameter number `param` (and of optimizer buffer
// number `buffer`, 0 = the parameter itself): distinct everywhere, exactly representable.
inline float fixture_value(size_t param, int64_t full_index, int buffer = 0) {
  return float(param) * 1000.0f + float(full_index) + float(buffer) * 0.25f;
}

inline ParameterStore make_fixture_store(int tp_rank, int tp_size,
                                         std::vector<ParamSpec> specs = fixture_specs()) {
  ParameterStore store(tp_rank, tp_size);
  for (const ParamSpec& s : specs) store.add(s);
  store.allocate();
  return store;
}

// Fills a flat f32 buffer laid out like the store's values with fixture_value(..., buffer).
inline void fill_fixture(const ParameterStore& store, Tensor flat, int buffer) {
  float* v = flat.data<float>();
  for (const Parameter& p : store.params()) {
    const size_t id = fixture_id(p.spec.name);
    for (int64_t k = 0; k < shape_numel(p.local_shape); ++k)
      v[p.flat_offset + k] = fixture_value(id, full_element_index(p, k), buffer);
  }
}

// Number of elements of `flat` that differ from the fixture (0 when the load was exact).
inline int64_t count_fixture_mismatches(const ParameterStore& store, const Tensor& flat,
                                        int buffer) {
  const float* v = flat.data<float>();
  int64_t bad = 0;
  for (const Parameter& p : store.params()) {
    const size_t id = fixture_id(p.spec.name);
    for (int64_t k = 0; k < shape_numel(p.local_shape); ++k)
      bad += v[p.flat_offset + k] != fixture_value(id, full_element_index(p, k), buffer);
  }
  return bad;
}

inline std::map<std::string, Tensor> make_fixture_optimizer(const ParameterStore& store) {
  std::map<std::string, Tensor> buffers;
  const int64_t n = const_cast<ParameterStore&>(store).flat_values().numel();
  buffers["exp_avg"] = Tensor::zeros({n}, DType::F32);
  buffers["exp_avg_sq"] = Tensor::zeros({n}, DType::F32);
  return buffers;
}

inline void fill_fixture_optimizer(const ParameterStore& store,
                                   std::map<std::string, Tensor>& buffers) {
  fill_fixture(store, buffers.at("exp_avg"), 1);
  fill_fixture(store, buffers.at("exp_avg_sq"), 2);
}

inline int64_t count_fixture_optimizer_mismatches(const ParameterStore& store,
                                                  const std::map<std::string, Tensor>& b) {
  return count_fixture_mismatches(store, b.at("exp_avg"), 1) +
         count_fixture_mismatches(store, b.at("exp_avg_sq"), 2);
}

}  // namespace megatron::testing
