// cub::DeviceSegmentedRadixSort::SortKeys for the emulated GPU (see ../simt_sort.h): each
// segment [begin[s], end[s]) of the keys sorted on its own.
#pragma once

#include "cub/simt_sort.h"

namespace cub {

struct DeviceSegmentedRadixSort {
  template <typename Key, typename Offsets>
  static cudaError_t SortKeys(void* d_temp_storage, size_t& temp_storage_bytes,
                              const Key* d_keys_in, Key* d_keys_out, int num_items,
                              int num_segments, Offsets begin_offsets, Offsets end_offsets,
                              int begin_bit = 0, int end_bit = int(sizeof(Key) * 8),
                              cudaStream_t stream = nullptr) {
    if (!d_temp_storage) {
      temp_storage_bytes = 1;  // CUB asks for some; a caller must allocate what it is told
      return cudaSuccess;
    }
    if (num_items < 0 || num_segments < 0 || !simt::valid_bits<Key>(begin_bit, end_bit))
      return cudaErrorInvalidValue;
    // The offsets are device memory written by earlier work: read when the stream gets here.
    megatron::simt::enqueue(stream, [=] {
      for (int s = 0; s < num_segments; ++s) {
        const int begin = begin_offsets[s], end = end_offsets[s];
        MT_CHECK(begin >= 0 && end <= num_items && begin <= end, "cub::SortKeys: segment ", s,
                 " is [", begin, ", ", end, ") of ", num_items, " keys");
        simt::sort_range(d_keys_in + begin, d_keys_out + begin, static_cast<const int*>(nullptr),
                         static_cast<int*>(nullptr), end - begin, begin_bit, end_bit);
      }
    });
    return cudaSuccess;
  }
};

}  // namespace cub
