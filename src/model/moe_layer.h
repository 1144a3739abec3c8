// MoeLayer: Megatron-Core's MoELayer in place of a transformer layer's MLP (the layers
// --moe-layer-freq selects), with tensor, sequence, context and expert parallelism.
//
//   x [s(/t), b, h] ─ḡ/f─→ X [N, h] (the micro-batch's N = s·b tokens on every TP rank)
//   (with context parallelism c: this CP rank's chunks, s/c in place of s; the layer is
//   token-wise, only the router's loss statistics are summed over CP, model/moe_router.h)
//     ├─ router (model/moe_router.h): indices [N, k], probs [N, k]
//     ├─ permute (kernels/moe_permute.h): the N·k (token, choice) pairs into M slots grouped by
//     │    expert, dropless (M = N·k) or at most C per expert (--moe-expert-capacity-factor,
//     │    C = ⌈N·k/E · factor⌉ of this rank's N, per CP rank as in Megatron; padded to
//     │    exactly C with --moe-pad-expert-input-to-capacity)
//     │    tokens_by_expert [M, h], tokens_per_expert [E] (host)
//     ├─ with expert parallelism (ep > 1): ExpertTokenExchange::dispatch over the EP group
//     │    (parallel/expert_token_exchange.h, EtpTokens::kShared: the TP ranks hold the same
//     │    tokens) → the rows of this rank's E/ep experts [M', h]; otherwise M' = M, the same rows.
//     │    With --expert-tensor-parallel-size et ≠ t each TP rank brings only its block of the
//     │    M rows (block_of) and the exchange runs over tp_ep (EtpTokens::kOwn, when ep·et > 1)
//     ├─ experts (kernels/grouped_gemm.h, one GEMM per local expert): fc1 [M', F/t] (+b1) ─
//     │    GeLU / SwiGLU / squared ReLU ─ fc2 [M', h] (+b2 on TP rank 0), this rank's partial
//     │    sum; with ep > 1 combine brings the rows back to [M, h] (at et ≠ t: the block's
//     │    rows, summed over etp, placed among zeros for the other TP ranks' blocks)
//     ├─ unpermute: Σ_j probs[n, j]·y[slot of (n, j)] → [N, h] partial
//     └─ ─g/g̅─→ [s(/t), b, h]: all-reduced, or reduce-scattered with sequence parallelism
//   + the shared expert (--moe-shared-expert-intermediate-size): a dense ParallelMLP on x, with
//     --moe-shared-expert-gate scaled per token by sigmoid(x·w_gateᵀ) (kernels/sigmoid_gate.h;
//     the gate's logits in f32 on this rank's rows, so with sequence parallelism its weight
//     gradient is summed over TP like a LayerNorm's).
//
// EP rank r holds experts [r·E/ep, (r+1)·E/ep) (ParameterStore::set_expert_grid splits dim 0 of
// the expert parameters). Each rank of the expert tensor-parallel group (etp: the TP group unless
// --expert-tensor-parallel-size says otherwise) holds a slice of each of its experts, split like
// the dense MLP: fc1 by output rows (with SwiGLU matching slices of the gate and up halves), fc2
// by input columns. The router, run on the gathered tokens, is replicated: its probabilities'
// gradient (a dot product with the partial expert outputs) is all-reduced over TP, and its input
// gradient enters the TP reduction from rank 0 only.
//
// With et ≠ t every routed row still reaches each slice of its expert exactly once: the TP
// ranks' blocks partition the micro-batch's rows, the tp_ep exchange brings every block to the
// etp group of its expert, and the TP sum after the unpermute (each rank's rows complete, zeros
// elsewhere) puts the micro-batch back together. Which rows meet which expert shard is all that
// changes (the expert gradients then differ per rank and are summed over edp, the ranks holding
// the same shard), so the function is that of et = t.
//
// Parameters ("<prefix>." = the layer's "layers.<i>.mlp."; ParamSpec::expert marks dim 0 as
// the expert dimension):
//   router.weight                [E, h]                 replicated
//   experts.linear_fc1.weight    [E, ffn, h] split dim 1, or with SwiGLU [E, 2, ffn, h] split
//                                dim 2 (gate rows, then up rows: [E, 2·ffn, h] in memory)
//   experts.linear_fc1.bias      [E, ffn] / [E, 2, ffn]  (with linear biases)
//   experts.linear_fc2.weight    [E, h, ffn] split dim 2
//   experts.linear_fc2.bias      [E, h] replicated      (with linear biases)
//   shared_experts.linear_fc1 / linear_fc2 (.weight, .bias) as a dense MLP's
//   shared_experts.gate_weight   [1, h] replicated      (--moe-shared-expert-gate)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "distributed/parallel_state.h"
#include "model/mlp.h"
#include "model/moe_router.h"
#include "parallel/expert_token_exchange.h"

namespace megatron {

class MoeLayer {
 public:
  // Rows [begin, end) of the `total` routed rows (tokens_by_expert's M).
  struct RowBlock {
    int64_t begin = 0, end = 0, total = 0;
  };

