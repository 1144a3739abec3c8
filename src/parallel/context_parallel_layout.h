// ContextParallelLayout: which positions of a sequence a context-parallel rank holds.
//
// With --context-parallel-size c > 1 every sequence of S positions is cut into 2c chunks of
// S/(2c) positions, and CP rank r holds chunks r and 2c − 1 − r, in that order, as its local
// sequence of S/c positions (Megatron's load balancing of causal attention: the early chunk
// attends to few keys, the late one to many, so every rank does the same work):
//
//   S = 16, c = 2:   chunk  0    1    2    3       rank 0: [0..3 | 12..15]
//                    rank   0    1    1    0       rank 1: [4..7 |  8..11]
//
// Everything keyed by position follows this layout: the tokens, labels and loss mask a rank
// takes from the micro-batch, the RoPE and learned position embeddings, the dropout masks
// (parallel/random.h), and the causal structure of the ring attention
// (parallel/ring_attention.h). With c = 1 the layout is the identity.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace megatron {

struct ContextParallelLayout {
  int64_t seq = 0;  // S, the whole sequence
  int cp_size = 1, cp_rank = 0;

  // Throws Error (naming the flags) unless S is divisible by 2c when c > 1.
  static ContextParallelLayout of(int64_t seq, int cp_size, int cp_rank);
  // The layout whose local sequence has `local_seq` positions (S = local_seq · c).
  static ContextParallelLayout of_local(int64_t local_seq, int cp_size, int cp_rank);

  bool split() const { return cp_size > 1; }
  int64_t local_seq() const { return seq / cp_size; }
  int64_t chunk() const { return seq / (2 * cp_size); }  // positions per chunk
  // The global index of local chunk k ∈ {0, 1}: r, then 2c − 1 − r.
  int64_t chunk_index(int k) const { return k == 0 ? cp_rank : 2 * cp_size - 1 - cp_rank; }
  int64_t chunk_begin(int k) const { return chunk_index(k) * chunk(); }
  // The global position of local position i.
  int64_t position(int64_t i) const;

  // This rank's columns of a micro-batch tensor full [b, S] (any dtype and device) into
  // local [b, S/c]: chunk r's columns, then chunk 2c − 1 − r's.
  void take_local(const Tensor& full, Tensor& local) const;
};

}  // namespace megatron
