#include "core/philox.h"

#include <cmath>

namespace megatron {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& lo, uint32_t& hi) {
  uint64_t p = uint64_t(a) * b;
  lo = uint32_t(p);
  hi = uint32_t(p >> 32);
}
}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    uint32_t lo0, hi0, lo1, hi1;
    mulhilo(kMul0, c[0], lo0, hi0);
    mulhilo(kMul1, c[2], lo1, hi1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

PhiloxCounter PhiloxStream::block(uint64_t b) const {
  return philox4x32_10({uint32_t(b), uint32_t(b >> 32), uint32_t(key_), uint32_t(key_ >> 32)},
                       {uint32_t(seed_), uint32_t(seed_ >> 32)});
}

float PhiloxStream::normal(uint64_t i) const {
  PhiloxCounter w = block(i / 2);
  // u1 in (0, 1] so that log(u1) is finite; u2 in [0, 1).
  double u1 = (double(w[0]) + 1.0) * 0x1p-32;
  double u2 = double(w[1]) * 0x1p-32;
  double r = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * M_PI * u2;
  return float(i % 2 == 0 ? r * std::cos(angle) : r * std::sin(angle));
}

uint64_t philox_key(std::initializer_list<uint64_t> fields) {
  uint64_t h = 0x6a09e667f3bcc909ull;
  for (uint64_t f : fields) {
    uint64_t z = h ^ (f + 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
  }
  return h;
}

}  // namespace megatron
