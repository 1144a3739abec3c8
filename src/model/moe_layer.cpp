#include "model/moe_layer.h"

#include <cmath>

#include "kernels/bias_add.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/moe_permute.h"
#include "kernels/sigmoid_gate.h"
#include "kernels/squared_relu.h"
#include "kernels/swiglu.h"
#include "parallel/mappings.h"

namespace megatron {

namespace {

ParamSpec expert_spec(std::string name, Shape shape, int partition_dim, bool weight_decay) {
  ParamSpec s;
  s.name = std::move(name);
  s.full_shape = std::move(shape);
  s.partition_dim = partition_dim;
  s.weight_decay = weight_decay;
  s.expert = true;
  return s;
}

}  // namespace

MoeLayer::MoeLayer(const std::string& prefix, const TransformerConfig& config,
                   const ParallelState& ps, ParameterStore& store, const ComputeWeights& weights)
    : config_(config),
      moe_(config.arch.moe),
      tp_(ps.tp),
      tp_rank_(ps.tp_rank),
      ffn_local_(config.expert_ffn_size() / ps.etp_size),
      weights_(weights),
      router_(prefix + ".router", config, ps, store, weights),
      local_experts_(config.arch.moe.num_experts / ps.ep_size),
      // With the expert grid's own TP size the TP ranks share the routed rows out (block_of).
      rows_shared_out_(ps.etp_size != ps.tp_size),
      first_etp_rank_(ps.etp_rank == 0) {
  if (!rows_shared_out_ && ps.ep_size > 1) {
    // The TP ranks route the whole micro-batch alike (the gather above) and the experts are
    // split over TP, so the rows move over the EP group alone; fc2's partial sums are reduced
    // over TP after the unpermute. Both dispatchers give the same bits
    // (parallel/expert_token_exchange.h): alltoall moves less.
    exchange_.emplace(ps, config.arch.moe.num_experts, TokenDispatcher::kAllToAll,
                      EtpTokens::kShared);
  } else if (rows_shared_out_ && ps.ep_size * ps.etp_size > 1) {
    // Each TP rank brings its block of the rows, as each rank brings its sequence shard in
    // Megatron: the rows move over tp_ep and the etp partial sums are added in the combine.
    exchange_.emplace(ps, config.arch.moe.num_experts, TokenDispatcher::kAllToAll, EtpTokens::kOwn);
  }
  const int64_t e = moe_.num_experts, h = config.hidden_size, ffn = config.expert_ffn_size();
  const bool swiglu = config.arch.swiglu, bias = config.arch.add_bias_linear;
  const std::string fc1 = prefix + ".experts.linear_fc1", fc2 = prefix + ".experts.linear_fc2";
  fc1_weight_ = store.add(swiglu ? expert_spec(fc1 + ".weight", {e, 2, ffn, h}, 2, true)
                                 : expert_spec(fc1 + ".weight", {e, ffn, h}, 1, true));
  if (bias)
    fc1_bias_ = store.add(swiglu ? expert_spec(fc1 + ".bias", {e, 2, ffn}, 2, false)
                                 : expert_spec(fc1 + ".bias", {e, ffn}, 1, false));
  fc2_weight_ = store.add(expert_spec(fc2 + ".weight", {e, h, ffn}, 2, true));
  if (bias) fc2_bias_ = store.add(expert_spec(fc2 + ".bias", {e, h}, -1, false));
  if (moe_.shared_expert_ffn > 0) {
    shared_.emplace(prefix + ".shared_experts", config, ps, store, weights,
                    MlpShape{moe_.shared_expert_ffn, "linear_fc1", "linear_fc2"});
    if (moe_.shared_expert_gate) {
      ParamSpec gate{prefix + ".shared_experts.gate_weight", {1, h}, -1};
      gate.sequence_parallel = config.sequence_parallel;
      gate_weight_ = store.add(gate);
    }
  }
}

void MoeLayer::init_weights(ParameterStore& store, uint64_t seed) const {
  router_.init_weights(store, seed);
  init_normal(store.params()[fc1_weight_], seed, config_.hidden_init_std());
  init_normal(store.params()[fc2_weight_], seed, config_.output_layer_init_std());
  if (config_.arch.add_bias_linear) {
    init_constant(store.params()[fc1_bias_], 0.0f);
    init_constant(store.params()[fc2_bias_], 0.0f);
  }
  if (shared_) shared_->init_weights(store, seed);
  if (gate_weight_) init_normal(store.params()[*gate_weight_], seed, config_.hidden_init_std());
}

MoeLayer::RowBlock MoeLayer::block_of(int64_t rows) const {
  if (!rows_shared_out_) return {0, rows, rows};
  const int64_t t = tp_->size(), r = tp_->rank();
  return {rows * r / t, rows * (r + 1) / t, rows};
}

std::vector<int64_t> MoeLayer::rows_per_expert_in(const RowBlock& block,
                                                  const std::vector<int64_t>& slots) {
  std::vector<int64_t> rows(slots.size() - 1);
  for (size_t e = 0; e + 1 < slots.size(); ++e)
    rows[e] =
        std::max<int64_t>(0, std::min(slots[e + 1], block.end) - std::max(slots[e], block.begin));
  return rows;
}

Tensor MoeLayer::all_rows(const RowBlock& block, const Tensor& rows, Arena& arena) const {
  if (!rows_shared_out_) return rows;
  // Zeros elsewhere: the TP sum that follows adds exactly nothing for them.
  Tensor all = arena.zeros({block.total, rows.size(1)}, rows.dtype());
  all.slice(0, block.begin, block.end).copy_from(rows);
  return all;
}

std::vector<int64_t> MoeLayer::expert_slots(const std::vector<int64_t>& counts,
                                            int64_t tokens) const {
  std::vector<int64_t> slots(counts.size() + 1, 0);
  // Megatron's get_capacity over the routed pairs: ⌈N·k / E · factor⌉.
  const int64_t capacity =
      moe_.capacity_factor ? int64_t(std::ceil(double(tokens * moe_.topk) /
                                               double(moe_.num_experts) * *moe_.capacity_factor))
                           : 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    int64_t n = counts[e];
    if (moe_.capacity_factor) n = moe_.pad_to_capacity ? capacity : std::min(n, capacity);
    slots[e + 1] = slots[e] + n;
  }
  return slots;
}

