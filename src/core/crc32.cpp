#include "core/crc32.h"

#include "core/crc_tables.h"

namespace megatron {

namespace {
constexpr detail::CrcTables kCrc32Tables = detail::make_crc_tables(0xEDB88320u);
}  // namespace

uint32_t crc32_extend(uint32_t crc, const void* data, size_t size) {
  return ~detail::crc_update_sliced(kCrc32Tables, ~crc, static_cast<const uint8_t*>(data), size);
}

uint32_t crc32(const void* data, size_t size) {
  return crc32_extend(0, data, size);
}

}  // namespace megatron
