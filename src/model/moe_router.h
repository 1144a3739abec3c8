// MoeRouter: Megatron-Core's TopKRouter at expert-parallel size 1. A linear layer without
// bias scores every token against every expert (logits in fp32, as --moe-router-dtype fp32),
// then kernels/moe_router.h picks each token's top-k experts and their weights:
//
//   x [N, h] ─(f32)─ logits = x·Wᵀ [N, E] ─ top-k (score function, groups, bias) → indices
//                                                                       [N, k], probs [N, k]
//            (--moe-router-load-balancing-type sinkhorn, training: the sinkhorn choice,
//             kernels/moe_sinkhorn.h, with the plain scores' weights)
//            training only: + z-loss(logits), + load-balancing losses(logits)
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
// Buffers (parallel/parameter.h, with --moe-router-enable-expert-bias; Megatron's names):
//   "<prefix>.expert_bias"              f32 [E], persistent (in checkpoints)
//   "<prefix>.local_tokens_per_expert"  f32 [E], this rank's counts of the step
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
  double load_balancing = 0;      // aux_loss ("load_balancing_loss")
  double seq_load_balancing = 0;  // seq_aux_loss ("seq_load_balancing_loss")
  double z_loss = 0;              // mean logsumexp(logits)² ("z_loss")
  MoeLosses& operator+=(const MoeLosses& o) {
    load_balancing += o.load_balancing;
    seq_load_balancing += o.seq_load_balancing;
    z_loss += o.z_loss;
    return *this;
  }
};

class MoeRouter {
 public:
  struct Ctx {
    Tensor input;    // f32 [N, h]: x in fp32
    Tensor logits;   // f32 [N, E]
    Tensor indices;  // i32 [N, k]
    Tensor probs;    // f32 [N, k]
    // The losses' gradient weights per unit of loss scale (kernels::moe_aux_loss_backward),
    // f32 [1, E] and [b, E]; undefined when the loss is off.
    Tensor aux_weights, seq_aux_weights;
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
  kernels::MoeTopkParams params_;
  bool sinkhorn_ = false;  // training chooses by kernels/moe_sinkhorn.h
  int64_t experts_, hidden_;
  double aux_coeff_, seq_aux_coeff_, z_coeff_;
  bool per_token_loss_;
  std::shared_ptr<Communicator> cp_;  // the context-parallel group (size 1 without CP)
  float init_std_;
  const ComputeWeights& weights_;
  size_t weight_index_;
  ParameterStore* store_;  // its buffers (the expert bias and counts)
  std::optional<size_t> bias_buffer_, counts_buffer_;
};

// The step's end for every router of `store` with an expert bias (Megatron's
// _update_router_expert_bias in finalize_model_grads): its token counts are summed over `dp_cp`
// — the ranks that routed other tokens; the TP ranks route the same ones, so the counts (and
// the bias) are those of the global batch on every rank, at any layout — in one all-reduce
// of [routers, E], each bias moves by rate · sign(mean − count) (kernels::
// moe_expert_bias_update), and the counts restart from zero. Collective over dp_cp when the
// store holds a router with an expert bias (all of dp_cp hold the same stage); else nothing.
void update_moe_expert_biases(ParameterStore& store, Communicator& dp_cp, float rate);
// Zeroes the routers' token counts (before a step's micro-batches run, or run again).
void reset_moe_token_counts(ParameterStore& store);

}  // namespace megatron
