// ParallelState: the rank grid and its groups, with Megatron's layout (order tp-cp-dp-pp)
//   tp_rank = rank % t,  cp_rank = (rank / t) % c,  dp_rank = (rank / (t·c)) % d,
//   pp_rank = rank / (t·c·d),  d = world / (t·c·p).
// TP groups are consecutive ranks (fastest-varying, so on one node); CP groups (context
// parallelism: the ranks that share one sequence, docs/parallelism.md) share (tp, dp, pp);
// DP groups share (tp_rank, cp_rank, pp_rank); PP groups share (tp, cp, dp); the
// model-parallel group is the t·p ranks that together hold one model replica (same dp and cp
// rank). The context parallel ranks are carved out of the data-parallel dimension: they hold
// the same weights, so the gradients are reduced (and the distributed optimizer shards) over
// the DP×CP group, while the data loader places samples by the DP rank alone. With p > 1 the
// embedding group is the first and the last stage of a pipeline (same tp, cp and dp rank), the
// two ranks that hold the tied word embedding (Megatron's rule). --use-tp-pp-dp-mapping
// (RankOrder::kTpPpDp) makes pipeline ranks vary before data-parallel ones, as Megatron's does:
//   tp_rank = rank % t,  cp_rank = (rank / t) % c,  pp_rank = (rank / (t·c)) % p,
//   dp_rank = rank / (t·c·p).
// The groups are the same sets of coordinates either way; only which process holds which
// coordinates changes, so a run's results do not depend on the order.
// Hierarchical context parallelism (--hierarchical-context-parallel-sizes A P, for
// --cp-comm-type a2a+p2p) splits each CP group in two levels, as Megatron's hierarchical
// groups: hcp_a2a is A consecutive CP ranks (cp_rank / A shared, rank cp_rank mod A), hcp_p2p
// the P ranks with the same rank in theirs (rank cp_rank / A).
//
// Expert parallelism (mixture-of-experts layers, docs/moe.md) decomposes the same world a second
// time, as Megatron-Core's expert rank generator: the expert layers see no context parallelism,
// their tensor parallelism has its own size (etp, --expert-tensor-parallel-size, by default the
// dense TP size), and the expert-parallel ranks (ep, --expert-model-parallel-size; each holds
// E/ep of the experts) are carved out of what the dense grid calls tp × cp × dp:
//   etp_rank = rank % et,  ep_rank = (rank / et) % e,  edp_rank = (rank / (et·e)) % ed,
//   pp_rank  = rank / (et·e·ed),  ed = world / (et·e·p)            (order etp-ep-edp-pp)
// and with --use-tp-pp-dp-mapping (etp-ep-pp-edp) pp_rank = (rank / (et·e)) % p,
// edp_rank = rank / (et·e·p). Both decompositions give every rank the same pipeline stage
// (Megatron asserts it; with etp-ep-edp-pp it holds by construction, with etp-ep-pp-edp it needs
// et·e = t·c). The expert groups: ep (the all-to-all of the token dispatcher), etp (the expert
// weights' tensor split), tp_ep (etp × ep, ordered ep_rank·et + etp_rank: the dispatcher's
// count exchange and the all-gather dispatcher), edp (the ranks that hold the same expert
// shard: the expert gradients are reduced over it instead of dp × cp) and emp (etp × ep × pp,
// Megatron's expert tensor-model-pipeline group: the ranks that together hold one copy of every
// expert, over which the expert parameters' gradient norm is summed, as the dense ones' over mp).
// With ep = 1 and et = t (no expert parallelism, the default) the expert grid is the dense one
// folded and the expert groups are the dense ones (etp = tp_ep = tp, edp = dp_cp, emp = mp, ep a
// world of one), in either order and with context parallelism: no communicators of their own.
#pragma once

#include <memory>

#include "distributed/communicator.h"

