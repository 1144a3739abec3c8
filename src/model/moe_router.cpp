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
constexpr const char* kGlobalCountsSuffix = ".global_tokens_per_expert";
constexpr const char* kGlobalStepsSuffix = ".ga_steps";

// The values of an f32 or f64 tensor (any device), in double.
std::vector<double> host_values(const Tensor& t) {
  const Tensor host = t.to(Device::CPU);
  if (t.dtype() == DType::F64) return host.to_vector<double>();
  const std::vector<float> v = host.to_vector<float>();
  return {v.begin(), v.end()};
}

// values as an f32 or f64 tensor of `shape` on `device`.
Tensor device_values(const std::vector<double>& values, const Shape& shape, DType dtype,
                     Device device) {
  if (dtype == DType::F64) return Tensor::from_vector(values, shape).to(device);
  return Tensor::from_vector(std::vector<float>(values.begin(), values.end()), shape).to(device);
}

}  // namespace

MoeRouter::MoeRouter(const std::string& prefix, const TransformerConfig& config,
                     const ParallelState& ps, ParameterStore& store, const ComputeWeights& weights)
    : experts_(config.arch.moe.num_experts),
      hidden_(config.hidden_size),
      aux_coeff_(config.arch.moe.aux_loss_coeff),
      seq_aux_coeff_(config.arch.moe.seq_aux_loss_coeff),
      global_aux_coeff_(config.arch.moe.global_aux_loss_coeff),
      z_coeff_(config.arch.moe.z_loss_coeff),
      per_token_loss_(config.per_token_loss),
      dtype_(config.arch.moe.router_fp64 ? DType::F64 : DType::F32),
      cp_(ps.cp),
      dp_cp_(ps.dp_cp),
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
  if (global_aux_coeff_ > 0) {
    MT_REQUIRE(!config.recompute_activations && !config.recompute_moe,
               "--moe-router-load-balancing-type global_aux_loss adds each micro-batch's counts "
               "to the step's in the forward, which a recomputed MoE layer runs twice: drop "
               "--recompute-granularity full (or --recompute-modules moe), or use aux_loss");
    global_counts_buffer_ = store.add_buffer({prefix + kGlobalCountsSuffix, {experts_}, false});
    global_steps_buffer_ = store.add_buffer({prefix + kGlobalStepsSuffix, {1}, false});
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
  for (Buffer& b : store.buffers()) {
    const std::string& name = b.spec.name;
    if (name.ends_with(kTokenCountsSuffix) || name.ends_with(kGlobalCountsSuffix) ||
        name.ends_with(kGlobalStepsSuffix))
      kernels::fill(b.value, 0.0f);
  }
}

std::vector<float> MoeRouter::global_mean_counts(const std::vector<double>& counts) const {
  Tensor& total = store_->buffers()[*global_counts_buffer_].value;
  Tensor& steps = store_->buffers()[*global_steps_buffer_].value;
  std::vector<float> t = total.to(Device::CPU).to_vector<float>();
  const float n = steps.to(Device::CPU).to_vector<float>().at(0) + 1.0f;
  std::vector<float> mean(t.size());
  for (size_t e = 0; e < t.size(); ++e) {
    t[e] += float(counts[e]);
    mean[e] = t[e] / n;
  }
  total.copy_from(Tensor::from_vector(t, {experts_}).to(total.device()));
  steps.copy_from(Tensor::from_vector(std::vector<float>{n}, {1}).to(steps.device()));
  return mean;
}

void MoeRouter::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_index_], seed, init_std_);
}

