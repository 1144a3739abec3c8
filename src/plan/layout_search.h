// Layout search: every layout of a model over a number of devices that the implementation can
// run — TP x CP x PP x DP sizes (CP sizes whose 2·CP chunks divide the sequence), for MoE models
// the expert grid (EP dividing the experts and DP x CP, ETP = TP or 1), micro-batch size,
// interleaving, recompute, sequence parallelism, distributed optimizer — predicted and ranked by
// throughput among those that fit in device memory (Narayanan et al. 2021 §3 explore the same space
// by hand).
//
// Where full recompute fits, block recompute of the fewest layers per chunk that still fits
// is tried too (--recompute-method block --recompute-num-layers N: memory falls as N grows,
// time rises). Fixed from the base layout: the global batch, precision, the communication
// overlaps, flash attention and the CP exchange (--cp-comm-type). TP sizes divide the heads, query
// groups and FFN width; PP sizes divide the layers; micro-batch sizes divide the batch of one DP
// rank (up to 16); the interleaved schedule uses v chunks per rank dividing L/p (up to 8) when the
// micro-batch count is a multiple of p. The layers split evenly (the base layout's uneven split,
// which may not hold at other pipeline sizes, and its micro-batch group are not searched).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/memory_estimate.h"
#include "plan/step_time.h"

namespace megatron::plan {

struct Candidate {
  Layout layout;
  MemoryEstimate memory;
  StepTime time;
  bool fits = false;  // peak memory <= the device's, less the headroom
};

struct SearchResult {
  std::vector<Candidate> best;  // fitting layouts, fastest first (at most `top`)
  Candidate smallest;           // the layout with the least memory (reported when none fits)
  int64_t evaluated = 0;        // layouts predicted
  int64_t fitting = 0;          // of which fit in memory
};

// A layout fits when its peak memory leaves `headroom` (a fraction) of the device free: the
// allocator's fragmentation and buffers no model accounts for need some.
SearchResult search_layouts(const ModelSpec& model, const Layout& base, const Machine& machine,
                            Implementation impl, int devices, int top, double headroom = 0.0);

}  // namespace megatron::plan
