// Fused self-attention core (flash attention, Dao et al. 2022): the attention of
// model/attention.h without its [b, heads, s, s] scores, probabilities and dropout mask. Query
// blocks meet key blocks with an online softmax; the backward recomputes each block's
// probabilities from the forward's log-sum-exp and redraws its dropout mask. Memory is O(s)
// per head instead of O(s²); causal blocks above the diagonal are skipped.
//
// Layout (model/attention.h; heads group-major, head h = g·q + i):
//   qkv  [s, b, G, q + 2, d]   per KV group g: its q query heads, its key, its value
//   out  [s, b, G·q·d]          head h's context at columns h·d (the dense layer's input)
//   lse  f32 [b, G·q, s]        log Σ_j exp(scale·q·k_j + mask_j) of each query row (−inf when
//                               every key is masked), kept for the backward
// For head h of batch n, with P = softmax(scale · Q_h K_gᵀ + mask) in f32 and Z the dropout
// mask scaled by 1/(1 − p):  out_h = (P ⊙ Z) V_g.  Masks: causal (key j > query i), and/or
// pad_mask u8 [b, s] (1 = padding key). A query row whose every key is masked gets zeros, as
// kernels/softmax.h's. The dropout mask is kernels/dropout.h's, drawn from the same rows
// (parallel/random.h's attention_dropout_rows: row (n, h, i) draws i·s + j for key j), so it
// keeps exactly the elements the unfused path keeps.
//
// f32 or bf16 operands; every product and sum in f32, rounded once on store. Results equal the
// unfused path up to f32 rounding (a different summation order); deterministic run to run.
// Backends: kernels/cpu/flash_attention.cpp; kernels/cuda/flash_attention.cu (which also takes
// f16, and rounds the probabilities to bf16/f16 before they multiply V, as FlashAttention does).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/dropout.h"

namespace megatron::kernels {

struct FlashAttentionParams {
  int64_t queries_per_group = 1;  // q: query heads sharing one key and value (1 without GQA)
  float scale = 1.0f;             // 1/√d
  bool causal = false;
  Tensor pad_mask;  // u8 [b, s], 1 = padding key; undefined: none
  // Attention dropout: p > 0 draws the mask rows (b·G·q·s of them, attention_dropout_rows)
  // from `seed`; p = 0 keeps every element and ignores them.
  float dropout_p = 0.0f;
  uint64_t seed = 0;
  const std::vector<MaskRow>* dropout_rows = nullptr;
};

// qkv [s, b, G, q + 2, d] → out [s, b, G·q·d] (qkv's dtype), lse f32 [b, G·q, s].
void flash_attention_forward(const Tensor& qkv, const FlashAttentionParams& params, Tensor& out,
                             Tensor& lse);

// The gradients of forward's qkv given dout (out's shape and dtype): dqkv [s, b, G, q + 2, d]
// (written; qkv's dtype). `out` and `lse` are forward's; the parameters must be forward's.
void flash_attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dout, const FlashAttentionParams& params, Tensor& dqkv);

}  // namespace megatron::kernels
