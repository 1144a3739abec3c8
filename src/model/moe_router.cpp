#include "model/moe_router.h"

#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/moe_sinkhorn.h"

namespace megatron {

namespace {

// The router buffers' names after the router's prefix (Megatron's attribute names).
constexpr const char* kExpertBiasSuffix = ".expert_bias";
constexpr const char* kTokenCountsSuffix = ".local_tokens_per_expert";

}  // namespace

MoeRouter::MoeRouter(const std::string& prefix, const TransformerConfig& config,
                     const ParallelState& ps, ParameterStore& store, const ComputeWeights& weights)
    : experts_(config.arch.moe.num_experts),
      hidden_(config.hidden_size),
      aux_coeff_(config.arch.moe.aux_loss_coeff),
      seq_aux_coeff_(config.arch.moe.seq_aux_loss_coeff),
      z_coeff_(config.arch.moe.z_loss_coeff),
      per_token_loss_(config.per_token_loss),
      cp_(ps.cp),
      init_std_(config.hidden_init_std()),
      weights_(weights) {
  const MoeOptions& m = config.arch.moe;
  params_.topk = m.topk;
  if (m.sinkhorn) {
    // Sinkhorn's weights (and its evaluation routing): the sigmoid for k = 1, else the softmax
    // over all experts — the pre-softmax top-k; nothing else applies (model/moe_options.h).
    params_.sigmoid = m.topk == 1;
    params_.pre_softmax = m.topk > 1;
    sinkhorn_ = true;
  } else {
    params_.sigmoid = m.score_function == MoeScoreFunction::kSigmoid;
    // As Megatron, --moe-router-pre-softmax has no effect on sigmoid scores.
    params_.pre_softmax = m.pre_softmax && !params_.sigmoid;
    params_.num_groups = m.num_groups;
    params_.group_topk = m.group_topk;
    params_.scaling_factor = float(m.topk_scaling_factor.value_or(1.0));
  }
  weight_index_ = store.add({prefix + ".weight", {experts_, hidden_}, -1});
  store_ = &store;
  if (m.expert_bias) {
    bias_buffer_ = store.add_buffer({prefix + kExpertBiasSuffix, {experts_}, true});
    counts_buffer_ = store.add_buffer({prefix + kTokenCountsSuffix, {experts_}, false});
  }
}

void MoeRouter::count_routed_tokens(const std::vector<int64_t>& tokens_per_expert) const {
  if (!counts_buffer_) return;
  const std::vector<float> counts(tokens_per_expert.begin(), tokens_per_expert.end());
  Tensor& total = store_->buffers()[*counts_buffer_].value;
  kernels::axpy(1.0f, Tensor::from_vector(counts, {experts_}).to(total.device()), total);
}

void update_moe_expert_biases(ParameterStore& store, Communicator& dp_cp, float rate) {
  // The routers' (bias, counts) pairs, by their names.
  std::vector<std::pair<Tensor, Tensor>> routers;
  for (const Buffer& b : store.buffers()) {
    const std::string& name = b.spec.name;
    if (!name.ends_with(kExpertBiasSuffix)) continue;
    const std::string counts =
        name.substr(0, name.size() - std::strlen(kExpertBiasSuffix)) + kTokenCountsSuffix;
    for (const Buffer& c : store.buffers())
      if (c.spec.name == counts) routers.emplace_back(b.value, c.value);
  }
  if (routers.empty()) return;
  const int64_t e = routers.front().first.numel();
  Tensor stacked = Tensor::empty({int64_t(routers.size()), e}, DType::F32, store.device());
  for (size_t r = 0; r < routers.size(); ++r) {
    Tensor row = stacked.slice(0, int64_t(r), int64_t(r) + 1).view({e});
    row.copy_from(routers[r].second);
  }
  if (dp_cp.size() > 1) dp_cp.all_reduce(stacked);
  for (size_t r = 0; r < routers.size(); ++r) {
    Tensor bias = routers[r].first.view({1, e});
    kernels::moe_expert_bias_update(stacked.slice(0, int64_t(r), int64_t(r) + 1), rate, bias);
  }
  reset_moe_token_counts(store);
}

void reset_moe_token_counts(ParameterStore& store) {
  for (Buffer& b : store.buffers())
    if (b.spec.name.ends_with(kTokenCountsSuffix)) kernels::fill(b.value, 0.0f);
}

void MoeRouter::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_index_], seed, init_std_);
}

