// The work of one micro-batch on one rank, op by op: GEMM time from the machine's GEMM model
// (plan/machine.h), memory-bound kernels from the bytes they move (or the exp / random draws
// they evaluate, where that is slower), and the tensor-parallel collectives each layer issues.
//
// With context parallelism a rank computes s/c query positions of each sequence against all s
// keys (the core's work over c), and its attention exchanges K/V with the other CP ranks.
//
// Each implementation has its own list of element-wise kernels (plan/implementation.h):
//   megatron-lm       fused kernels: LayerNorm, scale-mask-softmax, bias-dropout-add, bias-GeLU
//                     (or flash attention, which never writes the s x s scores to memory);
//   megatron-lm-2019  the 2019 code's PyTorch ops one by one: bias adds after addmm, Q/K/V
//                     copies for matmul, scale, mask multiply and subtract, softmax, dropout,
//                     residual adds, each reading and writing its whole tensor;
//   megatron-cpp      this project's kernels (kernels/), including the dropout masks drawn
//                     with Philox and the f32 cross-entropy passes.
// The byte counts are listed in microbatch_costs.cpp next to the kernel they stand for.
#pragma once

#include <string>
#include <vector>

#include "plan/collective_cost.h"
#include "plan/implementation.h"
#include "plan/layout.h"
#include "plan/machine.h"
#include "plan/model_spec.h"

namespace megatron::plan {

struct ComputeTime {
  double gemm = 0;    // seconds in GEMMs
  double memory = 0;  // seconds in memory-bound (element-wise) kernels
  double total() const { return gemm + memory; }
  ComputeTime& operator+=(const ComputeTime& o) {
    gemm += o.gemm;
    memory += o.memory;
    return *this;
  }
  ComputeTime operator*(double k) const { return {gemm * k, memory * k}; }
};

// One kind of collective a micro-batch issues, with its count and time.
struct CommTerm {
  std::string name;  // "TP all-reduce (forward)", ...
  Collective op = Collective::kAllReduce;
  double bytes = 0;       // per call
  double calls = 0;       // per micro-batch on this rank
  double seconds = 0;     // all calls together
  double overlapped = 0;  // seconds of `seconds` hidden behind compute
};

struct MicrobatchCosts {
  // One transformer layer.
  ComputeTime layer_forward, layer_backward;  // backward without recompute
  ComputeTime layer_recompute;                // forward work redone in backward
  // Outside the layers.
  ComputeTime embedding_forward, embedding_backward;  // first stage (post-LN BERT: + its norm)
  ComputeTime output_forward, output_backward;        // last stage: final norm, logits, loss
  // Tensor-parallel collectives: per layer, and once for the embedding / output layer.
  std::vector<CommTerm> layer_comm, embedding_comm, output_comm;
  // Context-parallel exchanges of the attention, per layer (microbatch_costs.cpp lists them;
  // "overlapped": hidden behind the ring's blocks).
  std::vector<CommTerm> layer_cp_comm;
  // The MoE layers' token exchange over the expert grid, per layer on average (none overlapped).
  std::vector<CommTerm> layer_ep_comm;
  double layer_comm_seconds() const;
  double layer_comm_exposed() const;
  double layer_cp_seconds() const;
  double layer_cp_exposed() const;
  double layer_ep_seconds() const;
};

MicrobatchCosts microbatch_costs(const ModelSpec& model, const Layout& layout,
                                 const Machine& machine, Implementation impl);

// Seconds of one [M x K]·[K x N] GEMM (batch of them) under the machine's GEMM model.
double gemm_seconds(const ComputeSpec& spec, double m, double n, double k, double batch = 1);

// The dtype GEMMs run in: megatron-cpp computes --fp16 runs in f32.
Precision gemm_precision(const Layout& layout, Implementation impl);

}  // namespace megatron::plan
