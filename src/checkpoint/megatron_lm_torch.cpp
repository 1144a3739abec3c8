#include "checkpoint/megatron_lm_torch.h"

#include <filesystem>
#include <functional>
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

std::vector<std::pair<std::string, Tensor>> megatron_lm_rank_parameters(const MegatronLmRank& rank,
                                                                        MegatronLmNaming naming,
                                                                        int first_layer,
                                                                        bool tied_embeddings) {
  const std::string& path = rank.path;
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
    MT_THROW("Megatron-LM checkpoint '", path, "' holds '", key,
             "', which no GPT-family model of megatron-cpp has (BERT, MoE and multi-token "
             "prediction checkpoints are not read yet)");
  };
  if (naming == MegatronLmNaming::kLegacy) {
    for (const auto& [k, v] : model.items) {
      const std::string key = k.as_str("a model key");
      if (key == "word_embeddings_for_head") {  // the last stage's copy
        add("", entry(v.as_dict(key), "weight", path, key.c_str()), key + ".weight");
        continue;
      }
      MT_REQUIRE(key == "language_model", "Megatron-LM checkpoint '", path, "' holds model entry '",
                 key, "', which a GPT model does not have");
      for (const auto& [k2, part] : v.as_dict(key).items) {
        const std::string sub = k2.as_str("a model key");
        const std::string where = "language_model." + sub;
        if (sub == "embedding") {
          for (const auto& [k3, table] : part.as_dict(where).items) {
            const std::string e = k3.as_str("an embedding key");
            MT_REQUIRE(e == "word_embeddings" || e == "position_embeddings",
                       "Megatron-LM checkpoint '", path, "' holds ", where, ".", e,
                       ", which a GPT model does not have (tokentype embeddings: a BERT model, not "
                       "read yet)");
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
        } else if (sub == "output_layer") {
          add("output_layer.weight", entry(part.as_dict(where), "weight", path, "output_layer"),
              where + ".weight");
        } else {
          MT_THROW("Megatron-LM checkpoint '", path, "' holds ", where,
                   ", which a GPT model does not have (a pooler: a BERT model, not read yet)");
        }
      }
    }
    return out;
  }
  for (const auto& [k, v] : model.items) {
    const std::string key = k.as_str("a model key");
    if (key.ends_with("._extra_state")) continue;
    if (key == "embedding.word_embeddings.weight" ||
        key == "embedding.position_embeddings.weight") {
      add(key, v, key);
    } else if (key == "decoder.final_layernorm.weight" || key == "decoder.final_layernorm.bias") {
      add(key.substr(8), v, key);
    } else if (key == "output_layer.weight") {
      add(tied_embeddings ? "" : key, v, key);  // tied: the last stage's copy of the embedding
    } else if (key.rfind("decoder.", 0) == 0) {
      add_layer(key, key.substr(8), v);
    } else {
      MT_THROW("Megatron-LM checkpoint '", path, "' holds '", key,
               "', which no GPT-family model of megatron-cpp has");
    }
  }
  return out;
}

PyValue megatron_lm_model_entry(const ParameterStore& store, MegatronLmNaming naming,
                                int first_layer) {
  auto ours_to_megatron = [&](const Parameter& p) -> std::string {
    const std::string& name = p.spec.name;
    if (const auto layer = split_layer(name)) {
      const std::string suffix = megatron_lm_layer_suffix(layer->second, naming);
      MT_REQUIRE(!suffix.empty(), "parameter ", name, " has no name in Megatron-LM's checkpoints");
      return (naming == MegatronLmNaming::kLegacy ? "layers." : "decoder.layers.") +
             std::to_string(layer->first - first_layer) + "." + suffix;
    }
    if (name == "final_layernorm.weight" || name == "final_layernorm.bias")
      return naming == MegatronLmNaming::kLegacy ? "final_norm." + name.substr(16)
                                                 : "decoder." + name;
    if (p.spec.stage_tie == StageTie::kCopy)
      return naming == MegatronLmNaming::kLegacy ? "word_embeddings_for_head"
                                                 : "output_layer.weight";
    return name;
  };
  auto host = [](const Tensor& t) { return PyValue::tensor(t.to(Device::CPU).clone()); };
  if (naming == MegatronLmNaming::kCore) {
    PyValue model = PyValue::dict(PyDict::Kind::kOrderedDict);
    PyDict& m = model.as_dict("");
    int last_layer = -1;
    auto extra_states = [&](int layer) {
      for (const char* module : kCoreExtraStates)
        m.set(PyValue::str("decoder.layers." + std::to_string(layer - first_layer) + "." + module +
                           "._extra_state"),
              PyValue());
    };
    for (const Parameter& p : store.params()) {
      const auto layer = split_layer(p.spec.name);
      if (last_layer >= 0 && (!layer || layer->first != last_layer)) extra_states(last_layer);
      last_layer = layer ? layer->first : -1;
      m.set(PyValue::str(ours_to_megatron(p)), host(p.value));
    }
    if (last_layer >= 0) extra_states(last_layer);
    return model;
  }
  PyValue model = PyValue::dict();
  PyValue lm = PyValue::dict();
  PyValue embedding = PyValue::dict();
  PyValue encoder = PyValue::dict(PyDict::Kind::kOrderedDict);
  PyValue output_layer;
  auto weight_dict = [&](const Parameter& p) {
    PyValue d = PyValue::dict(PyDict::Kind::kOrderedDict);
    d.as_dict("").set(PyValue::str("weight"), host(p.value));
    return d;
  };
  for (const Parameter& p : store.params()) {
    const std::string name = ours_to_megatron(p);
    if (p.spec.stage_tie == StageTie::kCopy) {
      model.as_dict("").set(PyValue::str(name), weight_dict(p));
    } else if (name.rfind("embedding.", 0) == 0) {
      embedding.as_dict("").set(PyValue::str(name.substr(10, name.size() - 17)), weight_dict(p));
    } else if (name == "output_layer.weight") {
      output_layer = weight_dict(p);
    } else {
      encoder.as_dict("").set(PyValue::str(name), host(p.value));
    }
  }
  if (!embedding.as_dict("").items.empty())
    lm.as_dict("").set(PyValue::str("embedding"), embedding);
  lm.as_dict("").set(PyValue::str("encoder"), encoder);
  if (!output_layer.is_none()) lm.as_dict("").set(PyValue::str("output_layer"), output_layer);
  // The language model first, as Megatron's GPT model saves it.
  PyDict& m = model.as_dict("");
  m.items.insert(m.items.begin(), {PyValue::str("language_model"), lm});
  return model;
}

}  // namespace megatron
