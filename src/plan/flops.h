// FLOPs of one training iteration, counted as Megatron-LM counts them.
//
// Model FLOPs (Megatron-LM's num_floating_point_operations; for GPT-2/3-style models
// 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)), Narayanan et al. 2021 eq. (3) without recompute):
//     12·B·s·L·h²·[ (1 + g/a + s/h)·(a·d/h) + (f/h)·(3/2 with SwiGLU) + V/(2·L·h) ]
// — forward and backward of every GEMM (backward = 2x forward), attention over the full s x s
// (Megatron does not halve it for causal masks), the output layer once.
// Hardware FLOPs add what recompute runs again: full recompute one more forward of every
// layer (Narayanan's 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))), selective recompute the QKᵀ and
// attention-times-V products (megatron-cpp: QKᵀ only; its backward does not need the context).
// With multi-latent attention the attention terms are Megatron-LM's MLA count (its down/up
// projections, QKᵀ over qk_head_dim + qk_pos_emb_head_dim, AV over v_head_dim). MFU uses model
// FLOPs; "TFLOP/s" as the 2021 paper reports it uses hardware FLOPs.
#pragma once

#include "plan/implementation.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace megatron::plan {

struct IterationFlops {
  double model = 0;     // FLOPs per iteration, all ranks together
  double hardware = 0;  // model + recomputed forward work
};

IterationFlops iteration_flops(const ModelSpec& model, const Layout& layout, Implementation impl);

}  // namespace megatron::plan
