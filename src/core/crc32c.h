// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TFRecord framing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron {

uint32_t crc32c(const void* data, size_t size);
// TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace megatron
