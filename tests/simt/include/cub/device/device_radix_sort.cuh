// cub::DeviceRadixSort::SortPairs for the emulated GPU (see ../simt_sort.h).
#pragma once

#include "cub/simt_sort.h"

namespace cub {

struct DeviceRadixSort {
  template <typename Key, typename Value, typename NumItems>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes,
                               const Key* d_keys_in, Key* d_keys_out, const Value* d_values_in,
                               Value* d_values_out, NumItems num_items, int begin_bit = 0,
                               int end_bit = int(sizeof(Key) * 8), cudaStream_t stream = nullptr) {
    if (!d_temp_storage) {
      temp_storage_bytes = 1;  // CUB asks for some; a caller must allocate what it is told
      return cudaSuccess;
    }
    if (num_items < 0 || !simt::valid_bits<Key>(begin_bit, end_bit)) return cudaErrorInvalidValue;
    megatron::simt::enqueue(stream, [=] {
      simt::sort_range(d_keys_in, d_keys_out, d_values_in, d_values_out, int(num_items), begin_bit,
                       end_bit);
    });
    return cudaSuccess;
  }
};

}  // namespace cub
