#include "pipeline/schedule.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace megatron {

namespace {

void check_sizes(int pipeline_size, int rank, int chunks, int64_t micro_batches) {
  MT_CHECK(pipeline_size >= 1 && rank >= 0 && rank < pipeline_size, "pipeline rank ", rank, " of ",
           pipeline_size);
  MT_CHECK(chunks >= 1, "model chunks per pipeline rank must be >= 1, got ", chunks);
  MT_REQUIRE(micro_batches >= 1, "a pipeline schedule needs at least one micro-batch, got ",
             micro_batches);
}

}  // namespace

std::vector<PipelineOp> no_pipelining_schedule(int64_t micro_batches) {
  check_sizes(1, 0, 1, micro_batches);
  std::vector<PipelineOp> ops;
  for (int64_t m = 0; m < micro_batches; ++m) {
    ops.push_back({PipelineOp::kForward, 0, m});
    ops.push_back({PipelineOp::kBackward, 0, m});
  }
  return ops;
}

std::vector<PipelineOp> one_f_one_b_schedule(int pipeline_size, int rank, int64_t micro_batches) {
  check_sizes(pipeline_size, rank, 1, micro_batches);
  // The later stages start their backwards sooner: rank r runs p − r − 1 forwards ahead.
  const int64_t warmup = std::min<int64_t>(pipeline_size - rank - 1, micro_batches);
  const int64_t steady = micro_batches - warmup;
  std::vector<PipelineOp> ops;
  for (int64_t m = 0; m < warmup; ++m) ops.push_back({PipelineOp::kForward, 0, m});
  for (int64_t i = 0; i < steady; ++i) {
    ops.push_back({PipelineOp::kForward, 0, warmup + i});
    ops.push_back({PipelineOp::kBackward, 0, i});
  }
  for (int64_t m = steady; m < micro_batches; ++m) ops.push_back({PipelineOp::kBackward, 0, m});
  return ops;
}

void check_interleaved_micro_batches(int pipeline_size, int64_t micro_batches, int64_t group,
                                     const std::string& batch) {
  const int64_t p = pipeline_size, m = micro_batches, g = group == 0 ? p : group;
  const std::string where = " = " + batch + " / (--micro-batch-size x data-parallel size)";
  if (group == 0) {
    MT_REQUIRE(m % p == 0, "the interleaved schedule needs the number of micro-batches (", m, where,
               ") to be a multiple of --pipeline-model-parallel-size ", p,
               "; change the global batch size, or give "
               "--microbatch-group-size-per-virtual-pipeline-stage");
    return;
  }
  MT_REQUIRE(g >= p && g <= m, "--microbatch-group-size-per-virtual-pipeline-stage ", g,
             " must lie between --pipeline-model-parallel-size ", p,
             " and the number of micro-batches (", m, where, ")");
  MT_REQUIRE(m % g == 0 || m % g >= p, "the interleaved schedule runs the micro-batches (", m,
             where, ") in groups of ", g,
             " (--microbatch-group-size-per-virtual-pipeline-stage), which leaves a last group of ",
             m % g, ", fewer than --pipeline-model-parallel-size ", p,
             "; change the group size or the global batch size");
}

std::vector<PipelineOp> interleaved_schedule(int pipeline_size, int rank, int chunks,
                                             int64_t micro_batches, int64_t group) {
  check_sizes(pipeline_size, rank, chunks, micro_batches);
  check_interleaved_micro_batches(pipeline_size, micro_batches, group);
  const int64_t p = pipeline_size, v = chunks, g = group == 0 ? p : group;
  const int64_t total = micro_batches * v;  // (chunk, micro-batch) pairs
  // The k-th forward (or backward) of this rank: groups of g micro-batches (the last one of
  // what remains), each through chunk 0, then chunk 1, ...; backwards in the reverse chunks.
  const int64_t whole_groups = micro_batches / g;
  auto op = [&](PipelineOp::Kind kind, int64_t k) {
    const int64_t group_index = std::min(k / (g * v), whole_groups);
    const int64_t size = group_index < whole_groups ? g : micro_batches % g;
    const int64_t in_group = k - group_index * g * v;
    int64_t chunk = in_group / size;
    if (kind == PipelineOp::kBackward) chunk = v - 1 - chunk;
    return PipelineOp{kind, int(chunk), group_index * g + in_group % size};
  };
  const int64_t warmup =
      micro_batches == p ? total : std::min(total, (p - rank - 1) * 2 + (v - 1) * g);
  const int64_t steady = total - warmup;
  std::vector<PipelineOp> ops;
  for (int64_t k = 0; k < warmup; ++k) ops.push_back(op(PipelineOp::kForward, k));
  for (int64_t k = 0; k < steady; ++k) {
    ops.push_back(op(PipelineOp::kForward, warmup + k));
    ops.push_back(op(PipelineOp::kBackward, k));
  }
  for (int64_t k = steady; k < total; ++k) ops.push_back(op(PipelineOp::kBackward, k));
  return ops;
}

std::vector<PipelineOp> forward_only_schedule(int chunks, int64_t micro_batches) {
  check_sizes(1, 0, chunks, micro_batches);
  std::vector<PipelineOp> ops;
  for (int64_t m = 0; m < micro_batches; ++m)
    for (int c = 0; c < chunks; ++c) ops.push_back({PipelineOp::kForward, c, m});
  return ops;
}

std::vector<PipelineOp> training_schedule(int pipeline_size, int rank, int chunks,
                                          int64_t micro_batches, int64_t group) {
  if (chunks > 1) return interleaved_schedule(pipeline_size, rank, chunks, micro_batches, group);
  if (pipeline_size == 1) return no_pipelining_schedule(micro_batches);
  return one_f_one_b_schedule(pipeline_size, rank, micro_batches);
}

std::string op_name(const PipelineOp& op) {
  // snprintf, not string concatenation: GCC 12's -Wrestrict misfires on the latter.
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%c%d.%lld", op.kind == PipelineOp::kForward ? 'F' : 'B',
                op.chunk, static_cast<long long>(op.micro_batch));
  return buffer;
}

}  // namespace megatron
