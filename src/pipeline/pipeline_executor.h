// PipelineExecutor: runs one rank's pipeline schedule (schedule.h), moving activations and
// their gradients between pipeline ranks with non-blocking point-to-point operations.
//
// Virtual stage c·p + r (chunk c of pipeline rank r) receives its input from virtual stage
// c·p + r − 1 — pipeline rank r − 1, or rank p − 1's chunk c − 1 when r = 0 — and its output
// gradient from the virtual stage after it; the pipeline ranks form a ring. Each operation's
// input is received (irecv, then wait) just before the operation runs; each output is copied and
// sent with isend, and a send is only waited on once it is known to be complete — an output's
// when its gradient has come back, an input gradient's at the end of the schedule — so a rank
// only ever waits for data another rank produces: with schedules whose data dependencies the
// ranks' orders respect (all of schedule.h's), nothing can deadlock, and nothing relies on MPI
// buffering a send eagerly. The copy of each sent tensor lives as long as its send (the model may
// reuse its memory at once): outputs as long as their micro-batch is in flight, input gradients
// until the end of the schedule. Tags name (direction, receiving chunk, micro-batch), so messages
// match by meaning, not by arrival order, even where rank r's previous and next rank are the same
// (p = 2). NCCL has no tags; it matches the messages between two ranks in posting order, which
// is also right: every schedule posts its sends to a peer in the order that peer posts the
// matching receives (tests/dist/pipeline_executor_test.cpp runs them with the tags dropped).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "distributed/communicator.h"
#include "pipeline/schedule.h"

namespace megatron {

// What the executor calls for each operation of the schedule.
struct PipelineStageFunctions {
  // Forward of micro-batch m on model chunk c. `input`: the previous virtual stage's output
  // (undefined on virtual stage 0). Returns the output for the next virtual stage (ignored on the
  // last virtual stage).
  std::function<Tensor(int chunk, int64_t micro_batch, const Tensor& input)> forward;
  // Backward of micro-batch m on chunk c. `grad_output`: the next virtual stage's input gradient
  // (undefined on the last virtual stage). Returns the gradient of the chunk's input (ignored on
  // virtual stage 0). May be empty for forward-only schedules.
  std::function<Tensor(int chunk, int64_t micro_batch, const Tensor& grad_output)> backward;
};

// Shape, dtype and device of every activation and gradient passed between stages.
struct StageActivation {
  Shape shape;
  DType dtype = DType::F32;
  Device device = Device::CPU;
};

// Runs `ops` for pipeline rank pp.rank() of pp.size() with `chunks` model chunks per rank.
// `pp` may be null when there is one pipeline rank (nothing is sent). Collective over the
// pipeline group: every rank runs its own schedule for the same micro-batches and chunks.
void run_pipeline_schedule(const std::vector<PipelineOp>& ops, Communicator* pp, int chunks,
                           const StageActivation& activation, const PipelineStageFunctions& fns);

// Seconds this process has spent, over all run_pipeline_schedule calls so far, waiting for a
// stage input or output gradient to arrive: the pipeline bubble plus the transfers and any
// imbalance between stages. For benchmarks (`megatron bench --mode step`).
double pipeline_receive_wait_seconds();

}  // namespace megatron
