// Pipeline schedules: the order in which one pipeline rank runs the forward and backward passes
// of its micro-batches (Narayanan et al. 2021; Megatron-Core's pipeline_parallel/schedules.py).
//
// A rank holds v model chunks (v = 1 unless interleaved); chunk c of pipeline rank r is virtual
// stage c·p + r of the p·v stages, so activations travel around the ring of pipeline ranks v
// times. A schedule is a list of operations; PipelineExecutor (pipeline_executor.h) runs it,
// receiving each operation's input just before it and sending its output without waiting.
//
//   no pipelining (p = 1)  F0 B0 F1 B1 ...: one micro-batch alive at a time
//   1F1B                   warm-up of min(p − r − 1, m) forwards, then one forward and one
//                          backward alternately, then the remaining backwards: at most p − r
//                          micro-batches alive on rank r, whatever m
//   interleaved 1F1B       the same over p·v virtual stages; forwards go chunk by chunk in groups
//                          of g micro-batches (--microbatch-group-size-per-virtual-pipeline-stage,
//                          default p; the last group takes the remainder of m), backwards in the
//                          reverse chunk order; warm-up of 2·(p − r − 1) + (v − 1)·g forwards
//                          (all of them when m = p). As Megatron-LM requires: p <= g <= m, and
//                          the last group whole or of at least p micro-batches (with g = p: m a
//                          multiple of p). A larger g keeps more micro-batches in flight in
//                          exchange for fewer constraints on m; the arithmetic is the same.
//   forward only           every chunk's forward of micro-batch 0, then of 1, ... (evaluation)
//
// Every list holds each (chunk, micro-batch) forward once and, except forward-only, its backward
// once, after it. That the lists of all ranks together never deadlock — with sends that never
// block and receives that wait — is tested by simulation for p ∈ {2, 4}, m ∈ {1, p, 3p} and several
// group sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron {

struct PipelineOp {
  enum Kind { kForward, kBackward } kind;
  int chunk;            // model chunk on this rank, in [0, v)
  int64_t micro_batch;  // in [0, m)
  bool operator==(const PipelineOp&) const = default;
};

// F0 B0 F1 B1 ... F(m−1) B(m−1) on chunk 0.
std::vector<PipelineOp> no_pipelining_schedule(int64_t micro_batches);
// 1F1B for pipeline rank `rank` of `pipeline_size`.
std::vector<PipelineOp> one_f_one_b_schedule(int pipeline_size, int rank, int64_t micro_batches);
// Interleaved 1F1B with `chunks` model chunks per rank, in groups of `group` micro-batches per
// model chunk (0: pipeline_size, Megatron's default). Throws Error naming the flags unless
// check_interleaved_micro_batches accepts the counts.
std::vector<PipelineOp> interleaved_schedule(int pipeline_size, int rank, int chunks,
                                             int64_t micro_batches, int64_t group = 0);
// Throws Error naming the flags unless the interleaved schedule can run `micro_batches` per
// iteration in groups of `group` (0: pipeline_size): pipeline_size <= group <= micro_batches,
// and micro_batches % group zero or at least pipeline_size. `batch`: the global batch size the
// count comes from, as the message names it.
void check_interleaved_micro_batches(int pipeline_size, int64_t micro_batches, int64_t group = 0,
                                     const std::string& batch = "--global-batch-size");
// Forward passes only (no backward), micro-batch by micro-batch, chunk by chunk.
std::vector<PipelineOp> forward_only_schedule(int chunks, int64_t micro_batches);

// The training schedule for a layout: no pipelining when pipeline_size == 1, interleaved (in
// groups of `group`, 0: pipeline_size) when chunks > 1, else 1F1B.
std::vector<PipelineOp> training_schedule(int pipeline_size, int rank, int chunks,
                                          int64_t micro_batches, int64_t group = 0);

// "F0.1" (forward of micro-batch 1 on chunk 0), "B0.1": for messages and tests.
std::string op_name(const PipelineOp& op);

}  // namespace megatron
