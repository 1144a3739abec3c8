// Helpers shared by the CPU kernels (internal to src/kernels/cpu): f32 <-> bf16 element access
// written so the compiler can vectorise it, dtype dispatch and the deterministic reduction
// split. Argument and device checks live in the dispatch layer (kernels/<concept>.cpp).
//
// Every kernel reads its 16-bit inputs into f32, computes in f32 (or f64 where the header says
// so) and rounds once on store, which is what "bf16 with f32 statistics" means in the headers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::kernels::cpu {

// Element access for the two activation dtypes. float passes through; bf16 widens by a shift
// and narrows with round-to-nearest-even (quiet NaN kept), bit-identical to bf16::from_float.
inline float to_f32(float x) {
  return x;
}
inline float to_f32(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
inline T from_f32(float f);
template <>
inline float from_f32<float>(float f) {
  return f;
}
template <>
inline bf16 from_f32<bf16>(float f) {
  // bf16::from_float's arithmetic with its NaN test as a select instead of an early return,
  // so loops that store bf16 still vectorise.
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  bf16 r;
  r.bits = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  return r;
}

// Calls fn(T{}) with the T among Ts whose dtype_of<T>() is `dtype`; anything else is an Error
// naming the kernel operand and the accepted dtypes ("expected f32, bf16 or f16").
template <typename... Ts, typename Fn>
void dispatch_dtype(DType dtype, const char* what, Fn&& fn) {
  if (((dtype == dtype_of<Ts>() ? (fn(Ts{}), true) : false) || ...)) return;
  const std::string_view names[] = {dtype_name(dtype_of<Ts>())...};
  std::string expected;
  for (size_t i = 0; i < sizeof...(Ts); ++i)
    expected += std::string(i == 0                   ? ""
                            : i + 1 == sizeof...(Ts) ? " or "
                                                     : ", ") +
                std::string(names[i]);
  MT_THROW(what, " has dtype ", dtype_name(dtype), ", expected ", expected);
}

// The activation dtypes: T = float or bf16.
template <typename Fn>
void dispatch_float(DType dtype, const char* what, Fn&& fn) {
  dispatch_dtype<float, bf16>(dtype, what, std::forward<Fn>(fn));
}

// Rows are split into a number of chunks that depends only on the row count, never on the
// thread count, so reductions over rows (dbias, dgamma) sum in the same order on any machine
// and give bit-identical results from run to run.
int64_t reduction_chunks(int64_t rows);

}  // namespace megatron::kernels::cpu
