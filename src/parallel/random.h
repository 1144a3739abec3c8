// Dropout keying: which Philox stream and counter every dropout mask element uses.
//
// A mask element is a pure function of its LOGICAL position, never of how the work is split:
//   key     = philox_key({iteration, global sample, layer, site[, global head]})
//   counter = global element index inside that (sample, layer, site[, head]) block
// so the masks are the same at any TP size, DP size or micro-batch split, and activation
// recompute regenerates them without saved state. Replicated activations (hidden states
// [s, b, h]) get the same mask on every TP rank — and a sequence-parallel shard of them the
// mask of its global positions; attention probabilities [b, heads, s, s] are
// sharded by head, and their key includes the global head, so each head (and so each rank)
// draws its own mask. The seed is passed separately to kernels::dropout_mask.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dropout.h"
#include "parallel/context_parallel_layout.h"

namespace megatron {

// Where in the network a mask is drawn (part of the key; values are fixed forever because
// changing them changes every mask).
enum class DropoutSite : uint64_t {
  kEmbedding = 1,           // after word + position embedding, [s, b, h]
  kAttentionProbs = 2,      // attention probabilities, [b, heads, s, s]
  kAttentionOutput = 3,     // after the attention output projection, [s, b, h]
  kMlpOutput = 4,           // after the MLP output projection, [s, b, h]
  kClassificationHead = 5,  // on the pooled [CLS] state before a finetuning head, [n, h]
};

// The logical coordinates of a micro-batch: row r of the micro-batch is global sample
// first_sample + r of iteration `iteration`.
// enabled = false (evaluation) turns every dropout off.
struct DropoutScope {
  bool enabled = false;
  uint64_t seed = 0;
  int64_t iteration = 0;
  int64_t first_sample = 0;
};

// Rows of a mask over a replicated activation [s, b, h] viewed as [s·b, h] (row = i·b + r):
// row (i, r) is global position pos = layout.position(seq_begin + i) and uses key (iteration,
// first_sample + r, layer, site), counter base pos·h. A sequence-parallel shard [s/t, b, h]
// passes its first local position as seq_begin, a context-parallel rank its layout, and each
// draws exactly its rows of the whole sequence's mask.
std::vector<kernels::MaskRow> hidden_dropout_rows(const DropoutScope& scope, int64_t layer,
                                                  DropoutSite site, int64_t seq, int64_t batch,
                                                  int64_t hidden, int64_t seq_begin = 0,
                                                  const ContextParallelLayout& layout = {});

// Rows of a mask over attention probabilities [b, heads_local, s, s] viewed as
// [b·heads_local·s, s]; local head j is global head head_begin + j. Row (r, j, q) uses key
// (iteration, first_sample + r, layer, kAttentionProbs, head_begin + j), counter base q·s.
std::vector<kernels::MaskRow> attention_dropout_rows(const DropoutScope& scope, int64_t layer,
                                                     int64_t batch, int64_t head_begin,
                                                     int64_t heads_local, int64_t seq);

// The same mask's rows for one block of it: queries [query_begin, + block) against keys
// [key_begin, + block) of a sequence of `seq` positions, viewed as [b·heads_local·block, block]
// (context-parallel attention's blocks, parallel/context_parallel_blocks.h): row (r, j, q) has
// counter base (query_begin + q)·seq + key_begin, so key k of the block draws the element the whole
// sequence's mask draws for it.
std::vector<kernels::MaskRow> attention_block_dropout_rows(const DropoutScope& scope, int64_t layer,
                                                           int64_t batch, int64_t head_begin,
                                                           int64_t heads_local, int64_t seq,
                                                           int64_t query_begin, int64_t key_begin,
                                                           int64_t block);

}  // namespace megatron
