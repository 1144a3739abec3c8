#include "parallel/expert_token_exchange.h"

#include <numeric>

#include "core/error.h"
#include "distributed/solo_communicator.h"
#include "kernels/elementwise.h"

namespace megatron {

namespace {

Shape with_rows(const Tensor& like, int64_t rows) {
  Shape shape = like.shape();
  shape[0] = rows;
  return shape;
}

int64_t total(std::span<const int64_t> rows) {
  return std::accumulate(rows.begin(), rows.end(), int64_t(0));
}

// src is the chunks `sizes` back to back (rows); the result holds the chunks `order` names, in
// that order. A chunk order leaves out is dropped.
Tensor gather_chunks(const Tensor& src, const std::vector<int64_t>& sizes,
                     const std::vector<size_t>& order, Arena& arena) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), offsets.begin() + 1);
  int64_t rows = 0;
  for (const size_t c : order) rows += sizes[c];
  Tensor dst = arena.alloc(with_rows(src, rows), src.dtype());
  int64_t at = 0;
  for (const size_t c : order) {
    if (sizes[c] == 0) continue;
    dst.slice(0, at, at + sizes[c]).copy_from(src.slice(0, offsets[c], offsets[c] + sizes[c]));
    at += sizes[c];
  }
  return dst;
}

// The inverse of gather_chunks: a tensor of the chunks `sizes` whose chunk order[k] is src's
// k-th chunk, and zeros in the chunks order does not name.
Tensor scatter_chunks(const Tensor& src, const std::vector<int64_t>& sizes,
                      const std::vector<size_t>& order, Arena& arena) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), offsets.begin() + 1);
  Tensor dst = arena.zeros(with_rows(src, offsets.back()), src.dtype());
  int64_t at = 0;
  for (const size_t c : order) {
    if (sizes[c] == 0) continue;
    dst.slice(0, offsets[c], offsets[c] + sizes[c]).copy_from(src.slice(0, at, at + sizes[c]));
    at += sizes[c];
  }
  return dst;
}

// All-gather with per-member row counts, through all_to_all_v: every member sends its `mine`
// (rows_of[rank] rows) to every member, itself included; the result is the members' blocks in
// rank order. A group of one returns `mine`.
Tensor all_gather_rows(Communicator& group, const Tensor& mine, std::span<const int64_t> rows_of,
                       Arena& arena) {
  const int n = group.size();
  if (n == 1) return mine;
  const int64_t rows = mine.shape()[0];
  Tensor copies = arena.alloc(with_rows(mine, rows * n), mine.dtype());
  for (int q = 0; q < n; ++q) copies.slice(0, q * rows, (q + 1) * rows).copy_from(mine);
  Tensor gathered = arena.alloc(with_rows(mine, total(rows_of)), mine.dtype());
  group.all_to_all_v(copies, std::vector<int64_t>(size_t(n), rows), gathered, rows_of);
  return gathered;
}

// Reduce-scatter with per-member row counts, through all_to_all_v: `whole` is the members'
// segments (rows_of) back to back; the result is this rank's segment summed over the members in
// rank order, accumulated in f32 and rounded once to the tensors' dtype (Megatron reduces the
// experts' outputs in the probabilities' f32). A group of one returns `whole`.
Tensor reduce_scatter_rows(Communicator& group, const Tensor& whole,
                           std::span<const int64_t> rows_of, Arena& arena) {
  const int n = group.size();
  if (n == 1) return whole;
  const int64_t rows = rows_of[size_t(group.rank())];
  Tensor pieces = arena.alloc(with_rows(whole, rows * n), whole.dtype());
  group.all_to_all_v(whole, rows_of, pieces, std::vector<int64_t>(size_t(n), rows));
  const bool f32 = whole.dtype() == DType::F32;
  Tensor sum = arena.alloc(with_rows(whole, rows), DType::F32);
  const Tensor first = pieces.slice(0, 0, rows);
  if (f32) {
    sum.copy_from(first);
  } else {
    kernels::cast(first, sum);
  }
  for (int q = 1; q < n; ++q) kernels::axpy(1.0f, pieces.slice(0, q * rows, (q + 1) * rows), sum);
  if (f32) return sum;
  Tensor rounded = arena.alloc(sum.shape(), whole.dtype());
  kernels::cast(sum, rounded);
  return rounded;
}

}  // namespace

TokenDispatcher token_dispatcher_from_name(const std::string& name) {
  if (name == "alltoall") return TokenDispatcher::kAllToAll;
  if (name == "allgather") return TokenDispatcher::kAllGather;
  // Megatron's flex dispatcher drives DeepEP / HybridEP / NCCL-EP, GPU communication libraries
  // that move the same tokens to the same experts: the all-to-all exchange does it here.
  if (name == "flex") return TokenDispatcher::kAllToAll;
  MT_THROW("--moe-token-dispatcher-type ", name,
           ": unknown dispatcher; choose alltoall, allgather (the default) or flex");
}

