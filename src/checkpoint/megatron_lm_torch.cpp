#include "checkpoint/megatron_lm_torch.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "core/error.h"
#include "core/torch_file.h"

namespace megatron {

namespace {

// Layer-local parameter suffixes: megatron-cpp's, legacy Megatron's (and its older
// spellings, read only), Megatron-Core's with Transformer Engine's fused norms (and the local
// spec's, read only).
struct LayerName {
  const char* ours;
  const char* legacy;
  const char* core;
  std::vector<const char*> legacy_aliases, core_aliases;
};
const std::vector<LayerName>& layer_names() {
  static const std::vector<LayerName> names = {
      {"input_layernorm.weight",
       "input_norm.weight",
       "self_attention.linear_qkv.layer_norm_weight",
       {"input_layernorm.weight"},
       {"input_layernorm.weight"}},
      {"input_layernorm.bias",
       "input_norm.bias",
       "self_attention.linear_qkv.layer_norm_bias",
       {"input_layernorm.bias"},
       {"input_layernorm.bias"}},
      {"self_attention.query_key_value.weight",
       "self_attention.query_key_value.weight",
       "self_attention.linear_qkv.weight",
       {"attention.query_key_value.weight"},
       {}},
      {"self_attention.query_key_value.bias",
       "self_attention.query_key_value.bias",
       "self_attention.linear_qkv.bias",
       {"attention.query_key_value.bias"},
       {}},
      {"self_attention.dense.weight",
       "self_attention.dense.weight",
       "self_attention.linear_proj.weight",
       {"attention.dense.weight"},
       {}},
      {"self_attention.dense.bias",
       "self_attention.dense.bias",
       "self_attention.linear_proj.bias",
       {"attention.dense.bias"},
       {}},
      {"post_attention_layernorm.weight",
       "post_attention_norm.weight",
       "mlp.linear_fc1.layer_norm_weight",
       {"post_attention_layernorm.weight"},
       {"pre_mlp_layernorm.weight"}},
      {"post_attention_layernorm.bias",
       "post_attention_norm.bias",
       "mlp.linear_fc1.layer_norm_bias",
       {"post_attention_layernorm.bias"},
       {"pre_mlp_layernorm.bias"}},
      {"mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.weight", "mlp.linear_fc1.weight", {}, {}},
      {"mlp.dense_h_to_4h.bias", "mlp.dense_h_to_4h.bias", "mlp.linear_fc1.bias", {}, {}},
      {"mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.weight", "mlp.linear_fc2.weight", {}, {}},
      {"mlp.dense_4h_to_h.bias", "mlp.dense_4h_to_h.bias", "mlp.linear_fc2.bias", {}, {}},
  };
  return names;
}

// Transformer Engine modules whose `_extra_state` a Megatron-Core layer saves.
constexpr const char* kCoreExtraStates[] = {
    "self_attention.core_attention", "self_attention.linear_proj", "self_attention.linear_qkv",
    "mlp.linear_fc1", "mlp.linear_fc2"};

// "layers.<j>.<rest>" → (j, rest), or nullopt.
std::optional<std::pair<int, std::string>> split_layer(const std::string& name) {
  static const std::regex pattern(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  return std::make_pair(std::stoi(m[1].str()), m[2].str());
}

const PyValue& entry(const PyDict& d, const char* key, const std::string& path, const char* where) {
  const PyValue* v = d.find(key);
  MT_REQUIRE(v, "Megatron-LM checkpoint '", path, "' has no \"", key, "\" in ", where);
  return *v;
}

Tensor tensor_of(const PyValue& v, const std::string& path, const std::string& key) {
  return v.as_tensor("entry '" + key + "' of Megatron-LM checkpoint '" + path + "'").data;
}

}  // namespace

std::string megatron_lm_layer_name(const std::string& suffix, MegatronLmNaming naming) {
  for (const LayerName& n : layer_names()) {
    std::vector<const char*> spellings = {naming == MegatronLmNaming::kLegacy ? n.legacy : n.core};
    const auto& aliases = naming == MegatronLmNaming::kLegacy ? n.legacy_aliases : n.core_aliases;
    spellings.insert(spellings.end(), aliases.begin(), aliases.end());
    for (const char* s : spellings)
      if (suffix == s) return n.ours;
  }
  return "";
}

std::string megatron_lm_layer_suffix(const std::string& ours, MegatronLmNaming naming) {
  for (const LayerName& n : layer_names())
    if (ours == n.ours) return naming == MegatronLmNaming::kLegacy ? n.legacy : n.core;
  return "";
}

bool is_megatron_lm_torch_checkpoint(const std::string& load_dir) {
  const std::optional<int64_t> iteration = read_latest_iteration(load_dir);
  if (!iteration) return false;
  const std::filesystem::path dir =
      std::filesystem::path(load_dir) / iteration_dir_name(*iteration);
  if (!std::filesystem::is_directory(dir)) return false;
  static const std::regex rank(R"(mp_rank_\d{2}(_\d{3})?)");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_directory() && std::regex_match(e.path().filename().string(), rank) &&
        std::filesystem::exists(e.path() / kMegatronLmTorchFileName))
      return true;
  return false;
}

const PyValue& MegatronLmCheckpoint::args() const {
  return entry(ranks.front().root.as_dict(""), "args", ranks.front().path, "the saved dict");
}

MegatronLmCheckpoint read_megatron_lm_checkpoint(const std::string& load_dir, int64_t iteration) {
  MegatronLmCheckpoint ckpt;
  ckpt.iteration_dir = checkpoint_iteration_dir(load_dir, iteration);
  for (const RankDir& d : list_rank_dirs(ckpt.iteration_dir, RankDirFormat::kMegatronLmTorch)) {
    const std::string path = d.path + "/" + kMegatronLmTorchFileName;
    ckpt.ranks.push_back({d.tp_rank, d.pp_rank, path, torch_load(path)});
    ckpt.tp_size = std::max(ckpt.tp_size, d.tp_rank + 1);
    ckpt.pp_size = std::max(ckpt.pp_size, d.pp_rank + 1);
  }
  for (size_t i = 0; i < ckpt.ranks.size(); ++i) {
    const MegatronLmRank& r = ckpt.ranks[i];
    const PyDict& root =
        r.root.as_dict("the object saved in Megatron-LM checkpoint '" + r.path + "'");
    const std::string where = "Megatron-LM checkpoint '" + r.path + "'";
    MT_REQUIRE(!root.find("model0"), where,
               " holds several model chunks (model0, model1, ...: a run with "
               "--num-layers-per-virtual-pipeline-stage); only one chunk per rank is supported");
    const PyValue* it = root.find("iteration");
    const int64_t iter = it ? it->as_int("\"iteration\" of " + where)
                            : entry(root, "total_iters", r.path, "the saved dict")
                                  .as_int("\"total_iters\" of " + where);
    const PyValue* version = root.find("checkpoint_version");
    const double v = version ? version->as_float("\"checkpoint_version\" of " + where) : 0.0;
    MT_REQUIRE(v == 0 || v == 1 || v == 2 || v == 3, where, " has checkpoint_version ", v,
               "; versions 0 to 3 are known");
    const PyDict& args =
        entry(root, "args", r.path, "the saved dict").as_dict("\"args\" of " + where);
    const int64_t tp = entry(args, "tensor_model_parallel_size", r.path, "its args")
                           .as_int("args.tensor_model_parallel_size of " + where);
    const PyValue* pp_value = args.find("pipeline_model_parallel_size");
    const int64_t pp = pp_value ? pp_value->as_int("args.pipeline_model_parallel_size") : 1;
    if (i == 0) {
      ckpt.iteration = iter;
      ckpt.checkpoint_version = v;
      const PyDict& model =
          entry(root, "model", r.path, "the saved dict").as_dict("\"model\" of " + where);
      ckpt.naming =
          model.find("language_model") ? MegatronLmNaming::kLegacy : MegatronLmNaming::kCore;
    }
    MT_REQUIRE(iter == ckpt.iteration && v == ckpt.checkpoint_version, where, " is iteration ",
               iter, " (checkpoint_version ", v, "), ", ckpt.ranks[0].path, " iteration ",
               ckpt.iteration, " (checkpoint_version ", ckpt.checkpoint_version,
               "): the rank files come from different saves");
    MT_REQUIRE(tp == ckpt.tp_size && pp == ckpt.pp_size, where, " was saved by a run of ", tp,
               " tensor x ", pp, " pipeline ranks, but '", ckpt.iteration_dir, "' holds ",
               ckpt.tp_size, " x ", ckpt.pp_size,
               " rank directories (a rank directory is missing or left over)");
  }
  return ckpt;
}

nlohmann::json megatron_lm_args_json(const PyValue& args) {
  std::function<nlohmann::json(const PyValue&)> convert = [&](const PyValue& v) -> nlohmann::json {
    switch (v.kind()) {
      case PyValue::Kind::kNone:
        return nullptr;
      case PyValue::Kind::kBool:
        return v.as_bool("");
      case PyValue::Kind::kInt:
        return v.as_int("");
      case PyValue::Kind::kFloat:
        return v.as_float("");
      case PyValue::Kind::kStr:
        return v.as_str("");
      case PyValue::Kind::kList:
      case PyValue::Kind::kTuple: {
        nlohmann::json a = nlohmann::json::array();
        for (const PyValue& item : v.as_sequence("")) a.push_back(convert(item));
        return a;
      }
      case PyValue::Kind::kGlobal:
        return v.as_global("").qualified();
      case PyValue::Kind::kObject: {  // an enum member: getattr(Class, name) or Class(value)
        const PyObject& o = v.as_object("");
        if (o.type.name == "getattr" && o.args.size() == 2)
          return o.args[0].as_global("").name + "." + o.args[1].as_str("");
        if (o.args.size() == 1 && o.args[0].kind() == PyValue::Kind::kStr)
          return o.type.name + "." + o.args[0].as_str("");
        return o.args.size() == 1 ? convert(o.args[0]) : nlohmann::json(o.type.qualified());
      }
      default:
        return v.describe();  // dicts, tensors, bytes: recorded by kind only
    }
  };
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : args.as_dict("Megatron-LM's args").items)
    if (k.kind() == PyValue::Kind::kStr) j[k.as_str("")] = convert(v);
  const bool bias = j.value("add_bias_linear", true);
  j["disable_bias_linear"] = !bias;
  // Megatron fills in what megatron-cpp leaves at 0/false when implied: the head dim
  // (kv_channels = hidden / heads) and QKV biases (add_qkv_bias with linear biases).
  if (j.value("kv_channels", int64_t(0)) * j.value("num_attention_heads", int64_t(0)) ==
      j.value("hidden_size", int64_t(-1)))
    j["kv_channels"] = 0;
  if (bias) j["add_qkv_bias"] = false;
  // Megatron's fused bias-GeLU (the default with biases) computes the tanh approximation.
  const bool fused_gelu = j.value("bias_gelu_fusion", false) && bias && !j.value("swiglu", false);
  j["openai_gelu"] = j.value("openai_gelu", false) || fused_gelu;
  return j;
}

