#include "optim/grad_reduction.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"

namespace megatron {

void reduce_tied_gradients(ParameterStore& store, const ParallelState& ps) {
  if (ps.embedding == nullptr) return;
  for (Parameter& p : store.params()) {
    if (p.spec.stage_tie == StageTie::kNone) continue;
    Tensor grad = p.grad;
    ps.embedding->all_reduce(grad, ReduceOp::SUM);
  }
}

void reduce_sequence_parallel_gradients(ParameterStore& store, const ParallelState& ps,
                                        Tensor* packed_scratch, size_t first, size_t end) {
  if (ps.tp_size == 1) return;
  std::vector<Parameter>& params = store.params();
  end = std::min(end, params.size());
  std::vector<Tensor> grads;
  int64_t total = 0;
  for (size_t p = first; p < end; ++p)
    if (params[p].spec.sequence_parallel) {
      grads.push_back(params[p].grad.flatten());
      total += params[p].grad.numel();
    }
  if (grads.empty()) return;
  // Packed into one buffer: one all-reduce instead of one per LayerNorm and bias.
  Tensor local;
  Tensor& scratch = packed_scratch != nullptr ? *packed_scratch : local;  // f32 [>= Σ numel]
  if (!scratch.defined() || scratch.numel() < total)
    scratch = Tensor::empty({total}, DType::F32, store.device());
  Tensor packed = scratch.slice(0, 0, total);
  int64_t offset = 0;
  for (const Tensor& g : grads) {
    Tensor part = packed.slice(0, offset, offset + g.numel());
    kernels::copy(g, part);
    offset += g.numel();
  }
  ps.tp->all_reduce(packed, ReduceOp::SUM);
  offset = 0;
  for (Tensor& g : grads) {
    kernels::copy(packed.slice(0, offset, offset + g.numel()), g);
    offset += g.numel();
  }
}

namespace {

// This rank's part of found_overflow_anywhere.
bool overflows(const Tensor& flat_grads, bool f16_range, Tensor* f16_scratch) {
  bool overflow = kernels::has_inf_or_nan(flat_grads);
  if (f16_range && !overflow) {
    Tensor as_f16;  // f16 [n]
    if (f16_scratch != nullptr) {
      MT_CHECK(f16_scratch->dtype() == DType::F16 && f16_scratch->numel() == flat_grads.numel() &&
                   f16_scratch->device() == flat_grads.device(),
               "overflow check: the f16 scratch buffer is ", f16_scratch->describe(), " on ",
               f16_scratch->device().str(), ", expected f16 [", flat_grads.numel(), "] on ",
               flat_grads.device().str());
      as_f16 = f16_scratch->view(flat_grads.shape());
    } else {
      as_f16 = Tensor::empty(flat_grads.shape(), DType::F16, flat_grads.device());
    }
    kernels::cast(flat_grads, as_f16);  // rounds out-of-range values to ±inf
    overflow = kernels::has_inf_or_nan(as_f16);
  }
  return overflow;
}

}  // namespace

bool found_overflow_anywhere(std::span<const OverflowCheckPart> parts, Communicator& world,
                             bool f16_range) {
  bool overflow = false;
  for (const OverflowCheckPart& part : parts)
    overflow = overflow || overflows(part.grads, f16_range, part.f16_scratch);
  const double local = overflow ? 1.0 : 0.0;
  return world.all_reduce_scalar(local, ReduceOp::MAX) > 0.0;
}

bool found_overflow_anywhere(const Tensor& flat_grads, Communicator& world, bool f16_range,
                             Tensor* f16_scratch) {
  const OverflowCheckPart part{flat_grads, f16_scratch};
  return found_overflow_anywhere(std::span(&part, 1), world, f16_range);
}

namespace {

// Σ reduce(run) over the runs of counted elements (ParameterStore::norm_ranges) of `flat`,
// which holds flat elements [first, first + flat.numel()) of the store's layout: the dense
// parameters' or the expert parameters'.
template <typename T, typename Reduce>
T counted_sum(const Tensor& flat, int64_t first, const ParameterStore& store, Reduce reduce,
              bool experts) {
  const int64_t last = first + flat.numel();
  T sum = 0;
  for (auto [begin, end] : store.norm_ranges(experts)) {
    begin = std::max(begin, first);
    end = std::min(end, last);
    if (begin < end) sum += reduce(flat.slice(0, begin - first, end - first));
  }
  return sum;
}

// The model-parallel sum (dense over mp, experts over emp) of a counted per-rank quantity.
template <typename T, typename Reduce>
double model_parallel_sum(const Tensor& flat, const ParameterStore& store, const ParallelState& ps,
                          Reduce reduce) {
  double dense = double(counted_sum<T>(flat, 0, store, reduce, false));
  double experts = double(counted_sum<T>(flat, 0, store, reduce, true));
  // On an expert grid of their own the experts' sums run over ps.emp, the dense ones' over
  // ps.mp; otherwise emp and mp are the same ranks and one reduction serves both.
  if (!ps.own_expert_grid()) {
    dense += experts;
    return ps.tp_size * ps.pp_size > 1 ? ps.mp->all_reduce_scalar(dense, ReduceOp::SUM) : dense;
  }
  if (ps.tp_size * ps.pp_size > 1) dense = ps.mp->all_reduce_scalar(dense, ReduceOp::SUM);
  if (ps.emp->size() > 1) experts = ps.emp->all_reduce_scalar(experts, ReduceOp::SUM);
  return dense + experts;
}

// The sum over the world of a counted quantity of each rank's distributed-optimizer shards.
// The dense elements are cut over dp × cp and counted once over TP × PP (norm_ranges), the
// expert ones cut over edp (or with the dense ones, folded) and counted once over etp × ep × PP:
// either way every element of the model once over the world.
template <typename T, typename Reduce>
double sharded_sum(std::span<const GradShard> shards, const ParameterStore& store,
                   const ParallelState& ps, Reduce reduce) {
  double local = 0;
  for (const GradShard& shard : shards)
    local += double(counted_sum<T>(shard.grads, shard.range.begin, store, reduce, false) +
                    counted_sum<T>(shard.grads, shard.range.begin, store, reduce, true));
  return ps.world_size > 1 ? ps.world->all_reduce_scalar(local, ReduceOp::SUM) : local;
}

double squares(const Tensor& run) {
  return kernels::sum_squares(run);
}
int64_t zeros(const Tensor& run) {
  return kernels::count_zeros(run);
}

}  // namespace

double global_grad_norm(const ParameterStore& store, const ParallelState& ps,
                        std::span<const GradShard> shards) {
  if (shards.empty()) return global_norm(store.flat_grads(), store, ps);
  MT_CHECK(store.tp_rank() == ps.tp_rank, "global_grad_norm: the store is for TP rank ",
           store.tp_rank(), ", the parallel state is rank ", ps.tp_rank);
  return std::sqrt(sharded_sum<double>(shards, store, ps, squares));
}

double global_norm(const Tensor& flat, const ParameterStore& store, const ParallelState& ps) {
  MT_CHECK(store.tp_rank() == ps.tp_rank, "global_norm: the store is for TP rank ", store.tp_rank(),
           ", the parallel state is rank ", ps.tp_rank);
  MT_CHECK(flat.numel() == store.flat_values().numel(), "global_norm: a buffer of ", flat.numel(),
           " elements, the store has ", store.flat_values().numel());
  return std::sqrt(model_parallel_sum<double>(flat, store, ps, squares));
}

int64_t count_zero_grads(const ParameterStore& store, const ParallelState& ps,
                         std::span<const GradShard> shards) {
  MT_CHECK(store.tp_rank() == ps.tp_rank, "count_zero_grads: the store is for TP rank ",
           store.tp_rank(), ", the parallel state is rank ", ps.tp_rank);
  // Counts are exact in f64 up to 2^53, far above any model size.
  if (shards.empty())
    return int64_t(model_parallel_sum<int64_t>(store.flat_grads(), store, ps, zeros));
  return int64_t(sharded_sum<int64_t>(shards, store, ps, zeros));
}

double clip_grad_norm(ParameterStore& store, const ParallelState& ps, double max_norm,
                      std::span<const GradShard> shards) {
  const double norm = global_grad_norm(store, ps, shards);
  if (max_norm > 0.0) {
    const double coeff = max_norm / (norm + 1e-6);
    if (coeff < 1.0 && shards.empty()) kernels::scale(store.flat_grads(), float(coeff));
    if (coeff < 1.0)
      for (const GradShard& shard : shards) {
        Tensor grads = shard.grads;  // a view: scaled in place
        kernels::scale(grads, float(coeff));
      }
  }
  return norm;
}

}  // namespace megatron
