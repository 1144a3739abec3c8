// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TFRecord framing and by
// the per-tensor checksums of checkpoint shards. Uses the SSE4.2 crc32 instruction where the
// CPU has it (about 20 GB/s per core), else a table (slicing by 8).
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron {

uint32_t crc32c(const void* data, size_t size);
// Continues `crc` (the CRC of the bytes before) over `data`: crc32c_extend(crc32c(a), b) ==
// crc32c(a + b), and crc32c_extend(0, x) == crc32c(x).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);
// TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

namespace detail {
// The portable implementation, exposed so that tests can compare it with the hardware one.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t size);
}  // namespace detail

}  // namespace megatron
