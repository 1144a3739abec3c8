// Index kernels (contract: kernels/indexing.h): argument checks, then the device's backend.
#include "kernels/indexing.h"

#include <limits>

#include "kernels/dispatch.h"

namespace megatron::kernels {

void fill_positions(Tensor& ids, int64_t batch, int64_t start) {
  check_i32_contiguous(ids, "fill_positions ids");
  MT_CHECK(batch >= 1, "fill_positions batch must be >= 1, got ", batch);
  MT_CHECK(ids.numel() % batch == 0, "fill_positions ids ", ids.describe(),
           " is not a whole number of rows of batch ", batch);
  const int64_t last = start + ids.numel() / batch - 1;  // the largest position written
  MT_CHECK(start >= 0 && last <= std::numeric_limits<int32_t>::max(), "fill_positions positions [",
           start, ", ", last, "] do not fit i32 ids >= 0");
  const Device device = operand_device("fill_positions", {&ids});
  MT_DISPATCH(device, fill_positions, ids, batch, start);
}

int64_t first_out_of_range(const Tensor& ids, int64_t lo, int64_t hi) {
  check_i32_contiguous(ids, "first_out_of_range ids");
  const Device device = operand_device("first_out_of_range", {&ids});
  return MT_DISPATCH(device, first_out_of_range, ids, lo, hi);
}

}  // namespace megatron::kernels
