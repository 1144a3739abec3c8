#include "core/dtype.h"

#include "core/error.h"

namespace megatron {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
  }
  MT_THROW("unknown dtype code ", int(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
  }
  MT_THROW("unknown dtype code ", int(t));
}

DType dtype_from_name(std::string_view name) {
  for (DType t :
       {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8})
    if (dtype_name(t) == name) return t;
  MT_THROW("unknown dtype '", name, "' (expected f32, f64, bf16, f16, i32, i64 or u8)");
}

// IEEE binary16 <-> binary32, round to nearest even, with subnormals, inf and NaN.
uint16_t f16::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                  // subnormal or zero in f16
    if (abs < 0x33000000u) return uint16_t(sign);           // below half the smallest
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - int(abs >> 23);  // bits to drop so that 2^-24 is the unit
    uint32_t half = 1u << (shift - 1);
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t r = mant >> shift;
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((abs - 0x38000000u) >> 13);
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

float f16::to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // normalise the subnormal
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      x = sign | uint32_t(112 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else {
    x = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace megatron
