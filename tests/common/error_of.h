// The message of the error a call throws, for tests of error sentences.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace megatron::testing {

// The what() of the megatron::Error `f` throws, or "" when it throws none (other exceptions
// propagate and fail the test).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace megatron::testing
