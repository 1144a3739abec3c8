// MoeRouter: Megatron-Core's TopKRouter at expert-parallel size 1. A linear layer without
// bias scores every token against every expert, then kernels/moe_router.h picks each token's
// top-k experts and their weights:
//
//   x [N, h] ─(R)─ logits = x·Wᵀ [N, E] ─ top-k (score function, groups, bias) → indices
//                                                                      [N, k], probs f32 [N, k]
//            (--moe-router-load-balancing-type sinkhorn, training: the sinkhorn choice,
//             kernels/moe_sinkhorn.h, with the plain scores' weights)
//            training only: + z-loss(logits), + load-balancing losses(logits)
//
// R, the router dtype, is f32 (--moe-router-dtype fp32, and Megatron's None here) or f64
// (--moe-router-dtype fp64, Megatron's RouterGatingLinearFunction with torch.float64): x and W
// are cast to R, the GEMM multiplies in R, and the routing, the losses' statistics and the
// logits' gradient are in R (every row computation is in double either way: what fp64 changes
// is the logits themselves, e.g. two experts an f32 GEMM rounds to a tie). The weight gradient
// dlogitsᵀ·x is an R GEMM, cast to f32 and added to the weight's (f32) gradient; the input
// gradient dlogits·W is an R GEMM cast to the input's dtype (f64 → f32 → bf16 for a bf16
// input: two roundings where Megatron's .to(bf16) rounds once). The probs stay f32 for the
// experts, rounded once from double.
//
// global_aux_loss (Megatron's _apply_global_aux_loss, the Qwen "global-batch" balancing loss):
// each training micro-batch's per-expert counts (of the loss's own top-k) are summed over the
// data-parallel × context-parallel ranks (Megatron's tp_dp_cp group: the TP ranks here route
// the same tokens) and added to the step's running total; the loss uses their running mean
// over the step's micro-batches so far (total / micro-batches seen, f32 as Megatron's buffers)
// with this rank's scores, T = the micro-batch's tokens over all those ranks:
//   loss_rank = E/(k·T²) · Σ_e mean_count_e · Σ_{t on this rank} q_te
// so the ranks' losses add up to the global one (logged as global_load_balancing_loss, the
// sum over dp × cp), and its gradient flows through this rank's q only; the trainer's mean
// over data-parallel ranks then scales it by 1/dp as Megatron's. The running total restarts
// with each step (reset_moe_token_counts). Because the forward adds to the running total, a
// recomputed MoE layer (whose forward runs again in the backward) would count twice:
// global_aux_loss refuses recomputation of MoE layers (Megatron's recompute runs the first
// forward without grad, where the loss is skipped).
//
// The losses never enter the loss the trainer reports: as Megatron's MoEAuxLossAutoScaler they
// add their gradient in the backward, scaled like the main loss's (the backward's loss_scale:
// the loss scale / the micro-batches), and are logged apart (MoeLosses). The router sees the
// whole micro-batch's tokens on every tensor-parallel rank (model/moe_layer.h), so its losses
// are those of the micro-batch at any TP size (Megatron's with sequence parallelism, where
// the ranks' shares are summed), and its weight gradient is complete on every rank.
// With context parallelism each CP rank routes its own chunks of the sequences; the
// load-balancing statistics (per-expert counts and score sums, per sequence for seq_aux_loss)
// and the z-loss sum are summed over the CP group (Megatron's tp_cp reduction), so every CP rank
// logs the micro-batch's losses and its gradient is its tokens' share of them: the CP ranks'
// gradients add up to the CP 1 gradient (the trainer sums them over dp × cp).
// With --calculate-per-token-loss the losses' gradients are multiplied by the micro-batch's
// token count (s·b), as Megatron's (aux_loss × num_local_tokens × tp_cp size): the trainer's
// division by the global batch's token count then leaves them averaged over micro-batches and
// data-parallel ranks, as without it when every token counts.
//
// Aux-loss-free balancing (--moe-router-enable-expert-bias, DeepSeek-V3; Megatron's
// TopKRouter buffers): the expert bias is added to the sigmoid scores for the choice only, in
// training and evaluation; each training micro-batch's backward adds the tokens the layer
// routed to each expert (after the capacity's drops: its slots) to the step's counts — in the
// backward because it runs once per micro-batch, where a recomputed layer runs its forward
// twice — and update_moe_expert_biases moves the bias once per step.
//
// Parameter: "<prefix>.weight" [E, h], replicated, f32 compute.
// Buffers (parallel/parameter.h; Megatron's names): with --moe-router-enable-expert-bias
//   "<prefix>.expert_bias"              f32 [E], persistent (in checkpoints)
//   "<prefix>.local_tokens_per_expert"  f32 [E], this rank's counts of the step
// with global_aux_loss
//   "<prefix>.global_tokens_per_expert" f32 [E], the step's counts over dp × cp so far
//   "<prefix>.ga_steps"                 f32 [1], the step's micro-batches so far
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "distributed/parallel_state.h"
#include "kernels/moe_router.h"
#include "model/transformer_config.h"
#include "parallel/compute_weights.h"

