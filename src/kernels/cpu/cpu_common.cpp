// Helpers shared by the CPU kernels (see cpu_common.h).
#include "kernels/cpu/cpu_common.h"

#include <algorithm>

namespace megatron::kernels::cpu {

int64_t reduction_chunks(int64_t rows) {
  // 64 chunks keep 2-64 threads busy; tiny inputs get one row per chunk.
  return std::clamp<int64_t>(rows, 1, 64);
}

}  // namespace megatron::kernels::cpu
