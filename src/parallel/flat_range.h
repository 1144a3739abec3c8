// A range of the flat parameter space (ParameterStore's flat buffers): the dense or the expert
// part of it (ParameterStore::dense_part, expert_part), or what one optimizer instance owns (the
// distributed optimizer's data-parallel shard, optim/distributed_optimizer.h).
#pragma once

#include <cstdint>

namespace megatron {

// Elements [begin, end) of the flat parameter space; end -1: through the last element.
struct FlatRange {
  int64_t begin = 0;
  int64_t end = -1;
};

}  // namespace megatron
