// Megatron-LM's legacy `torch` checkpoint format (--ckpt-format torch): one PyTorch pickle per
// model-parallel rank, in Megatron's directory layout (checkpoint/layout.h).
//
//   LOAD/latest_checkpointed_iteration.txt
//   LOAD/iter_0000010/mp_rank_TT[_PPP]/model_optim_rng.pt   torch.save of a dict:
//     "args"                 argparse.Namespace of the run's arguments (the model's shape)
//     "checkpoint_version"   3.0 (QKV rows per head, [heads, 3, d], since 2.0)
//     "iteration"            int
//     "model"                this rank's parameters, local layer numbers, in one of two
//                            namings (below); Megatron-Core's adds `_extra_state` entries
//     "optimizer", "opt_param_scheduler", "rng_state", "num_floating_point_operations_so_far"
//
// Parameter names, megatron-cpp's on the left (layer i global; Megatron numbers the layers of
// each pipeline stage from 0):
//   embedding.word_embeddings.weight   legacy: language_model/embedding/word_embeddings/weight
//                                      core:   embedding.word_embeddings.weight
//   embedding.position_embeddings.weight  likewise with position_embeddings
//   layers.i.input_layernorm.*         legacy: language_model/encoder/layers.j.input_norm.*
//                                      core:   decoder.layers.j.self_attention.linear_qkv.
//                                              layer_norm_* (Transformer Engine) or
//                                              decoder.layers.j.input_layernorm.* (local)
//   layers.i.self_attention.query_key_value.*   .self_attention.query_key_value.* |
//                                               .self_attention.linear_qkv.*
//   layers.i.self_attention.dense.*    .self_attention.dense.* | .self_attention.linear_proj.*
//   layers.i.post_attention_layernorm.*  .post_attention_norm.* | .mlp.linear_fc1.layer_norm_*
//                                        or .pre_mlp_layernorm.*
//   layers.i.mlp.dense_h_to_4h.*       .mlp.dense_h_to_4h.* | .mlp.linear_fc1.*
//   layers.i.mlp.dense_4h_to_h.*       .mlp.dense_4h_to_h.* | .mlp.linear_fc2.*
//   final_layernorm.*                  language_model/encoder/final_norm.* |
//                                      decoder.final_layernorm.*
//   output_layer.weight                language_model/output_layer/weight | output_layer.weight
//   (the last stage's copy of a tied word embedding, pipeline size > 1)
//                                      word_embeddings_for_head/weight | output_layer.weight
// Older legacy files spell input_norm / post_attention_norm / final_norm as *_layernorm and
// encoder as transformer; both are read.
// BERT (Megatron-LM's legacy BertModel, megatron/legacy/model/bert_model.py, and Megatron-Core's
// BertModel, megatron/core/models/bert/bert_model.py) adds, megatron-cpp's names on the left:
//   embedding.tokentype_embeddings.weight  legacy: language_model/embedding/tokentype_embeddings/
//                                          weight; core: embedding.tokentype_embeddings.weight
//   layers.i.*, final_layernorm.*      core: encoder.layers.j.*, encoder.final_layernorm.* (the
//                                      block is Megatron-Core BERT's `encoder`); legacy as GPT
//   pooler.dense.*                     legacy: language_model/pooler/dense.*; core: pooler.dense.*
//   lm_head.dense.*                    lm_head/dense.* | lm_head.dense.*
//   lm_head.layernorm.*                lm_head/norm.* (older: lm_head/layernorm.*) |
//                                      lm_head.layer_norm.*
//   lm_head.bias                       lm_head/bias | output_layer.bias
//   binary_head.*                      binary_head/* | binary_head.*
//   (the last stage's copy of the word embedding, pipeline size > 1)
//                                      word_embeddings_for_head/weight | output_layer.weight
// Megatron's parameter order (the optimizer's ids) is the legacy model's language_model,
// word_embeddings_for_head, lm_head (bias first), binary_head, whatever order the dict was saved
// in; Megatron-Core's is the saved order (its modules' registration order: in a layer
// linear_proj before linear_qkv, which SelfAttention creates after Attention's linear_proj; what
// megatron_lm_model_entry writes). Each rank's tensor is its slice as megatron-cpp's
// GptModel registers it for that rank (same split dimension and per-rank row order: QKV rows
// per query group [g, q + 2, d], SwiGLU's [gate; up] per rank), so tensors move rank by rank.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/pickle_value.h"
#include "parallel/parameter.h"

