#include "plan/pipeline_buffers.h"

#include <algorithm>

#include "core/error.h"
#include "pipeline/schedule.h"

namespace megatron::plan {

PipelineRankPeak pipeline_rank_peak(int pipeline_size, int rank, int chunks, int64_t micro_batches,
                                    int64_t microbatch_group,
                                    const std::vector<double>& chunk_arena_bytes,
                                    double buffer_bytes) {
  MT_CHECK(int(chunk_arena_bytes.size()) == chunks, "pipeline_rank_peak: ", chunks, " chunks but ",
           chunk_arena_bytes.size(), " arena sizes");
  const int last_virtual = pipeline_size * chunks - 1;
  PipelineRankPeak r;
  r.contexts.assign(size_t(chunks), 0);
  std::vector<int64_t> free_contexts(size_t(chunks), 0);  // in the pool, each with a stale input
  double arenas = 0;
  int64_t buffers = 0;
  auto check_peak = [&] {
    const double total = arenas + double(buffers) * buffer_bytes;
    if (total > r.peak_bytes) {
      r.peak_bytes = total;
      r.peak_buffers = buffers;
    }
  };
  for (const PipelineOp& op :
       training_schedule(pipeline_size, rank, chunks, micro_batches, microbatch_group)) {
    const size_t c = size_t(op.chunk);
    const int virtual_stage = op.chunk * pipeline_size + rank;
    const bool first = virtual_stage == 0, last = virtual_stage == last_virtual;
    if (op.kind == PipelineOp::kForward) {
      if (!first) ++buffers;  // the received input
      check_peak();
      if (free_contexts[c] > 0) {
        --free_contexts[c];
        if (!first) --buffers;  // the reused context drops its previous input
      } else {
        ++r.contexts[c];
        arenas += chunk_arena_bytes[c];
      }
      if (!last) ++buffers;  // the copy of the output, sent
      check_peak();
    } else {
      if (!last) ++buffers;  // the received output gradient
      check_peak();
      if (!last) --buffers;  // the output's send is complete: its copy goes
      ++free_contexts[c];
      if (!first) ++buffers;  // the copy of the input gradient, sent (kept to the end)
      check_peak();
      if (!last) --buffers;  // the received gradient goes after the send
    }
  }
  return r;
}

}  // namespace megatron::plan
