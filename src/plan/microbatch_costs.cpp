#include "plan/microbatch_costs.h"

#include <algorithm>
#include <cmath>

namespace megatron::plan {

double gemm_seconds(const ComputeSpec& c, double m, double n, double k, double batch) {
  const double c0 = c.gemm_half_dim;
  return batch * 2.0 * m * n * k / (c.peak_flops * c.gemm_efficiency) *
         (1.0 + c0 / m + c0 / n + c0 / k);
}

Precision gemm_precision(const Layout& l, Implementation impl) {
  return impl == Implementation::kMegatronCpp && l.precision == Precision::kFp16 ? Precision::kFp32
                                                                                 : l.precision;
}

namespace {

double total_seconds(const std::vector<CommTerm>& terms) {
  double s = 0;
  for (const CommTerm& c : terms) s += c.seconds;
  return s;
}

// What compute does not hide: each term's seconds less its overlapped part.
double exposed_seconds(const std::vector<CommTerm>& terms) {
  double s = 0;
  for (const CommTerm& c : terms) s += c.seconds - c.overlapped;
  return s;
}

}  // namespace

double MicrobatchCosts::layer_comm_seconds() const {
  return total_seconds(layer_comm);
}
double MicrobatchCosts::layer_comm_exposed() const {
  return exposed_seconds(layer_comm);
}
double MicrobatchCosts::layer_cp_seconds() const {
  return total_seconds(layer_cp_comm);
}
double MicrobatchCosts::layer_cp_exposed() const {
  return exposed_seconds(layer_cp_comm);
}
double MicrobatchCosts::layer_ep_seconds() const {
  return total_seconds(layer_ep_comm);
}

namespace {

class Costing {
 public:
  Costing(const Machine& m, const ComputeSpec& spec) : m_(m), spec_(spec) {}

  // Forward GEMM y[M x N] = x[M x K]·Wᵀ into fwd, and its input- and weight-gradient GEMMs
  // dX = dY·W (M x K, inner N) and dW = dYᵀ·X (N x K, inner M) into bwd.
  void linear(ComputeTime& fwd, ComputeTime& bwd, double M, double N, double K,
              double batch = 1) const {
    fwd.gemm += gemm_seconds(spec_, M, N, K, batch);
    bwd.gemm += gemm_seconds(spec_, M, K, N, batch) + gemm_seconds(spec_, N, K, M, batch);
  }
  // `calls` memory-bound kernels moving `bytes` together, evaluating `exps` exp/tanh and
  // drawing `randoms` dropout bits: each call pays the machine's kernel overhead, then the
  // slowest of its memory traffic, its exp evaluations and its random draws.
  void memory(ComputeTime& into, double calls, double bytes, double exps = 0,
              double randoms = 0) const {
    double t = bytes / (m_.memory_bandwidth * m_.memory_efficiency);
    if (m_.exp_rate > 0) t = std::max(t, exps / m_.exp_rate);
    if (m_.random_rate > 0) t = std::max(t, randoms / m_.random_rate);
    into.memory += calls * m_.kernel_overhead + t;
  }

