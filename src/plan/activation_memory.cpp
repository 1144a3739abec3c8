#include "plan/activation_memory.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "plan/pipeline_buffers.h"

namespace megatron::plan {

namespace {

// ---------------------------------------------------------------------------------------------
// megatron-cpp: the arena allocations of model/ for one micro-batch.

// Sums allocations as the Arena makes them: each rounded up to 64 bytes.
struct Allocations {
  double bytes = 0;
  void add(double b, double count = 1) { bytes += count * std::ceil(b / 64.0) * 64.0; }
};

struct CppShapes {
  double N, h, e, hl, s, b, qkv, ctx, ffn, vocab_local;  // s: this rank's s/c positions, N = s·b
  double n;           // tokens of this rank's sequence shard: N, or N/t with sequence parallelism
  bool sp;            // sequence parallelism (parallel/mappings.h)
  double fc1;         // fc1 output width: ffn, or 2·ffn (gate and value) with SwiGLU
  double norm_stats;  // f32 [N] statistics a norm keeps: mean and rstd (LayerNorm), rstd (RMSNorm)
  bool hidden_dropout, attention_dropout;
  bool selective;  // selective recompute: the probabilities and mask are not kept (attention.h)
  bool norm_slot;  // --recompute-modules layernorm: the norms' outputs in the shared slot
  bool mlp_recomputed;  // --recompute-modules mlp: the MLP's activations in the workspace
  bool moe = false;     // the layer's MLP is a mixture of experts (the fields below)
  bool flash;  // fused attention: only the f32 log-sum-exp [b, a/t, s] is kept (attention.h)
  // Context parallelism (parallel/context_parallel_attention.h): CP size, the ranks of its
  // all-to-all (a2a, a2a+p2p) and of its ring (p2p, a2a+p2p), and the all-gather of all_gather.
  double cp = 1, cp_a2a = 1, cp_ring = 1;
  bool cp_gather = false;
  // Residuals from the norms' outputs (pre-LN BERT, --apply-residual-connection-post-layernorm):
  // the backward writes each norm's input gradient to a new tensor instead of adding it in place
  // to the residual's.
  bool residual_from_norm;
  // Mixture of experts (model/moe_layer.h), on the share `moe_share` of the layers: E experts,
  // top k; this rank routes the N·k rows of the micro-batch's N tokens (every TP rank alike)
  // into `routed` slots (dropless: N·k; with a capacity factor E·C), and brings the block
  // `block` of them (all; with ETP ≠ TP its 1/t) to the experts, whose rows arrive over the
  // expert-parallel all-to-all (expected: as many as sent, the router balanced) and, with
  // ETP ≠ TP, an all-gather over the `etp_gather` ranks of the expert TP group: `local` rows.
  // Each expert runs at fe = expert width / ETP (fe1: fc1's output, 2·fe with SwiGLU); the
  // shared expert (its width / t) is a dense MLP.
  double moe_share = 0, experts = 0, topk = 0, routed = 0, block = 0, local = 0;
  double ep = 1, etp_gather = 1, fe = 0, fe1 = 0, shared_ffn = 0, shared_fc1 = 0;
  bool rows_shared_out = false;  // ETP ≠ TP: the TP ranks share the routed rows out
  bool shared_gate = false;
  // Groups of the load-balancing losses (model/moe_router.h): the aux loss's one (the
  // micro-batch), the per-sequence loss's b, the global loss's one; 0 without.
  double aux_groups = 0, seq_aux_groups = 0, global_aux_groups = 0;
  double router = 4;  // bytes of the router's logits and statistics (--moe-router-dtype)
  bool exchange() const { return rows_shared_out ? ep * etp_gather > 1 : ep > 1; }
  double scores() const { return b * hl * s * s; }  // elements of one [b, a/t, s, s] tensor
  // Elements of this rank's Q, K/V and QKV of its local sequence ([2C, b, G, q + 2, d]).
  double q_elems() const { return N * ctx; }
  double kv_elems() const { return N * (qkv - ctx); }
  double qkv_elems() const { return N * qkv; }
  bool cp_blocks() const { return cp_ring > 1 || cp_gather; }  // parallel/context_parallel_blocks
};

// What the context-parallel attention keeps for the backward beyond the fused kernel's
// log-sum-exp: Ulysses' head-split QKV and output (parallel/ulysses_attention.h; its log-sum-exp
// has the same bytes as the others').
void cpp_cp_kept(const CppShapes& c, Allocations& a) {
  if (c.cp_a2a == 1) return;
  a.add(c.qkv_elems() * c.e);  // saved QKV, [2AC, b, G/A, q + 2, d]
  a.add(c.q_elems() * c.e);    // saved output
}

// The context-parallel attention's forward temporaries (the layer's workspace). Every shape is
// the local sequence's: Ulysses' head split holds A times the positions of 1/A of the groups.
void cpp_cp_forward_workspace(const CppShapes& c, Allocations& a) {
  const double A = c.cp_a2a, e = c.e;
  if (A > 1) a.add(c.qkv_elems() / A * e, A - 1);  // all-to-all: the shares sent
  if (c.cp_blocks()) {                             // CpBlocksForward: one block's operands
    a.add(c.qkv_elems() / 2 * e);                  // packed Q of a chunk and K/V of one
    a.add(c.q_elems() / 2 * e);                    // block output
    a.add(c.b * c.hl * c.s / 2 * 4);               // block log-sum-exp
  }
  if (c.cp_ring > 1) a.add(c.kv_elems() * e, 2);  // the ring's K/V: held and arriving
  if (c.cp_gather) {
    a.add(c.kv_elems() * e);         // own K/V
    a.add(c.cp * c.kv_elems() * e);  // every rank's K/V
  }
  if (A > 1) a.add(c.q_elems() / A * e, A - 1);  // all-to-all back: the shares received
}

// The context-parallel attention's backward temporaries (the layer's scratch arena).
void cpp_cp_backward(const CppShapes& c, Allocations& a) {
  const double A = c.cp_a2a, e = c.e;
  if (A > 1) {
    a.add(c.q_elems() * e);             // d(output), head split
    a.add(c.q_elems() / A * e, A - 1);  // all-to-all: the shares sent
    a.add(c.qkv_elems() * e);           // dQKV, head split
  }
  if (c.cp_blocks()) {                // CpBlocksBackward
    a.add(c.q_elems() * 4);           // f32 dQ, summed over the blocks
    a.add(c.qkv_elems() / 2 * e, 2);  // packed block operands and their gradient
    a.add(c.q_elems() / 2 * 4);       // f32 staging of a block's dQ
    a.add(c.kv_elems() / 2 * 4);      // ... and dK/dV
    if (e != 4) {
      a.add(c.q_elems() * e);   // dQ narrowed
      a.add(c.kv_elems() * e);  // dK/dV narrowed
    }
  }
  if (c.cp_ring > 1) {
    a.add(c.kv_elems() * e, 2);  // K/V held and arriving
    a.add(c.kv_elems() * 4, 2);  // f32 dK/dV travelling with them
  }
  if (c.cp_gather) {
    a.add(c.kv_elems() * e);         // own K/V
    a.add(c.cp * c.kv_elems() * e);  // every rank's K/V, gathered again
    a.add(c.cp * c.kv_elems() * 4);  // f32 dK/dV of every rank's
    a.add(c.kv_elems() * 4);         // own dK/dV, reduce-scattered
  }
  if (A > 1) a.add(c.qkv_elems() / A * e, A - 1);  // all-to-all back: the shares received
}

// ParallelAttention::core_probs's kept outputs: the softmax output and the u8 attention mask.
void cpp_attention_probs(const CppShapes& c, Allocations& a) {
  a.add(c.scores() * c.e);
  if (c.attention_dropout) a.add(c.scores());
}

// TransformerLayer::forward's allocations into `arena` (kept for backward). With sequence
// parallelism the norms, dropouts and residuals hold the shard (n tokens); a column-parallel
// GEMM all-gathers its input (kept for its weight gradient) and a row-parallel GEMM
// reduce-scatters its partial sums into a new shard. Listed in the pre-LN order; the post-LN
// layer (forward_post_ln) allocates the same tensors in another order — attention on x,
// h = x + attention, LN1(h), the MLP on it, LN1(h) + mlp, LN2 of that as the output — so the
// sum is the same.
// The MLP's allocations (ParallelMLP::forward) for a hidden width of ffn per rank (fc1: its
// output, 2·ffn with SwiGLU): kept, or with --recompute-modules mlp in the workspace, and again
// in the backward's scratch.
void cpp_mlp_forward(const CppShapes& c, double ffn, double fc1, Allocations& a) {
  if (c.sp) a.add(c.N * c.h * c.e);  // LN2 output all-gathered
  a.add(c.N * fc1 * c.e);            // fc1 output
  a.add(c.N * ffn * c.e);            // GeLU / SwiGLU output
  a.add(c.N * c.h * c.e);            // fc2 output (partial sums with SP)
  if (c.sp) a.add(c.n * c.h * c.e);  // fc2 output reduce-scattered
}

// ParallelMLP::backward's allocations (the layer's scratch arena).
void cpp_mlp_backward(const CppShapes& c, double ffn, double fc1, Allocations& a) {
  if (c.sp) a.add(c.N * c.h * c.e);  // d(mlp output) all-gathered (fc2 backward)
  a.add(c.N * ffn * c.e);            // d(GeLU / SwiGLU output)
  a.add(c.N * fc1 * c.e);            // d(fc1 output)
  a.add(c.N * c.h * c.e);            // fc1 input gradient
  if (c.sp) a.add(c.n * c.h * c.e);  // ... reduce-scattered
}

// ExpertTokenExchange (parallel/expert_token_exchange.h, the alltoall dispatcher megatron-cpp's
// layer runs) bringing `rows` [·, h] rows of this rank to the experts' ranks: the EP
// all-to-all's received rows, the expert TP group's all-gather (copies sent and rows received),
// and the chunks regrouped by local expert. (Dispatch, and combine's backward.)
void cpp_to_experts(const CppShapes& c, double rows, Allocations& a) {
  const double g = c.etp_gather;
  if (c.ep > 1) a.add(rows * c.h * c.e);      // the all-to-all's receive buffer
  if (g > 1) a.add(rows * g * c.h * c.e, 2);  // all-gather: g copies sent, g blocks received
  a.add(c.local * c.h * c.e);                 // regrouped by local expert
}

// The reverse (combine, and dispatch's backward): the chunks scattered back among zeros, the
// expert TP group's reduce-scatter (pieces received, the f32 sum, rounded to the compute dtype)
// and the EP all-to-all's receive buffer.
void cpp_from_experts(const CppShapes& c, double rows, Allocations& a) {
  const double g = c.etp_gather;
  a.add(rows * g * c.h * c.e);  // chunks placed
  if (g > 1) {
    a.add(rows * g * c.h * c.e);  // pieces
    a.add(rows * c.h * 4);        // f32 sum
    if (c.e != 4) a.add(rows * c.h * c.e);
  }
  if (c.ep > 1) a.add(rows * c.h * c.e);  // back from the experts' ranks
}

// MoeLayer::forward's allocations (kept for backward) in place of the dense MLP's.
void cpp_moe_forward(const CppShapes& c, Allocations& a) {
  const double N = c.N, h = c.h, e = c.e, E = c.experts, k = c.topk;
  if (c.sp) a.add(N * h * e);  // LN2 output all-gathered
  const double r = c.router;
  if (e != 4) a.add(N * h * 4);  // the router's f32 input
  if (r == 8) a.add(N * h * 8);  // ... in f64
  if (r == 8) a.add(E * h * 8);  // the router weight in f64
  a.add(N * E * r);              // router logits
  a.add(N * k * 4, 2);           // top-k indices (i32), probabilities (f32)
  for (double groups : {c.aux_groups, c.seq_aux_groups, c.global_aux_groups})
    if (groups > 0) a.add(2 * groups * E * r);  // load-balancing statistics (counts, sums)
  a.add(E * 8);                                 // tokens per expert (i64)
  a.add(c.routed * 4);                          // slot sources (i32)
  a.add(N * k * 4);                             // slot of each (token, choice) (i32)
  a.add(c.routed * h * e);                      // permuted rows
  if (c.exchange()) cpp_to_experts(c, c.block, a);
  a.add(c.local * c.fe1 * e);  // fc1 output
  a.add(c.local * c.fe * e);   // activation output
  a.add(c.local * h * e);      // fc2 output
  if (c.exchange()) cpp_from_experts(c, c.block, a);
  if (c.rows_shared_out) a.add(c.routed * h * e);  // this block among zeros
  a.add(N * h * e);                                // unpermuted (partial sums)
  if (c.sp) a.add(c.n * h * e);                    // ... reduce-scattered
  if (c.shared_ffn > 0) {
    cpp_mlp_forward(c, c.shared_ffn, c.shared_fc1, a);
    if (c.shared_gate) {
      if (e != 4) a.add(c.n * h * 4);  // the gate's f32 input
      a.add(c.n * 4);                  // its logits
    }
  }
}

// MoeLayer::backward's allocations (the layer's scratch arena).
void cpp_moe_backward(const CppShapes& c, Allocations& a) {
  const double N = c.N, h = c.h, e = c.e, E = c.experts, k = c.topk;
  if (c.sp) a.add(N * h * e);  // d(output) all-gathered
  a.add(c.routed * h * e);     // d(expert outputs), all rows
  a.add(N * k * 4);            // d(probabilities) (f32)
  if (c.exchange()) cpp_to_experts(c, c.block, a);
  a.add(c.local * c.fe * e);   // d(activation output)
  a.add(c.local * c.fe1 * e);  // d(fc1 output)
  a.add(c.local * h * e);      // d(expert inputs)
  if (c.exchange()) cpp_from_experts(c, c.block, a);
  if (c.rows_shared_out) a.add(c.routed * h * e);  // this block among zeros
  a.add(N * h * e);                                // input gradient (partial sums)
  const double r = c.router;
  a.add(N * E * r);                        // d(router logits)
  if (r == 8) a.add(E * h * 8);            // the weight gradient in f64
  if (r == 8) a.add(E * h * 4);            // ... rounded to f32
  if (r != 4 || e != 4) a.add(N * h * r);  // the router's input gradient (TP rank 0)
  if (r == 8) a.add(N * h * 4);            // ... in f32
  if (e != 4) a.add(N * h * e);            // ... cast
  if (c.sp) a.add(c.n * h * e);            // input gradient reduce-scattered
  if (c.shared_ffn > 0) {
    if (c.shared_gate) {
      a.add(c.n * h * e);              // d(shared output) through the gate
      a.add(c.n * 4);                  // d(gate logits)
      a.add(c.n * h * 4);              // the gate's input gradient (f32)
      if (e != 4) a.add(c.n * h * e);  // ... cast
    }
    cpp_mlp_backward(c, c.shared_ffn, c.shared_fc1, a);
  }
}

void cpp_layer_forward(const CppShapes& c, Allocations& a) {
  if (c.hidden_dropout) a.add(c.n * c.h, 2);  // two u8 hidden masks
  if (!c.norm_slot) {
    a.add(c.n * 4, c.norm_stats);  // LN1 rstd (and mean)
    a.add(c.n * c.h * c.e);        // LN1 output
  }
  if (c.sp) a.add(c.N * c.h * c.e);  // LN1 output all-gathered
  a.add(c.N * c.qkv * c.e);          // QKV
  if (c.flash)
    a.add(c.b * c.hl * c.s * 4);  // log-sum-exp
  else if (!c.selective)
    cpp_attention_probs(c, a);
  cpp_cp_kept(c, a);
  a.add(c.N * c.ctx * c.e);          // context
  a.add(c.N * c.h * c.e);            // projection output (partial sums with SP)
  if (c.sp) a.add(c.n * c.h * c.e);  // projection output reduce-scattered
  a.add(c.n * c.h * c.e);            // h = x + attention
  if (!c.norm_slot) {
    a.add(c.n * 4, c.norm_stats);  // LN2 rstd (and mean)
    a.add(c.n * c.h * c.e);        // LN2 output
  }
  if (c.moe)
    cpp_moe_forward(c, a);
  else if (!c.mlp_recomputed)
    cpp_mlp_forward(c, c.ffn, c.fc1, a);
  a.add(c.n * c.h * c.e);  // y = h + mlp
}

// The norm-output slot's capacity (TransformerLayer's bound for two norms of the shard, the
// arena's one block rounded up to 64 bytes).
double cpp_norm_slot(const CppShapes& c) {
  return std::ceil(2 * (c.n * c.h * c.e + 2 * c.n * 4 + c.h * 4 + 4 * 256) / 64.0) * 64.0;
}

// The attention's `workspace` allocations during one layer forward: raw scores (with
// selective recompute the probabilities and mask too), dropped probabilities.
void cpp_layer_workspace(const CppShapes& c, Allocations& a) {
  if (c.mlp_recomputed && !c.moe) cpp_mlp_forward(c, c.ffn, c.fc1, a);
  if (c.flash) {  // the fused kernel's tiles are its own; the CP exchange's are not
    cpp_cp_forward_workspace(c, a);
    return;
  }
  a.add(c.scores() * c.e);
  if (c.selective) cpp_attention_probs(c, a);
  if (c.attention_dropout) a.add(c.scores() * c.e);
}

// TransformerLayer::backward's allocations (into the scratch arena, reset per layer). The
// post-LN backward (backward_post_ln) allocates LN2's input gradient where the pre-LN one
// allocates d(mlp output), and LN1's where it allocates d(attention output); it writes
// d(mlp output) over its dy and d(attention output) over LN2's input gradient: the same sum.
void cpp_layer_backward(const CppShapes& c, Allocations& a) {
  if (c.mlp_recomputed && !c.moe) cpp_mlp_forward(c, c.ffn, c.fc1, a);  // the MLP once more
  if (c.selective) {          // ParallelAttention::backward recomputes the core's probabilities
    a.add(c.scores() * c.e);  // raw scores
    cpp_attention_probs(c, a);
  }
  a.add(c.n * c.h * c.e);  // d(mlp output) after bias-dropout-add backward
  if (c.moe)
    cpp_moe_backward(c, a);
  else
    cpp_mlp_backward(c, c.ffn, c.fc1, a);
  a.add(c.n * c.h * c.e);            // d(attention output)
  if (c.sp) a.add(c.N * c.h * c.e);  // ... all-gathered (projection backward)
  a.add(c.N * c.ctx * c.e);          // d(context)
  a.add(c.N * c.qkv * c.e);          // dQKV
  cpp_cp_backward(c, a);
  if (!c.flash) {                                      // (the fused backward needs nothing more)
    if (c.attention_dropout) a.add(c.scores() * c.e);  // dropped probabilities, re-derived
    a.add(c.scores() * c.e);                           // d(dropped probabilities)
    if (c.attention_dropout) a.add(c.scores() * c.e);  // d(probabilities)
    a.add(c.scores() * c.e);                           // d(scores)
  }
  a.add(c.N * c.h * c.e);                               // QKV input gradient
  if (c.sp) a.add(c.n * c.h * c.e);                     // ... reduce-scattered
  if (c.residual_from_norm) a.add(c.n * c.h * c.e, 2);  // LN2's, LN1's input gradients
}

// A LayerNorm outside the layers — the final one (pre-LN), or the embedding's (post-LN BERT,
// between the lookups and the dropout, InputEmbedding) — on the rank's shard: its statistics
// and output, and in backward its input gradient (a new tensor).
void cpp_outer_norm(const CppShapes& c, Allocations& a) {
  a.add(c.n * 4, c.norm_stats);  // rstd (and mean)
  a.add(c.n * c.h * c.e);        // output
  a.add(c.n * c.h * c.e);        // backward: input gradient
}

ActivationMemory megatron_cpp(const ModelSpec& m, const Layout& l) {
  const double t = l.tensor_parallel;
  CppShapes c;
  c.s = l.local_sequence(m.seq_length);
  c.b = double(l.micro_batch);
  c.N = c.s * c.b;
  c.sp = l.sequence_parallel;
  c.n = c.sp ? c.N / t : c.N;

  c.h = double(m.hidden_size);
  c.e = l.precision == Precision::kBf16 ? 2.0 : 4.0;  // compute dtype (fp16 computes in f32)
  c.hl = double(m.num_attention_heads) / t;
  // Q of a/t heads and K, V of g/t groups, head dim d (validate_layout: t divides g).
  const double d = double(m.head_dim());
  c.qkv = double(m.num_attention_heads + 2 * m.query_groups()) * d / t;
  c.ctx = c.hl * d;
  c.ffn = double(m.ffn_size()) / t;
  c.fc1 = (m.arch.swiglu ? 2.0 : 1.0) * c.ffn;
  c.norm_stats = m.arch.normalization == Normalization::kRMSNorm ? 1.0 : 2.0;
  c.vocab_local = double(m.padded_vocab(l.tensor_parallel)) / t;
  c.hidden_dropout = m.hidden_dropout > 0;
  c.attention_dropout = m.attention_dropout > 0;
  c.flash = l.fused_attention();
  c.cp = l.context_parallel;
  c.cp_a2a = l.cp_a2a_ranks();
  c.cp_ring = l.cp_ring_ranks();
  c.cp_gather = l.context_parallel > 1 && l.cp_comm == CpCommType::kAllGather;
  c.selective = l.recompute == Recompute::kSelective && !c.flash;
  c.norm_slot = l.recompute_layernorm;
  c.mlp_recomputed = l.recompute_mlp;
  c.residual_from_norm = m.norm_order() == NormOrder::kPreResidualFromNorm;
  if (m.arch.moe.enabled()) {
    const MoeOptions& moe = m.arch.moe;
    const double et = l.expert_tp(), gated = m.arch.swiglu ? 2.0 : 1.0;
    c.moe_share = double(moe.count_moe_layers(m.num_layers)) / double(m.num_layers);
    c.experts = double(moe.num_experts);
    c.topk = double(moe.topk);
    c.routed = c.N * c.topk;    // dropless
    if (moe.capacity_factor) {  // at most C = ⌈N·k/E · factor⌉ per expert, exactly C padded
      const double slots = c.experts * std::ceil(c.routed / c.experts * *moe.capacity_factor);
      c.routed = moe.pad_to_capacity ? slots : std::min(c.routed, slots);
    }
    c.ep = l.expert_parallel;
    c.rows_shared_out = l.expert_tp() != l.tensor_parallel;
    c.block = c.rows_shared_out ? c.routed / t : c.routed;
    c.etp_gather = c.rows_shared_out ? et : 1.0;
    c.local = c.block * c.etp_gather;
    c.fe = double(m.expert_ffn_size()) / et;
    c.fe1 = gated * c.fe;
    c.shared_ffn = double(moe.shared_expert_ffn) / t;
    c.shared_fc1 = gated * c.shared_ffn;
    c.shared_gate = moe.shared_expert_gate;
    c.aux_groups = moe.aux_loss_coeff > 0 ? 1.0 : 0.0;
    c.seq_aux_groups = moe.seq_aux_loss_coeff > 0 ? c.b : 0.0;
    c.global_aux_groups = moe.global_aux_loss_coeff > 0 ? 1.0 : 0.0;
    c.router = moe.router_fp64 ? 8.0 : 4.0;
  }
  const bool bert = m.family == ModelFamily::kBert;
  const int p = l.pipeline_parallel, v = l.virtual_stages;
  const double layers_per_chunk = double(m.num_layers) / (p * v);
  // Full recompute re-runs these layers of each chunk (all, or the first few with block).
  const double recomputed = l.recomputed_layers_per_chunk(layers_per_chunk);
  const double N = c.N, n = c.n, h = c.h, e = c.e;

  ActivationMemory r;
  // Embedding (InputEmbedding::forward / backward).
  Allocations emb;
  emb.add(N * 4);                // token ids, sequence-major
  emb.add(N * h * e);            // word embedding rows (this rank's partial sums with SP)
  if (c.sp) emb.add(n * h * e);  // ... reduce-scattered to the shard
  emb.add(n * h * e);  // position (and token type) rows of the shard, allocated with or without
  if (m.arch.position_embedding == PositionEmbedding::kLearnedAbsolute)
    emb.add(N * 4);                                // position ids, the whole sequence
  if (bert) emb.add(N * 4);                        // token types, sequence-major, the same
  if (m.embedding_norm()) cpp_outer_norm(c, emb);  // post-LN BERT: LayerNorm before dropout
  if (c.hidden_dropout) {                          // on this rank's sequence shard with SP
    emb.add(n * h);                                // u8 mask
    emb.add(n * h * e);                            // dropped output
    emb.add(n * h * e);                            // backward: undropped gradient
  }
  if (c.sp) emb.add(N * h * e);  // backward: the gradient all-gathered

  r.embedding = emb.bytes;
  // A context-parallel rank copies its chunks of the micro-batch's tokens, labels and loss mask
  // into each stage context's arena (GptModel::on_device).
  Allocations cp_inputs;
  if (c.cp > 1) cp_inputs.add(N * 4, 3);

  // A recomputed layer keeps its input, copied out of the scratch arena; another layer its
  // forward's activations. Both copy their input gradient out of the scratch arena.
  // MoE layers keep their own (the share of them averaged in, as parameter_count.h counts them).
  CppShapes moe_shapes = c;
  moe_shapes.moe = true;
  Allocations recomputed_layer, kept_layer, kept_dense, kept_moe;
  recomputed_layer.add(n * h * e);
  cpp_layer_forward(c, kept_dense);
  if (c.moe_share > 0) cpp_layer_forward(moe_shapes, kept_moe);
  kept_layer.bytes = (1 - c.moe_share) * kept_dense.bytes + c.moe_share * kept_moe.bytes;
  recomputed_layer.add(n * h * e);
  kept_layer.add(n * h * e);
  // The bytes of a chunk of `layers` layers (the split may give the chunks different counts).
  auto chunk_bytes = [&](double layers) {
    const double recomputed_here = l.recomputed_layers_per_chunk(layers);
    return recomputed_here * recomputed_layer.bytes + (layers - recomputed_here) * kept_layer.bytes;
  };
  r.per_layer = chunk_bytes(layers_per_chunk) / layers_per_chunk;
  if (c.moe_share > 0) {
    r.per_moe_layer = kept_moe.bytes + n * h * e;  // with its input gradient's copy
    r.expert_rows = c.local;
  }

  Allocations out;
  if (m.final_norm()) cpp_outer_norm(c, out);  // pre-LN: the final norm
  if (c.sp) out.add(N * h * e);                // the heads' input, all-gathered along the sequence
  // GPT's backward reduce-scatters d(hidden); BERT's keeps this rank's rows of the heads'
  // complete gradient (a view, model/bert_encoder.h).
  if (c.sp && !bert) out.add(n * h * e);

  if (!bert) {
    const double V = c.vocab_local;
    out.add(N * V * 4);              // f32 logits (cross-entropy in place)
    out.add(N * 4, 2);               // labels, loss mask
    out.add(N * 4);                  // row max
    out.add(2 * N * 4);              // Σexp, target logit
    out.add(N * 4);                  // per-token loss
    out.add(N * 4);                  // backward: d(loss)
    if (e != 4) out.add(N * V * e);  // d(logits) cast to bf16
    out.add(N * h * e);              // d(hidden)
  } else {
    // The masked positions (rows, labels, weights) come with the batch (data layer).
    const double n = std::round(m.mask_prob * N), V = c.vocab_local, b = c.b;
    out.add(n * h * e);     // scored rows
    out.add(n * h * e, 2);  // LM head dense output, GeLU output
    out.add(n * 4, 2);      // LM head LayerNorm mean, rstd
    out.add(n * h * e);     // LM head LayerNorm output
    out.add(n * V * 4);     // f32 logits
    out.add(n * 4);         // row max
    out.add(2 * n * 4);     // Σexp, target logit
    out.add(n * 4);         // per-token loss
    if (m.binary_head) {
      out.add(b * h * 4, 2);  // [CLS] rows, pooled (f32)
      out.add(b * 2 * 4);     // sentence-order logits
      out.add(b * 4, 4);      // row max, Σexp, target, loss
      out.add(b * 4);         // ones: the weights of the mean loss
    }
    out.add(n * 4);                  // backward: d(loss)
    if (e != 4) out.add(n * V * e);  // d(logits) cast to bf16
    out.add(n * h * e, 4);           // LM head backward
    out.add(N * h * 4);              // d(hidden): the rows' gradients scattered (f32)
    if (e != 4) out.add(N * h * e);  // d(hidden) cast to the compute dtype
    if (m.binary_head) {
      out.add(b * 4);         // d(loss)
      out.add(b * 2 * 4);     // d(logits)
      out.add(b * h * 4, 3);  // d(pooled), d(pooler's pre-tanh), d([CLS])
    }
  }
  r.output = out.bytes;

  // Each pipeline rank's stage contexts and the executor's buffers at its peak
  // (plan/pipeline_buffers.h). With an even split rank 1 stands for the middle ranks: it has
  // the most contexts in flight among them and the same gradient copies; an uneven split
  // weighs each of them.
  const std::vector<int> stage_layers = l.virtual_stage_layers(m.num_layers);
  auto rank_peak = [&](int rank) {
    std::vector<double> arenas;
    for (int chunk = 0; chunk < v; ++chunk) {
      const int virtual_stage = chunk * p + rank;
      arenas.push_back(cp_inputs.bytes + (virtual_stage == 0 ? r.embedding : 0.0) +
                       chunk_bytes(stage_layers[size_t(virtual_stage)]) +
                       (virtual_stage == p * v - 1 ? r.output : 0.0));
    }
    return pipeline_rank_peak(p, rank, v, l.num_micro_batches(), l.microbatch_group, arenas,
                              n * h * e);
  };
  const PipelineRankPeak first = rank_peak(0);
  r.in_flight = 0;
  for (int64_t contexts : first.contexts) r.in_flight += double(contexts);
  r.first_stage = first.peak_bytes;
  const bool even = l.pipeline_split(m.num_layers).even();
  for (int rank = 1; rank < p - 1 && (rank == 1 || !even); ++rank)
    r.first_stage = std::max(r.first_stage, rank_peak(rank).peak_bytes);
  r.last_stage = p > 1 ? rank_peak(p - 1).peak_bytes : r.first_stage;

  // The scratch arena: per layer, forward workspace (with recompute: the whole layer forward)
  // and backward temporaries (with recompute: after the layer's forward again); a recomputed
  // layer's are the larger ones.
  // The largest of a dense and (if any) a MoE layer's.
  auto scratch = [&](const CppShapes& shapes) {
    Allocations forward_scratch, backward_scratch;
    if (recomputed > 0) {
      cpp_layer_forward(shapes, forward_scratch);
      cpp_layer_forward(shapes, backward_scratch);
      cpp_layer_workspace(shapes, backward_scratch);
    }
    cpp_layer_workspace(shapes, forward_scratch);
    cpp_layer_backward(shapes, backward_scratch);
    return std::max(forward_scratch.bytes, backward_scratch.bytes);
  };
  double layer_scratch = c.moe_share < 1 ? scratch(c) : 0.0;
  if (c.moe_share > 0) layer_scratch = std::max(layer_scratch, scratch(moe_shapes));
  // One scratch arena per model chunk, and with --recompute-modules layernorm one norm-output
  // slot.
  r.workspace = v * (layer_scratch + (c.norm_slot ? cpp_norm_slot(c) : 0.0));
  return r;
}

// ---------------------------------------------------------------------------------------------
// Megatron-LM: Korthikanti et al. (2022), itemised (activation_memory.h).

ActivationMemory megatron_lm(const ModelSpec& m, const Layout& l) {
  const double t = l.tensor_parallel, p = l.pipeline_parallel, v = l.virtual_stages;
  // A context-parallel rank holds s/c positions of each sequence.
  const double s = l.local_sequence(m.seq_length), b = double(l.micro_batch),
               h = double(m.hidden_size);
  const double a = double(m.num_attention_heads), d = double(m.head_dim()),
               g = double(m.query_groups()), f = double(m.ffn_size());
  const double e = activation_bytes(l.precision);
  const double mask_h = m.hidden_dropout > 0 ? 1.0 : 0.0;
  const double mask_a = m.attention_dropout > 0 ? 1.0 : 0.0;
  const double sp = l.sequence_parallel ? t : 1.0;  // divisor of the replicated parts
  const double sbh = s * b * h;

  const double replicated = (2 * sbh * e + sbh * e + sbh * e + 2 * sbh * mask_h) / sp;
  const double gated = m.arch.swiglu ? 2.0 : 1.0;
  const double mlp = s * b * f * (gated + 1) * e / t;  // activation input and output
  double split = (s * b * (a * d + g * d) * e + s * b * g * d * e + s * b * a * d * e) / t + mlp;
  // MoE layers (Megatron-Core's MoELayer, alltoall / allgather dispatcher; TP needs sequence
  // parallelism there, so each rank routes its N/t tokens): the router's f32 logits and
  // probabilities [N/t, E]; the expert inputs, fc1 output and activation of the rows its
  // experts compute, N·k·et/t expected (dropless: the tokens spread evenly over the experts;
  // with a capacity factor E·C padded, else at most that), at the expert width / ETP; the
  // experts' outputs [N/t·k, h] the unpermute weighs by the probabilities; the shared expert as
  // a dense MLP. The dispatch's send and receive buffers are transient (workspace below).
  double dispatch = 0, moe_kept = 0, expert_rows = 0, moe_layer_share = 0;
  if (m.arch.moe.enabled()) {
    const MoeOptions& moe = m.arch.moe;
    const double share = double(moe.count_moe_layers(m.num_layers)) / double(m.num_layers);
    const double E = double(moe.num_experts), et = l.expert_tp(), ep = l.expert_parallel;
    const double tokens = s * b / sp;  // routed by this rank
    double routed = tokens * double(moe.topk);
    if (moe.capacity_factor) {
      const double slots = E * std::ceil(routed / E * *moe.capacity_factor);
      routed = moe.pad_to_capacity ? slots : std::min(routed, slots);
    }
    const double rows = routed * et * sp / t;  // at this rank's experts
    const double fe = double(m.expert_ffn_size()) / et;
    const double moe_layer = 2 * tokens * E * 4 + rows * h * e + rows * fe * (gated + 1) * e +
                             routed * h * e +
                             s * b * double(moe.shared_expert_ffn) * (gated + 1) * e / t;
    split += share * (moe_layer - mlp);
    moe_kept = moe_layer - mlp;
    expert_rows = rows;
    moe_layer_share = share;
    if (l.dispatcher == TokenDispatcher::kAllToAll && ep > 1)
      dispatch = 2 * routed * h * e;  // the all-to-all's send and receive buffers
    if (l.dispatcher == TokenDispatcher::kAllGather && ep * et > 1)
      dispatch = ep * et * tokens * h * e;  // every tp_ep rank's tokens, gathered
  }
  const double scores =
      b * a * s * s * (e + mask_a + (mask_a > 0 ? e : 0.0)) / t;  // softmax out, mask, dropped
  const bool fused = l.fused_attention();
  const bool keep_scores = l.recompute == Recompute::kNone && !fused;
  const double full_layer = replicated + split + (fused ? 0.0 : scores);

  ActivationMemory r;
  switch (l.recompute) {
    case Recompute::kFull: {
      // Recomputed layers keep their input; with block recompute the others keep everything.
      const double chunk = double(m.num_layers) / (p * v);
      const double recomputed = l.recomputed_layers_per_chunk(chunk);
      const double kept_layer = replicated + split + (fused ? 0.0 : scores);
      r.per_layer = (recomputed * sbh * e / sp + (chunk - recomputed) * kept_layer) / chunk;
      r.workspace = full_layer;  // one layer recomputed at a time
      break;
    }
    case Recompute::kSelective:
      r.per_layer = replicated + split;
      break;
    case Recompute::kNone:
      r.per_layer = replicated + split + (keep_scores ? scores : 0.0);
      break;
  }
  // The context-parallel exchange's transient buffers in one layer's backward (Transformer
  // Engine's): the ring's K/V held and arriving with their gradients, the all-gather's every
  // rank's K/V and their gradients, or Ulysses' head-split QKV and output.
  const double kv = s * b * 2 * g * d / t * e, q = s * b * a * d / t * e;
  if (l.cp_ring_ranks() > 1) r.workspace += 4 * kv;
  if (l.context_parallel > 1 && l.cp_comm == CpCommType::kAllGather)
    r.workspace += 2 * l.context_parallel * kv;
  if (l.cp_a2a_ranks() > 1) r.workspace += kv + 2 * q;
  r.workspace += dispatch;
  if (m.arch.moe.enabled()) {  // the layer as a dense one would keep it, the MLP's replaced
    r.per_moe_layer =
        replicated + split - moe_layer_share * moe_kept + moe_kept + (keep_scores ? scores : 0.0);
    r.expert_rows = expert_rows;
  }
  r.embedding = (8 * s * b + sbh * mask_h) / sp;  // token ids, embedding dropout mask
  const double vocab = double(m.padded_vocab(l.tensor_parallel));
  r.output = 4 * sbh / sp + 4 * s * b * vocab / t;  // output-layer input, fp32 logits

  // In-flight micro-batches on the first stage (Megatron's schedules).
  const double m_count = double(l.num_micro_batches());
  double factor = 1;
  if (v > 1) {
    factor = 1 + (p - 1) / (p * v);
  } else if (p > 1) {
    factor = std::min(1.0, m_count / p);
  }
  r.in_flight = p * factor;
  const double L = double(m.num_layers);
  // p micro-batches of the first stage's layers (L/p of them in an even split).
  r.first_stage = (p * l.rank_layers(m.num_layers, 0) * r.per_layer + p * r.embedding) * factor;
  r.last_stage = l.rank_layers(m.num_layers, int(p) - 1) * r.per_layer + r.output;
  if (p == 1) r.first_stage = r.last_stage = L * r.per_layer + r.embedding + r.output;
  return r;
}

}  // namespace

ActivationMemory activation_memory(const ModelSpec& model, const Layout& layout,
                                   Implementation impl) {
  return impl == Implementation::kMegatronCpp ? megatron_cpp(model, layout)
                                              : megatron_lm(model, layout);
}

}  // namespace megatron::plan