void MoeRouter::forward(Ctx& ctx, const Tensor& x, int64_t batch, bool train, Arena& arena) const {
  const int64_t n = x.size(0);
  if (x.dtype() == DType::F32) {
    ctx.input = x;
  } else {
    ctx.input = arena.alloc({n, hidden_}, DType::F32);
    kernels::cast(x, ctx.input);
  }
  ctx.logits = arena.alloc({n, experts_}, DType::F32);
  kernels::gemm(ctx.input, false, weights_.master(weight_index_), true, ctx.logits);
  ctx.indices = arena.alloc({n, params_.topk}, DType::I32);
  ctx.probs = arena.alloc({n, params_.topk}, DType::F32);
  if (sinkhorn_ && train) {
    kernels::moe_sinkhorn_topk(ctx.logits, params_.topk, ctx.indices);
    kernels::moe_topk_weights(ctx.logits, ctx.indices, params_, ctx.probs);
  } else {
    // Sinkhorn's evaluation choice is plain, as Megatron's: the bias is the top-k router's.
    const Tensor bias =
        bias_buffer_ && !sinkhorn_ ? store_->buffers()[*bias_buffer_].value : Tensor();
    kernels::moe_topk_forward(ctx.logits, bias, params_, ctx.indices, ctx.probs);
  }
  ctx.losses = {};
  ctx.z_loss = train && z_coeff_ > 0;
  // The micro-batch's tokens: this rank's n times the context-parallel ranks sharing them.
  const int64_t cp = cp_->size(), micro_batch_tokens = n * cp;
  if (ctx.z_loss) {
    double sum = kernels::moe_z_loss_sum(ctx.logits);
    if (cp > 1) sum = cp_->all_reduce_scalar(sum);
    ctx.losses.z_loss = sum / double(micro_batch_tokens);
  }
  // Switch Transformer's loss E/(k·T²)·Σ_e (Σ_t q_te)·count_e over groups of T tokens, the
  // per-sequence one averaged over the b sequences; its gradient weights are
  // coefficient·E/(k·T²·groups)·count. With CP a group's tokens are spread over the CP ranks:
  // counts and score sums are summed over them (one all-reduce), so T counts them all.
  const auto balancing = [&](int64_t groups, double coeff, Tensor& weights) {
    if (!train || coeff <= 0) return 0.0;
    const int64_t tokens = micro_batch_tokens / groups;
    Tensor stats = arena.alloc({2 * groups, experts_}, DType::F32);
    Tensor counts = stats.slice(0, 0, groups), sums = stats.slice(0, groups, 2 * groups);
    kernels::moe_aux_loss_stats(ctx.logits, params_.topk, params_.sigmoid, groups, counts, sums);
    if (cp > 1) cp_->all_reduce(stats);
    const double factor =
        double(experts_) / (double(params_.topk) * double(tokens) * double(tokens) * groups);
    const std::vector<float> c = counts.to(Device::CPU).to_vector<float>();
    const std::vector<float> s = sums.to(Device::CPU).to_vector<float>();
    double loss = 0;
    for (size_t i = 0; i < c.size(); ++i) loss += double(c[i]) * double(s[i]);
    weights = counts;
    kernels::scale(weights, float(coeff * factor));
    return loss * factor;
  };
  ctx.losses.load_balancing = balancing(1, aux_coeff_, ctx.aux_weights);
  ctx.losses.seq_load_balancing = balancing(batch, seq_aux_coeff_, ctx.seq_aux_weights);
}

void MoeRouter::backward(const Ctx& ctx, Tensor& dprobs, float loss_scale, Tensor dx,
                         Arena& arena) const {
  const int64_t n = ctx.logits.size(0), micro_batch_tokens = n * cp_->size();
  Tensor dlogits = arena.zeros({n, experts_}, DType::F32);
  kernels::moe_topk_backward(dprobs, ctx.logits, ctx.indices, params_, dlogits);
  // The per-token loss's gradients are sums the trainer divides by the global token count.
  if (per_token_loss_) loss_scale *= float(micro_batch_tokens);
  for (const Tensor* w : {&ctx.aux_weights, &ctx.seq_aux_weights}) {
    if (!w->defined()) continue;
    Tensor scaled = arena.alloc(w->shape(), DType::F32);
    scaled.copy_from(*w);
    kernels::scale(scaled, loss_scale);
    kernels::moe_aux_loss_backward(ctx.logits, scaled, params_.sigmoid, dlogits);
  }
  if (ctx.z_loss)
    kernels::moe_z_loss_backward(
        ctx.logits, float(z_coeff_ / double(micro_batch_tokens)) * loss_scale, dlogits);
  Tensor dw = weights_.grad(weight_index_);
  kernels::gemm(dlogits, true, ctx.input, false, dw, 1.0f, 1.0f);
  if (!dx.defined()) return;
  if (dx.dtype() == DType::F32) {
    kernels::gemm(dlogits, false, weights_.master(weight_index_), false, dx, 1.0f, 1.0f);
    return;
  }
  Tensor d32 = arena.alloc({n, hidden_}, DType::F32);
  kernels::gemm(dlogits, false, weights_.master(weight_index_), false, d32);
  Tensor d16 = arena.alloc(dx.shape(), dx.dtype());
  kernels::cast(d32, d16);
  kernels::axpy(1.0f, d16, dx);
}

}  // namespace megatron
