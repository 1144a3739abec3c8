#include "core/crc32c.h"

#include <cstring>

#include "core/crc_tables.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace megatron {

namespace {

constexpr detail::CrcTables kCrc32cTables = detail::make_crc_tables(0x82F63B78u);

// On the inverted state (as the hardware instruction works).
uint32_t update_portable(uint32_t c, const uint8_t* p, size_t n) {
  return detail::crc_update_sliced(kCrc32cTables, c, p, n);
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
    p += 8;
    n -= 8;
  }
  c = uint32_t(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}
bool have_sse42() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return have;
}
#endif

}  // namespace

namespace detail {
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t size) {
  return ~update_portable(~crc, static_cast<const uint8_t*>(data), size);
}
}  // namespace detail

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (have_sse42()) return ~update_sse42(~crc, p, size);
#endif
  return ~update_portable(~crc, p, size);
}

uint32_t crc32c(const void* data, size_t size) {
  return crc32c_extend(0, data, size);
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace megatron
