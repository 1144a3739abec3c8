#include "core/arena.h"

#include <algorithm>
#include <cstring>

#include "core/device_runtime.h"

namespace megatron {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

Arena::Arena(Device device, size_t initial_bytes) : device_(device) {
  if (initial_bytes) add_block(initial_bytes);
}

void Arena::add_block(size_t bytes) {
  blocks_.push_back({Storage::allocate(align_up(bytes), device_), 0});
}

size_t Arena::capacity() const {
  size_t c = 0;
  for (const Block& b : blocks_) c += b.storage->bytes();
  return c;
}

Tensor Arena::alloc(const Shape& shape, DType dtype) {
  const size_t bytes = align_up(size_t(shape_numel(shape)) * dtype_size(dtype));
  if (blocks_.empty() || blocks_.back().used + bytes > blocks_.back().storage->bytes())
    add_block(std::max(bytes, blocks_.empty() ? bytes : blocks_.back().storage->bytes()));
  Block& b = blocks_.back();
  char* base = static_cast<char*>(b.storage->data()) + b.used;
  b.used += bytes;
  used_total_ += bytes;
  high_water_ = std::max(high_water_, used_total_);
  // The view pins its block (keep_alive), so the block outlives every tensor carved from it.
  auto storage = Storage::borrow(base, bytes, device_, b.storage);
  return Tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Arena::zeros(const Shape& shape, DType dtype) {
  Tensor t = alloc(shape, dtype);
  zero_bytes(t.raw_data(), device_, t.nbytes());
  return t;
}

void Arena::reset() {
  if (blocks_.size() > 1) {
    blocks_.clear();
    add_block(high_water_);
  }
  for (Block& b : blocks_) b.used = 0;
  used_total_ = 0;
}

}  // namespace megatron
