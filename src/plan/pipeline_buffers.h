// What one pipeline rank of megatron-cpp holds at its peak while it runs its training schedule
// (pipeline/schedule.h, executed by pipeline/pipeline_executor.h and train/gpt_step.cpp):
//
//   stage contexts  one arena per micro-batch a model chunk has in flight at once; a context
//                   goes back to its chunk's pool after the backward and is reused, and its
//                   arena keeps its high-water size, so a chunk holds as many arenas as it ever
//                   had micro-batches in flight;
//   received inputs [s, b, h] each (not on virtual stage 0), referenced by the context that ran
//                   the forward until that context is reused;
//   sent outputs    the copy of each output sent forward, until the micro-batch's gradient
//                   comes back (not on the last virtual stage);
//   sent gradients  the copy of each input gradient sent backward, until the end of the
//                   schedule (not on virtual stage 0);
//   received grads  [s, b, h] during the backward that uses it (not on the last virtual stage).
//
// The planner walks this rank's actual schedule, op by op in the executor's order, and takes
// the largest total of arenas and buffers.
#pragma once

#include <cstdint>
#include <vector>

namespace megatron::plan {

struct PipelineRankPeak {
  std::vector<int64_t> contexts;  // stage contexts (arenas) per model chunk at the end
  int64_t peak_buffers = 0;       // [s, b, h] buffers alive at the peak
  double peak_bytes = 0;          // arenas + buffers at the peak
};

// Rank `rank` of `pipeline_size`, `chunks` model chunks, `micro_batches` per iteration (in
// groups of `microbatch_group` when interleaved; 0: pipeline_size).
// chunk_arena_bytes[c]: the arena one micro-batch fills on chunk c; buffer_bytes: one [s, b, h]
// activation in the compute dtype.
PipelineRankPeak pipeline_rank_peak(int pipeline_size, int rank, int chunks, int64_t micro_batches,
                                    int64_t microbatch_group,
                                    const std::vector<double>& chunk_arena_bytes,
                                    double buffer_bytes);

}  // namespace megatron::plan
