// CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320): the checksum of zip archives, which
// PyTorch's checkpoint files are (core/torch_zip.h). Table-driven (slicing by 8).
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron {

uint32_t crc32(const void* data, size_t size);
// Continues `crc` (the CRC of the bytes before) over `data`: crc32_extend(crc32(a), b) ==
// crc32(a + b), and crc32_extend(0, x) == crc32(x).
uint32_t crc32_extend(uint32_t crc, const void* data, size_t size);

}  // namespace megatron
