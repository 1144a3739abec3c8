// Arena: bump allocation of per-step activations from a few large blocks.
//
// alloc() carves a 64-byte-aligned tensor out of the current block; reset() makes all of it
// reusable at once (call it when a step's activations are dead). When a step needs more than
// the arena holds, a new block is added; at the next reset the blocks are merged into one of
// the high-water size, so from the second step on a step costs no allocation at all.
// Tensors keep their block alive, so a tensor that outlives reset() stays valid memory (but
// its bytes will be overwritten by the next step — do not keep activations across reset).
// An arena lives on one device; on a GPU its blocks come from the caching allocator.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace megatron {

class Arena {
 public:
  explicit Arena(Device device = Device::CPU, size_t initial_bytes = 0);
  Device device() const { return device_; }
  Tensor alloc(const Shape& shape, DType dtype);
  Tensor zeros(const Shape& shape, DType dtype);
  void reset();
  size_t used() const { return used_total_; }
  size_t high_water() const { return high_water_; }
  size_t capacity() const;

 private:
  struct Block {
    std::shared_ptr<Storage> storage;
    size_t used = 0;
  };
  void add_block(size_t bytes);
  Device device_;
  std::vector<Block> blocks_;
  size_t used_total_ = 0;
  size_t high_water_ = 0;
};

}  // namespace megatron
