#include "optim/layer_grad_norms.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/elementwise.h"

namespace megatron {

namespace {

// The layer index of "layers.<i>.…", or -1 for any other name (embeddings, final norm, heads).
int64_t layer_of(const std::string& name) {
  static const std::string prefix = "layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return -1;
  int64_t layer = 0;
  for (size_t i = prefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    layer = layer * 10 + (name[i] - '0');
  }
  return layer;
}

}  // namespace

std::vector<double> layer_grad_norms(const ParameterStore& store, const ParallelState& ps,
                                     std::span<const GradShard> shards) {
  MT_CHECK(store.tp_rank() == ps.tp_rank, "layer_grad_norms: the store is for TP rank ",
           store.tp_rank(), ", the parallel state is rank ", ps.tp_rank);
  std::vector<double> sums;
  for (const Parameter& p : store.params()) {
    const int64_t layer = layer_of(p.spec.name);
    if (layer < 0) continue;
    if (size_t(layer) >= sums.size()) sums.resize(size_t(layer) + 1, 0.0);
    // Replicated parameters are identical on every TP rank: only rank 0 counts them.
    if (p.replicated() && ps.tp_rank != 0) continue;
    if (shards.empty()) {
      sums[size_t(layer)] += kernels::sum_squares(p.grad);
      continue;
    }
    // The part of the parameter in this rank's shards of the flat space.
    for (const GradShard& shard : shards) {
      const int64_t begin = std::max(p.flat_offset, shard.range.begin);
      const int64_t end = std::min(p.flat_offset + p.grad.numel(), shard.range.end);
      if (begin < end)
        sums[size_t(layer)] += kernels::sum_squares(
            shard.grads.slice(0, begin - shard.range.begin, end - shard.range.begin));
    }
  }
  // The group holding the pieces of every layer: the TP group, the model-parallel group when
  // the layers are spread over pipeline stages, the world when DP ranks hold disjoint shards.
  Communicator* group = nullptr;
  if (!shards.empty()) {
    if (ps.world_size > 1) group = ps.world.get();
  } else if (ps.pp_size > 1) {
    group = ps.mp.get();
  } else if (ps.tp_size > 1) {
    group = ps.tp.get();
  }
  // Stages hold different layers: every rank reduces as many norms as the deepest layer.
  if (ps.pp_size > 1)
    sums.resize(size_t(group->all_reduce_scalar(double(sums.size()), ReduceOp::MAX)), 0.0);
  for (double& s : sums) {
    if (group != nullptr) s = group->all_reduce_scalar(s, ReduceOp::SUM);
    s = std::sqrt(s);
  }
  return sums;
}

}  // namespace megatron