PyValue megatron_lm_args_namespace(const nlohmann::json& args) {
  std::function<PyValue(const nlohmann::json&)> convert = [&](const nlohmann::json& j) {
    if (j.is_null()) return PyValue();
    if (j.is_boolean()) return PyValue::boolean(j.get<bool>());
    if (j.is_number_integer()) return PyValue::integer(j.get<int64_t>());
    if (j.is_number()) return PyValue::real(j.get<double>());
    if (j.is_string()) return PyValue::str(j.get<std::string>());
    if (j.is_array()) {
      std::vector<PyValue> items;
      for (const nlohmann::json& item : j) items.push_back(convert(item));
      return PyValue::list(std::move(items));
    }
    return PyValue::str(j.dump());  // nested records: their JSON text
  };
  PyValue ns = PyValue::dict(PyDict::Kind::kNamespace);
  PyDict& d = ns.as_dict("");
  for (const auto& [k, v] : args.items()) {
    if (k == "disable_bias_linear") continue;
    d.set(PyValue::str(k), convert(v));
  }
  d.set(PyValue::str("add_bias_linear"),
        PyValue::boolean(!args.value("disable_bias_linear", false)));
  // What megatron-cpp leaves implied, Megatron-LM's arguments spell out.
  const int64_t heads = args.value("num_attention_heads", int64_t(1));
  if (args.value("kv_channels", int64_t(0)) == 0 && args.contains("hidden_size"))
    d.set(PyValue::str("kv_channels"),
          PyValue::integer(args["hidden_size"].get<int64_t>() / heads));
  if (!args.value("group_query_attention", false))
    d.set(PyValue::str("num_query_groups"), PyValue::integer(heads));
  // megatron-cpp's "openai_gelu" is the GeLU form itself; Megatron's fused bias-GeLU would
  // turn an erf model into tanh, so it is off.
  d.set(PyValue::str("openai_gelu"), PyValue::boolean(args.value("openai_gelu", true)));
  d.set(PyValue::str("bias_gelu_fusion"), PyValue::boolean(false));
  const char* dtype = args.value("bf16", false)   ? "bfloat16"
                      : args.value("fp16", false) ? "float16"
                                                  : "float32";
  d.set(PyValue::str("params_dtype"), PyValue::global("torch", dtype));
  return ns;
}