Tensor MoeLayer::activation_forward(const Ctx& ctx, Arena& arena) const {
  Tensor g = arena.alloc({ctx.pre_activation.size(0), ffn_local_}, ctx.pre_activation.dtype());
  if (config_.arch.swiglu)
    kernels::swiglu_forward(ctx.pre_activation, g);
  else if (config_.arch.squared_relu)
    kernels::bias_squared_relu_forward(ctx.pre_activation, Tensor(), g);
  else
    kernels::bias_gelu_forward(ctx.pre_activation, Tensor(), g, config_.gelu);
  return g;
}

Tensor MoeLayer::forward(Ctx& ctx, const Tensor& x, bool train, Arena& arena,
                         Arena* workspace) const {
  const bool sp = config_.sequence_parallel;
  const Tensor full = TpRegionInput::forward(*tp_, x, sp, arena);  // [s, b, h]
  const int64_t h = config_.hidden_size, n = full.numel() / h, k = moe_.topk;
  ctx.input = full.view({n, h});
  router_.forward(ctx.router, ctx.input, full.size(1), train, arena);

  Tensor counts = arena.alloc({moe_.num_experts}, DType::I64);
  kernels::moe_expert_counts(ctx.router.indices, moe_.num_experts, counts);
  const std::vector<int64_t> slots = expert_slots(counts.to(Device::CPU).to_vector<int64_t>(), n);
  ctx.tokens_per_expert.resize(size_t(moe_.num_experts));
  for (size_t e = 0; e < ctx.tokens_per_expert.size(); ++e)
    ctx.tokens_per_expert[e] = slots[e + 1] - slots[e];
  const int64_t m = slots.back();
  ctx.slot_source = arena.alloc({m}, DType::I32);
  ctx.slot_of = arena.alloc({n * k}, DType::I32);
  const bool drop_by_probs = moe_.capacity_factor && moe_.drop_policy == MoeTokenDropPolicy::kProbs;
  kernels::moe_assign_slots(ctx.router.indices, drop_by_probs ? ctx.router.probs : Tensor(), slots,
                            ctx.slot_source, ctx.slot_of);
  ctx.permuted = arena.alloc({m, h}, full.dtype());
  kernels::moe_permute(ctx.input, ctx.slot_source, k, ctx.permuted);
  ctx.block = block_of(m);
  const Tensor mine = ctx.permuted.slice(0, ctx.block.begin, ctx.block.end);
  const std::vector<int64_t> mine_per_expert = rows_per_expert_in(ctx.block, slots);
  if (exchange_) {
    LocalTokens local = exchange_->dispatch(ctx.exchange, mine, mine_per_expert, arena);
    ctx.local_tokens = local.tokens;
    ctx.local_tokens_per_expert = std::move(local.tokens_per_expert);
  } else {
    ctx.local_tokens = mine;
    ctx.local_tokens_per_expert = mine_per_expert;
  }
  const std::vector<int64_t>& counts_local = ctx.local_tokens_per_expert;
  const int64_t m_local = ctx.local_tokens.size(0);

  const int64_t f_local = (config_.arch.swiglu ? 2 : 1) * ffn_local_;
  const Tensor w1 = weights_.weight(fc1_weight_).view({local_experts_, f_local, h});
  ctx.pre_activation = arena.alloc({m_local, f_local}, full.dtype());
  kernels::grouped_gemm(ctx.local_tokens, w1, true, counts_local, ctx.pre_activation);
  if (config_.arch.add_bias_linear)
    kernels::grouped_bias_add(ctx.pre_activation,
                              weights_.weight(fc1_bias_).view({local_experts_, f_local}),
                              counts_local);
  const bool recompute_act = config_.recompute_moe_act && workspace != nullptr;
  ctx.activation = activation_forward(ctx, recompute_act ? *workspace : arena);
  Tensor expert_out = arena.alloc({m_local, h}, full.dtype());
  kernels::grouped_gemm(ctx.activation, weights_.weight(fc2_weight_), true, counts_local,
                        expert_out);
  if (recompute_act) ctx.activation = Tensor();
  // The bias enters the sum over the expert's weight shards once.
  if (config_.arch.add_bias_linear && first_etp_rank_)
    kernels::grouped_bias_add(expert_out, weights_.weight(fc2_bias_), counts_local);
  const Tensor mine_out =
      exchange_ ? exchange_->combine(ctx.exchange, expert_out, arena) : expert_out;
  ctx.expert_out = all_rows(ctx.block, mine_out, arena);

  Tensor out = arena.alloc(full.shape(), full.dtype());  // [s, b, h] partial
  Tensor out2 = out.view({n, h});
  kernels::moe_unpermute(ctx.expert_out, ctx.slot_of, ctx.router.probs, out2);
  Tensor y;
  if (sp) {
    y = ReduceScatterToSequenceParallelRegion::forward(*tp_, out, arena);
  } else {
    ReduceFromTpRegion::forward(*tp_, out);
    y = out;
  }
  if (shared_) {
    const bool recompute_shared = config_.recompute_shared_experts && workspace != nullptr;
    if (recompute_shared) ctx.shared_input = x;
    const Tensor shared2 = shared_forward(ctx, x, recompute_shared ? *workspace : arena);
    if (gate_weight_) {
      Tensor y2 = y.view(shared2.shape());
      kernels::sigmoid_gate_forward(shared2, ctx.gate_logits.view({shared2.size(0)}), y2);
    } else {
      kernels::axpy(1.0f, shared2.view(y.shape()), y);
    }
  }
  return y;
}

