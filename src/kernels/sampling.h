// Token sampling over a vocabulary-sharded logit row, in the pieces the vocab-parallel sampler
// (parallel/vocab_parallel_sampling.h) combines across ranks without gathering the logits.
//
// Randomness is the Gumbel-max trick with Philox noise keyed by the GLOBAL token id:
//   sample = argmax_i (value_i + g_i),  g_i = −log(−log(u_i)),
//   u_i = (philox(seed, row_key, i) + ½) · 2⁻³²   (i = global vocabulary id, u in (0, 1))
// which draws exactly from softmax(value) over the candidates, and draws the same token
// whichever rank holds which ids, so every TP size (and every rank) picks the same token with
// no communication beyond the candidates. `row_keys` (host, one per row) are the Philox stream
// keys, e.g. philox_key({request, sequence, step}).
//
// Values are f32 and already divided by the temperature. Ties (equal value) are broken towards
// the smaller id everywhere, so results do not depend on the order candidates arrive in.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megatron::kernels {

// The k largest entries of each row, sorted by value descending (ties: smaller id first).
//   values f32 [B, N]
//   ids    i32 [B, N]: each entry's id (−1 marks an empty slot, skipped), or undefined: entry
//          (b, c) has id id_offset + c and only the first valid_cols columns count (a logit
//          shard: id_offset = vocab_start, padding columns excluded)
//   out_values f32 [B, k], out_ids i32 [B, k]; slots past the available entries get −inf and −1.
void topk_rows(const Tensor& values, const Tensor& ids, int64_t id_offset, int64_t valid_cols,
               Tensor& out_values, Tensor& out_ids);

// Per row, the Gumbel-perturbed maximum over a logit shard: out_ids[b] = the global id
// i = id_offset + c (c < valid_cols) maximising values[b, c] + g_i, out_values[b] that
// perturbed value (−inf and −1 when valid_cols = 0). values f32 [B, N]; out f32 [B], i32 [B].
void gumbel_max_rows(const Tensor& values, int64_t id_offset, int64_t valid_cols, uint64_t seed,
                     const std::vector<uint64_t>& row_keys, Tensor& out_values, Tensor& out_ids);

// Draws one id per row from sorted candidates (topk_rows' output, identical on every rank):
//   values f32 [B, C] descending, ids i32 [B, C] (−1 = empty slot).
//   Without top-p (top_p <= 0, row_max/sum_exp undefined): among every candidate.
//   With top-p: the nucleus of Megatron's rule — candidate j is kept when the probability mass
//   of the candidates before it is <= top_p (the first always is), probabilities being
//   exp(value − row_max) / sum_exp under the FULL distribution (row_max, sum_exp f32 [B]: the
//   global max and Σ exp(value − max) of the row). A row whose candidates hold mass <= top_p
//   is INCOMPLETE (the nucleus may go on past the list) unless the list is known to hold the
//   whole vocabulary: `whole_vocabulary`, or an empty slot in the row (the merge of every
//   rank's top-C has an empty slot only when every rank gave all its entries).
// Writes out_ids i32 [B] for complete rows and returns the number of incomplete rows (the
// caller retries with more candidates); always 0 without top-p.
int64_t sample_candidates(const Tensor& values, const Tensor& ids, const Tensor& row_max,
                          const Tensor& sum_exp, float top_p, bool whole_vocabulary, uint64_t seed,
                          const std::vector<uint64_t>& row_keys, Tensor& out_ids);

}  // namespace megatron::kernels