namespace megatron {

// Whether `load_dir`'s latest checkpoint (its tracker's iteration) is in Megatron-LM's torch
// format: an mp_rank_* directory of it holds model_optim_rng.pt.
bool is_megatron_lm_torch_checkpoint(const std::string& load_dir);

enum class MegatronLmNaming { kLegacy, kCore };
// The model a checkpoint holds: GPT family (GPT-2, Llama-style) or BERT.
enum class MegatronLmFamily { kGpt, kBert };

// One rank's file, loaded (tensors are views of the mapped file).
struct MegatronLmRank {
  int tp_rank = 0, pp_rank = 0;
  std::string path;
  PyValue root;  // the saved dict
};

// Every rank file of iteration `iteration` (-1: the tracker's) of `load_dir`, loaded and
// checked to agree with each other and with their directory names: the same iteration, the
// args' tensor/pipeline sizes equal to the grid of mp_rank_* directories, checkpoint_version
// known (0, 1, 2 or 3). Sorted by (pp_rank, tp_rank).
struct MegatronLmCheckpoint {
  std::string iteration_dir;
  int64_t iteration = 0;
  double checkpoint_version = 0;
  int tp_size = 1, pp_size = 1;
  MegatronLmNaming naming = MegatronLmNaming::kLegacy;
  std::vector<MegatronLmRank> ranks;
  const PyValue& args() const;  // rank 0's "args"
};
MegatronLmCheckpoint read_megatron_lm_checkpoint(const std::string& load_dir, int64_t iteration);

// Megatron's args Namespace as JSON (the attribute names kept): numbers, strings, booleans,
// None, lists; torch dtypes as their names ("torch.bfloat16"); enum members as
// "Class.member" (pickled by name) or their value. Entries translated into the spellings
// megatron-cpp's records use: "disable_bias_linear" (= not add_bias_linear); "openai_gelu"
// true also when Megatron's fused bias-GeLU ran (bias_gelu_fusion with biases), whose GeLU is
// the tanh form; "kv_channels" 0 when it is hidden / heads and "add_qkv_bias" false with
// linear biases (Megatron fills both in; megatron-cpp records them only when they matter).
nlohmann::json megatron_lm_args_json(const PyValue& args);
// The inverse for a checkpoint megatron-cpp writes: `args` (its state.json args, Megatron
// names) as a Namespace, with add_bias_linear, params_dtype, the GeLU flags, kv_channels and
// num_query_groups in Megatron's spelling.
PyValue megatron_lm_args_namespace(const nlohmann::json& args);

// megatron-cpp's layer-local parameter name ("self_attention.query_key_value.weight") of
// Megatron's layer-local `suffix` in `naming` ("self_attention.linear_qkv.weight"; the older
// spellings too), or "" when no GPT-family model of megatron-cpp has it.
std::string megatron_lm_layer_name(const std::string& suffix, MegatronLmNaming naming);
// The inverse: Megatron's layer-local name in `naming` (Transformer Engine's norm names for
// kCore) of megatron-cpp's layer-local `ours`, or "" when Megatron's GPT has none.
std::string megatron_lm_layer_suffix(const std::string& ours, MegatronLmNaming naming);

// The family of the model in rank `rank`'s "model" entry: BERT when it holds BERT's heads or
// token-type embeddings (legacy lm_head / binary_head / embedding.tokentype_embeddings, core
// lm_head.* / encoder.* / embedding.tokentype_embeddings.weight), else GPT.
MegatronLmFamily megatron_lm_model_family(const MegatronLmRank& rank);

// Rank `rank`'s model tensors under megatron-cpp's names (global layer numbers, given the
// stage's first layer `first_layer`), in the order saved — the model's parameter order, which
// the optimizer's parameter ids follow. With `tied_embeddings` (args without
// untie_embeddings_and_output_weights) the last stage's copy of the word embedding is named ""
// (a parameter of Megatron's, not of megatron-cpp's model); `_extra_state` entries are dropped.
// BERT's (`family`) are returned in Megatron's parameter order (above). Throws Error naming the
// file and the entry for one that is not a tensor or that no model of `family` has (MoE's, ...).
std::vector<std::pair<std::string, Tensor>> megatron_lm_rank_parameters(
    const MegatronLmRank& rank, MegatronLmNaming naming, int first_layer, bool tied_embeddings,
    MegatronLmFamily family = MegatronLmFamily::kGpt);

// Rank tensors in megatron-cpp's names (a stage's registrations: `store`'s parameters) → the
// "model" entry Megatron saves for that rank in `naming`, and the parameters in Megatron's
// parameter order (the ids of the optimizer state Megatron saves); `first_layer` turns global
// layer numbers into the stage's local ones.
struct MegatronLmModelEntry {
  PyValue model;
  std::vector<const Parameter*> order;
};
MegatronLmModelEntry megatron_lm_model_entry(const ParameterStore& store, MegatronLmNaming naming,
                                             int first_layer,
                                             MegatronLmFamily family = MegatronLmFamily::kGpt);

}  // namespace megatron
