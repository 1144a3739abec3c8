// Merge of two partial attentions of the same queries over disjoint sets of keys: how
// context-parallel attention (parallel/context_parallel_blocks.h) combines the blocks of keys
// it meets one at a time.
// A part's output O_k is its softmax-weighted values and L_k its log-sum-exp per query row
// (kernels/flash_attention.h's `out` and `lse`); the attention over the union of the keys is
//   L = log(exp L_a + exp L_b),   O = exp(L_a − L)·O_a + exp(L_b − L)·O_b,
// exactly (the softmax's denominator is the sum of the parts'), in f32 and rounded once on
// store. A row that no key of either part reaches (both −inf) keeps O_a and L_a = −inf.
//
//   out, part_out  [s, b, H·d]  f32 or bf16 (f16 too on CUDA), one dtype; contiguous
//   lse, part_lse  f32 [b, H, s]  contiguous
// Backends: kernels/cpu/attention_merge.cpp, kernels/cuda/attention_merge.cu.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

// (out, lse) ← the merge of (out, lse) with (part_out, part_lse), in place.
void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse);

}  // namespace megatron::kernels
