#include "parallel/vocab_parallel_sampling.h"

#include <algorithm>
#include <cmath>

#include "core/philox.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/sampling.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace megatron {

namespace {
constexpr int64_t kFirstNucleusCandidates = 64;
}

void validate_sampling_params(const SamplingParams& p, int64_t vocab_size) {
  MT_CHECK(std::isfinite(p.temperature) && p.temperature > 0.0f,
           "temperature must be a positive number, got ", p.temperature);
  MT_CHECK(p.top_k >= 0, "top_k must be >= 0, got ", p.top_k);
  MT_CHECK(p.top_k < vocab_size, "top_k ", p.top_k, " must be below the vocabulary size ",
           vocab_size);
  MT_CHECK(p.top_p >= 0.0f && p.top_p <= 1.0f, "top_p must be in [0, 1], got ", p.top_p);
  MT_CHECK(!(p.top_p > 0.0f && p.top_k > 0), "cannot set both top-k and top-p samplings.");
}

uint64_t sampling_row_key(uint64_t request, uint64_t sequence, uint64_t step) {
  return philox_key({0x73616d706c65ull /* "sample" */, request, sequence, step});
}

VocabParallelSampler::VocabParallelSampler(Communicator& tp, int64_t vocab_size,
                                           int64_t padded_vocab_size)
    : tp_(tp), vocab_size_(vocab_size) {
  MT_CHECK(vocab_size > 0 && padded_vocab_size >= vocab_size && padded_vocab_size % tp.size() == 0,
           "sampler: vocabulary ", vocab_size, " padded to ", padded_vocab_size,
           " must split evenly over ", tp.size(), " ranks");
  local_cols_ = padded_vocab_size / tp.size();
  vocab_start_ = int64_t(tp.rank()) * local_cols_;
  valid_cols_ = std::clamp<int64_t>(vocab_size - vocab_start_, 0, local_cols_);
}

void VocabParallelSampler::gather_candidates(const Tensor& values, const Tensor& ids, Arena& arena,
                                             Tensor& all_values, Tensor& all_ids) {
  const int64_t b = values.size(0), k = values.size(1), t = tp_.size();
  all_values = arena.alloc({b, t * k}, DType::F32);
  all_ids = arena.alloc({b, t * k}, DType::I32);
  if (t == 1) {
    kernels::copy(values, all_values);
    kernels::copy(ids, all_ids);
    return;
  }
  Tensor gathered_values = arena.alloc({t * b, k}, DType::F32);  // [t, B, k] rank-major
  Tensor gathered_ids = arena.alloc({t * b, k}, DType::I32);
  tp_.all_gather(values, gathered_values);
  tp_.all_gather(ids, gathered_ids);
  Tensor v = all_values.view({b, t, k}), i = all_ids.view({b, t, k});
  kernels::copy(gathered_values.view({t, b, k}).transpose(0, 1), v);
  kernels::copy(gathered_ids.view({t, b, k}).transpose(0, 1), i);
}

void VocabParallelSampler::global_topk(const Tensor& logits, int64_t k, int64_t merged_k,
                                       Arena& arena, Tensor& values, Tensor& ids) {
  const int64_t b = logits.size(0);
  Tensor local_values = arena.alloc({b, k}, DType::F32),
         local_ids = arena.alloc({b, k}, DType::I32);
  kernels::topk_rows(logits, Tensor(), vocab_start_, valid_cols_, local_values, local_ids);
  Tensor all_values, all_ids;
  gather_candidates(local_values, local_ids, arena, all_values, all_ids);
  values = arena.alloc({b, merged_k}, DType::F32);
  ids = arena.alloc({b, merged_k}, DType::I32);
  kernels::topk_rows(all_values, all_ids, 0, all_values.size(1), values, ids);
}

void VocabParallelSampler::top_k(const Tensor& logits, int64_t k, Arena& arena, Tensor& values,
                                 Tensor& ids) {
  check_dtype(logits, DType::F32, "top-k logits");
  MT_CHECK(logits.dim() == 2 && logits.size(1) == local_cols_, "top-k logits must be [B, ",
           local_cols_, "], got ", logits.describe());
  MT_CHECK(k >= 1 && k < vocab_size_, "top-k needs 1 <= k < the vocabulary, got ", k);
  global_topk(logits, k, k, arena, values, ids);
}