ExpertTokenExchange::ExpertTokenExchange(const ParallelState& ps, int64_t num_experts,
                                         TokenDispatcher kind, EtpTokens etp_tokens)
    : ep_(ps.ep),
      etp_(ps.etp),
      tp_ep_(ps.tp_ep),
      num_experts_(num_experts),
      kind_(kind),
      ep_size_(ps.ep_size),
      ep_rank_(ps.ep_rank),
      etp_size_(ps.etp_size),
      etp_rank_(ps.etp_rank) {
  MT_CHECK(num_experts >= 1, "ExpertTokenExchange: a layer needs at least one expert, got ",
           num_experts);
  check_expert_count(int(num_experts), ps.ep_size);
  MT_CHECK(ep_ != nullptr && etp_ != nullptr && tp_ep_ != nullptr,
           "ExpertTokenExchange: the parallel state has no expert groups");
  if (etp_tokens == EtpTokens::kShared) {
    // The etp peers hold the same rows: the exchange is the ep group's alone.
    etp_ = std::make_shared<SoloCommunicator>();
    tp_ep_ = ep_;
    etp_size_ = 1;
    etp_rank_ = 0;
  }
}

int64_t ExpertTokenExchange::count(const ExpertExchangeCtx& ctx, int64_t tp_ep_rank,
                                   int64_t expert) const {
  return ctx.counts[size_t(tp_ep_rank * num_experts_ + expert)];
}

void ExpertTokenExchange::chunk_layout(const ExpertExchangeCtx& ctx, std::vector<int64_t>& sizes,
                                       std::vector<size_t>& order) const {
  const int64_t local = num_local_experts(), first = first_local_expert();
  sizes.clear();
  order.clear();
  if (kind_ == TokenDispatcher::kAllToAll) {
    // After the all-to-all and the etp all-gather: [source etp t][source ep y][local expert j].
    for (int64_t t = 0; t < etp_size_; ++t)
      for (int64_t y = 0; y < ep_size_; ++y)
        for (int64_t j = 0; j < local; ++j)
          sizes.push_back(count(ctx, y * etp_size_ + t, first + j));
    for (int64_t j = 0; j < local; ++j)
      for (int64_t t = 0; t < etp_size_; ++t)
        for (int64_t y = 0; y < ep_size_; ++y)
          order.push_back(size_t((t * ep_size_ + y) * local + j));
  } else {
    // After the tp_ep all-gather: [source tp_ep g][global expert e]; this rank keeps its own.
    const int64_t group = ep_size_ * etp_size_;
    for (int64_t g = 0; g < group; ++g)
      for (int64_t e = 0; e < num_experts_; ++e) sizes.push_back(count(ctx, g, e));
    for (int64_t j = 0; j < local; ++j)
      for (int64_t g = 0; g < group; ++g) order.push_back(size_t(g * num_experts_ + first + j));
  }
}

LocalTokens ExpertTokenExchange::dispatch(ExpertExchangeCtx& ctx, const Tensor& tokens_by_expert,
                                          std::span<const int64_t> tokens_per_expert,
                                          Arena& arena) const {
  MT_CHECK(tokens_by_expert.dim() == 2 && tokens_by_expert.is_contiguous(),
           "ExpertTokenExchange::dispatch: tokens_by_expert must be a contiguous [M, h], got ",
           tokens_by_expert.describe());
  MT_CHECK(int64_t(tokens_per_expert.size()) == num_experts_,
           "ExpertTokenExchange::dispatch: ", tokens_per_expert.size(), " token counts for ",
           num_experts_, " experts");
  MT_CHECK(total(tokens_per_expert) == tokens_by_expert.shape()[0],
           "ExpertTokenExchange::dispatch: the token counts sum to ", total(tokens_per_expert),
           ", but tokens_by_expert has ", tokens_by_expert.shape()[0], " rows");
  // Counts first: every rank of tp_ep learns every rank's tokens_per_expert.
  const std::vector<int64_t> mine(tokens_per_expert.begin(), tokens_per_expert.end());
  Tensor all = Tensor::empty({tp_ep_->size() * num_experts_}, DType::I64);
  tp_ep_->all_gather(Tensor::from_vector(mine, {num_experts_}), all);
  ctx.counts = all.to_vector<int64_t>();
  ctx.rows = tokens_by_expert.shape()[0];

  LocalTokens out;
  out.tokens = to_experts(ctx, tokens_by_expert, arena);
  const int64_t group = ep_size_ * etp_size_;
  for (int64_t j = 0; j < num_local_experts(); ++j) {
    int64_t rows = 0;
    for (int64_t g = 0; g < group; ++g) rows += count(ctx, g, first_local_expert() + j);
    out.tokens_per_expert.push_back(rows);
  }
  return out;
}

