// Vocabulary-parallel token sampling (DESIGN.md §3 "Inference"): greedy, temperature, top-k and
// top-p (nucleus) from the logit shards of the TP ranks, with no rank gathering the logits.
//
//   greedy (top_k = 1)  each rank's best (id, logit) → all-gather → the best of t
//   top-k               each rank's top k → all-gather → the global top k → Gumbel-max draw
//   top-p               global max and Σexp of logits/T (two all-reduces, as the
//                       cross-entropy); each rank's top C → all-gather → the global top C; if
//                       they hold no more than top_p of the mass the nucleus may run past them,
//                       so C grows ×4 and the round repeats (C = 64 covers almost every row)
//   temperature only    each rank's Gumbel-max over its shard → all-gather → the best of t
// Draws use Philox noise keyed by (seed, row key, global token id) (kernels/sampling.h), so all
// TP ranks pick the same token without communicating it, any TP size draws the same token, and
// a run is reproducible. Row keys come from sampling_row_key(request, sequence, step).
// Padded vocabulary entries are never drawn. Every step is a collective over the TP group.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "distributed/communicator.h"

namespace megatron {

struct SamplingParams {
  float temperature = 1.0f;  // > 0; logits are divided by it (ignored by greedy)
  int top_k = 0;             // 0: off; 1: greedy; k > 1: the k most likely tokens
  float top_p = 0.0f;        // 0: off; in (0, 1]: the nucleus (not together with top_k > 1)
  uint64_t seed = 0;
};

// Throws Error naming the field when a value is out of range or top-k and top-p are both set
// (Megatron's rules); top_k must be below the vocabulary size.
void validate_sampling_params(const SamplingParams& p, int64_t vocab_size);

// The Philox stream key of one draw: request number, sequence in the request, step (the
// position the drawn token will take).
uint64_t sampling_row_key(uint64_t request, uint64_t sequence, uint64_t step);

class VocabParallelSampler {
 public:
  // This rank holds columns [rank · V_padded/t, (rank + 1) · V_padded/t) of the logits; ids
  // >= vocab_size are padding.
  VocabParallelSampler(Communicator& tp, int64_t vocab_size, int64_t padded_vocab_size);

  // logits f32 [B, V_padded/t] (this rank's shard, not modified), row_keys[b] the draw's key
  // → token ids i32 [B] in `arena` (on the logits' device), the same on every TP rank.
  Tensor sample(const Tensor& logits, const SamplingParams& params,
                const std::vector<uint64_t>& row_keys, Arena& arena);

  // The k largest logits of each row over the real vocabulary, sorted (ties to the smaller id):
  // values f32 [B, k] and ids i32 [B, k] in `arena`, the same on every TP rank.
  void top_k(const Tensor& logits, int64_t k, Arena& arena, Tensor& values, Tensor& ids);

 private:
  // Every rank's rows of per-rank candidates values [B, k] / ids [B, k] → [B, t·k], rank-major.
  void gather_candidates(const Tensor& values, const Tensor& ids, Arena& arena, Tensor& all_values,
                         Tensor& all_ids);
  // The global top merged_k of every shard's top k (sorted, ties to the smaller id):
  // merged_k <= k is the global top merged_k; merged_k = t·k keeps every candidate.
  void global_topk(const Tensor& logits, int64_t k, int64_t merged_k, Arena& arena, Tensor& values,
                   Tensor& ids);

  Communicator& tp_;
  int64_t vocab_size_, local_cols_, vocab_start_, valid_cols_;
};

// log p(targets[n]) under softmax(logits[n]) over the real vocabulary (padding excluded), with
// the logits split over TP as for the sampler: logits f32 [N, V_padded/t], targets i32 [N] →
// f32 [N] in `arena`, identical on every rank (the vocab-parallel cross-entropy, negated).
Tensor vocab_parallel_log_probs(Communicator& tp, const Tensor& logits, const Tensor& targets,
                                int64_t vocab_size, Arena& arena);

}  // namespace megatron
