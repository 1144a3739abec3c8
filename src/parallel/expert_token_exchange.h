// ExpertTokenExchange: moves a mixture-of-experts layer's routed tokens to the ranks that hold
// their experts and the experts' outputs back (Megatron-Core's token dispatchers, the part of
// them that communicates; docs/moe.md).
//
// Expert parallelism (ParallelState: ep, etp, tp_ep) gives EP rank r the E/ep experts
// [r·E/ep, (r+1)·E/ep), its local expert j being global expert r·E/ep + j, and splits each
// expert's weights over the expert tensor-parallel group (etp). Every rank of the tp_ep group
// (etp × ep) routes tokens of its own (with TP > 1 the sequence-parallel shard, as Megatron
// requires for MoE with tensor parallelism), permuted by the layer into `tokens_by_expert`
// [M, h]: grouped by global expert, tokens_per_expert[e] rows for expert e (M = Σ, the
// dropless N·k or the capacity layout alike). Every rank of an expert's etp group computes its
// weight shard's part of the expert on every token routed to it, so:
//
//   dispatch: the tp_ep group first all-gathers its tokens_per_expert (counts before tokens),
//   then
//     kAllToAll  (--moe-token-dispatcher-type alltoall): an all-to-all over ep sends each EP
//                rank the rows of its experts; with etp > 1 an all-gather over etp (per-rank
//                row counts) gives every etp rank the rows of all of them;
//     kAllGather (allgather): an all-gather over tp_ep of every rank's tokens_by_expert, of
//                which each rank keeps its experts' rows;
//   the result `local_tokens` [M', h] grouped by local expert; within one local expert by
//   source rank: (source etp rank, then source EP rank) for kAllToAll, as Megatron's sort of
//   the gathered chunks, and the tp_ep rank (EP rank, then etp rank) for kAllGather; within a
//   source in its order. `tokens_per_expert` [E/ep] counts the rows of each local expert.
//
//   combine: the exact reverse: expert outputs [M', h] (each etp rank's partial sums from its
//   weight shard) go back to their source ranks, are summed over the etp group (a
//   reduce-scatter with per-rank counts, accumulated in f32 in rank order) and land in
//   tokens_by_expert's order [M, h]. kAllGather's reduce-scatter spans tp_ep with zeros for the
//   rows of other ranks' experts, so both dispatchers give bit-identical results.
//
// That is Megatron's layout, where TP > 1 requires sequence parallelism and each etp rank brings
// tokens of its own (EtpTokens::kOwn). A layer that runs its experts on tokens every etp rank
// holds alike (the way the dense MLP splits over TP without sequence parallelism:
// EtpTokens::kShared) exchanges over ep only (the counts over ep too) and reduces the partial
// sums itself (the row-parallel fc2's all-reduce); the etp rank then plays no part here.
//
// The backward of dispatch is combine's exchange applied to the gradient, and the backward of
// combine is dispatch's; the counts come from the micro-batch's ExpertExchangeCtx, so the
// backwards communicate no counts. With ep = etp = 1 every operation is a copy (the layer skips
// the exchange: active() is false).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/arena.h"
#include "distributed/parallel_state.h"

namespace megatron {

enum class TokenDispatcher { kAllToAll, kAllGather };

// Whether the ranks of an etp group route tokens of their own or the same tokens (above).
enum class EtpTokens { kOwn, kShared };

// --moe-token-dispatcher-type: "alltoall", "allgather", or "flex" — Megatron's dispatcher over
// DeepEP / HybridEP / NCCL-EP, GPU communication libraries, whose exchange is alltoall's;
// Error naming the flag otherwise.
TokenDispatcher token_dispatcher_from_name(const std::string& name);

// What one micro-batch's dispatch leaves for its combine and the two backwards.
struct ExpertExchangeCtx {
  // [tp_ep size × E] row-major: row g is tokens_per_expert of tp_ep rank g.
  std::vector<int64_t> counts;
  int64_t rows = 0;  // M, this rank's tokens_by_expert rows
};

struct LocalTokens {
  Tensor tokens;                           // [M', h], grouped by local expert
  std::vector<int64_t> tokens_per_expert;  // [E/ep]
};

class ExpertTokenExchange {
 public:
  // Error when num_experts is not divisible by the EP size (check_expert_count).
  ExpertTokenExchange(const ParallelState& ps, int64_t num_experts, TokenDispatcher kind,
                      EtpTokens etp_tokens = EtpTokens::kOwn);

  // Something to exchange (ep > 1, or etp > 1 with kOwn); otherwise local_tokens would be
  // tokens_by_expert.
  bool active() const { return ep_size_ * etp_size_ > 1; }
  int64_t num_local_experts() const { return num_experts_ / ep_size_; }
  int64_t first_local_expert() const { return ep_rank_ * num_local_experts(); }

  // tokens_by_expert [M, h] (contiguous; f32, bf16 or f16), tokens_per_expert [E] (Σ = M).
  LocalTokens dispatch(ExpertExchangeCtx& ctx, const Tensor& tokens_by_expert,
                       std::span<const int64_t> tokens_per_expert, Arena& arena) const;
  // expert_out [M', h] → [M, h] in tokens_by_expert's order.
  Tensor combine(const ExpertExchangeCtx& ctx, const Tensor& expert_out, Arena& arena) const;
  // grad of local_tokens [M', h] → grad of tokens_by_expert [M, h].
  Tensor dispatch_backward(const ExpertExchangeCtx& ctx, const Tensor& grad_local_tokens,
                           Arena& arena) const;
  // grad of the combined [M, h] → grad of expert_out [M', h].
  Tensor combine_backward(const ExpertExchangeCtx& ctx, const Tensor& grad_combined,
                          Arena& arena) const;

 private:
  // tokens_by_expert-ordered rows → local_tokens (dispatch, combine_backward).
  Tensor to_experts(const ExpertExchangeCtx& ctx, const Tensor& x, Arena& arena) const;
  // local_tokens-ordered rows → tokens_by_expert order, summed over the etp partials (combine,
  // dispatch_backward).
  Tensor from_experts(const ExpertExchangeCtx& ctx, const Tensor& y, Arena& arena) const;
  int64_t count(const ExpertExchangeCtx& ctx, int64_t tp_ep_rank, int64_t expert) const;
  // The group whose all-gather (dispatch) and reduce-scatter (combine) follow the all-to-all:
  // etp for kAllToAll, tp_ep for kAllGather; and the rows each of its members contributes.
  Communicator& gather_group() const;
  std::vector<int64_t> gather_rows(const ExpertExchangeCtx& ctx) const;
  // kAllToAll's all-to-all over ep in dispatch's direction: rows to and from each EP rank.
  void ep_rows(const ExpertExchangeCtx& ctx, std::vector<int64_t>& to,
               std::vector<int64_t>& from) const;
  // The chunk layout between the communication and the local-expert grouping: chunk sizes in
  // the order the communication leaves them, and the chunks of local_tokens, in its order, as
  // indices into that list.
  void chunk_layout(const ExpertExchangeCtx& ctx, std::vector<int64_t>& sizes,
                    std::vector<size_t>& order) const;

  std::shared_ptr<Communicator> ep_, etp_, tp_ep_;
  int64_t num_experts_;
  TokenDispatcher kind_;
  int64_t ep_size_, ep_rank_, etp_size_, etp_rank_;
};

}  // namespace megatron