namespace megatron {

// Throws Error (naming the flags) when a size is < 1 or t·c·p does not divide the world size.
// Communicates nothing: callers may check the grid on every rank before building it.
void check_parallel_sizes(int world_size, int tensor_parallel, int pipeline_parallel,
                          int context_parallel = 1);

// The expert grid's sizes: ep, etp >= 1 and et·e·p dividing the world size. Communicates nothing.
void check_expert_parallel_sizes(int world_size, int expert_model_parallel,
                                 int expert_tensor_parallel, int pipeline_parallel);
// The experts split evenly over the expert-parallel group (Megatron's rule), and expert
// parallelism only with experts: Error naming --num-experts and --expert-model-parallel-size
// otherwise. num_experts 0 means a model without experts.
void check_expert_count(int num_experts, int expert_model_parallel);

// The order in which the grid's coordinates vary with the world rank, fastest first.
enum class RankOrder {
  kTpDpPp,  // Megatron's default ("tp-cp-ep-dp-pp" without expert parallelism)
  kTpPpDp,  // --use-tp-pp-dp-mapping ("tp-cp-ep-pp-dp")
};

struct ParallelState {
  // Throws Error when t·c·p does not divide the world size or a size is < 1
  // (check_parallel_sizes), and likewise for the expert grid (check_expert_parallel_sizes).
  // cp_a2a_size > 0 (A, which must divide context_parallel) builds the hierarchical CP groups.
  // expert_tensor_parallel 0 means the dense TP size (Megatron's default).
  static ParallelState create(std::shared_ptr<Communicator> world, int tensor_parallel,
                              int pipeline_parallel, RankOrder order = RankOrder::kTpDpPp,
                              int context_parallel = 1, int cp_a2a_size = 0,
                              int expert_model_parallel = 1, int expert_tensor_parallel = 0);

  int world_size = 1, rank = 0;
  int tp_size = 1, tp_rank = 0;
  int cp_size = 1, cp_rank = 0;
  int dp_size = 1, dp_rank = 0;
  int pp_size = 1, pp_rank = 0;
  // The gradient-reduction group's size and rank: dp_rank · cp_size + cp_rank of dp × cp.
  int dp_cp_size = 1, dp_cp_rank = 0;
  // The expert grid (see the top of this file).
  int ep_size = 1, ep_rank = 0;    // expert model parallel: which E/ep experts this rank holds
  int etp_size = 1, etp_rank = 0;  // expert tensor parallel
  int edp_size = 1, edp_rank = 0;  // expert data parallel

  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> tp;                // tensor-model-parallel group
  std::shared_ptr<Communicator> cp;                // context-parallel group (ring order = cp_rank)
  std::shared_ptr<Communicator> hcp_a2a, hcp_p2p;  // hierarchical CP levels, or null
  std::shared_ptr<Communicator> dp;                // data-parallel group (the loader's placement)
  std::shared_ptr<Communicator> dp_cp;             // dp × cp: gradient reduction, optimizer shards
  std::shared_ptr<Communicator> pp;                // pipeline group
  std::shared_ptr<Communicator> mp;                // model-parallel group (tp × pp)
  std::shared_ptr<Communicator> ep;                // expert-parallel group (rank = ep_rank)
  std::shared_ptr<Communicator> etp;               // expert tensor-parallel group
  std::shared_ptr<Communicator> tp_ep;             // etp × ep (rank = ep_rank · et + etp_rank)
  std::shared_ptr<Communicator> edp;               // expert data-parallel group (rank = edp_rank)
  std::shared_ptr<Communicator> emp;               // expert model-parallel group (etp × ep × pp)
  // Embedding group (pp_rank 0 and pp_size − 1) on those two stages when pp_size > 1; null on
  // the middle stages and when pp_size == 1.
  std::shared_ptr<Communicator> embedding;

  bool first_pipeline_stage() const { return pp_rank == 0; }
  bool last_pipeline_stage() const { return pp_rank == pp_size - 1; }
  // Whether the experts live on a grid of their own (EP > 1, or an etp group other than TP):
  // their gradients, norms and distributed-optimizer shards then go over the expert groups.
  bool own_expert_grid() const { return ep_size > 1 || etp_size != tp_size; }
};

}  // namespace megatron
