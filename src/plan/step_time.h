// Predicted time of one training iteration and where it goes.
//
//   stage time per micro-batch  t_s = forward + backward (+ recompute) + exposed TP collectives
//                                     + exposed context-parallel exchanges (the ring's K/V
//                                     transfers beyond its blocks' compute, all-gathers,
//                                     all-to-alls) + the MoE layers' token exchange (EP
//                                     all-to-alls, ETP all-gathers) + pipeline send/recv (2·v
//                                     per micro-batch)
//   pipeline                    m · max_s t_s + (p − 1)/v · mean_s t_s   (1F1B; interleaved
//                               with v chunks per rank: Narayanan et al. 2021 §2.2)
//   data-parallel gradients     all-reduce of this rank's gradients over the d·c ranks of DP x
//                               CP (reduce-scatter with the distributed optimizer, then an
//                               all-gather of the parameters), in buckets; without
//                               --overlap-grad-reduce after the backward; with it each bucket
//                               starts when the last micro-batch's backward has completed it
//                               (the layers' at an even pace, the first stage's embeddings at
//                               its end) and the one before it is done: what runs past the
//                               backward is exposed, and the machine's overlap_slowdown is
//                               charged for the overlapped part
//   tied embedding (p > 1)      all-reduce of the word-embedding gradient between the first and
//                               last stage
//   sequence-parallel grads     with sequence parallelism, all-reduce over TP of the gradients
//                               of the replicated parameters applied per sequence shard
//                               (norms, row-parallel biases), after the backward
//   optimizer                   memory-bound pass over this rank's parameters and state
//                               (the 2019 code: plus the host's per-tensor loops that wait for
//                               the device, machine host_op / host_sync)
// Step = pipeline + exposed DP + embedding sync + sequence-parallel grads + optimizer. Data loading
// and logging are not modelled.
#pragma once

#include <vector>

#include "plan/flops.h"
#include "plan/microbatch_costs.h"

namespace megatron::plan {

struct StepTime {
  MicrobatchCosts microbatch;  // the per-op detail of one micro-batch
  // Per micro-batch on the slowest pipeline stage.
  double forward = 0;       // compute
  double backward = 0;      // compute, recompute included
  double recompute = 0;     // the part of `backward` that re-runs forward work
  double gemm = 0;          // GEMM share of forward + backward
  double memory_bound = 0;  // element-wise share of forward + backward
  double tp_comm = 0;       // TP collectives issued
  double tp_exposed = 0;    // of which not hidden behind compute
  double cp_comm = 0;       // context-parallel exchanges of the attention issued
  double cp_exposed = 0;    // of which not hidden behind the ring's blocks
  double ep_comm = 0;       // the MoE layers' token exchange (EP all-to-all, ETP gathers), exposed
  double pp_p2p = 0;        // pipeline send/recv on the critical path
  double stage = 0;         // t_s of the slowest stage
  // Per iteration.
  int64_t micro_batches = 0;
  double pipeline = 0;  // m · max t_s + bubble
  double bubble = 0;
  double dp_comm = 0;     // gradient reduction (and parameter all-gather) issued
  double dp_exposed = 0;  // of which on the critical path
  double embedding_sync = 0;
  double sequence_parallel_sync = 0;  // TP all-reduce of the shard-partial gradients
  double optimizer = 0;
  double step = 0;  // seconds per iteration
  IterationFlops flops;
  double tokens_per_second = 0;
  double model_tflops_per_device = 0;     // model FLOPs / step / devices
  double hardware_tflops_per_device = 0;  // with recomputed FLOPs (Narayanan et al.'s count)
  double mfu = 0;                         // model FLOPs / (step · devices · peak)
};

StepTime predict_step_time(const ModelSpec& model, const Layout& layout, const Machine& machine,
                           Implementation impl);

}  // namespace megatron::plan