Communicator& ExpertTokenExchange::gather_group() const {
  return kind_ == TokenDispatcher::kAllToAll ? *etp_ : *tp_ep_;
}

std::vector<int64_t> ExpertTokenExchange::gather_rows(const ExpertExchangeCtx& ctx) const {
  const int64_t local = num_local_experts(), first = first_local_expert();
  std::vector<int64_t> rows;
  if (kind_ == TokenDispatcher::kAllToAll) {
    // etp rank t holds what its EP peers routed to this rank's experts.
    for (int64_t t = 0; t < etp_size_; ++t) {
      int64_t n = 0;
      for (int64_t y = 0; y < ep_size_; ++y)
        for (int64_t j = 0; j < local; ++j) n += count(ctx, y * etp_size_ + t, first + j);
      rows.push_back(n);
    }
  } else {
    // tp_ep rank g holds its whole tokens_by_expert.
    for (int64_t g = 0; g < ep_size_ * etp_size_; ++g) {
      int64_t n = 0;
      for (int64_t e = 0; e < num_experts_; ++e) n += count(ctx, g, e);
      rows.push_back(n);
    }
  }
  return rows;
}

void ExpertTokenExchange::ep_rows(const ExpertExchangeCtx& ctx, std::vector<int64_t>& to,
                                  std::vector<int64_t>& from) const {
  const int64_t local = num_local_experts(), first = first_local_expert();
  const int64_t me = ep_rank_ * etp_size_ + etp_rank_;
  to.assign(size_t(ep_size_), 0);
  from.assign(size_t(ep_size_), 0);
  for (int64_t y = 0; y < ep_size_; ++y)
    for (int64_t j = 0; j < local; ++j) {
      to[size_t(y)] += count(ctx, me, y * local + j);
      from[size_t(y)] += count(ctx, y * etp_size_ + etp_rank_, first + j);
    }
}

Tensor ExpertTokenExchange::to_experts(const ExpertExchangeCtx& ctx, const Tensor& x,
                                       Arena& arena) const {
  Tensor exchanged = x;
  if (kind_ == TokenDispatcher::kAllToAll && ep_size_ > 1) {
    // To EP rank y the rows of its experts (contiguous in x, experts being in order), from it
    // the rows it routed to this rank's experts.
    std::vector<int64_t> to, from;
    ep_rows(ctx, to, from);
    exchanged = arena.alloc(with_rows(x, total(from)), x.dtype());
    ep_->all_to_all_v(x, to, exchanged, from);
  }
  const Tensor gathered = all_gather_rows(gather_group(), exchanged, gather_rows(ctx), arena);
  std::vector<int64_t> sizes;
  std::vector<size_t> order;
  chunk_layout(ctx, sizes, order);
  return gather_chunks(gathered, sizes, order, arena);
}

Tensor ExpertTokenExchange::from_experts(const ExpertExchangeCtx& ctx, const Tensor& y,
                                         Arena& arena) const {
  MT_CHECK(y.dim() == 2 && y.is_contiguous(),
           "ExpertTokenExchange: expert rows must be a contiguous [M', h], got ", y.describe());
  std::vector<int64_t> sizes;
  std::vector<size_t> order;
  chunk_layout(ctx, sizes, order);
  const Tensor placed = scatter_chunks(y, sizes, order, arena);
  const Tensor reduced = reduce_scatter_rows(gather_group(), placed, gather_rows(ctx), arena);
  if (kind_ == TokenDispatcher::kAllGather || ep_size_ == 1) return reduced;
  std::vector<int64_t> to, from;  // the dispatch's all-to-all, reversed
  ep_rows(ctx, to, from);
  Tensor back = arena.alloc(with_rows(y, ctx.rows), y.dtype());
  ep_->all_to_all_v(reduced, from, back, to);
  return back;
}

Tensor ExpertTokenExchange::combine(const ExpertExchangeCtx& ctx, const Tensor& expert_out,
                                    Arena& arena) const {
  return from_experts(ctx, expert_out, arena);
}

Tensor ExpertTokenExchange::dispatch_backward(const ExpertExchangeCtx& ctx,
                                              const Tensor& grad_local_tokens, Arena& arena) const {
  return from_experts(ctx, grad_local_tokens, arena);
}

Tensor ExpertTokenExchange::combine_backward(const ExpertExchangeCtx& ctx,
                                             const Tensor& grad_combined, Arena& arena) const {
  MT_CHECK(grad_combined.dim() == 2 && grad_combined.shape()[0] == ctx.rows,
           "ExpertTokenExchange::combine_backward: the gradient must be [", ctx.rows, ", h], got ",
           grad_combined.describe());
  return to_experts(ctx, grad_combined, arena);
}

}  // namespace megatron