Tensor MoeLayer::shared_forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  const int64_t h = config_.hidden_size;
  ctx.shared.emplace();
  Tensor shared2 = shared_->forward(*ctx.shared, x, arena).view({-1, h});  // [T, h]
  if (config_.arch.add_bias_linear) kernels::bias_add_forward(shared2, shared_->output_bias());
  if (!gate_weight_) return shared2;
  const int64_t rows = shared2.size(0);
  ctx.shared_out = shared2;
  if (x.dtype() == DType::F32) {
    ctx.gate_input = x.view({rows, h});
  } else {
    ctx.gate_input = arena.alloc({rows, h}, DType::F32);
    kernels::cast(x.view({rows, h}), ctx.gate_input);
  }
  ctx.gate_logits = arena.alloc({rows, 1}, DType::F32);
  kernels::gemm(ctx.gate_input, false, weights_.master(*gate_weight_), true, ctx.gate_logits);
  return shared2;
}

Tensor MoeLayer::backward(const Ctx& ctx, const Tensor& dout, float loss_scale,
                          Arena& arena) const {
  const bool sp = config_.sequence_parallel;
  const int64_t h = config_.hidden_size, n = ctx.input.size(0);
  const Tensor dfull = sp ? ReduceScatterToSequenceParallelRegion::backward(*tp_, dout, arena)
                          : dout;  // [s, b, h], complete on every rank
  const Tensor d2 = dfull.view({n, h});

  Tensor dy = arena.alloc(ctx.expert_out.shape(), ctx.expert_out.dtype());
  Tensor dprobs = arena.alloc(ctx.router.probs.shape(), DType::F32);
  kernels::moe_unpermute_backward(d2, ctx.expert_out, ctx.slot_source, ctx.slot_of,
                                  ctx.router.probs, dy, dprobs);
  // Each rank's dot products are with its partial expert outputs.
  if (tp_->size() > 1) tp_->all_reduce(dprobs);
  // The experts' output gradient on the rows they computed: this rank's block (all rows unless
  // the TP ranks share them out), through combine's backward with an exchange.
  dy = dy.slice(0, ctx.block.begin, ctx.block.end);
  if (exchange_) dy = exchange_->combine_backward(ctx.exchange, dy, arena);
  const std::vector<int64_t>& counts_local = ctx.local_tokens_per_expert;
  if (config_.arch.add_bias_linear)
    kernels::grouped_bias_add_backward(dy, counts_local, weights_.grad(fc2_bias_));

  const int64_t m_local = ctx.local_tokens.size(0), f_local = ctx.pre_activation.size(1);
  Tensor dact = arena.alloc({m_local, ffn_local_}, dy.dtype());
  kernels::grouped_gemm(dy, weights_.weight(fc2_weight_), false, counts_local, dact);
  Tensor dw2 = weights_.grad(fc2_weight_);
  const Tensor activation =
      ctx.activation.defined() ? ctx.activation : activation_forward(ctx, arena);
  kernels::grouped_gemm_weight_grad(dy, activation, counts_local, dw2);

  Tensor dpre = arena.alloc({m_local, f_local}, dy.dtype());
  Tensor no_bias;
  if (config_.arch.swiglu)
    kernels::swiglu_backward(dact, ctx.pre_activation, dpre);
  else if (config_.arch.squared_relu)
    kernels::bias_squared_relu_backward(dact, ctx.pre_activation, Tensor(), dpre, no_bias);
  else
    kernels::bias_gelu_backward(dact, ctx.pre_activation, Tensor(), dpre, no_bias, config_.gelu);
  if (config_.arch.add_bias_linear) {
    Tensor db1 = weights_.grad(fc1_bias_).view({local_experts_, f_local});
    kernels::grouped_bias_add_backward(dpre, counts_local, db1);
  }
  const Tensor w1 = weights_.weight(fc1_weight_).view({local_experts_, f_local, h});
  Tensor dlocal = arena.alloc({m_local, h}, dy.dtype());
  kernels::grouped_gemm(dpre, w1, false, counts_local, dlocal);
  Tensor dw1 = weights_.grad(fc1_weight_).view({local_experts_, f_local, h});
  kernels::grouped_gemm_weight_grad(dpre, ctx.local_tokens, counts_local, dw1);
  // Back to the rows of this rank's block (dispatch's backward with an exchange), among zeros
  // for the other TP ranks' blocks: the input gradient's TP sum adds them.
  const Tensor dpermuted = all_rows(
      ctx.block, exchange_ ? exchange_->dispatch_backward(ctx.exchange, dlocal, arena) : dlocal,
      arena);

  Tensor dx_full = arena.alloc(dfull.shape(), dy.dtype());  // [s, b, h] partial
  Tensor dx2 = dx_full.view({n, h});
  kernels::moe_permute_backward(dpermuted, ctx.slot_of, moe_.topk, dx2);
  // The router's input gradient is replicated: it enters the TP sum once.
  router_.backward(ctx.router, dprobs, loss_scale, tp_rank_ == 0 ? dx2 : Tensor(), arena);
  router_.count_routed_tokens(ctx.tokens_per_expert);
  Tensor dx = TpRegionInput::backward(*tp_, dx_full, sp, arena);
  if (shared_) {
    Ctx again;  // --recompute-modules shared_experts: the shared expert's forward once more
    if (ctx.shared_input.defined()) shared_forward(again, ctx.shared_input, arena);
    const Ctx& sc = ctx.shared_input.defined() ? again : ctx;
    const Tensor dshared = gate_weight_ ? shared_gate_backward(sc, dout, dx, arena) : dout;
    if (config_.arch.add_bias_linear) {
      Tensor db = shared_->output_bias_grad();
      kernels::bias_add_backward(dshared.view({-1, h}), db);
    }
    kernels::axpy(1.0f, shared_->backward(*sc.shared, dshared, arena), dx);
  }
  return dx;
}

