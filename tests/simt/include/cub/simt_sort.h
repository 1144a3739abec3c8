// CUB's device sorts for the emulated GPU (tests/simt), with CUB's contracts computed on the
// host, in stream order (simt_streams.h): a size query when d_temp_storage is null; keys sorted
// ascending by their bits [begin_bit, end_bit), stably (radix sorts are), values moved with
// their keys. This directory
// comes before CUDA's on the emulated build's include path, so CUB's own headers (device code)
// are not compiled by the host compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "simt_streams.h"

namespace cub::simt {

template <typename Key>
bool valid_bits(int begin_bit, int end_bit) {
  return begin_bit >= 0 && end_bit <= int(sizeof(Key) * 8) && begin_bit < end_bit;
}

// keys_out[i] = keys_in[order[i]] (and values alike) for the stable order of [0, n) by bits.
template <typename Key, typename Value>
void sort_range(const Key* keys_in, Key* keys_out, const Value* values_in, Value* values_out, int n,
                int begin_bit, int end_bit) {
  const int width = end_bit - begin_bit;
  const auto bits = [&](Key k) {
    const Key shifted = Key(k >> begin_bit);
    return width >= int(sizeof(Key) * 8) ? shifted : Key(shifted & ((Key(1) << width) - 1));
  };
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return bits(keys_in[a]) < bits(keys_in[b]); });
  std::vector<Key> keys(static_cast<size_t>(n));
  std::vector<Value> values(values_in ? static_cast<size_t>(n) : 0);
  for (int i = 0; i < n; ++i) {
    keys[size_t(i)] = keys_in[order[size_t(i)]];
    if (values_in) values[size_t(i)] = values_in[order[size_t(i)]];
  }
  std::copy(keys.begin(), keys.end(), keys_out);  // in and out may alias
  if (values_in) std::copy(values.begin(), values.end(), values_out);
}

}  // namespace cub::simt
