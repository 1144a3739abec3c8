#include "convert/megatron_lm_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <type_traits>

#include "checkpoint/architecture_json.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_core_keys.h"
#include "checkpoint/megatron_lm_distrib_optim.h"
#include "checkpoint/megatron_lm_rank_state.h"
#include "checkpoint/megatron_lm_torch_dist.h"
#include "checkpoint/megatron_lm_torch_dist_writer.h"
#include "checkpoint/megatron_lm_torch_optimizer.h"
#include "checkpoint/megatron_lm_trainer_state.h"
#include "checkpoint/model_shape.h"
#include "checkpoint/shards.h"
#include "convert/bert_checkpoint.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "core/durable_file.h"
#include "core/logging.h"
#include "core/torch_file.h"
#include "model/bert_model.h"
#include "model/stage_range.h"
#include "optim/optimizer.h"

namespace megatron {

namespace {

constexpr int64_t kGpt2BpeVocabSize = 50257;

// The real vocabulary: the flag, else args.vocab_size, else the GPT-2 BPE tokenizer's; at most
// the padded one.
int64_t real_vocab_size(const nlohmann::json& args, int64_t flag, const std::string& dir) {
  const std::string tokenizer = args.value("tokenizer_type", std::string("unknown"));
  int64_t vocab = 0;
  std::string from;
  if (flag > 0) {
    vocab = flag;
    from = "--vocab-size";
  } else if (args.contains("vocab_size") && args["vocab_size"].is_number_integer()) {
    vocab = args["vocab_size"].get<int64_t>();
    from = "args.vocab_size";
  } else if (tokenizer == "GPT2BPETokenizer") {
    vocab = kGpt2BpeVocabSize;
    from = "the GPT2BPETokenizer";
  } else {
    MT_THROW("Megatron-LM checkpoint '", dir,
             "' does not record its real vocabulary size (args.vocab_size is unset and the "
             "tokenizer is ",
             tokenizer, "); pass it with --vocab-size");
  }
  const int64_t padded = args.value("padded_vocab_size", int64_t(0));
  MT_REQUIRE(vocab >= 1 && vocab <= padded, "Megatron-LM checkpoint '", dir,
             "': the real vocabulary size ", vocab, " (", from,
             ") is not within args.padded_vocab_size ", padded,
             "; pass the real one with --vocab-size");
  return vocab;
}

// Options of Megatron runs that megatron-cpp's GPT (or, `bert`, BERT) model does not build, and
// (with `per_rank_files`, the torch format) pipeline layouts whose rank files it does not split.
void check_supported_args(const nlohmann::json& args, const std::string& dir, bool per_rank_files,
                          bool bert = false) {
  // Unset: absent, None, false, 0 or "" (megatron-cpp's own args spell an unset layout so).
  auto set = [&](const char* key) {
    return args.contains(key) && !args[key].is_null() && args[key] != false && args[key] != 0 &&
           args[key] != "";
  };
  std::vector<const char*> keys = {"apply_residual_connection_post_layernorm", "squared_relu"};
  // The torch format's rank files name experts, MTP depths, QK norms and MLA in ways not mapped
  // yet (torch_dist's keys are: checkpoint/megatron_core_keys.h).
  if (per_rank_files)
    keys.insert(keys.end(),
                {"num_experts", "mtp_num_layers", "qk_layernorm", "multi_latent_attention",
                 "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                 "num_layers_per_virtual_pipeline_stage", "pipeline_model_parallel_layout"});
  if (bert)
    keys.insert(keys.end(), {"swiglu", "group_query_attention", "disable_bias_linear",
                             "untie_embeddings_and_output_weights", "add_qkv_bias"});
  const char* model = bert ? "BERT" : "GPT";
  for (const char* key : keys)
    MT_REQUIRE(!set(key), "Megatron-LM checkpoint '", dir, "' was trained with args.", key, " = ",
               args[key].dump(), ", which megatron-cpp's ", model, " model does not support yet");
  if (!bert) return;
  const std::string position =
      args.value("position_embedding_type", std::string("learned_absolute"));
  const std::string norm = args.value("normalization", std::string("LayerNorm"));
  MT_REQUIRE(position == "learned_absolute" && norm == "LayerNorm", "Megatron-LM checkpoint '", dir,
             "' is a BERT with position_embedding_type ", position, " and normalization ", norm,
             "; megatron-cpp's BERT has learned absolute positions and LayerNorm");
}

// The state.json-shaped record (model shape + args) of the Megatron args, with the vocabulary
// padded to `padded`.
nlohmann::json megatron_state(const nlohmann::json& args, int64_t padded, const std::string& dir) {
  auto number = [&](const char* key) {
    MT_REQUIRE(args.contains(key) && args[key].is_number_integer(), "Megatron-LM checkpoint '", dir,
               "': args.", key, " is not recorded (needed to rebuild the model)");
    return args[key].get<int64_t>();
  };
  const int64_t hidden = number("hidden_size");
  const int64_t ffn =
      args.contains("ffn_hidden_size") && args["ffn_hidden_size"].is_number_integer()
          ? args["ffn_hidden_size"].get<int64_t>()
          : 4 * hidden;
  const int64_t positions = args.contains("max_position_embeddings") &&
                                    args["max_position_embeddings"].is_number_integer()
                                ? args["max_position_embeddings"].get<int64_t>()
                                : number("seq_length");
  return {{"model",
           {{"num_layers", number("num_layers")},
            {"hidden_size", hidden},
            {"num_attention_heads", number("num_attention_heads")},
            {"ffn_hidden_size", ffn},
            {"max_position_embeddings", positions},
            {"padded_vocab_size", padded}}},
          {"args", args}};
}

// checkpoint_version 0 and 1 kept a rank's QKV rows as [3, heads, d] and [heads, d, 3]; since
// 2.0 they are [heads, 3, d], megatron-cpp's order.
Tensor qkv_rows_per_head(const Tensor& t, double version, int64_t heads, const std::string& name) {
  if (version >= 2) return t;
  const int64_t cols = t.dim() == 2 ? t.size(1) : 1;
  const int64_t d = t.size(0) / (3 * heads);
  Tensor src = t.view({t.size(0), cols});
  Tensor out = Tensor::empty(src.shape(), DType::F32);
  const float* s = src.data<float>();
  float* o = out.data<float>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t i = 0; i < d; ++i) {
        const int64_t from = version == 0 ? (k * heads + h) * d + i : (h * d + i) * 3 + k;
        std::copy_n(s + from * cols, cols, o + ((h * 3 + k) * d + i) * cols);
      }
  log_info("reordered ", name, " from checkpoint_version ", version, "'s QKV rows");
  return out.view(t.shape());
}

// One tensor per parameter of each rank (ckpt.ranks' order), under megatron-cpp's names: the
// model's values or one optimizer buffer.
using RankTensors = std::vector<std::map<std::string, Tensor>>;

// `per_rank` (`what`: "" for the model, else the optimizer buffer's name) as full (f32) tensors
// under megatron-cpp's names, for `config` (the vocabulary padded as stored). A replicated
// parameter is taken from TP rank 0.
template <typename ModelT, typename ConfigT>
TensorMap gather_full_tensors(const MegatronLmCheckpoint& ckpt, const ConfigT& config,
                              RankTensors per_rank, const std::string& what) {
  const std::string prefix = what.empty() ? "" : what + " of ";
  TensorMap full;
  std::string problems;
  for (size_t r = 0; r < ckpt.ranks.size(); ++r) {
    const MegatronLmRank& rank = ckpt.ranks[r];
    const StageRange stage = stage_range(
        {.num_layers = config.num_layers, .pipeline_size = ckpt.pp_size}, rank.pp_rank, 0);
    ParameterStore store =
        registered_parameter_store<ModelT>(config, rank.tp_rank, ckpt.tp_size, stage);
    std::map<std::string, Tensor>& tensors = per_rank[r];
    for (const Parameter& p : store.params()) {
      if (p.spec.stage_tie == StageTie::kCopy) continue;
      auto it = tensors.find(p.spec.name);
      if (it == tensors.end()) {
        problems += "\n  " + rank.path + ": " + prefix + p.spec.name + " is missing";
        continue;
      }
      Tensor t = hf_tensor_to_f32(it->second, "Megatron-LM");
      tensors.erase(it);
      if (t.numel() != shape_numel(p.local_shape)) {
        problems += "\n  " + rank.path + ": " + prefix + p.spec.name + " is " +
                    shape_str(t.shape()) + ", the model's slice is " + shape_str(p.local_shape);
        continue;
      }
      if (p.spec.name.find("query_key_value") != std::string::npos)
        t = qkv_rows_per_head(t, ckpt.checkpoint_version, config.num_attention_heads / ckpt.tp_size,
                              p.spec.name);
      if (p.replicated() && rank.tp_rank != 0) continue;  // every TP rank holds a copy
      Tensor& f = full[p.spec.name];
      if (!f.defined()) f = Tensor::zeros(p.spec.full_shape, DType::F32);
      local_slice(p, f).copy_from(t.view(p.local_shape));
    }
    for (const auto& [name, t] : tensors)
      problems += "\n  " + rank.path + ": " + prefix + name + " " + shape_str(t.shape()) +
                  " is not a parameter of the model its args describe";
  }
  MT_REQUIRE(problems.empty(), "Megatron-LM checkpoint '", ckpt.iteration_dir,
             "' does not hold the model its args describe:", problems);
  return full;
}

// Whether a torch_dist global tensor of `stored` shape is megatron-cpp's full tensor of `full`
// shape: the same, or (SwiGLU's linear_fc1 [..., 2·ffn, ...] = [..., gate; up, ...], dense or
// per expert) with two adjacent dimensions of full's merged.
bool same_layout(const Shape& stored, const Shape& full) {
  if (stored == full) return true;
  if (full.size() != stored.size() + 1) return false;
  for (size_t a = 0; a < stored.size(); ++a) {
    Shape merged = full;
    merged[a + 1] *= merged[a];
    merged.erase(merged.begin() + ptrdiff_t(a));
    if (merged == stored) return true;
  }
  return false;
}

// `stored` (megatron-cpp's names → torch_dist global tensors; `what`: "" for the model, else the
// optimizer buffer's name) as full f32 tensors of `store`'s parameters; what is missing,
// misshaped or unknown is added to `problems`.
TensorMap full_parameter_tensors(std::map<std::string, Tensor> stored, const ParameterStore& store,
                                 const std::string& what, std::string& problems) {
  const std::string prefix = what.empty() ? "" : what + " of ";
  TensorMap full;
  for (const Parameter& p : store.params()) {
    auto it = stored.find(p.spec.name);
    if (it == stored.end()) {
      problems += "\n  " + prefix + p.spec.name + " is missing";
      continue;
    }
    if (!same_layout(it->second.shape(), p.spec.full_shape)) {
      problems += "\n  " + prefix + p.spec.name + " is " + shape_str(it->second.shape()) +
                  ", the model's is " + shape_str(p.spec.full_shape);
    } else {
      full[p.spec.name] = hf_tensor_to_f32(it->second, "Megatron-LM GPT").view(p.spec.full_shape);
    }
    stored.erase(it);
  }
  // The persistent buffers (the routers' expert_bias), model tensors without optimizer state.
  for (const Buffer& b : store.buffers()) {
    if (!b.spec.persistent || !what.empty()) continue;
    auto it = stored.find(b.spec.name);
    if (it == stored.end()) {
      problems += "\n  " + b.spec.name + " is missing";
      continue;
    }
    if (it->second.shape() != b.spec.shape)
      problems += "\n  " + b.spec.name + " is " + shape_str(it->second.shape()) +
                  ", the model's is " + shape_str(b.spec.shape);
    else
      full[b.spec.name] = hf_tensor_to_f32(it->second, "Megatron-LM GPT");
    stored.erase(it);
  }
  for (const auto& [name, t] : stored)
    problems += "\n  " + prefix + name + " " + shape_str(t.shape()) +
                " is not a parameter of the model its args describe";
  return full;
}

// `full` with every padded-vocabulary tensor (the word embedding, GPT's output layer, BERT's
// LM-head bias) re-padded to `to`'s rows (the real rows kept, new padding zero).
template <typename ConfigT>
TensorMap repad_vocabulary(TensorMap full, const ConfigT& to) {
  for (auto& [name, t] : full) {
    if (name != "embedding.word_embeddings.weight" && name != "output_layer.weight" &&
        name != "lm_head.bias")
      continue;
    Shape shape = t.shape();
    shape[0] = to.padded_vocab_size;
    Tensor out = Tensor::zeros(shape, DType::F32);
    const int64_t rows = std::min(to.vocab_size, t.size(0));
    out.slice(0, 0, rows).copy_from(t.slice(0, 0, rows));
    t = out;
  }
  return full;
}

// A Megatron-LM checkpoint's model, read: its args (megatron-cpp's spelling), its real
// vocabulary, the model it describes and its full tensors.
template <typename ConfigT>
struct MegatronLmSource {
  nlohmann::json args, converted_from;
  int64_t vocab = 0;
  ConfigT config;
  TensorMap full;
  std::vector<std::string> not_converted;  // what a warning names as left behind
  // The optimizer state (buffer name → full tensors, as `full`) and the trainer state
  // (checkpoint/megatron_lm_trainer_state.h) when the checkpoint carries them; else empty.
  std::map<std::string, TensorMap> optimizer;
  nlohmann::json trainer;
};

// The BERT that Megatron-LM's `args` (megatron_lm_args_json's spelling) describe, the vocabulary
// padded to `padded`: Megatron's BERT is pre-LayerNorm with a final LayerNorm, token types and
// the pooler and binary head with args.bert_binary_head (pretrain_bert.py's num_tokentypes: 2
// with the binary head, else 0).
BertConfig bert_config_from_megatron_args(const nlohmann::json& args, int64_t padded, int64_t vocab,
                                          const std::string& dir) {
  const nlohmann::json shape = megatron_state(args, padded, dir)["model"];
  BertConfig c;
  c.num_layers = shape["num_layers"].get<int>();
  c.hidden_size = shape["hidden_size"].get<int>();
  c.num_attention_heads = shape["num_attention_heads"].get<int>();
  c.ffn_hidden_size = shape["ffn_hidden_size"].get<int>();
  c.max_position_embeddings = c.seq_length = shape["max_position_embeddings"].get<int>();
  c.padded_vocab_size = padded;
  c.vocab_size = vocab;
  c.binary_head = args.value("bert_binary_head", true);
  c.num_tokentypes = c.binary_head ? 2 : 0;
  c.layernorm_epsilon = norm_epsilon_from_args_json(args);
  c.layernorm_order = LayerNormOrder::kPreLayerNorm;
  auto number = [&](const char* key, float fallback) {
    return args.contains(key) && args[key].is_number() ? args[key].get<float>() : fallback;
  };
  c.hidden_dropout = number("hidden_dropout", c.hidden_dropout);
  c.attention_dropout = number("attention_dropout", c.attention_dropout);
  c.init_method_std = number("init_method_std", c.init_method_std);
  c.gelu = gelu_form_from_args_json(args);
  return c;
}

// The source's args, real vocabulary and model (the vocabulary padded as stored), from
// Megatron's `args` in `dir`.
template <typename ConfigT>
MegatronLmSource<ConfigT> source_model(const PyValue& args, const std::string& dir,
                                       int64_t vocab_size, bool per_rank_files) {
  constexpr bool bert = std::is_same_v<ConfigT, BertConfig>;
  MegatronLmSource<ConfigT> src;
  src.args = megatron_lm_args_json(args);
  check_supported_args(src.args, dir, per_rank_files, bert);
  src.vocab = real_vocab_size(src.args, vocab_size, dir);
  const int64_t padded = src.args.value("padded_vocab_size", int64_t(0));
  if constexpr (bert)
    src.config = bert_config_from_megatron_args(src.args, padded, src.vocab, dir);
  else
    src.config =
        gpt_config_from_checkpoint_state(megatron_state(src.args, padded, dir), dir, src.vocab);
  return src;
}

// The model class of a config, and the family of its Megatron-LM names.
template <typename ConfigT>
using ModelOf = std::conditional_t<std::is_same_v<ConfigT, BertConfig>, BertModel, GptModel>;
template <typename ConfigT>
constexpr MegatronLmFamily kFamilyOf =
    std::is_same_v<ConfigT, BertConfig> ? MegatronLmFamily::kBert : MegatronLmFamily::kGpt;

template <typename ConfigT>
bool tied_embeddings(const ConfigT& config) {
  if constexpr (std::is_same_v<ConfigT, BertConfig>)
    return true;
  else
    return !config.arch.untie_embeddings_and_output_weights;
}

template <typename ConfigT>
MegatronLmSource<ConfigT> read_torch_format(const std::string& load_dir, int64_t iteration,
                                            int64_t vocab_size) {
  using ModelT = ModelOf<ConfigT>;
  constexpr MegatronLmFamily family = kFamilyOf<ConfigT>;
  const MegatronLmCheckpoint ckpt = read_megatron_lm_checkpoint(load_dir, iteration);
  const bool bert_file = std::any_of(ckpt.ranks.begin(), ckpt.ranks.end(), [](const auto& r) {
    return megatron_lm_model_family(r) == MegatronLmFamily::kBert;
  });
  MT_REQUIRE(bert_file == (family == MegatronLmFamily::kBert), "Megatron-LM checkpoint '",
             ckpt.iteration_dir, "' holds a ", bert_file ? "BERT" : "GPT-family",
             " model: convert it with --model-type ", bert_file ? "bert" : "gpt",
             bert_file ? " (pretrain-bert loads it)" : " (pretrain-gpt loads it)");
  MegatronLmSource<ConfigT> src =
      source_model<ConfigT>(ckpt.args(), ckpt.iteration_dir, vocab_size, true);
  const bool tied = tied_embeddings(src.config);
  // Each rank's parameters in Megatron's order (the optimizer's ids follow it); the model is
  // checked whole before its optimizer state is matched to it.
  std::vector<std::vector<std::pair<std::string, Tensor>>> parameters;
  RankTensors model(ckpt.ranks.size());
  for (size_t r = 0; r < ckpt.ranks.size(); ++r) {
    const StageRange stage =
        stage_range({.num_layers = src.config.num_layers, .pipeline_size = ckpt.pp_size},
                    ckpt.ranks[r].pp_rank, 0);
    parameters.push_back(
        megatron_lm_rank_parameters(ckpt.ranks[r], ckpt.naming, stage.first_layer, tied, family));
    for (const auto& [name, t] : parameters.back())
      if (!name.empty()) model[r][name] = t;
  }
  src.full = gather_full_tensors<ModelT>(ckpt, src.config, std::move(model), "");
  // The non-distributed optimizer's state is in the rank files, the distributed optimizer's in
  // the distrib_optim.pt beside each.
  std::map<std::string, RankTensors> optimizer;
  for (size_t r = 0; r < ckpt.ranks.size(); ++r) {
    const MegatronLmRank& rank = ckpt.ranks[r];
    const std::string distrib_optim = megatron_lm_distrib_optim_path(rank);
    auto state = megatron_lm_rank_optimizer(rank, parameters[r]);
    if (state.empty() && !distrib_optim.empty())
      state = megatron_lm_distrib_optim_state(distrib_optim, rank.pp_rank, ckpt.pp_size,
                                              parameters[r], src.args);
    for (auto& [buffer, tensors] : state) {
      optimizer.try_emplace(buffer, ckpt.ranks.size());
      optimizer.at(buffer)[r] = std::move(tensors);
    }
  }
  for (auto& [buffer, tensors] : optimizer)
    src.optimizer[buffer] =
        gather_full_tensors<ModelT>(ckpt, src.config, std::move(tensors), buffer);
  src.trainer = megatron_lm_trainer_state(ckpt.ranks.front().root, src.args, ckpt.iteration_dir);
  src.converted_from = {{"format", "megatron-lm-torch"},
                        {"iteration", ckpt.iteration},
                        {"checkpoint_version", ckpt.checkpoint_version},
                        {"tensor_model_parallel_size", ckpt.tp_size},
                        {"pipeline_model_parallel_size", ckpt.pp_size}};
  if (ckpt.ranks.front().root.as_dict("").find("rng_state"))
    src.not_converted.push_back("rng_state");
  if (src.optimizer.empty() && src.args.value("use_distributed_optimizer", false))
    src.not_converted.push_back("the distributed optimizer's state (distrib_optim.pt)");
  return src;
}

// The distributed optimizer's dp_reshardable state of `ckpt`
// (checkpoint/megatron_lm_distrib_optim.h) as full tensors of `src`'s model: each (TP, PP) rank's
// buffer split by the layout of the rank's parameters in Megatron's order (megatron-cpp's slices of
// that rank are Megatron's), gathered as the torch format's rank slices are (a replicated
// parameter's from TP rank 0); empty when the checkpoint has none.
std::map<std::string, TensorMap> dp_reshardable_optimizer(const MegatronLmTorchDist& ckpt,
                                                          const MegatronLmSource<GptConfig>& src) {
  const int tp_size = src.args.value("tensor_model_parallel_size", 1);
  const int pp_size = src.args.value("pipeline_model_parallel_size", 1);
  std::map<std::string, TensorMap> full;
  for (int pp = 0; pp < pp_size; ++pp)
    for (int tp = 0; tp < tp_size; ++tp) {
      const int mp_rank = tp + tp_size * pp;
      const std::map<std::string, Tensor> flat =
          megatron_lm_dp_reshardable_buffers(ckpt.dcp, mp_rank);
      if (flat.empty() && mp_rank == 0) return {};
      MT_REQUIRE(!flat.empty(), "Megatron-LM checkpoint '", ckpt.iteration_dir,
                 "' holds the distributed optimizer's dp_reshardable state of model-parallel rank "
                 "0 but not of rank ",
                 mp_rank, " (tensor rank ", tp, ", pipeline rank ", pp, ")");
      const StageRange stage =
          stage_range({.num_layers = src.config.num_layers, .pipeline_size = pp_size}, pp, 0);
      ParameterStore store = registered_parameter_store<GptModel>(src.config, tp, tp_size, stage);
      const MegatronLmModelEntry entry =
          megatron_lm_model_entry(store, MegatronLmNaming::kCore, stage.first_layer);
      std::vector<std::pair<std::string, Tensor>> parameters;
      for (const Parameter* p : entry.order)
        parameters.emplace_back(p->spec.stage_tie == StageTie::kCopy ? "" : p->spec.name, p->value);
      const std::string where = "the dp_reshardable optimizer state of model-parallel rank " +
                                std::to_string(mp_rank) + " in '" + ckpt.iteration_dir + "'";
      for (const auto& [buffer, tensors] :
           megatron_lm_coalesced_state(flat, where, pp, pp_size, parameters, src.args))
        for (const Parameter& p : store.params()) {
          if (p.spec.stage_tie == StageTie::kCopy || (p.replicated() && tp != 0)) continue;
          Tensor& f = full[buffer][p.spec.name];
          if (!f.defined()) f = Tensor::zeros(p.spec.full_shape, DType::F32);
          local_slice(p, f).copy_from(tensors.at(p.spec.name).view(p.local_shape));
        }
    }
  return full;
}

MegatronLmSource<GptConfig> read_torch_dist_format(const std::string& load_dir, int64_t iteration,
                                                   int64_t vocab_size) {
  const MegatronLmTorchDist ckpt = read_megatron_lm_torch_dist(load_dir, iteration);
  MegatronLmSource<GptConfig> src =
      source_model<GptConfig>(ckpt.args(), ckpt.iteration_dir, vocab_size, false);
  // Megatron-Core's MLA normalises its latents only with --qk-layernorm (Transformer Engine's
  // fused linear_q_up_proj / linear_kv_up_proj norms); megatron-cpp's MLA always does.
  MlaOptions& mla = src.config.arch.mla;
  MT_REQUIRE(!mla.enabled || src.config.arch.qk_layernorm, "Megatron-LM checkpoint '",
             ckpt.iteration_dir,
             "' is a multi-latent-attention model without --qk-layernorm (no latent norms), "
             "which megatron-cpp's MLA does not build");
  if (mla.enabled) src.config.arch.qk_layernorm = false;  // implied by MLA here
  MegatronLmTorchDistModel model = megatron_lm_torch_dist_tensors(
      ckpt, src.config.num_layers, !src.config.arch.untie_embeddings_and_output_weights);
  src.not_converted = model.not_converted;
  const ParameterStore store = registered_parameter_store<GptModel>(src.config, 0, 1);
  std::string problems;
  src.full = full_parameter_tensors(std::move(model.tensors), store, "", problems);
  for (auto& [buffer, tensors] : model.optimizer)
    src.optimizer[buffer] = full_parameter_tensors(std::move(tensors), store, buffer, problems);
  MT_REQUIRE(problems.empty(), "Megatron-LM checkpoint '", ckpt.iteration_dir,
             "' does not hold the model its args describe:", problems);
  if (src.optimizer.empty()) {
    src.optimizer = dp_reshardable_optimizer(ckpt, src);
    if (!src.optimizer.empty())
      std::erase_if(src.not_converted, [](const std::string& key) {
        return key.find("optimizer.distributed.") != std::string::npos;
      });
  }
  // MLA's rope rows in megatron-cpp's pairing (checkpoint/megatron_core_keys.h).
  for (auto& [name, t] : src.full) t = megatron_cpp_rows(name, t, mla);
  for (auto& [buffer, tensors] : src.optimizer)
    for (auto& [name, t] : tensors) t = megatron_cpp_rows(name, t, mla);
  src.trainer = megatron_lm_trainer_state(ckpt.common, src.args, ckpt.iteration_dir);
  src.converted_from = {
      {"format", "megatron-lm-torch_dist"},
      {"iteration", ckpt.iteration},
      {"checkpoint_version", ckpt.checkpoint_version},
      {"tensor_model_parallel_size", src.args.value("tensor_model_parallel_size", 1)},
      {"pipeline_model_parallel_size", src.args.value("pipeline_model_parallel_size", 1)}};
  return src;
}

// Whether the source carries what a resumed run needs: Adam's moments of every parameter (checked
// complete when read), the step and the scheduler state.
template <typename ConfigT>
bool resumable(const MegatronLmSource<ConfigT>& src) {
  return src.optimizer.count("exp_avg") && src.optimizer.count("exp_avg_sq") &&
         src.trainer.contains("optimizer") && src.trainer.contains("scheduler");
}

}  // namespace

bool megatron_lm_checkpoint_is_resumable(const std::string& load_dir, int64_t iteration) {
  if (!is_megatron_lm_torch_dist_dir(checkpoint_iteration_dir(load_dir, iteration))) {
    const MegatronLmCheckpoint ckpt = read_megatron_lm_checkpoint(load_dir, iteration);
    const MegatronLmRank& rank = ckpt.ranks.front();
    return (megatron_lm_rank_has_optimizer_state(rank) ||
            !megatron_lm_distrib_optim_path(rank).empty()) &&
           rank.root.as_dict("").find("opt_param_scheduler");
  }
  const MegatronLmTorchDist ckpt = read_megatron_lm_torch_dist(load_dir, iteration);
  bool moments[2] = {false, false};
  for (const auto& [key, t] : ckpt.dcp.tensors()) {
    (void)t;
    // The non-distributed and fully_reshardable layouts, and dp_reshardable's buckets.
    const bool buckets = key.find("optimizer.distributed.") != std::string::npos;
    moments[0] |=
        key.rfind("optimizer.state.exp_avg.", 0) == 0 || (buckets && key.ends_with(".exp_avg"));
    moments[1] |= key.rfind("optimizer.state.exp_avg_sq.", 0) == 0 ||
                  (buckets && key.ends_with(".exp_avg_sq"));
  }
  const PyDict& common = ckpt.common.as_dict("");
  return moments[0] && moments[1] && common.find("optimizer") && common.find("opt_param_scheduler");
}

namespace {

// Writes `src` (read from `load_dir`) to `save_dir` at `target_tp` (megatron_lm_checkpoint.h).
template <typename ConfigT>
void write_import(const MegatronLmSource<ConfigT>& src, const std::string& load_dir,
                  const std::string& save_dir, int target_tp) {
  using ModelT = ModelOf<ConfigT>;
  const int divisible_by = src.args.value("make_vocab_size_divisible_by", 128);
  ConfigT target = src.config;
  target.padded_vocab_size = padded_vocab_size(src.vocab, divisible_by, target_tp);
  nlohmann::json ours_args, shape;
  if constexpr (std::is_same_v<ConfigT, BertConfig>) {
    ours_args = bert_hf_description(target);
    shape = bert_model_shape_json(target);
  } else {
    ours_args = gpt_imported_args(target);
    shape = gpt_model_shape_json(target);
  }
  ours_args["seq_length"] = src.args.value("seq_length", target.seq_length);
  nlohmann::json state =
      imported_checkpoint_state(shape, ours_args, divisible_by, target_tp,
                                src.converted_from.value("format", std::string()), load_dir, "");
  state["model"]["vocab_size"] = src.vocab;
  state["converted_from"].erase("config_json");
  state["converted_from"].update(src.converted_from);
  std::vector<std::string> not_converted = src.not_converted;
  if (resumable(src)) {
    state.update(src.trainer);
    // A distributed optimizer's state stays one: an export of the import writes its
    // distrib_optim.pt again, with the gradient buckets of the source's run.
    if (src.args.value("use_distributed_optimizer", false))
      for (const char* key :
           {"use_distributed_optimizer", "overlap_grad_reduce", "ddp_bucket_size"})
        if (src.args.contains(key) && !src.args[key].is_null()) state["args"][key] = src.args[key];
    std::map<std::string, TensorMap> optimizer;
    for (const auto& [buffer, full] : src.optimizer)
      optimizer[buffer] = repad_vocabulary(full, target);
    write_imported_checkpoint<ModelT>(save_dir, target, repad_vocabulary(src.full, target), state,
                                      target_tp, state["iteration"].get<int64_t>(), optimizer);
    log_info("Megatron-LM checkpoint '", load_dir, "': imported at iteration ",
             state["iteration"].get<int64_t>(), " with its optimizer state (", src.optimizer.size(),
             " buffers, step ", state["optimizer"]["steps"].get<int64_t>(),
             ") and LR scheduler; its RNG state is not carried (the run draws from its --seed)");
  } else {
    if (!src.optimizer.empty() || src.trainer.contains("optimizer"))
      not_converted.push_back(
          "the optimizer state (it needs exp_avg, exp_avg_sq, the step and opt_param_scheduler)");
    write_imported_checkpoint<ModelT>(save_dir, target, repad_vocabulary(src.full, target), state,
                                      target_tp);
  }
  if (!not_converted.empty()) {
    std::string parts;
    for (size_t i = 0; i < not_converted.size() && i < 4; ++i)
      parts += (i ? ", " : "") + not_converted[i];
    if (not_converted.size() > 4)
      parts += " and " + std::to_string(not_converted.size() - 4) + " more";
    log_warning(detail::concat("Megatron-LM checkpoint '", load_dir, "': ", parts, " not converted",
                               resumable(src) ? ""
                                              : " (weights only); start from the import with "
                                                "--finetune, or --no-load-optim --no-load-rng"));
  }
}

// The optimizer buffers of the checkpoint `reader` indexes as full f32 tensors of `expected`'s
// parameters (ModelT at TP 1): buffer name → parameter name → tensor; empty without optimizer
// state. The master weights come with them only from a run that kept them (bf16 / fp16).
std::map<std::string, TensorMap> read_full_optimizer_tensors(const CheckpointShardReader& reader,
                                                             ParameterStore& expected,
                                                             bool with_masters) {
  std::map<std::string, Tensor> flat;
  for (const std::string& name : reader.optimizer_buffer_names())
    if (name != kMasterWeightsBuffer || with_masters)
      flat[name] = Tensor::zeros({expected.flat_values().numel()}, DType::F32);
  if (flat.empty()) return {};
  if (with_masters && !flat.count(kMasterWeightsBuffer))
    flat[kMasterWeightsBuffer] = Tensor::zeros({expected.flat_values().numel()}, DType::F32);
  read_parameters(reader, expected, &flat);
  std::map<std::string, TensorMap> full;
  for (const auto& [buffer, values] : flat)
    for (const Parameter& p : expected.params())
      full[buffer][p.spec.name] =
          values.slice(0, p.flat_offset, p.flat_offset + shape_numel(p.spec.full_shape))
              .view(p.spec.full_shape);
  return full;
}

template <typename ConfigT>
void export_megatron_lm(const std::string& load_dir, int64_t iteration, const std::string& save_dir,
                        int target_tp, int target_pp, MegatronLmNaming naming) {
  using ModelT = ModelOf<ConfigT>;
  constexpr bool bert = std::is_same_v<ConfigT, BertConfig>;
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  MT_REQUIRE(target_pp >= 1, "--target-pipeline-parallel-size must be >= 1, got ", target_pp);
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const std::string& dir = reader.iteration_dir();
  ConfigT source;
  if constexpr (bert) {
    MT_REQUIRE(state.contains("model") && state["model"].contains("num_tokentypes"), "checkpoint '",
               dir,
               "' is not a BERT checkpoint (its state.json has no model.num_tokentypes): export "
               "it with --model-type gpt");
    source = bert_config_from_checkpoint_state(state, dir);
  } else {
    MT_REQUIRE(!state.contains("model") || !state["model"].contains("num_tokentypes"),
               "checkpoint '", dir, "' is a BERT checkpoint: export it with --model-type bert");
    source = gpt_config_from_checkpoint_state(state, dir);
  }
  check_megatron_lm_exportable(source, "checkpoint '" + dir + "'");
  check_pipeline_split({.num_layers = source.num_layers, .pipeline_size = target_pp});
  ParameterStore whole = registered_parameter_store<ModelT>(source, 0, 1);
  const TensorMap full = read_full_model_tensors(reader, whole);
  nlohmann::json args = state.value("args", nlohmann::json::object());
  const bool mixed_precision = args.value("bf16", false) || args.value("fp16", false);
  // The training state crosses when the checkpoint holds it (a save of a training run).
  const bool training_state = state.contains("optimizer") && state.contains("scheduler") &&
                              !reader.optimizer_buffer_names().empty();
  const std::map<std::string, TensorMap> optimizer =
      training_state ? read_full_optimizer_tensors(reader, whole, mixed_precision)
                     : std::map<std::string, TensorMap>{};
  const int divisible_by = args.value("make_vocab_size_divisible_by", 128);
  ConfigT target = source;
  target.padded_vocab_size = padded_vocab_size(source.vocab_size, divisible_by, target_tp);
  const TensorMap padded = repad_vocabulary(full, target);
  std::map<std::string, TensorMap> padded_optimizer;
  for (const auto& [buffer, tensors] : optimizer)
    padded_optimizer[buffer] = repad_vocabulary(tensors, target);
  const int64_t it = state.value("iteration", int64_t(0));
  // A --use-distributed-optimizer run's state is saved as Megatron's DistributedOptimizer saves
  // it (checkpoint/megatron_lm_distrib_optim.h), which is what such a Megatron-LM run loads.
  const bool distributed_optimizer = args.value("use_distributed_optimizer", false);

  args.update(state["model"]);
  args["padded_vocab_size"] = target.padded_vocab_size;
  args["vocab_size"] = target.vocab_size;
  args["make_vocab_size_divisible_by"] = divisible_by;
  args["tensor_model_parallel_size"] = target_tp;
  args["pipeline_model_parallel_size"] = target_pp;
  args["iteration"] = it;
  args["seq_length"] = args.value("seq_length", target.seq_length);
  args["ckpt_format"] = "torch";
  if (training_state) {
    args["consumed_train_samples"] = state.value("consumed_train_samples", int64_t(0));
    args["consumed_valid_samples"] = state.value("consumed_valid_samples", int64_t(0));
  }
  if constexpr (bert) {
    args["bert_binary_head"] = target.binary_head;
    args["add_position_embedding"] = true;
  } else {
    // Megatron-LM compares these with its flags when it resumes (check_checkpoint_args).
    args["add_position_embedding"] =
        target.arch.position_embedding == PositionEmbedding::kLearnedAbsolute;
  }
  const nlohmann::json tokenizer = state.value("tokenizer", nlohmann::json::object());
  if (tokenizer.is_object() && tokenizer.contains("type"))
    args["tokenizer_type"] = tokenizer["type"];

  CheckpointTransaction transaction(save_dir, it, conversion_nonce());
  for (int pp = 0; pp < target_pp; ++pp) {
    const StageRange stage =
        stage_range({.num_layers = target.num_layers, .pipeline_size = target_pp}, pp, 0);
    for (int tp = 0; tp < target_tp; ++tp) {
      ParameterStore store = registered_parameter_store<ModelT>(target, tp, target_tp, stage);
      auto stage_tensors = [&](const TensorMap& tensors) {
        TensorMap out;
        for (const Parameter& p : store.params()) out[p.spec.name] = tensors.at(p.spec.name);
        return out;
      };
      assign_from_full_tensors(stage_tensors(padded), store);
      const MegatronLmModelEntry model =
          megatron_lm_model_entry(store, naming, stage.first_layer, kFamilyOf<ConfigT>);
      PyValue root = PyValue::dict();
      PyDict& d = root.as_dict("");
      d.set(PyValue::str("args"), megatron_lm_args_namespace(args));
      d.set(PyValue::str("checkpoint_version"), PyValue::real(3.0));
      d.set(PyValue::str("iteration"), PyValue::integer(it));
      d.set(PyValue::str("model"), model.model);
      PyValue distrib_optim;  // the distributed optimizer's state file, when it has one
      if (training_state) {
        // Each buffer's slices of this rank, as the model's values are sliced.
        std::map<std::string, std::map<std::string, Tensor>> rank_buffers;
        std::vector<ParameterStore> buffer_stores;
        buffer_stores.reserve(padded_optimizer.size());
        for (const auto& [buffer, tensors] : padded_optimizer) {
          buffer_stores.push_back(registered_parameter_store<ModelT>(target, tp, target_tp, stage));
          assign_from_full_tensors(stage_tensors(tensors), buffer_stores.back());
          for (const Parameter& p : buffer_stores.back().params())
            rank_buffers[buffer][p.spec.name] = p.value;
        }
        if (distributed_optimizer) {
          d.set(PyValue::str("optimizer"), megatron_lm_distributed_optimizer_entry(state, args));
          distrib_optim =
              megatron_lm_distrib_optim_file(model.order, pp, target_pp, rank_buffers, args);
        } else {
          d.set(PyValue::str("optimizer"),
                megatron_lm_optimizer_entry(model.order, rank_buffers, state, args));
        }
        d.set(PyValue::str("opt_param_scheduler"), megatron_lm_scheduler_entry(state, dir));
      }
      d.set(PyValue::str("num_floating_point_operations_so_far"), PyValue::integer(0));
      const std::string rank_dir = transaction.path() + "/" + rank_dir_name(tp, pp, target_pp);
      std::filesystem::create_directories(rank_dir);
      torch_save(rank_dir + "/" + kMegatronLmTorchFileName, root);
      if (!distrib_optim.is_none())
        torch_save(rank_dir + "/" + kMegatronLmDistribOptimFileName, distrib_optim);
      fsync_directory(rank_dir);
    }
  }
  transaction.commit();
}

}  // namespace

void check_megatron_lm_exportable(const GptConfig& config, const std::string& what) {
  MT_REQUIRE(!config.arch.moe.enabled(), what,
             " is a mixture-of-experts model: its export to Megatron-LM's format is not "
             "implemented (the experts' parameter names are not mapped); keep it in "
             "megatron-cpp's format");
  MT_REQUIRE(!config.arch.mla.enabled, what,
             " is a multi-latent-attention model: its export to Megatron-LM's format is not "
             "implemented (MLA's parameter names and layouts are not mapped); keep it in "
             "megatron-cpp's format");
  MT_REQUIRE(!config.arch.mtp.enabled(), what,
             " has multi-token prediction (--mtp-num-layers): its export to Megatron-LM's "
             "format is not implemented (the depths' Megatron-Core names and the MTP stage's "
             "embedding copy are not written); keep it in megatron-cpp's format");
}

void check_megatron_lm_exportable(const BertConfig& config, const std::string& what) {
  MT_REQUIRE(!config.post_layernorm(), what,
             " is a post-LayerNorm BERT (--post-layernorm, or an HF BertForPreTraining "
             "import): Megatron-LM's BERT is pre-LayerNorm, so it has no Megatron-LM "
             "counterpart; keep it in megatron-cpp's format or export it to HF");
}

void import_megatron_lm_gpt(const std::string& load_dir, int64_t iteration,
                            const std::string& save_dir, int target_tp, int64_t vocab_size) {
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  const MegatronLmSource<GptConfig> src =
      is_megatron_lm_torch_dist_dir(checkpoint_iteration_dir(load_dir, iteration))
          ? read_torch_dist_format(load_dir, iteration, vocab_size)
          : read_torch_format<GptConfig>(load_dir, iteration, vocab_size);
  write_import(src, load_dir, save_dir, target_tp);
}

void import_megatron_lm_bert(const std::string& load_dir, int64_t iteration,
                             const std::string& save_dir, int target_tp, int64_t vocab_size) {
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  MT_REQUIRE(!is_megatron_lm_torch_dist_dir(checkpoint_iteration_dir(load_dir, iteration)),
             "Megatron-LM checkpoint '", load_dir,
             "' is a BERT in the torch_dist format, which megatron-cpp does not read yet (its "
             "torch format is read: save it with --ckpt-format torch)");
  write_import(read_torch_format<BertConfig>(load_dir, iteration, vocab_size), load_dir, save_dir,
               target_tp);
}

void export_megatron_lm_gpt(const std::string& load_dir, int64_t iteration,
                            const std::string& save_dir, int target_tp, int target_pp,
                            MegatronLmNaming naming) {
  export_megatron_lm<GptConfig>(load_dir, iteration, save_dir, target_tp, target_pp, naming);
}

void export_megatron_lm_bert(const std::string& load_dir, int64_t iteration,
                             const std::string& save_dir, int target_tp, int target_pp,
                             MegatronLmNaming naming) {
  export_megatron_lm<BertConfig>(load_dir, iteration, save_dir, target_tp, target_pp, naming);
}

void export_megatron_lm_gpt_torch_dist(const std::string& load_dir, int64_t iteration,
                                       const std::string& save_dir, int target_tp, int target_pp) {
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  MT_REQUIRE(target_pp >= 1, "--target-pipeline-parallel-size must be >= 1, got ", target_pp);
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  nlohmann::json state = reader.state(0, 0);
  const std::string& dir = reader.iteration_dir();
  const GptConfig source = gpt_config_from_checkpoint_state(state, dir);
  const PipelineSplit split{.num_layers = source.num_layers, .pipeline_size = target_pp};
  check_pipeline_split(split);
  const int divisible_by =
      state.value("args", nlohmann::json::object()).value("make_vocab_size_divisible_by", 128);
  GptConfig target = source;
  target.padded_vocab_size = padded_vocab_size(source.vocab_size, divisible_by, target_tp);
  state["model"]["padded_vocab_size"] = target.padded_vocab_size;
  state["model"]["vocab_size"] = target.vocab_size;
  const int64_t it = state.value("iteration", int64_t(0));

  CheckpointTransaction transaction(save_dir, it, conversion_nonce());
  std::vector<DcpWrittenItem> items;
  PyValue common;
  for (int pp = 0; pp < target_pp; ++pp) {
    for (int tp = 0; tp < target_tp; ++tp) {
      ParameterStore store =
          registered_parameter_store<GptModel>(target, tp, target_tp, stage_range(split, pp, 0));
      const std::string unwritable =
          megatron_lm_torch_dist_unwritable(store, reader.optimizer_buffer_names());
      MT_REQUIRE(unwritable.empty(), "--ckpt-format torch_dist: ", unwritable,
                 "; convert to the torch format (leave out --ckpt-format) or keep megatron-cpp's");
      check_checkpoint_matches(reader, store, target_pp == 1);
      std::map<std::string, Tensor> optimizer;
      for (const std::string& buffer : reader.optimizer_buffer_names())
        optimizer[buffer] = Tensor::zeros({store.flat_values().numel()}, DType::F32);
      read_parameters(reader, store, &optimizer);
      TorchDistWrites writes;
      writes.per_layer_keys = megatron_core_per_layer_keys(target.arch.moe);
      writes.mla = target.arch.mla;
      const std::vector<DcpChunkToWrite> chunks =
          megatron_lm_torch_dist_chunks(store, optimizer, {}, target.num_layers, writes);
      const std::string file = "__" + std::to_string(pp * target_tp + tp) + "_0.distcp";
      for (DcpWrittenItem& i : write_dcp_data_file(transaction.path(), file, chunks, {}))
        items.push_back(std::move(i));
      if (pp == 0 && tp == 0)
        common = megatron_lm_torch_dist_common_state(state, store, target_tp, target_pp,
                                                     optimizer.count(kMasterWeightsBuffer));
    }
  }
  write_megatron_lm_torch_dist_common(transaction.path(), common);
  const std::string final_dir =
      std::filesystem::absolute(save_dir + "/" + iteration_dir_name(it)).string();
  const std::string& tmp = transaction.path();
  write_dcp_metadata(tmp, items, final_dir, tmp.substr(tmp.rfind(".tmp-") + 5));
  transaction.commit();
}

}  // namespace megatron
