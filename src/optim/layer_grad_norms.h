// Gradient norm of each transformer layer, for studying how gradients are distributed over
// depth (docs/bert_ln_study.md: post-LN's gradients grow toward the output layer and vanish
// toward the input; pre-LN's are about even — Xiong et al. 2020). Logged with
// --log-layer-grad-norms as a metrics-file row {"type": "layer_grad_norms", "iteration": i,
// "norms": [layer 0, layer 1, ...]}.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "distributed/parallel_state.h"
#include "optim/grad_reduction.h"
#include "parallel/parameter.h"

namespace megatron {

// L2 norm of the full (unsplit) gradient of the parameters named "layers.<i>.…", for i from
// 0 to the largest layer index in the store: partitioned parameters' squares summed over the TP
// group, replicated ones counted once (as global_grad_norm). Identical on every rank of the TP
// group. Call it before clipping to see the raw gradients.
// With pipeline parallelism each stage holds some of the layers (their indices are global):
// the norms are summed over the model-parallel group (TP × PP) and run to the largest layer
// index of any stage, identical on every rank of that group. With the distributed optimizer
// (`shards`: this rank's reduced gradients, see global_grad_norm) each rank counts its shards
// and the sums run over the whole world.
std::vector<double> layer_grad_norms(const ParameterStore& store, const ParallelState& ps,
                                     std::span<const GradShard> shards = {});

}  // namespace megatron