 private:
  const Machine& m_;
  const ComputeSpec& spec_;
};

// The context-parallel attention's exchanges of one layer (parallel/context_parallel_attention.h)
// into c.layer_cp_comm, given the attention core's forward and backward time on this rank and
// the share of layers full recompute re-runs. Bytes are of this rank's local sequence (N
// tokens): K/V 2g·d/t wide, Q and the output a·d/t, in the activation dtype.
//   p2p         R − 1 K/V transfers forward and backward, each overlapped with one ring step's
//               blocks (the core over R) — what a step's compute does not cover is exposed;
//               and the dK/dV travelling back: megatron-cpp sends its f32 dK/dV after each
//               step's blocks (R transfers, not overlapped), Transformer Engine sends them
//               during the next step (only the last exposed);
//   all_gather  one all-gather of every rank's K/V forward, again in backward, and a
//               reduce-scatter of their gradients (f32 in megatron-cpp), none overlapped;
//   a2a         all-to-alls of QKV and of the output forward, of their gradients backward;
//   a2a+p2p     both: the all-to-alls within groups of A, the ring across the P groups.
// CP ranks are consecutive after TP (stride t; the ring's ranks stride t·A).
void context_parallel_comm(MicrobatchCosts& c, const ModelSpec& model, const Layout& l,
                           const Machine& machine, Implementation impl, double core_forward,
                           double core_backward, double recomputed) {
  if (l.context_parallel == 1) return;
  const double e = impl == Implementation::kMegatronCpp && l.precision == Precision::kFp16
                       ? 4.0
                       : double(activation_bytes(l.precision));
  const double N = l.local_sequence(model.seq_length) * double(l.micro_batch);
  const double t = l.tensor_parallel, d = double(model.head_dim());
  const double kv = N * 2 * double(model.query_groups()) * d / t * e;
  const double q = N * double(model.num_attention_heads) * d / t * e;
  const double grad_e = impl == Implementation::kMegatronCpp ? 4.0 : e;  // dK/dV element
  const int A = l.cp_a2a_ranks(), R = l.cp_ring_ranks();
  auto add = [&](const char* name, Collective op, double bytes, double calls,
                 const GroupPlacement& group, double hidden_per_call) {
    CommTerm ct{name, op, bytes, calls, 0, 0};
    const double one = collective_seconds(machine, op, bytes, group);
    ct.seconds = calls * one;
    ct.overlapped = calls * std::min(one, std::max(0.0, hidden_per_call));
    c.layer_cp_comm.push_back(ct);
  };
  const int devices = machine.devices_per_node;
  if (A > 1) {
    const GroupPlacement group = place_group(A, l.tensor_parallel, devices);
    add("CP all-to-all QKV (forward)", Collective::kAllToAll, q + kv, 1 + recomputed, group, 0);
    add("CP all-to-all output (forward)", Collective::kAllToAll, q, 1 + recomputed, group, 0);
    add("CP all-to-all d(output) (backward)", Collective::kAllToAll, q, 1, group, 0);
    add("CP all-to-all dQKV (backward)", Collective::kAllToAll, q + kv, 1, group, 0);
  }
  if (R > 1) {
    const GroupPlacement ring = place_group(R, l.tensor_parallel * A, devices);
    const double fwd_step = core_forward / R, bwd_step = core_backward / R;
    add("CP ring K/V (forward)", Collective::kSendRecv, kv, (R - 1) * (1 + recomputed), ring,
        fwd_step);
    add("CP ring K/V (backward)", Collective::kSendRecv, kv, R - 1, ring, bwd_step);
    const double kv_seconds = collective_seconds(machine, Collective::kSendRecv, kv, ring);
    if (impl == Implementation::kMegatronCpp) {
      add("CP ring dK/dV (backward)", Collective::kSendRecv, kv / e * grad_e, R, ring, 0);
    } else {  // the last step's dK/dV has no step after it to hide behind
      add("CP ring dK/dV (backward)", Collective::kSendRecv, kv, R, ring,
          (R - 1.0) / R * std::min(kv_seconds, std::max(0.0, bwd_step - kv_seconds)));
    }
  }
  if (l.cp_comm == CpCommType::kAllGather) {
    const GroupPlacement group = place_group(l.context_parallel, l.tensor_parallel, devices);
    const double all = l.context_parallel * kv;
    add("CP all-gather K/V (forward)", Collective::kAllGather, all, 1 + recomputed, group, 0);
    add("CP all-gather K/V (backward)", Collective::kAllGather, all, 1, group, 0);
    add("CP reduce-scatter dK/dV (backward)", Collective::kReduceScatter, all / e * grad_e, 1,
        group, 0);
  }
}

}  // namespace

MicrobatchCosts microbatch_costs(const ModelSpec& model, const Layout& l, const Machine& machine,
                                 Implementation impl) {
  const ComputeSpec& spec = machine.compute(gemm_precision(l, impl));
  const Costing k(machine, spec);
  const double t = l.tensor_parallel;
  // This rank's queries: s/c positions of each sequence (context parallelism), against the
  // keys of all s.
  const double s = l.local_sequence(model.seq_length), sk = double(model.seq_length),
               b = double(l.micro_batch);
  const double h = double(model.hidden_size), a = double(model.num_attention_heads),
               g = double(model.query_groups()), d = double(model.head_dim()),
               f = double(model.ffn_size());
  const double V = double(model.padded_vocab(l.tensor_parallel));
  // megatron-cpp computes --fp16 runs in f32; the others keep 16-bit activations.
  const double e = impl == Implementation::kMegatronCpp && l.precision == Precision::kFp16
                       ? 4.0
                       : double(activation_bytes(l.precision));
  const double N = s * b;  // tokens of the micro-batch
  const double sp = l.sequence_parallel ? t : 1.0;
  const double Eh = N * h / sp;                           // elements of one replicated [s, b, h]
  const double Q = N * (a + 2 * g) * d / t;               // QKV output elements
  const double C = N * a * d / t;                         // context elements
  const double F = N * f / t;                             // MLP activation output elements
  const double F1 = F * (model.arch.swiglu ? 2.0 : 1.0);  // fc1 output elements
  const double S2 = b * (a / t) * s * sk;                 // attention score elements
  const double QK = N * (a + g) * d / t;                  // rotated elements (RoPE): Q and K
  const double rope =
      model.arch.position_embedding != PositionEmbedding::kLearnedAbsolute ? 1.0 : 0.0;
  const double qkv_bias = model.qkv_bias() ? 1.0 : 0.0;
  const bool hdrop = model.hidden_dropout > 0, adrop = model.attention_dropout > 0;
  const bool flash = l.fused_attention();

  MicrobatchCosts c;
  ComputeTime fwd, bwd, core_fwd, core_bwd;
  // megatron-cpp's selective recompute re-runs the attention core up to its probabilities and
  // mask (ParallelAttention::core_probs): scores = Q Kᵀ, softmax, mask; not P V.
  ComputeTime cpp_probs;
  cpp_probs.gemm = gemm_seconds(spec, s, sk, d, b * a / t);

  // GEMMs of one layer (every implementation).
  k.linear(fwd, bwd, N, (a + 2 * g) * d / t, h);      // QKV
  k.linear(core_fwd, core_bwd, s, sk, d, b * a / t);  // scores = Q Kᵀ
  k.linear(core_fwd, core_bwd, s, d, sk, b * a / t);  // context = P V
  k.linear(fwd, bwd, N, h, a * d / t);                // output projection
  // The dense MLP (in the share of layers that have one: --moe-layer-freq).
  const MoeOptions& moe = model.arch.moe;
  const double moe_share =
      moe.enabled() ? double(moe.count_moe_layers(model.num_layers)) / model.num_layers : 0.0;
  ComputeTime mlp_fwd, mlp_bwd;
  k.linear(mlp_fwd, mlp_bwd, N, F1 / N, h);       // fc1 (gate and value with SwiGLU)
  k.linear(mlp_fwd, mlp_bwd, N, h, f / t);        // fc2
  if (impl != Implementation::kMegatronLm2019) {  // (the 2019 code's ops are listed below)
    k.memory(mlp_fwd, 1, (F1 + F) * e, F);        // bias-GeLU / SwiGLU
    k.memory(mlp_bwd, 1, (F + 2 * F1) * e, F);
  }
  fwd += mlp_fwd * (1 - moe_share);
  bwd += mlp_bwd * (1 - moe_share);
  // A MoE layer's (model/moe_layer.h; Megatron-Core's MoELayer): the router's GEMM and top-k,
  // the permutation of the routed rows and its inverse, the local experts' grouped GEMM — E/e
  // GEMMs of the rows each expert receives (expected: evenly spread) at the expert width / ETP —
  // and the shared expert. megatron-cpp routes the N tokens every TP rank holds (after its
  // all-gather) and, with ETP ≠ TP, brings 1/t of the rows; Megatron-LM routes each rank's N/t
  // shard (sequence parallelism). The rows this rank's experts compute: routed·et/t·(t/sp) for
  // Megatron-LM, routed (ETP = TP) or routed/t·et for megatron-cpp.
  const double et = l.expert_tp(), ep = l.expert_parallel;
  const bool cpp = impl == Implementation::kMegatronCpp;
  double moe_tokens = 0, moe_block = 0, moe_rows = 0;  // routed tokens, rows sent, rows computed
  if (moe.enabled()) {
    const double E = double(moe.num_experts), gated = model.arch.swiglu ? 2.0 : 1.0;
    moe_tokens = cpp ? N : N / sp;
    double routed = moe_tokens * double(moe.topk);
    if (moe.capacity_factor) {
      const double slots = E * std::ceil(routed / E * *moe.capacity_factor);
      routed = moe.pad_to_capacity ? slots : std::min(routed, slots);
    }
    const bool own_rows = !cpp || et != t;  // each rank brings rows of its own (etp gather)
    moe_block = cpp && et != t ? routed / t : routed;
    moe_rows = own_rows ? moe_block * et : moe_block;
    const double local_experts = E / ep, per_expert = moe_rows / local_experts;
    const double fe = double(model.expert_ffn_size()) / et;
    const double fs = double(moe.shared_expert_ffn) / t;
    ComputeTime mf, mb;
    k.linear(mf, mb, moe_tokens, E, h);                       // router
    k.memory(mf, 1, 2 * moe_tokens * E * 4, moe_tokens * E);  // softmax / top-k (f32)
    k.memory(mb, 1, 2 * moe_tokens * E * 4, moe_tokens * E);
    k.memory(mf, 2, 2 * (moe_tokens + routed) * h * e);  // permute, unpermute
    k.memory(mb, 2, 2 * (moe_tokens + routed) * h * e);
    k.linear(mf, mb, per_expert, gated * fe, h, local_experts);       // experts' fc1
    k.linear(mf, mb, per_expert, h, fe, local_experts);               // experts' fc2
    k.memory(mf, 1, (gated + 1) * moe_rows * fe * e, moe_rows * fe);  // activation
    k.memory(mb, 1, (1 + 2 * gated) * moe_rows * fe * e, moe_rows * fe);
    if (fs > 0) {  // the shared expert: a dense MLP of its width
      k.linear(mf, mb, N, gated * fs, h);
      k.linear(mf, mb, N, h, fs);
      k.memory(mf, 1, (gated + 1) * N * fs * e, N * fs);
      k.memory(mb, 1, (1 + 2 * gated) * N * fs * e, N * fs);
    }
    fwd += mf * moe_share;
    bwd += mb * moe_share;
  }
  if (flash) core_bwd.gemm += gemm_seconds(spec, s, sk, d, b * a / t);  // scores recomputed

  // Element-wise kernels of one layer.
  const double dmask = hdrop ? 1.0 : 0.0, amask = adrop ? 1.0 : 0.0;
  switch (impl) {
    case Implementation::kMegatronLm:
      k.memory(fwd, 2, 2 * 2 * Eh * e);                               // 2 LayerNorms
      k.memory(fwd, 2, 2 * (3 * e + dmask) * Eh, 0, 2 * dmask * Eh);  // 2 bias-dropout-add
      if (flash) {
        k.memory(core_fwd, 1, (Q + C) * e);      // read Q, K, V; write O
        k.memory(core_bwd, 1, 2 * (Q + C) * e);  // read Q, K, V, O, dO; write dQKV
      } else {
        k.memory(core_fwd, 1, 2 * S2 * e, S2);               // fused scale-mask-softmax
        k.memory(core_fwd, amask, (2 * e + 1) * S2, 0, S2);  // attention dropout
        k.memory(core_bwd, 1, 3 * S2 * e);                   // softmax backward
        k.memory(core_bwd, amask, (2 * e + 1) * S2);         // dropout backward
      }
      k.memory(bwd, 2, 2 * (2 * e + dmask) * Eh);         // 2 bias-dropout-add backward
      k.memory(bwd, 4, 2 * 3 * Eh * e + 2 * 3 * Eh * e);  // 2 LayerNorm bwd + residual adds
      break;
    case Implementation::kMegatronLm2019:
      k.memory(fwd, 2, 2 * 2 * Eh * e);                    // 2 LayerNorms (apex, fused)
      k.memory(fwd, 1, 2 * Q * e);                         // QKV addmm: bias broadcast
      k.memory(fwd, 3, 2 * Q * e);                         // Q, K, V made contiguous
      k.memory(core_fwd, 3, 3 * 2 * S2 * e);               // scale, mask multiply, subtract
      k.memory(core_fwd, 1, 2 * S2 * e, S2);               // softmax
      k.memory(core_fwd, amask, (2 * e + 1) * S2, 0, S2);  // dropout
      k.memory(fwd, 1, 2 * C * e);                         // context permute + contiguous
      k.memory(fwd, 2, 2 * 2 * Eh * e);                    // 2 row-parallel bias adds
      k.memory(fwd, 2, 2 * (2 * e + dmask) * Eh, 0, 2 * dmask * Eh);  // 2 hidden dropouts
      k.memory(fwd, 2, 2 * 3 * Eh * e);                               // 2 residual adds
      k.memory(fwd, 2, 2 * F * e + 2 * F * e, F);                     // fc1 addmm bias, GeLU
      k.memory(bwd, 2, 2 * 3 * Eh * e);                               // 2 residual gradient adds
      k.memory(bwd, 2, 2 * (2 * e + dmask) * Eh);                     // 2 dropout backward
      k.memory(bwd, 2, 2 * Eh * e);                                   // 2 bias gradients
      k.memory(bwd, 4, 2 * (3 * Eh * e + 3 * Eh * e));                // 2 LayerNorm backward + adds
      k.memory(bwd, 2, 3 * F * e + F * e, F);           // GeLU backward, fc1 bias grad
      k.memory(core_bwd, 1, 3 * S2 * e);                // softmax backward
      k.memory(core_bwd, amask, (2 * e + 1) * S2);      // dropout backward
      k.memory(core_bwd, 2, 2 * 2 * S2 * e);            // mask multiply, scale backward
      k.memory(bwd, 5, 2 * C * e + 2 * Q * e + Q * e);  // permute, copies, QKV bias grad
      break;
    case Implementation::kMegatronCpp:
      k.memory(fwd, 2 * dmask, 2 * dmask * Eh, 0, 2 * dmask * Eh);  // 2 hidden masks (Philox)
      k.memory(fwd, 2, 2 * 2 * Eh * e);                             // 2 LayerNorms
      k.memory(fwd, qkv_bias, 2 * qkv_bias * Q * e);                // QKV bias add
      k.memory(fwd, 2 * rope, 2 * 2 * rope * QK * e);               // RoPE on Q and K (in place)
      if (flash) {  // kernels/flash_attention.h: exps and mask draws in the tiles, not in memory
        k.memory(core_fwd, 1, (Q + C) * e, S2, amask * S2);      // read Q, K, V; write O
        k.memory(core_bwd, 1, 2 * (Q + C) * e, S2, amask * S2);  // + O, dO; write dQKV
      } else {
        k.memory(cpp_probs, 1, 2 * S2 * e, S2);  // scaled masked softmax
        k.memory(cpp_probs, amask, S2, 0, S2);   // attention mask (Philox)
        core_fwd.memory += cpp_probs.memory;
        k.memory(core_fwd, amask, (2 * e + 1) * S2);          // dropout
        k.memory(core_bwd, 2 * amask, 2 * (2 * e + 1) * S2);  // dropped probs again, dropout bwd
        k.memory(core_bwd, 1, 3 * S2 * e);                    // softmax backward
      }
      k.memory(fwd, 2, 2 * (3 * e + dmask) * Eh);      // 2 bias-dropout-add
      k.memory(bwd, 2, 2 * (2 * e + dmask) * Eh);      // 2 bias-dropout-add backward
      k.memory(bwd, 2 * rope, 2 * 2 * rope * QK * e);  // RoPE inverse on dQ, dK
      if (model.norm_order() == NormOrder::kPre) {
        k.memory(bwd, 2, 2 * 4 * Eh * e);  // 2 LayerNorm bwd, accumulated into the residual's
      } else {  // each norm's input gradient written (3 passes), the residual's added by axpy
        k.memory(bwd, 4, 2 * 3 * Eh * e + 2 * 3 * Eh * e);
      }
      k.memory(bwd, qkv_bias, qkv_bias * Q * e);  // QKV bias gradient
      k.memory(bwd, 1, 2 * Eh * e);               // input gradient out of scratch
      break;
  }
  fwd += core_fwd;
  bwd += core_bwd;
  c.layer_forward = fwd;
  c.layer_backward = bwd;
  // Full recompute re-runs the forward of every layer, or with block recompute of a share of
  // them: per layer on average.
  const double full = l.recomputed_layer_fraction(model.num_layers);
  if (l.recompute == Recompute::kFull) c.layer_recompute = fwd * full;
  // megatron-cpp's fused attention keeps nothing of the core that selective recompute would
  // drop, so there is nothing to recompute (Megatron-LM reruns its checkpointed core).
  if (l.recompute == Recompute::kSelective)
    c.layer_recompute = impl != Implementation::kMegatronCpp ? core_fwd
                        : flash                              ? ComputeTime{}
                                                             : cpp_probs;

  // Tensor-parallel collectives of one layer (Megatron-LM §3; Korthikanti §4.2.2).
  const GroupPlacement tp = place_group(l.tensor_parallel, 1, machine.devices_per_node);
  const double act = N * h * e;  // one full [s, b, h] activation
  auto term = [&](std::vector<CommTerm>& into, const char* name, Collective op, double bytes,
                  double calls, double overlapped_fraction = 0) {
    if (l.tensor_parallel == 1 || calls == 0) return;
    CommTerm ct{name, op, bytes, calls, 0, 0};
    ct.seconds = calls * collective_seconds(machine, op, bytes, tp);
    ct.overlapped = ct.seconds * overlapped_fraction;
    into.push_back(ct);
  };
  // Megatron-LM's MoE layers take each rank's sequence shard to the experts by their own
  // exchange (below) instead of the MLP's TP all-gather and reduce-scatter; megatron-cpp's
  // gather the whole sequence and reduce-scatter the output as the dense MLP does.
  const double pairs = 1 + (cpp ? 1.0 : 1 - moe_share);  // attention's and the MLP's
  if (l.sequence_parallel) {
    term(c.layer_comm, "TP all-gather (forward)", Collective::kAllGather, act, pairs * (1 + full));
    term(c.layer_comm, "TP reduce-scatter (forward)", Collective::kReduceScatter, act,
         pairs * (1 + full));
    term(c.layer_comm, "TP all-gather (backward)", Collective::kAllGather, act, pairs);
    term(c.layer_comm, "TP reduce-scatter (backward)", Collective::kReduceScatter, act, pairs);
    // Megatron-LM's column-parallel weight gradients re-gather their input, overlapped with the
    // dgrad GEMM; megatron-cpp keeps the gathered input (activation_memory.h).
    if (impl != Implementation::kMegatronCpp)
      term(c.layer_comm, "TP all-gather (wgrad input, overlapped)", Collective::kAllGather, act,
           pairs, 1.0);
  } else {
    term(c.layer_comm, "TP all-reduce (forward)", Collective::kAllReduce, act, 2 * (1 + full));
    term(c.layer_comm, "TP all-reduce (backward)", Collective::kAllReduce, act, 2);
  }
  // The MoE layers' token exchange (parallel/expert_token_exchange.h), per layer on average:
  // the dispatch and the combine forward (again with full recompute), their mirrors backward,
  // none overlapped. alltoall (megatron-cpp's layer always): an all-to-all over the EP group
  // (stride et in the expert grid) of the rows this rank sends, then with ETP > 1 and rows of
  // its own an all-gather of them over the expert TP group and a reduce-scatter back; allgather
  // (Megatron-LM): an all-gather of every tp_ep rank's tokens and a reduce-scatter of the
  // outputs over tp_ep.
  if (moe.enabled()) {
    const int devices = machine.devices_per_node;
    auto expert_term = [&](const char* name, Collective op, double bytes, double calls,
                           const GroupPlacement& group) {
      if (group.size == 1 || calls == 0) return;
      CommTerm ct{name, op, bytes, calls, 0, 0};
      ct.seconds = calls * collective_seconds(machine, op, bytes, group);
      c.layer_ep_comm.push_back(ct);
    };
    const double fwd_calls = moe_share * (1 + full), bwd_calls = moe_share;
    const bool own_rows = !cpp || et != t;
    if (cpp || l.dispatcher == TokenDispatcher::kAllToAll) {
      const GroupPlacement ep_group = place_group(int(ep), int(et), devices);
      const double rows = moe_block * h * e;
      expert_term("EP all-to-all dispatch + combine (forward)", Collective::kAllToAll, rows,
                  2 * fwd_calls, ep_group);
      expert_term("EP all-to-all (backward)", Collective::kAllToAll, rows, 2 * bwd_calls, ep_group);
      if (own_rows) {
        const GroupPlacement etp_group = place_group(int(et), 1, devices);
        const double gathered = moe_rows * h * e;
        expert_term("ETP all-gather + reduce-scatter (forward)", Collective::kAllGather, gathered,
                    2 * fwd_calls, etp_group);
        expert_term("ETP all-gather + reduce-scatter (backward)", Collective::kAllGather, gathered,
                    2 * bwd_calls, etp_group);
      }
    } else {
      const GroupPlacement tp_ep = place_group(int(ep * et), 1, devices);
      const double gathered = ep * et * moe_tokens * h * e;
      expert_term("EP all-gather + reduce-scatter (forward)", Collective::kAllGather, gathered,
                  2 * fwd_calls, tp_ep);
      expert_term("EP all-gather + reduce-scatter (backward)", Collective::kAllGather, gathered,
                  2 * bwd_calls, tp_ep);
    }
  }
  if (l.tp_comm_overlap) {  // hidden behind the layer's GEMMs as far as they last
    double comm = 0;
    for (const CommTerm& ct : c.layer_comm) comm += ct.seconds - ct.overlapped;
    const double gemm = fwd.gemm + bwd.gemm + c.layer_recompute.gemm;
    const double hidden = std::min(comm, gemm);
    for (CommTerm& ct : c.layer_comm)
      if (comm > 0) ct.overlapped += (ct.seconds - ct.overlapped) * hidden / comm;
  }

  context_parallel_comm(c, model, l, machine, impl, core_fwd.total(), core_bwd.total(), full);

  // Embedding: token + position lookups, dropout; its gradient scattered into the tables.
  k.memory(c.embedding_forward, 3 + 2 * dmask, 8 * N * h * e + dmask * (2 * e + 1) * N * h, 0,
           dmask * N * h);
  k.memory(c.embedding_backward, 2 + dmask, 8 * N * h * e + dmask * (2 * e + 1) * N * h);
  // A norm outside the layers, on the shard: the final one (pre-LN) on the last stage, or a
  // post-LN BERT's embedding LayerNorm on the first; its backward writes a new input gradient.
  auto outer_norm = [&](ComputeTime& forward, ComputeTime& backward) {
    k.memory(forward, 1, 2 * Eh * e);
    k.memory(backward, 1, 3 * Eh * e);
  };
  if (model.embedding_norm()) outer_norm(c.embedding_forward, c.embedding_backward);
  // The vocabulary-parallel lookup is summed over TP. With sequence parallelism megatron-cpp
  // reduce-scatters it straight to the shard (InputEmbedding); Megatron-Core does so only
  // without position and token-type tables (LanguageModelEmbedding's reduce_scatter_embeddings),
  // else it all-reduces and keeps its shard. Either way backward all-gathers the gradient.
  const bool reduce_scatter =
      impl == Implementation::kMegatronCpp ||
      (model.arch.position_embedding != PositionEmbedding::kLearnedAbsolute &&
       model.family == ModelFamily::kGpt);
  if (l.sequence_parallel && reduce_scatter) {
    term(c.embedding_comm, "TP reduce-scatter (embedding)", Collective::kReduceScatter, act, 1);
  } else {
    term(c.embedding_comm, "TP all-reduce (embedding)", Collective::kAllReduce, act, 1);
  }
  if (l.sequence_parallel)
    term(c.embedding_comm, "TP all-gather (embedding gradient)", Collective::kAllGather, act, 1);

  // Output: final norm, (BERT: LM-head transform), logits over V/t, vocab-parallel loss.
  const bool bert = model.family == ModelFamily::kBert;
  // megatron-cpp's BERT scores only the masked rows; Megatron-LM computes every position.
  const double rows = bert && impl == Implementation::kMegatronCpp ? N * model.mask_prob : N;
  if (model.final_norm()) outer_norm(c.output_forward, c.output_backward);
  if (bert) {
    k.linear(c.output_forward, c.output_backward, rows, h, h);      // LM-head dense
    k.memory(c.output_forward, 2, 2 * rows * h * e * 2, rows * h);  // GeLU, LayerNorm
    k.memory(c.output_backward, 2, 3 * rows * h * e * 2, rows * h);
  }
  k.linear(c.output_forward, c.output_backward, rows, V / t, h);  // logits
  const double logits = rows * V / t;
  switch (impl) {
    case Implementation::kMegatronCpp:
      k.memory(c.output_forward, 3, 2 * 4 * logits, logits);  // row max, Σexp, loss (f32)
      k.memory(c.output_backward, e != 4 ? 2 : 1,
               2 * 4 * logits + (e != 4 ? (4 + e) * logits : 0.0), logits);
      break;
    case Implementation::kMegatronLm:
      k.memory(c.output_forward, 2, (e + 2 * 4) * logits, logits);  // cast to f32, max, Σexp
      k.memory(c.output_backward, 1, (4 + 4 + e) * logits, logits);
      break;
    case Implementation::kMegatronLm2019:
      k.memory(c.output_forward, 6, (e + 6 * 4) * logits,
               logits);  // float, max, sub, exp, sum, div
      k.memory(c.output_backward, 3, 4 * 4 * logits + e * logits, logits);
      break;
  }
  // megatron-cpp's BERT gathers the whole hidden states for its replicated heads: its MLM head
  // all-reduces its input gradient as without sequence parallelism, and the gather's backward
  // keeps this rank's rows (model/bert_encoder.h), no collective.
  const bool whole_sequence_heads = bert && impl == Implementation::kMegatronCpp;
  if (l.sequence_parallel)
    term(c.output_comm, "TP all-gather (output layer input)", Collective::kAllGather, act, 1);
  if (l.sequence_parallel && !whole_sequence_heads) {
    term(c.output_comm, "TP reduce-scatter (output layer gradient)", Collective::kReduceScatter,
         act, 1);
  } else {
    term(c.output_comm, "TP all-reduce (output layer gradient)", Collective::kAllReduce,
         rows * h * e, 1);
  }
  term(c.output_comm, "TP all-reduce (cross-entropy statistics)", Collective::kAllReduce,
       3 * rows * 4, 2);
  return c;
}

}  // namespace megatron::plan
