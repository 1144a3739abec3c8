// Activation memory of one rank: the bytes a training step keeps between forward and backward,
// for the implementation that runs it (plan/implementation.h).
//
// megatron-lm, megatron-lm-2019 — Korthikanti et al. (2022), "Reducing Activation
// Recomputation in Large Transformer Models", Table 2, itemised per saved tensor with
// a = heads, d = head dim, g = query groups, f = FFN width, e = bytes per activation element
// (2 for bf16/fp16, 4 for fp32; dropout masks 1 byte). Per layer and micro-batch:
//     replicated over TP (split by t with sequence parallelism): 2·sbh·e (the two norms'
//         inputs) + sbh·e (QKV input) + sbh·e (fc1 input) + 2·sbh (hidden dropout masks)
//     split over TP: sb(ad + gd)·e (Q, K) + sb·gd·e (V) + sb·ad·e (projection input)
//         + sb·f·e (activation input, 2f with SwiGLU) + sb·f·e (activation output)
//     split over TP, unless selective recompute or flash attention: b·a·s²·(2e + 1)
//         (softmax output, attention-dropout mask and output)
//   which is sbh(34 + 5as/h) bytes for GPT-3-style models in 16-bit, and with sequence
//   parallelism and selective recompute sbh(18 + 4f/h)/t — the expression of Megatron-LM's
//   theoretical_memory_usage.py. Full recompute keeps the layer input only, sbh·e (/t with SP),
//   and holds one layer's activations transiently (the workspace) while it is recomputed.
//   The first stage also keeps 8sb (token ids) + sbh (embedding dropout mask); the last stage
//   4sbh + 4sbV/t (the output layer's input and the fp32 logits). The first stage of a
//   pipeline holds min(m, p) micro-batches in flight (1F1B), times 1 + (p−1)/(p·v) with the
//   interleaved schedule.
//
// megatron-cpp — the arenas of model/ (GptModel, BertModel): every tensor a training step
// allocates for one micro-batch, forward and backward, each rounded up to the arena's 64
// bytes, plus the scratch arena's high-water mark (one layer's backward, and its recompute).
// This is what GptModel::activation_bytes() reports after a step; tests/unit/
// plan_memory_test.cpp compares the two (tests/dist/plan_arena_tp_test.cpp at TP 2 and 4, with
// and without sequence parallelism). Selective recompute keeps the attention probabilities and
// mask in the workspace and re-allocates them in backward; sequence parallelism holds the
// norms, dropouts and residuals at s/t and keeps each column-parallel GEMM's gathered input
// and each row-parallel GEMM's partial sums at s. A post-LN BERT's layers allocate the same
// tensors in another order, and its embedding LayerNorm keeps what the final norm it lacks
// would (statistics, output, input gradient: moved from the last stage to the first); residuals
// from the norms (--apply-residual-connection-post-layernorm) add two input gradients to the
// layer's backward scratch.
// With pipeline parallelism each rank holds one such arena per micro-batch in flight, for its
// stage's layers only, plus the pipeline executor's copies of what it sends and receives
// (plan/pipeline_buffers.h); "first_stage" is then the most loaded rank other than the last
// (rank 0, or a middle rank whose gradient copies weigh more), and each of the v model chunks
// has its own scratch arena.
#pragma once

#include "plan/implementation.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace megatron::plan {

struct ActivationMemory {
  double per_layer = 0;  // bytes one layer keeps for backward (one micro-batch, one rank)
  // A MoE layer's (0 without experts): the bytes it keeps, and the routed rows this rank's
  // experts compute per micro-batch (expected: the router spreading them evenly).
  double per_moe_layer = 0;
  double expert_rows = 0;
  double embedding = 0;    // bytes the first stage keeps outside its layers (one micro-batch)
  double output = 0;       // bytes the last stage keeps outside its layers (one micro-batch)
  double in_flight = 1;    // micro-batches a first-stage rank holds at its peak (megatron-cpp:
                           // its stage contexts)
  double first_stage = 0;  // kept bytes at the peak of a first-stage rank
  double last_stage = 0;   // kept bytes at the peak of a last-stage rank
  double workspace = 0;    // transient bytes on top of the kept ones (recompute, backward scratch)
  double peak() const { return (first_stage > last_stage ? first_stage : last_stage) + workspace; }
};

ActivationMemory activation_memory(const ModelSpec& model, const Layout& layout,
                                   Implementation impl);

}  // namespace megatron::plan