  struct Ctx {
    Tensor input;  // X [N, h]
    MoeRouter::Ctx router;
    std::vector<int64_t> tokens_per_expert;  // slots per expert (host), Σ = M
    Tensor slot_source, slot_of;             // i32 [M], [N·k] (kernels/moe_permute.h)
    Tensor permuted;                         // [M, h]
    RowBlock block;  // the rows of `permuted` this rank brings to the experts (block_of)
    // The rows this rank's experts compute on, [M', h], and their counts [E/ep]: the block of
    // `permuted` and its counts without an exchange, what the exchange dispatched otherwise.
    ExpertExchangeCtx exchange;
    Tensor local_tokens;
    std::vector<int64_t> local_tokens_per_expert;
    Tensor pre_activation;  // [M', F/t]
    Tensor activation;      // [M', ffn/t]; undefined when recomputed (moe_act)
    Tensor expert_out;      // [M, h], this rank's partial sum (combined back at ep > 1; zeros
                            // outside the block)
    std::optional<ParallelMLP::Ctx> shared;
    // With the shared expert's gate: its output (with its bias) [T, h], the input in f32 and
    // the gate's logits f32 [T] (T: this rank's rows of x).
    Tensor shared_out, gate_input, gate_logits;
    // --recompute-modules shared_experts: the shared expert's input x (the fields above then
    // hold dead workspace views; backward re-runs the shared expert and its gate from x).
    Tensor shared_input;
  };

  MoeLayer(const std::string& prefix, const TransformerConfig& config, const ParallelState& ps,
           ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h] ([s/t, b, h] with sequence parallelism) → the same shape. `train`: the router's
  // losses are computed (MoeRouter::forward). With --recompute-modules moe_act
  // (TransformerConfig::recompute_moe_act) and a `workspace`, the experts' activation goes
  // there and is not kept: the backward recomputes it from the kept pre-activation (the same
  // kernel on the same input: the same bits). With --recompute-modules shared_experts
  // (TransformerConfig::recompute_shared_experts) and a `workspace`, so does everything the
  // shared expert and its gate keep (Megatron's SharedExpertMLP checkpoint): the backward
  // re-runs them from x, all-gather included with sequence parallelism.
  Tensor forward(Ctx& ctx, const Tensor& x, bool train, Arena& arena,
                 Arena* workspace = nullptr) const;
  // dout shaped like the output → dx shaped like the input. loss_scale: the router losses'
  // gradient scale (MoeRouter::backward).
  Tensor backward(const Ctx& ctx, const Tensor& dout, float loss_scale, Arena& arena) const;

 private:
  // The slots of each expert for the counts of the routing (capacity, padding).
  std::vector<int64_t> expert_slots(const std::vector<int64_t>& counts, int64_t tokens) const;
  Tensor activation_forward(const Ctx& ctx, Arena& arena) const;
  // The block of the M routed rows this rank brings to the experts: all of them when the
  // experts are split over TP; with another expert TP size (--expert-tensor-parallel-size) TP
  // rank r's r-th of t contiguous blocks, so that every routed row reaches its expert once.
  RowBlock block_of(int64_t rows) const;
  // The rows of each expert in `block`, given the experts' first slots (expert_slots).
  static std::vector<int64_t> rows_per_expert_in(const RowBlock& block,
                                                 const std::vector<int64_t>& slots);
  // The block's rows [end - begin, h] placed in [total, h] with zeros elsewhere (the TP sum
  // after the unpermute, or the permute's backward, adds the other ranks' blocks); the rows
  // themselves when the block is all of them.
  Tensor all_rows(const RowBlock& block, const Tensor& rows, Arena& arena) const;
  // The shared expert (with its output bias) on x [s(/t), b, h] → [T, h], its gate's input and
  // logits with --moe-shared-expert-gate; what their backward needs goes to ctx.
  Tensor shared_forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // The shared expert's gate: its weight gradient, dx += its input gradient; returns the shared
  // expert's output gradient (dout × the gate).
  Tensor shared_gate_backward(const Ctx& ctx, const Tensor& dout, Tensor& dx, Arena& arena) const;

  TransformerConfig config_;
  MoeOptions moe_;
  std::shared_ptr<Communicator> tp_;
  int tp_rank_;
  int64_t ffn_local_;  // an expert's hidden width on this rank
  const ComputeWeights& weights_;
  MoeRouter router_;
  int64_t local_experts_;  // E / ep
  // --expert-tensor-parallel-size other than the TP size: the TP ranks route the same rows and
  // share them out (block_of); the experts are split over etp and their partial sums added by
  // the exchange's combine (EtpTokens::kOwn).
  bool rows_shared_out_;
  bool first_etp_rank_;                          // adds fc2's bias (the etp sum counts it once)
  std::optional<ExpertTokenExchange> exchange_;  // ep > 1, or ep · etp > 1 with rows shared out
  size_t fc1_weight_, fc2_weight_, fc1_bias_ = 0, fc2_bias_ = 0;
  std::optional<ParallelMLP> shared_;
  size_t shared_bias_ = 0;             // the shared expert's output bias, with linear biases
  std::optional<size_t> gate_weight_;  // --moe-shared-expert-gate
};

}  // namespace megatron