namespace megatron {

// One micro-batch's MoE losses, as Megatron logs them: each loss without its coefficient,
// summed over the MoE layers that computed it (the log divides by the number of MoE layers).
struct MoeLosses {
  double load_balancing = 0;         // aux_loss ("load_balancing_loss")
  double seq_load_balancing = 0;     // seq_aux_loss ("seq_load_balancing_loss")
  double z_loss = 0;                 // mean logsumexp(logits)² ("z_loss")
  double global_load_balancing = 0;  // global_aux_loss ("global_load_balancing_loss"): the
                                     // sum of the dp × cp ranks' losses
  MoeLosses& operator+=(const MoeLosses& o) {
    load_balancing += o.load_balancing;
    seq_load_balancing += o.seq_load_balancing;
    global_load_balancing += o.global_load_balancing;
    z_loss += o.z_loss;
    return *this;
  }
};

class MoeRouter {
 public:
  struct Ctx {
    Tensor input;    // R [N, h]: x in the router dtype
    Tensor weight;   // R [E, h]: W in the router dtype (the f32 weight itself with R = f32)
    Tensor logits;   // R [N, E]
    Tensor indices;  // i32 [N, k]
    Tensor probs;    // f32 [N, k]
    // The balancing losses' gradient weights per unit of loss scale (kernels::
    // moe_aux_loss_backward), host, each [groups × E] (aux_loss and global_aux_loss 1 group,
    // seq_aux_loss b); empty when the loss is off.
    std::vector<std::vector<double>> balancing_weights;
    bool z_loss = false;
    MoeLosses losses;
  };

  // ps: its context-parallel group sums the losses' statistics.
  MoeRouter(const std::string& prefix, const TransformerConfig& config, const ParallelState& ps,
            ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [N, h] (compute dtype; rows in [s, b] order, b = batch) → ctx.indices, ctx.probs.
  // `train`: the losses are computed (and their gradients kept for the backward).
  void forward(Ctx& ctx, const Tensor& x, int64_t batch, bool train, Arena& arena) const;
  // dprobs f32 [N, k] (consumed) → the weight gradient, and with `dx` defined (f32 or the
  // compute dtype [N, h]) dx += the input gradient. loss_scale: the losses' gradient scale.
  void backward(const Ctx& ctx, Tensor& dprobs, float loss_scale, Tensor dx, Arena& arena) const;
  // With the expert bias: adds a training micro-batch's routed tokens per expert (host, [E])
  // to the step's counts; otherwise nothing.
  void count_routed_tokens(const std::vector<int64_t>& tokens_per_expert) const;

 private:
  // ctx.logits' gradient in R [N, E] (the top-k weights', the losses').
  Tensor logits_grad(const Ctx& ctx, Tensor& dprobs, float loss_scale, Arena& arena) const;
  // global_aux_loss: adds the micro-batch's counts (summed over dp × cp) to the step's running
  // total and returns its running mean per expert (f32, as Megatron's buffers).
  std::vector<float> global_mean_counts(const std::vector<double>& counts) const;

  kernels::MoeTopkParams params_;
  bool sinkhorn_ = false;  // training chooses by kernels/moe_sinkhorn.h
  int64_t experts_, hidden_;
  double aux_coeff_, seq_aux_coeff_, global_aux_coeff_, z_coeff_;
  bool per_token_loss_;
  DType dtype_;                          // R: f32, or f64 with --moe-router-dtype fp64
  std::shared_ptr<Communicator> cp_;     // the context-parallel group (size 1 without CP)
  std::shared_ptr<Communicator> dp_cp_;  // dp × cp: global_aux_loss's counts
  float init_std_;
  const ComputeWeights& weights_;
  size_t weight_index_;
  ParameterStore* store_;  // its buffers (the expert bias and counts)
  std::optional<size_t> bias_buffer_, counts_buffer_;
  std::optional<size_t> global_counts_buffer_, global_steps_buffer_;  // global_aux_loss
};

// The step's end for every router of `store` with an expert bias (Megatron's
// _update_router_expert_bias in finalize_model_grads): its token counts are summed over `dp_cp`
// — the ranks that routed other tokens; the TP ranks route the same ones, so the counts (and
// the bias) are those of the global batch on every rank, at any layout — in one all-reduce
// of [routers, E], each bias moves by rate · sign(mean − count) (kernels::
// moe_expert_bias_update), and the counts restart from zero. Collective over dp_cp when the
// store holds a router with an expert bias (all of dp_cp hold the same stage); else nothing.
void update_moe_expert_biases(ParameterStore& store, Communicator& dp_cp, float rate);
// Zeroes the routers' token counts — the expert bias's and global_aux_loss's running totals —
// (before a step's micro-batches run, or run again).
void reset_moe_token_counts(ParameterStore& store);

}  // namespace megatron