MegatronLmFamily megatron_lm_model_family(const MegatronLmRank& rank) {
  const PyDict& model = entry(rank.root.as_dict(""), "model", rank.path, "the saved dict")
                            .as_dict("\"model\" of Megatron-LM checkpoint '" + rank.path + "'");
  for (const auto& [k, v] : model.items) {
    if (k.kind() != PyValue::Kind::kStr) continue;
    const std::string key = k.as_str("");
    if (key == "lm_head" || key == "binary_head") return MegatronLmFamily::kBert;
    if (key == "language_model" && v.kind() == PyValue::Kind::kDict) {
      const PyDict& lm = v.as_dict("");
      if (lm.find("pooler")) return MegatronLmFamily::kBert;
      if (const PyValue* e = lm.find("embedding"); e && e->kind() == PyValue::Kind::kDict)
        if (e->as_dict("").find("tokentype_embeddings")) return MegatronLmFamily::kBert;
    }
    for (const char* bert : {"encoder.", "lm_head.", "binary_head.", "pooler.",
                             "embedding.tokentype_embeddings.", "output_layer.bias"})
      if (key.rfind(bert, 0) == 0) return MegatronLmFamily::kBert;
  }
  return MegatronLmFamily::kGpt;
}

namespace {

// BERT's head entries: Megatron's name inside its module (legacy: the module's flat dict;
// core: the full key) → megatron-cpp's.
struct BertHeadName {
  const char* legacy_module;
  const char* legacy;
  const char* core;
  const char* ours;
};
// In Megatron's parameter order within each module (the legacy BertLMHead registers its bias
// before its dense layer and norm).
constexpr BertHeadName kBertHeadNames[] = {
    {"pooler", "dense.weight", "pooler.dense.weight", "pooler.dense.weight"},
    {"pooler", "dense.bias", "pooler.dense.bias", "pooler.dense.bias"},
    {"lm_head", "bias", "output_layer.bias", "lm_head.bias"},
    {"lm_head", "dense.weight", "lm_head.dense.weight", "lm_head.dense.weight"},
    {"lm_head", "dense.bias", "lm_head.dense.bias", "lm_head.dense.bias"},
    {"lm_head", "norm.weight", "lm_head.layer_norm.weight", "lm_head.layernorm.weight"},
    {"lm_head", "norm.bias", "lm_head.layer_norm.bias", "lm_head.layernorm.bias"},
    {"binary_head", "weight", "binary_head.weight", "binary_head.weight"},
    {"binary_head", "bias", "binary_head.bias", "binary_head.bias"},
};

// megatron-cpp's name of a legacy BERT head entry `key` of `module` ("" when none): the older
// `layernorm` spelling of the LM head's norm is read too.
std::string legacy_bert_head_name(const std::string& module, std::string key) {
  if (module == "lm_head" && key.rfind("layernorm.", 0) == 0) key = "norm." + key.substr(10);
  for (const BertHeadName& n : kBertHeadNames)
    if (module == n.legacy_module && key == n.legacy) return n.ours;
  return "";
}

// The transformer block's key prefix in Megatron-Core's naming: GPTModel's `decoder`,
// BertModel's `encoder`.
std::string core_block_prefix(MegatronLmFamily family) {
  return family == MegatronLmFamily::kBert ? "encoder." : "decoder.";
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> megatron_lm_rank_parameters(const MegatronLmRank& rank,
                                                                        MegatronLmNaming naming,
                                                                        int first_layer,
                                                                        bool tied_embeddings,
                                                                        MegatronLmFamily family) {
  const std::string& path = rank.path;
  const bool bert = family == MegatronLmFamily::kBert;
  const char* model_kind = bert ? "a BERT model" : "a GPT model";
  const PyDict& model = entry(rank.root.as_dict(""), "model", path, "the saved dict")
                            .as_dict("\"model\" of Megatron-LM checkpoint '" + path + "'");
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& ours, const PyValue& v, const std::string& key) {
    MT_REQUIRE(ours.empty() || seen.insert(ours).second, "Megatron-LM checkpoint '", path,
               "' holds ", ours, " twice (the last one under '", key, "')");
    out.emplace_back(ours, tensor_of(v, path, key));
  };
  // A layer entry "layers.<j>.<suffix>" in one naming, or an Error naming it.
  auto add_layer = [&](const std::string& key, const std::string& name, const PyValue& v) {
    const auto layer = split_layer(name);
    if (layer) {
      const std::string ours = megatron_lm_layer_name(layer->second, naming);
      if (!ours.empty()) {
        add("layers." + std::to_string(first_layer + layer->first) + "." + ours, v, key);
        return;
      }
    }
    MT_THROW("Megatron-LM checkpoint '", path, "' holds '", key, "', which no ",
             bert ? "BERT" : "GPT-family",
             " model of megatron-cpp has (MoE and multi-token prediction checkpoints are not "
             "read yet)");
  };
  if (naming == MegatronLmNaming::kLegacy) {
    // Megatron's parameter order: the language model, the last stage's embedding copy, BERT's
    // heads; the dict may have been saved in another order.
    const std::vector<std::string> modules =
        bert ? std::vector<std::string>{"language_model", "word_embeddings_for_head", "lm_head",
                                        "binary_head"}
             : std::vector<std::string>{"language_model", "word_embeddings_for_head"};
    for (const auto& [k, v] : model.items) {
      const std::string key = k.as_str("a model key");
      MT_REQUIRE(std::find(modules.begin(), modules.end(), key) != modules.end(),
                 "Megatron-LM checkpoint '", path, "' holds model entry '", key, "', which ",
                 model_kind, " does not have",
                 !bert && (key == "lm_head" || key == "binary_head")
                     ? " (a BERT checkpoint: convert it with --model-type bert)"
                     : "");
    }
    for (const std::string& module : modules) {
      const PyValue* v = model.find(module);
      if (!v) continue;
      if (module == "word_embeddings_for_head") {  // the last stage's copy
        add("", entry(v->as_dict(module), "weight", path, module.c_str()), module + ".weight");
        continue;
      }
      if (module == "lm_head" || module == "binary_head") {
        for (const auto& [k2, t] : v->as_dict(module).items) {
          const std::string key = k2.as_str("a model key");
          const std::string ours = legacy_bert_head_name(module, key);
          MT_REQUIRE(!ours.empty(), "Megatron-LM checkpoint '", path, "' holds ", module, ".", key,
                     ", which a BERT model does not have");
          add(ours, t, module + "." + key);
        }
        continue;
      }
      for (const auto& [k2, part] : v->as_dict(module).items) {
        const std::string sub = k2.as_str("a model key");
        const std::string where = "language_model." + sub;
        if (sub == "embedding") {
          for (const auto& [k3, table] : part.as_dict(where).items) {
            const std::string e = k3.as_str("an embedding key");
            MT_REQUIRE(e == "word_embeddings" || e == "position_embeddings" ||
                           (bert && e == "tokentype_embeddings"),
                       "Megatron-LM checkpoint '", path, "' holds ", where, ".", e, ", which ",
                       model_kind, " does not have",
                       e == "tokentype_embeddings"
                           ? " (a BERT checkpoint: convert it with --model-type bert)"
                           : "");
            add("embedding." + e + ".weight",
                entry(table.as_dict(where + "." + e), "weight", path, e.c_str()),
                where + "." + e + ".weight");
          }
        } else if (sub == "encoder" || sub == "transformer") {
          for (const auto& [k3, t] : part.as_dict(where).items) {
            const std::string name = k3.as_str("an encoder key");
            if (name == "final_norm.weight" || name == "final_layernorm.weight")
              add("final_layernorm.weight", t, where + "." + name);
            else if (name == "final_norm.bias" || name == "final_layernorm.bias")
              add("final_layernorm.bias", t, where + "." + name);
            else
              add_layer(where + "." + name, name, t);
          }
        } else if (sub == "output_layer" && !bert) {
          add("output_layer.weight", entry(part.as_dict(where), "weight", path, "output_layer"),
              where + ".weight");
        } else if (sub == "pooler" && bert) {
          for (const auto& [k3, t] : part.as_dict(where).items) {
            const std::string key = k3.as_str("a pooler key");
            const std::string ours = legacy_bert_head_name("pooler", key);
            MT_REQUIRE(!ours.empty(), "Megatron-LM checkpoint '", path, "' holds ", where, ".", key,
                       ", which a BERT model does not have");
            add(ours, t, where + "." + key);
          }
        } else {
          MT_THROW(
              "Megatron-LM checkpoint '", path, "' holds ", where, ", which ", model_kind,
              " does not have",
              sub == "pooler" ? " (a BERT checkpoint: convert it with --model-type bert)" : "");
        }
      }
    }
    return out;
  }
  const std::string block = core_block_prefix(family);
  for (const auto& [k, v] : model.items) {
    const std::string key = k.as_str("a model key");
    if (key.ends_with("._extra_state")) continue;
    std::string head;
    if (bert)
      for (const BertHeadName& n : kBertHeadNames)
        if (key == n.core) head = n.ours;
    if (!head.empty()) {
      add(head, v, key);
    } else if (key == "embedding.word_embeddings.weight" ||
               key == "embedding.position_embeddings.weight" ||
               (bert && key == "embedding.tokentype_embeddings.weight")) {
      add(key, v, key);
    } else if (key == block + "final_layernorm.weight" || key == block + "final_layernorm.bias") {
      add(key.substr(block.size()), v, key);
    } else if (key == "output_layer.weight") {
      // tied: the last stage's copy of the embedding (BERT's always is)
      add(tied_embeddings || bert ? "" : key, v, key);
    } else if (key.rfind(block, 0) == 0) {
      add_layer(key, key.substr(block.size()), v);
    } else {
      MT_THROW("Megatron-LM checkpoint '", path, "' holds '", key, "', which no ",
               bert ? "BERT" : "GPT-family", " model of megatron-cpp has",
               !bert && megatron_lm_model_family(rank) == MegatronLmFamily::kBert
                   ? " (a BERT checkpoint: convert it with --model-type bert)"
                   : "");
    }
  }
  return out;
}

MegatronLmModelEntry megatron_lm_model_entry(const ParameterStore& store, MegatronLmNaming naming,
                                             int first_layer, MegatronLmFamily family) {
  const bool legacy = naming == MegatronLmNaming::kLegacy;
  const bool bert = family == MegatronLmFamily::kBert;
  // Each parameter's Megatron name and its place in Megatron's parameter order: the module
  // (`group`), then Megatron's order inside a BERT head or the transformer block (`within`),
  // else the store's. Megatron-Core's SelfAttention registers linear_qkv after its base class
  // Attention registered linear_proj (megatron/core/transformer/attention.py), so a layer's
  // named_parameters — the saved order, and the distributed optimizer's buffer order — have
  // linear_proj first; the legacy ParallelAttention registers query_key_value first.
  struct Slot {
    const Parameter* p;
    std::string name;    // legacy: the name inside its module's dict; core: the full key
    std::string module;  // legacy: "embedding", "encoder", "output_layer", "pooler",
                         // "word_embeddings_for_head", "lm_head", "binary_head"
    int group = 0, within = 0;
  };
  std::vector<Slot> slots;
  const std::string block = core_block_prefix(family);
  for (const Parameter& p : store.params()) {
    const std::string& name = p.spec.name;
    Slot s{&p, "", "", 0, 0};
    if (const auto layer = split_layer(name)) {
      bool found = false;
      for (const LayerName& n : layer_names())
        if (layer->second == n.ours) {
          s.name = (legacy ? "layers." : block + "layers.") +
                   std::to_string(layer->first - first_layer) + "." + (legacy ? n.legacy : n.core);
          found = true;
        }
      MT_REQUIRE(found, "parameter ", name, " has no name in Megatron-LM's checkpoints");
      s.module = "encoder";
      s.group = 1;
      const bool proj_first = !legacy && layer->second.rfind("self_attention.dense.", 0) == 0;
      s.within = 2 * layer->first + (proj_first ? 0 : 1);
    } else if (name == "final_layernorm.weight" || name == "final_layernorm.bias") {
      s.name = legacy ? "final_norm." + name.substr(16) : block + name;
      s.module = "encoder";
      s.group = 1;
      s.within = std::numeric_limits<int>::max();  // after the layers
    } else if (p.spec.stage_tie == StageTie::kCopy) {
      s.name = legacy ? "weight" : "output_layer.weight";
      s.module = "word_embeddings_for_head";
      // legacy: after the language model; core: the output layer (BERT's after its LM head)
      s.group = legacy ? 4 : (bert ? 3 : 2);
    } else if (name.rfind("embedding.", 0) == 0) {
      s.name = legacy ? name.substr(10, name.size() - 17) : name;
      s.module = "embedding";
    } else if (name == "output_layer.weight") {
      s.name = legacy ? "weight" : name;
      s.module = "output_layer";
      s.group = 2;
    } else {
      for (int i = 0; i < int(std::size(kBertHeadNames)); ++i) {
        const BertHeadName& n = kBertHeadNames[i];
        if (!bert || name != n.ours) continue;
        s.module = n.legacy_module;
        s.name = legacy ? n.legacy : n.core;
        s.within = i;
        // legacy: language_model (embedding 0, encoder 1, pooler 2), word_embeddings_for_head
        // 4, lm_head 5, binary_head 6; core: embedding, encoder, lm_head 2, output_layer 3
        // (its bias: lm_head.bias), binary_head 4, pooler 5
        const std::string m = s.module;
        if (legacy)
          s.group = m == "pooler" ? 2 : m == "lm_head" ? 5 : 6;
        else
          s.group = m == "pooler" ? 5 : m == "binary_head" ? 4 : name == "lm_head.bias" ? 3 : 2;
      }
      MT_REQUIRE(!s.module.empty(), "parameter ", name, " has no name in Megatron-LM's ",
                 bert ? "BERT" : "GPT", " checkpoints");
    }
    slots.push_back(std::move(s));
  }
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    return a.group != b.group ? a.group < b.group : a.within < b.within;
  });
  MegatronLmModelEntry out;
  for (const Slot& s : slots) out.order.push_back(s.p);
  auto host = [](const Tensor& t) { return PyValue::tensor(t.to(Device::CPU).clone()); };
  if (!legacy) {
    out.model = PyValue::dict(PyDict::Kind::kOrderedDict);
    PyDict& m = out.model.as_dict("");
    int last_layer = -1;
    auto extra_states = [&](int layer) {
      for (const char* module : kCoreExtraStates)
        m.set(PyValue::str(block + "layers." + std::to_string(layer - first_layer) + "." + module +
                           "._extra_state"),
              PyValue());
    };
    for (const Slot& s : slots) {
      const auto layer = split_layer(s.p->spec.name);
      if (last_layer >= 0 && (!layer || layer->first != last_layer)) extra_states(last_layer);
      last_layer = layer ? layer->first : -1;
      m.set(PyValue::str(s.name), host(s.p->value));
    }
    if (last_layer >= 0) extra_states(last_layer);
    return out;
  }
  // Legacy: nested dicts per module; the saved order is the language model (embedding,
  // encoder, pooler, output layer), BERT's LM head and binary head, then the embedding copy.
  std::map<std::string, PyValue> modules;
  auto module_dict = [&](const std::string& m) -> PyDict& {
    auto it = modules.find(m);
    if (it == modules.end())
      it = modules
               .emplace(m, PyValue::dict(m == "embedding" ? PyDict::Kind::kDict
                                                          : PyDict::Kind::kOrderedDict))
               .first;
    return it->second.as_dict("");
  };
  auto weight_dict = [&](const Parameter& p) {
    PyValue d = PyValue::dict(PyDict::Kind::kOrderedDict);
    d.as_dict("").set(PyValue::str("weight"), host(p.value));
    return d;
  };
  for (const Slot& s : slots) {
    if (s.module == "embedding")
      module_dict("embedding").set(PyValue::str(s.name), weight_dict(*s.p));
    else
      module_dict(s.module).set(PyValue::str(s.name), host(s.p->value));
  }
  out.model = PyValue::dict();
  PyDict& m = out.model.as_dict("");
  PyValue lm = PyValue::dict();
  for (const char* sub : {"embedding", "encoder", "pooler", "output_layer"})
    if (modules.count(sub)) lm.as_dict("").set(PyValue::str(sub), modules.at(sub));
  m.set(PyValue::str("language_model"), lm);
  for (const char* head : {"lm_head", "binary_head", "word_embeddings_for_head"})
    if (modules.count(head)) m.set(PyValue::str(head), modules.at(head));
  return out;
}

}  // namespace megatron
