// Gradient reduction across ranks after the micro-batches of one iteration: the job-wide
// inf/NaN check and the global gradient norm with clipping, the tied-embedding and the
// sequence-parallel sums. The data-parallel sum itself is optim/grad_buckets.h's (in buckets,
// after the backward or overlapped with it: --overlap-grad-reduce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "distributed/communicator.h"
#include "distributed/parallel_state.h"
#include "optim/optimizer.h"
#include "parallel/parameter.h"

namespace megatron {

// Megatron's embedding-group reduction: on the first and last pipeline stage (pp > 1), sums the
// gradients of the parameters both hold (StageTie) over ps.embedding, so the two copies of the
// tied word embedding take the same step. Nothing on other ranks or at pp = 1.
void reduce_tied_gradients(ParameterStore& store, const ParallelState& ps);

// Sequence parallelism: sums the gradients of the ParamSpec::sequence_parallel parameters
// (replicated, each TP rank's gradient covering its own sequence shard) among the store's
// parameters [first, end) over the TP group, in one all-reduce, so every TP rank holds the whole
// gradient. Runs before the data-parallel reduction (GradBuckets: per bucket); nothing when no
// parameter is marked or at TP = 1. `packed_scratch`, when given, is the packing buffer kept
// between calls (allocated on first use, grown when too small), so a step allocates nothing.
void reduce_sequence_parallel_gradients(ParameterStore& store, const ParallelState& ps,
                                        Tensor* packed_scratch = nullptr, size_t first = 0,
                                        size_t end = SIZE_MAX);

// True on every rank when any rank's gradients hold an inf or NaN (all-reduce MAX over the
// world), so every rank makes the same skip decision. With `f16_range`, a value that does not
// fit in f16 (|g| > 65504 after rounding) counts as an overflow too: that is what an fp16
// backward would have produced, and the loss scaler must react to it. That test casts the
// gradients to f16: into the part's `f16_scratch` when given (f16, as many elements as its
// grads, same device — e.g. the optimizer's, free between steps), else into a temporary buffer.
// The gradients come in parts (the distributed optimizer's dense and expert shards), checked
// with one reduction.
struct OverflowCheckPart {
  Tensor grads;
  Tensor* f16_scratch = nullptr;
};
bool found_overflow_anywhere(std::span<const OverflowCheckPart> parts, Communicator& world,
                             bool f16_range);
bool found_overflow_anywhere(const Tensor& flat_grads, Communicator& world, bool f16_range,
                             Tensor* f16_scratch = nullptr);

// L2 norm of the full (unsplit) model gradient: partitioned parameters' squares are summed
// over the model-parallel group (TP × PP), replicated ones (identical on every TP rank) are
// counted once — only TP rank 0 contributes them — and a pipeline stage's copy of a tied
// parameter not at all. Expert parameters on an expert grid of their own (EP > 1 or an etp
// size other than TP's) are summed over the expert model-parallel group (etp × ep × pp, each
// replicated one counted on etp rank 0) and added, as Megatron adds the expert norm. One
// sum-of-squares pass per run of counted parameters in the flat gradient buffer
// (ParameterStore::norm_ranges: the whole buffer on TP rank 0). Identical on every rank.
//
// With the distributed optimizer each DP rank holds the reduced gradients of its shards of the
// flat space only (`shards`, each grads f32 [range length] of flat elements [range.begin,
// range.end): optim/distributed_optimizer.h's DistributedShards, the dense one over dp × cp and
// the expert one over edp); then each rank counts the counted elements of its shards and the sum
// runs over the whole world (dp × cp × TP × PP, which is edp × etp × ep × PP), so each element
// is counted once. Empty `shards`: the whole gradients.
struct GradShard {
  Tensor grads;
  FlatRange range;
};
double global_grad_norm(const ParameterStore& store, const ParallelState& ps,
                        std::span<const GradShard> shards = {});
// The same L2 norm of any flat buffer laid out like the store's values (the parameters, or the
// fp32 master weights), whole on every rank: Megatron's calc_params_l2_norm with `flat` the
// parameters. Reduced over the model-parallel group (TP × PP).
double global_norm(const Tensor& flat, const ParameterStore& store, const ParallelState& ps);

// Megatron's --log-num-zeros-in-grad (count_zeros_fp32): the number of gradient elements equal
// to zero over the same counted elements as global_grad_norm, reduced the same way (over TP × PP,
// or over the world for `shards`). Identical on every rank.
int64_t count_zero_grads(const ParameterStore& store, const ParallelState& ps,
                         std::span<const GradShard> shards = {});

// Megatron's clip_grad_norm: when max_norm > 0 and norm > max_norm, scales every gradient (of
// the shards, when given) by max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm(ParameterStore& store, const ParallelState& ps, double max_norm,
                      std::span<const GradShard> shards = {});

}  // namespace megatron
