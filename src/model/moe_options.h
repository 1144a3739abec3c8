// Megatron-Core's mixture-of-experts options (--num-experts, --moe-*): which layers replace
// their MLP with a routed set of experts, how the router scores and picks them, the
// load-balancing losses, the expert capacity and the shared experts (model/moe_layer.h).
// Nothing here depends on the parallel layout: expert parallelism is the ParallelState's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatron {

// --moe-router-score-function: softmax over the experts, or an independent sigmoid each.
enum class MoeScoreFunction { kSoftmax, kSigmoid };
// --moe-token-drop-policy: past an expert's capacity, drop the tokens of the lowest
// probability (probs) or the latest in token order (position).
enum class MoeTokenDropPolicy { kProbs, kPosition };

MoeScoreFunction moe_score_function_from_name(const std::string& name);
const char* moe_score_function_name(MoeScoreFunction f);
MoeTokenDropPolicy moe_token_drop_policy_from_name(const std::string& name);
const char* moe_token_drop_policy_name(MoeTokenDropPolicy p);

// --moe-layer-freq: an integer N (every N-th layer, starting with the first, is MoE) or
// Megatron's Python list expression of one 0/1 per layer, e.g. "([0]+[1]*23)" or "[1,0,1,0]"
// (terms [a,b,...] or [a,b,...]*k joined by +, optionally in parentheses). Returns one flag per
// layer; throws Error naming the flag when the text is neither or the list does not have
// `num_layers` entries.
std::vector<bool> moe_layer_pattern(const std::string& freq, int num_layers);

struct MoeOptions {
  int64_t num_experts = 0;  // --num-experts; 0: no MoE layer
  // --moe-ffn-hidden-size: each routed expert's hidden width (0: the dense --ffn-hidden-size).
  int64_t ffn_hidden_size = 0;
  int64_t topk = 2;  // --moe-router-topk
  // The load-balancing losses' coefficients (0: off), from --moe-router-load-balancing-type
  // and --moe-aux-loss-coeff (set_moe_load_balancing): aux_loss is Switch Transformer's loss
  // over the micro-batch's tokens, seq_aux_loss the same per sequence, averaged,
  // global_aux_loss the same with the counts of the step's micro-batches so far over the
  // data-parallel ranks (model/moe_router.h).
  double aux_loss_coeff = 0.0;
  double seq_aux_loss_coeff = 0.0;
  double global_aux_loss_coeff = 0.0;
  double z_loss_coeff = 0.0;  // --moe-z-loss-coeff (0: Megatron's None, no z-loss)
  // --moe-router-load-balancing-type sinkhorn (S-BASE): in training each token takes the top k
  // of the Sinkhorn-normalised scores (kernels/moe_sinkhorn.h), weighted by the plain scores —
  // the sigmoid for k = 1, else the softmax over all experts; in evaluation the top k of those
  // plain scores. As Megatron, the score function, pre-softmax, groups and the scaling factor
  // do not apply.
  bool sinkhorn = false;
  MoeScoreFunction score_function = MoeScoreFunction::kSoftmax;
  // --moe-router-dtype fp64: the router's logits, routing, losses and weight gradient in f64
  // (model/moe_router.h); else fp32 (Megatron's fp32 and None alike: logits in f32).
  bool router_fp64 = false;
  bool pre_softmax = false;  // --moe-router-pre-softmax (softmax scores only; else ignored)
  std::optional<double> topk_scaling_factor;  // --moe-router-topk-scaling-factor
  // --moe-router-enable-expert-bias (aux-loss-free balancing, DeepSeek-V3): a per-expert bias
  // added to the sigmoid scores for the top-k choice only (not to the weights), moved after
  // every training step by --moe-router-bias-update-rate towards the mean load
  // (model/moe_router.h, update_moe_expert_biases).
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  int64_t num_groups = 0;         // --moe-router-num-groups (0: None)
  int64_t group_topk = 0;         // --moe-router-group-topk (0: None)
  std::string layer_freq = "1";   // --moe-layer-freq as given (moe_layer_pattern)
  int64_t shared_expert_ffn = 0;  // --moe-shared-expert-intermediate-size (0: none)
  // --moe-shared-expert-gate: the shared expert's output × sigmoid(x·w_gate) per token.
  bool shared_expert_gate = false;
  std::optional<double> capacity_factor;  // --moe-expert-capacity-factor (none: dropless)
  bool pad_to_capacity = false;           // --moe-pad-expert-input-to-capacity
  MoeTokenDropPolicy drop_policy = MoeTokenDropPolicy::kProbs;

  bool enabled() const { return num_experts > 0; }
  // Whether the (0-based, global) layer is a MoE layer.
  bool is_moe_layer(int layer, int num_layers) const;
  // The number of MoE layers among num_layers (Megatron averages the logged losses over it).
  int count_moe_layers(int num_layers) const;
  bool operator==(const MoeOptions&) const = default;
};

// Megatron's --moe-router-load-balancing-type and --moe-aux-loss-coeff, lists of equal length
// (the i-th coefficient weighs the i-th type; one type takes one coefficient): sets
// aux_loss_coeff, seq_aux_loss_coeff, global_aux_loss_coeff and sinkhorn. Types: aux_loss,
// seq_aux_loss, global_aux_loss, none, and sinkhorn alone with coefficient 0; another is an
// Error naming it.
void set_moe_load_balancing(MoeOptions& moe, const std::vector<std::string>& types,
                            const std::vector<double>& coeffs);
// The inverse, for a stored record: sinkhorn, or the types with a positive coefficient ("none"
// for none).
std::vector<std::string> moe_load_balancing_types(const MoeOptions& moe);
std::vector<double> moe_load_balancing_coeffs(const MoeOptions& moe);

// Throws Error naming the flag and the fix when the options contradict each other or the
// model (dense_ffn: the dense --ffn-hidden-size, tp_size: the tensor-parallel size).
void validate_moe_options(const MoeOptions& moe, int num_layers, int64_t dense_ffn, int tp_size);

}  // namespace megatron
