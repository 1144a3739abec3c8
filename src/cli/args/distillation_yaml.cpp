#include "cli/args/distillation_yaml.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace megatron::cli {

namespace {

// Megatron's module names and what they are here: the LM head's output (the logits) and the
// final norm's output (the last hidden states). No other module is exposed to the losses.
constexpr const char* kLogits = "output_layer";
constexpr const char* kFinalNorm = "decoder.final_layernorm";

// A [student, teacher] pair of module names, each `expected`.
std::pair<std::string, std::string> module_pair(const YAML::Node& node, const std::string& where,
                                                const char* expected, const std::string& source) {
  MT_REQUIRE(node.IsSequence() && node.size() == 2, source, ": ", where,
             " must be a [student, teacher] pair of module names (a third entry, a loss "
             "function name, is not supported: the loss is Megatron's default)");
  std::pair<std::string, std::string> pair;
  for (size_t i = 0; i < 2; ++i) {
    MT_REQUIRE(node[i].IsScalar(), source, ": ", where, " must hold module names");
    const std::string name = node[i].as<std::string>();
    MT_REQUIRE(name == expected, source, ": ", where, " names module '", name, "' of the ",
               i == 0 ? "student" : "teacher", ": only '", expected,
               "' is supported there (the modules distillation can read here are "
               "output_layer, the logits, and decoder.final_layernorm, the last hidden states)");
    (i == 0 ? pair.first : pair.second) = name;
  }
  return pair;
}

template <typename T>
T scalar(const YAML::Node& node, const std::string& key, const char* expected,
         const std::string& source) {
  try {
    if (node.IsScalar()) return node.as<T>();
  } catch (const YAML::Exception&) {
  }
  MT_THROW(source, ": key '", key, "' must be ", expected);
}

}  // namespace

DistillationConfig parse_distillation_config(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    MT_THROW(source, " is not valid YAML: ", e.what());
  }
  DistillationConfig c;
  if (root.IsNull()) return c;
  MT_REQUIRE(root.IsMap(), source,
             ": a distillation config must be a mapping of keys (logit_layers, "
             "intermediate_layer_pairs, skip_lm_loss, kd_loss_scale, logit_kl_temperature)");
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    if (key == "logit_layers") {
      c.logit_layers = module_pair(value, "logit_layers", kLogits, source);
    } else if (key == "intermediate_layer_pairs") {
      MT_REQUIRE(value.IsSequence() || value.IsNull(), source,
                 ": intermediate_layer_pairs must be a list of [student, teacher] pairs");
      for (size_t i = 0; i < value.size(); ++i)
        c.intermediate_layer_pairs.push_back(module_pair(
            value[i], "intermediate_layer_pairs[" + std::to_string(i) + "]", kFinalNorm, source));
    } else if (key == "skip_lm_loss") {
      c.skip_lm_loss = scalar<bool>(value, key, "true or false", source);
    } else if (key == "kd_loss_scale") {
      c.kd_loss_scale = scalar<double>(value, key, "a number", source);
      MT_REQUIRE(c.kd_loss_scale >= 0, source, ": kd_loss_scale must be >= 0, got ",
                 c.kd_loss_scale);
    } else if (key == "logit_kl_temperature") {
      c.logit_kl_temperature = scalar<double>(value, key, "a number", source);
      MT_REQUIRE(c.logit_kl_temperature > 0, source,
                 ": logit_kl_temperature must be positive, got ", c.logit_kl_temperature);
    } else {
      MT_THROW(source, ": unknown key '", key,
               "' (expected logit_layers, intermediate_layer_pairs, skip_lm_loss, "
               "kd_loss_scale or logit_kl_temperature)");
    }
  }
  return c;
}

DistillationConfig read_distillation_config(const std::string& path) {
  std::ifstream in(path);
  MT_REQUIRE(in.good(), "--export-kd-cfg ", path,
             " cannot be read: give the path of a distillation config YAML file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_distillation_config(text.str(), "--export-kd-cfg " + path);
}

}  // namespace megatron::cli
