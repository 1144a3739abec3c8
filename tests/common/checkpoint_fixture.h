// A small parameter set with every kind of split (rows, columns, 1-D, replicated), whose
// values are a fixed function of (parameter, full-tensor element index): any rank at any
// tensor-parallel size can fill its slice and check what it loaded, independently of the
// checkpoint code.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"
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

// Calls visit(index into a buffer laid out like elements `range` of the store's values,
// fixture_id, full-tensor element index) for every element of the range.
template <typename Visit>
void for_each_fixture_element(const ParameterStore& store, FlatRange range, Visit visit) {
  const int64_t end = range.end < 0 ? store.flat_values().numel() : range.end;
  for (const Parameter& p : store.params()) {
    const size_t id = fixture_id(p.spec.name);
    const int64_t n = shape_numel(p.local_shape);
    for (int64_t k = std::max<int64_t>(0, range.begin - p.flat_offset);
         k < std::min<int64_t>(n, end - p.flat_offset); ++k)
      visit(p.flat_offset + k - range.begin, id, full_element_index(p, k));
  }
}

// Fills a flat f32 buffer laid out like elements `range` of the store's values (all of them by
// default) with fixture_value(..., buffer).
inline void fill_fixture(const ParameterStore& store, Tensor flat, int buffer,
                         FlatRange range = {}) {
  float* v = flat.data<float>();
  for_each_fixture_element(store, range, [&](int64_t i, size_t id, int64_t full) {
    v[i] = fixture_value(id, full, buffer);
  });
}

// Number of elements of `flat` (laid out like `range`) that differ from the fixture (0 when the
// load was exact).
inline int64_t count_fixture_mismatches(const ParameterStore& store, const Tensor& flat, int buffer,
                                        FlatRange range = {}) {
  const float* v = flat.data<float>();
  int64_t bad = 0;
  for_each_fixture_element(store, range, [&](int64_t i, size_t id, int64_t full) {
    bad += v[i] != fixture_value(id, full, buffer);
  });
  return bad;
}

// The optimizer buffers of elements `range` of the store's flat space, zero.
inline std::map<std::string, Tensor> make_fixture_optimizer(const ParameterStore& store,
                                                            FlatRange range = {}) {
  const int64_t end = range.end < 0 ? store.flat_values().numel() : range.end;
  std::map<std::string, Tensor> buffers;
  buffers["exp_avg"] = Tensor::zeros({end - range.begin}, DType::F32);
  buffers["exp_avg_sq"] = Tensor::zeros({end - range.begin}, DType::F32);
  return buffers;
}

inline void fill_fixture_optimizer(const ParameterStore& store,
                                   std::map<std::string, Tensor>& buffers, FlatRange range = {}) {
  fill_fixture(store, buffers.at("exp_avg"), 1, range);
  fill_fixture(store, buffers.at("exp_avg_sq"), 2, range);
}

inline int64_t count_fixture_optimizer_mismatches(const ParameterStore& store,
                                                  const std::map<std::string, Tensor>& b,
                                                  FlatRange range = {}) {
  return count_fixture_mismatches(store, b.at("exp_avg"), 1, range) +
         count_fixture_mismatches(store, b.at("exp_avg_sq"), 2, range);
}

inline  // Flips one byte at `from_end` bytes before the end of `path` (a checkpoint file: damages
        // the
    // last tensor's data, which its CRC-32C must catch).
    void
    flip_byte(const std::string& path, std::streamoff from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(char(c ^ 0x01));
}

}  // namespace megatron::testing
