// ParallelState: the rank grid and its groups, with Megatron's layout
//   tp_rank = rank % t,  dp_rank = (rank / t) % d,  pp_rank = rank / (t·d),  d = world / (t·p).
// TP groups are consecutive ranks (fastest-varying, so on one node); DP groups share
// (tp_rank, pp_rank); PP groups share (tp_rank, dp_rank); the model-parallel group is the
// t·p ranks that together hold one model replica (same dp_rank). With p > 1 the embedding group
// is the first and the last stage of a pipeline (same tp_rank and dp_rank), the two ranks that
// hold the tied word embedding (Megatron's rule). --use-tp-pp-dp-mapping (RankOrder::kTpPpDp)
// makes pipeline ranks vary before data-parallel ones, as Megatron's does:
//   tp_rank = rank % t,  pp_rank = (rank / t) % p,  dp_rank = rank / (t·p).
// The groups are the same sets of coordinates either way; only which process holds which
// coordinates changes, so a run's results do not depend on the order.
#pragma once

#include <memory>

#include "distributed/communicator.h"

namespace megatron {

// Throws Error (naming the flags) when a size is < 1 or t·p does not divide the world size.
// Communicates nothing: callers may check the grid on every rank before building it.
void check_parallel_sizes(int world_size, int tensor_parallel, int pipeline_parallel);

// The order in which the grid's coordinates vary with the world rank, fastest first.
enum class RankOrder {
  kTpDpPp,  // Megatron's default ("tp-cp-ep-dp-pp" without context or expert parallelism)
  kTpPpDp,  // --use-tp-pp-dp-mapping
};

struct ParallelState {
  // Throws Error when t·p does not divide the world size or a size is < 1
  // (check_parallel_sizes).
  static ParallelState create(std::shared_ptr<Communicator> world, int tensor_parallel,
                              int pipeline_parallel, RankOrder order = RankOrder::kTpDpPp);

  int world_size = 1, rank = 0;
  int tp_size = 1, tp_rank = 0;
  int dp_size = 1, dp_rank = 0;
  int pp_size = 1, pp_rank = 0;

  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> tp;  // tensor-model-parallel group
  std::shared_ptr<Communicator> dp;  // data-parallel group
  std::shared_ptr<Communicator> pp;  // pipeline group
  std::shared_ptr<Communicator> mp;  // model-parallel group (tp × pp)
  // Embedding group (pp_rank 0 and pp_size − 1) on those two stages when pp_size > 1; null on
  // the middle stages and when pp_size == 1.
  std::shared_ptr<Communicator> embedding;

  bool first_pipeline_stage() const { return pp_rank == 0; }
  bool last_pipeline_stage() const { return pp_rank == pp_size - 1; }
};

}  // namespace megatron
