// Token permutation for the mixture-of-experts layer (model/moe_layer.h): the N·k (token,
// choice) pairs of a top-k routing are placed into slots grouped by expert, and the experts'
// outputs are gathered back and weighted. Every kernel is a gather (each output row written by
// one thread, in a fixed order), so the results are deterministic on every device.
//
//   indices      i32 [N, k]   each token's experts (kernels/moe_router.h)
//   expert_slots i64 [E + 1]  host: expert e owns the slots [expert_slots[e], expert_slots[e+1])
//   slot_source  i32 [M]      the pair n·k + j in each slot, −1 for a padding slot
//   slot_of      i32 [N·k]    the slot of each pair, −1 for a dropped pair
// Dropless routing fills each expert's slots with all its pairs; with a capacity C an expert
// keeps at most C pairs (the rest are dropped) and, padded, owns exactly C slots.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megatron::kernels {

// counts i64 [E] (=): the number of pairs routed to each expert.
void moe_expert_counts(const Tensor& indices, int64_t num_experts, Tensor& counts);

// Places the pairs into the slots: an expert's kept pairs fill its first slots in token order;
// the rest of its slots are padding. An expert with more pairs than its slots keeps the first
// ones in token order (probs undefined: Megatron's "position" drop policy) or the ones of the
// largest probs (f32 [N, k]; "probs" policy, ties to the earlier token).
void moe_assign_slots(const Tensor& indices, const Tensor& probs,
                      const std::vector<int64_t>& expert_slots, Tensor& slot_source,
                      Tensor& slot_of);

// out [M, h] (=): row m is x[slot_source[m] / k], zeros for padding. x f32 or bf16 [N, h].
void moe_permute(const Tensor& x, const Tensor& slot_source, int64_t topk, Tensor& out);
// dx [N, h] (=): row n is the sum over its kept choices j of dout[slot_of[n·k + j]] (in j order).
void moe_permute_backward(const Tensor& dout, const Tensor& slot_of, int64_t topk, Tensor& dx);

// out [N, h] (=): row n is Σ_j probs[n, j] · y[slot_of[n·k + j]] over its kept choices (f32
// accumulation in j order). y [M, h] and out share the dtype, f32 or bf16.
void moe_unpermute(const Tensor& y, const Tensor& slot_of, const Tensor& probs, Tensor& out);
// The backward of moe_unpermute: dy [M, h] (=) row m = probs[p]·dout[p / k] for its pair
// p = slot_source[m], zeros for padding; dprobs f32 [N, k] (=) = ⟨dout[n], y[slot_of[n·k+j]]⟩,
// 0 for a dropped pair.
void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& slot_source,
                            const Tensor& slot_of, const Tensor& probs, Tensor& dy, Tensor& dprobs);

}  // namespace megatron::kernels
