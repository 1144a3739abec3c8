// Process-wide GEMM options (see gemm_options.h).
#include "kernels/gemm_options.h"

#include <atomic>

namespace megatron::kernels {

namespace {

std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

}  // namespace

void set_allow_tf32(bool allow) {
  tf32_flag().store(allow, std::memory_order_relaxed);
}

bool allow_tf32() {
  return tf32_flag().load(std::memory_order_relaxed);
}

}  // namespace megatron::kernels
