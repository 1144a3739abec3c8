// The table-driven (slicing by 8) update shared by the reflected CRC-32 variants: CRC-32C
// (core/crc32c.h) and zip's CRC-32 (core/crc32.h) differ only in their polynomial.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace megatron::detail {

// tables[k][b]: the CRC of byte b followed by k zero bytes, for the reflected `polynomial`.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;
constexpr CrcTables make_crc_tables(uint32_t polynomial) {
  CrcTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ polynomial : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  return t;
}

// Continues the inverted CRC state `c` over `n` bytes at `p`.
inline uint32_t crc_update_sliced(const CrcTables& t, uint32_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian hosts (x86-64, aarch64)
    word ^= c;
    c = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
        t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
        t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c;
}

}  // namespace megatron::detail
