// Megatron-LM's `torch_dist` checkpoint format (--ckpt-format torch_dist, its default): Megatron-
// Core's dist_checkpointing over PyTorch Distributed Checkpoint (checkpoint/torch_dcp.h). No rank
// directories: every rank writes its chunks of the global tensors into one iteration directory.
//
//   LOAD/latest_checkpointed_iteration.txt
//   LOAD/iter_0000010/metadata.json    {"sharded_backend": "torch_dist", ...}
//   LOAD/iter_0000010/.metadata, __R_K.distcp    the DCP checkpoint
//   LOAD/iter_0000010/common.pt        torch.save of the common (not sharded) state: "args",
//                                      "checkpoint_version", "iteration", ...; Megatron-Core
//                                      since July 2026 stores it instead as the DCP byte item
//                                      "common_state/shard_0_1" (torch.save of [state])
//
// DCP keys are Megatron-Core's ShardedTensor keys, their tensors global (whole over TP, PP and EP):
//   embedding.word_embeddings.weight [padded vocab, h], embedding.position_embeddings.weight,
//   output_layer.weight (untied only), decoder.final_layernorm.{weight,bias},
//   decoder.layers.<suffix>      a transformer layer's tensor stacked over all layers: the
//                                layer is a leading axis [L, ...] (homogeneous layers)
//   decoder.layers.<i>.<suffix>  one layer's tensor (non-homogeneous layers: --moe-layer-freq)
//   mtp.layers.<d>.<...>         multi-token prediction's depth d (never stacked)
// with <suffix> Megatron-Core's layer names (checkpoint/megatron_core_keys.h: linear_qkv,
// linear_proj, linear_fc1, linear_fc2, the norms as Transformer Engine's layer_norm_* or the
// local spec's input_layernorm / pre_mlp_layernorm, the QK norms, the MoE router, its
// expert_bias, the experts [E, ...] and the shared experts). The global tensors are megatron-cpp's
// full tensors: QKV rows per query group [g, q + 2, d]; SwiGLU's linear_fc1 [gate; up] = the
// stacked [2, ffn, h] (an expert's [E, 2, ffn, h]). Byte items (Transformer Engine's
// `_extra_state`, the RNG states, the rerun state machine) are not model tensors. The
// non-distributed optimizer's state of a parameter is stored as global tensors of the parameter's
// shape under "optimizer.state.<state>.<model key>" (exp_avg, exp_avg_sq, and fp32_param with
// 16-bit params); the distributed optimizer's fully_reshardable layout likewise, its fp32 main
// params as "param"; the step, the param groups, the loss scaler and the LR scheduler
// ("opt_param_scheduler") are in the common state. The distributed optimizer's dp_reshardable
// layout (per-bucket flat buffers, optimizer.distributed.dp_group_idx_*) is read by
// checkpoint/megatron_lm_distrib_optim.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/torch_dcp.h"
#include "core/pickle_value.h"

namespace megatron {

// Whether `iteration_dir` is in the torch_dist format: it holds metadata.json or .metadata.
bool is_megatron_lm_torch_dist_dir(const std::string& iteration_dir);
// Whether `load_dir`'s latest checkpoint (its tracker's iteration) is.
bool is_megatron_lm_torch_dist_checkpoint(const std::string& load_dir);

struct MegatronLmTorchDist {
  std::string iteration_dir;
  int64_t iteration = 0;
  double checkpoint_version = 0;
  PyValue common;  // the common state dict
  DcpCheckpoint dcp;
  const PyValue& args() const;  // common["args"]
};

// Iteration `iteration` (-1: the tracker's) of `load_dir`, its metadata.json, .metadata and
// common state read and checked: sharded_backend torch_dist, the common state a dict with
// "args", "iteration" and checkpoint_version >= 2 (QKV rows per head; torch_dist was never
// written with older versions).
MegatronLmTorchDist read_megatron_lm_torch_dist(const std::string& load_dir, int64_t iteration);

struct MegatronLmTorchDistModel {
  // megatron-cpp's names (layers.i...., global layer numbers) → global tensors as stored (their
  // dtype, Megatron's shape without the layer axis).
  std::map<std::string, Tensor> tensors;
  // The optimizer's state of each parameter, by megatron-cpp's buffer name — "exp_avg",
  // "exp_avg_sq" (Adam's moments), "fp32_master" (the fp32 main params of a bf16/fp16 run) —
  // then by parameter name as `tensors`: optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<key>
  // (the distributed optimizer's fully_reshardable layout: param for fp32_param).
  std::map<std::string, std::map<std::string, Tensor>> optimizer;
  // What was read past: other optimizer items, and the byte items other than `_extra_state`
  // and the common state (RNG states, ...), by key.
  std::vector<std::string> not_converted;
};

// The model tensors (the persistent buffers — the routers' expert_bias — among them) and the
// optimizer's tensors of `ckpt` for a GPT-family model of `num_layers` layers. With
// `tied_embeddings` output_layer.weight entries are left out. Throws Error naming the key for an
// entry no GPT-family model of megatron-cpp has (BERT's, multi-latent attention's, ...), for
// a stacked tensor whose layer axis is not num_layers, and for an optimizer tensor not of its
// parameter's global shape (the distributed optimizer's flattened layouts).
MegatronLmTorchDistModel megatron_lm_torch_dist_tensors(const MegatronLmTorchDist& ckpt,
                                                        int64_t num_layers, bool tied_embeddings);

}  // namespace megatron