void MoeRouter::forward(Ctx& ctx, const Tensor& x, int64_t batch, bool train, Arena& arena) const {
  const int64_t n = x.size(0);
  // x and W in R: f32 (x as it is, or cast), or f64 from f32 (x cast to f32 first: exact).
  Tensor x32 = x;
  if (x.dtype() != DType::F32) {
    x32 = arena.alloc({n, hidden_}, DType::F32);
    kernels::cast(x, x32);
  }
  ctx.input = x32;
  ctx.weight = weights_.master(weight_index_);
  if (dtype_ == DType::F64) {
    ctx.input = arena.alloc({n, hidden_}, DType::F64);
    kernels::cast(x32, ctx.input);
    ctx.weight = arena.alloc({experts_, hidden_}, DType::F64);
    kernels::cast(weights_.master(weight_index_), ctx.weight);
  }
  ctx.logits = arena.alloc({n, experts_}, dtype_);
  kernels::gemm(ctx.input, false, ctx.weight, true, ctx.logits);
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
  ctx.balancing_weights.clear();
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
  // counts and score sums are summed over them (one all-reduce), so T counts them all. The
  // global loss sums them over dp × cp instead, and weighs the step's running mean counts.
  const auto balancing = [&](int64_t groups, double coeff, bool global) {
    if (!train || coeff <= 0) return 0.0;
    Communicator& group = global ? *dp_cp_ : *cp_;
    const int64_t tokens = micro_batch_tokens / groups * (global ? dp_cp_->size() / cp : 1);
    Tensor stats = arena.alloc({2 * groups, experts_}, dtype_);
    Tensor counts = stats.slice(0, 0, groups), sums = stats.slice(0, groups, 2 * groups);
    kernels::moe_aux_loss_stats(ctx.logits, params_.topk, params_.sigmoid, groups, counts, sums);
    if (group.size() > 1) group.all_reduce(stats);
    const std::vector<double> all = host_values(stats);
    std::vector<double> c(all.begin(), all.begin() + groups * experts_);
    const std::vector<double> sum(all.begin() + groups * experts_, all.end());
    if (global) {
      const std::vector<float> mean = global_mean_counts(c);
      c.assign(mean.begin(), mean.end());
    }
    const double factor =
        double(experts_) / (double(params_.topk) * double(tokens) * double(tokens) * groups);
    double loss = 0;
    for (size_t i = 0; i < c.size(); ++i) loss += c[i] * sum[i];
    std::vector<double>& weights = ctx.balancing_weights.emplace_back(c.size());
    for (size_t i = 0; i < c.size(); ++i) weights[i] = coeff * factor * c[i];
    return loss * factor;
  };
  ctx.losses.load_balancing = balancing(1, aux_coeff_, false);
  ctx.losses.seq_load_balancing = balancing(batch, seq_aux_coeff_, false);
  ctx.losses.global_load_balancing = balancing(1, global_aux_coeff_, true);
}

Tensor MoeRouter::logits_grad(const Ctx& ctx, Tensor& dprobs, float loss_scale,
                              Arena& arena) const {
  const int64_t n = ctx.logits.size(0), micro_batch_tokens = n * cp_->size();
  Tensor dlogits = arena.zeros({n, experts_}, dtype_);
  kernels::moe_topk_backward(dprobs, ctx.logits, ctx.indices, params_, dlogits);
  // The per-token loss's gradients are sums the trainer divides by the global token count.
  double scale = loss_scale;
  if (per_token_loss_) scale *= double(micro_batch_tokens);
  for (const std::vector<double>& w : ctx.balancing_weights) {
    std::vector<double> scaled(w.size());
    for (size_t i = 0; i < w.size(); ++i) scaled[i] = w[i] * scale;
    const Tensor weights =
        device_values(scaled, {int64_t(w.size()) / experts_, experts_}, dtype_, dlogits.device());
    kernels::moe_aux_loss_backward(ctx.logits, weights, params_.sigmoid, dlogits);
  }
  if (ctx.z_loss)
    kernels::moe_z_loss_backward(ctx.logits, z_coeff_ / double(micro_batch_tokens) * scale,
                                 dlogits);
  return dlogits;
}

void MoeRouter::backward(const Ctx& ctx, Tensor& dprobs, float loss_scale, Tensor dx,
                         Arena& arena) const {
  const int64_t n = ctx.logits.size(0);
  const Tensor dlogits = logits_grad(ctx, dprobs, loss_scale, arena);
  Tensor dw = weights_.grad(weight_index_);
  if (dtype_ == DType::F32) {
    kernels::gemm(dlogits, true, ctx.input, false, dw, 1.0f, 1.0f);
  } else {  // the f64 product, rounded once to the f32 gradient it adds to
    Tensor dw64 = arena.alloc({experts_, hidden_}, DType::F64);
    kernels::gemm(dlogits, true, ctx.input, false, dw64);
    Tensor dw32 = arena.alloc({experts_, hidden_}, DType::F32);
    kernels::cast(dw64, dw32);
    kernels::axpy(1.0f, dw32, dw);
  }
  if (!dx.defined()) return;
  if (dtype_ == DType::F32 && dx.dtype() == DType::F32) {
    kernels::gemm(dlogits, false, ctx.weight, false, dx, 1.0f, 1.0f);
    return;
  }
  Tensor d = arena.alloc({n, hidden_}, dtype_);
  kernels::gemm(dlogits, false, ctx.weight, false, d);
  if (dtype_ == DType::F64) {
    Tensor d32 = arena.alloc({n, hidden_}, DType::F32);
    kernels::cast(d, d32);
    d = d32;
  }
  if (dx.dtype() != DType::F32) {
    Tensor d16 = arena.alloc(dx.shape(), dx.dtype());
    kernels::cast(d, d16);
    d = d16;
  }
  kernels::axpy(1.0f, d, dx);
}

}  // namespace megatron