Tensor VocabParallelSampler::sample(const Tensor& logits, const SamplingParams& p,
                                    const std::vector<uint64_t>& row_keys, Arena& arena) {
  check_dtype(logits, DType::F32, "sampler logits");
  MT_CHECK(logits.dim() == 2 && logits.size(1) == local_cols_, "sampler logits must be [B, ",
           local_cols_, "], got ", logits.describe());
  validate_sampling_params(p, vocab_size_);
  const int64_t b = logits.size(0);
  Tensor out = arena.alloc({b}, DType::I32);

  if (p.top_k == 1) {  // greedy: the best of every rank's best
    Tensor values, ids;
    global_topk(logits, 1, 1, arena, values, ids);
    kernels::copy(ids.view({b}), out);
    return out;
  }

  Tensor scaled = arena.alloc(logits.shape(), DType::F32);  // logits / T
  kernels::copy(logits, scaled);
  if (p.temperature != 1.0f) kernels::scale(scaled, 1.0f / p.temperature);

  if (p.top_k > 1) {
    Tensor values, ids;
    global_topk(scaled, p.top_k, p.top_k, arena, values, ids);
    kernels::sample_candidates(values, ids, Tensor(), Tensor(), 0.0f, false, p.seed, row_keys, out);
    return out;
  }

  if (p.top_p > 0.0f) {
    // The full distribution's normaliser, as the vocab-parallel cross-entropy computes it.
    Tensor row_max = arena.alloc({b}, DType::F32);
    kernels::cross_entropy_row_max(scaled, valid_cols_, row_max);
    if (tp_.size() > 1) tp_.all_reduce(row_max, ReduceOp::MAX);
    Tensor sums = arena.alloc({2, b}, DType::F32);  // Σexp, (unused) target logit
    Tensor sum_exp = sums.select(0, 0), unused = sums.select(0, 1);
    kernels::cross_entropy_sum_exp_target(scaled, arena.zeros({b}, DType::I32), vocab_start_,
                                          valid_cols_, row_max, sum_exp, unused);
    if (tp_.size() > 1) tp_.all_reduce(sums, ReduceOp::SUM);
    for (int64_t c = std::min(kFirstNucleusCandidates, local_cols_);;
         c = std::min(4 * c, local_cols_)) {
      // With c = V/t every rank gives all its entries, and all of them are kept.
      const bool whole = c >= local_cols_;
      Tensor values, ids;
      global_topk(scaled, c, whole ? c * tp_.size() : c, arena, values, ids);
      // Identical candidates on every rank, so every rank takes the same branch.
      if (kernels::sample_candidates(values, ids, row_max, sum_exp, p.top_p, whole, p.seed,
                                     row_keys, out) == 0)
        return out;
      MT_CHECK(!whole, "top-p sampling found no nucleus in the whole vocabulary");
    }
  }

  // Plain sampling from softmax(logits / T): Gumbel-max over each shard, then the best of t.
  Tensor best_value = arena.alloc({b, 1}, DType::F32), best_id = arena.alloc({b, 1}, DType::I32);
  Tensor bv = best_value.view({b}), bi = best_id.view({b});
  kernels::gumbel_max_rows(scaled, vocab_start_, valid_cols_, p.seed, row_keys, bv, bi);
  Tensor all_values, all_ids;
  gather_candidates(best_value, best_id, arena, all_values, all_ids);
  Tensor winner_value = arena.alloc({b, 1}, DType::F32), winner = arena.alloc({b, 1}, DType::I32);
  kernels::topk_rows(all_values, all_ids, 0, all_values.size(1), winner_value, winner);
  kernels::copy(winner.view({b}), out);
  return out;
}

Tensor vocab_parallel_log_probs(Communicator& tp, const Tensor& logits, const Tensor& targets,
                                int64_t vocab_size, Arena& arena) {
  VocabParallelCrossEntropyCtx ctx;
  Tensor loss = vocab_parallel_cross_entropy_forward(ctx, tp, logits, targets, vocab_size, arena);
  kernels::scale(loss, -1.0f);
  return loss;
}

}  // namespace megatron