Tensor MoeLayer::shared_gate_backward(const Ctx& ctx, const Tensor& dout, Tensor& dx,
                                      Arena& arena) const {
  const int64_t rows = ctx.shared_out.size(0), h = config_.hidden_size;
  Tensor dshared = arena.alloc(dout.shape(), dout.dtype());
  Tensor dshared2 = dshared.view({rows, h});
  Tensor dlogits = arena.alloc({rows, 1}, DType::F32);
  Tensor dlogits1 = dlogits.view({rows});
  kernels::sigmoid_gate_backward(dout.view({rows, h}), ctx.shared_out, ctx.gate_logits.view({rows}),
                                 dshared2, dlogits1);
  Tensor dw = weights_.grad(*gate_weight_);
  kernels::gemm(dlogits, true, ctx.gate_input, false, dw, 1.0f, 1.0f);
  // dx += dlogits · w_gate, formed in f32 and added once in dx's dtype.
  Tensor d32 = arena.alloc({rows, h}, DType::F32);
  kernels::gemm(dlogits, false, weights_.master(*gate_weight_), false, d32);
  if (dx.dtype() == DType::F32) {
    kernels::axpy(1.0f, d32.view(dx.shape()), dx);
  } else {
    Tensor d16 = arena.alloc(dx.shape(), dx.dtype());
    Tensor d16v = d16.view({rows, h});
    kernels::cast(d32, d16v);
    kernels::axpy(1.0f, d16, dx);
  }
  return dshared;
}

}  // namespace megatron
