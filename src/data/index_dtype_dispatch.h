// dispatch_integer_index_dtype: calls a generic lambda with the C++ integer type of an integer
// IndexDType, so the dataset reader (widening to int32) and the builder (narrowing from int32)
// share one switch over the on-disk token types.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace megatron {

// Calls fn(T{}) with T = uint8_t, int8_t, int16_t, uint16_t, int32_t or int64_t; a float dtype
// is an Error (token ids are integers).
template <typename Fn>
void dispatch_integer_index_dtype(IndexDType dtype, Fn&& fn) {
  switch (dtype) {
    case IndexDType::U8:
      return fn(uint8_t{});
    case IndexDType::I8:
      return fn(int8_t{});
    case IndexDType::I16:
      return fn(int16_t{});
    case IndexDType::U16:
      return fn(uint16_t{});
    case IndexDType::I32:
      return fn(int32_t{});
    case IndexDType::I64:
      return fn(int64_t{});
    default:
      MT_THROW("unreachable dtype ", index_dtype_name(dtype));
  }
}

}  // namespace megatron
