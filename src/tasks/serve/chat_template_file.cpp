#include "tasks/serve/chat_template_file.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace megatron {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A special token as tokenizer_config.json writes it: a string or {"content": ...}.
std::string token_text(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_object()) return it->value("content", std::string());
  return it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

ChatTemplateFile read_chat_template_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_REQUIRE(in.good(), "--chat-template '", path, "' cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  ChatTemplateFile out;
  if (fs::path(path).extension() != ".json") {
    out.source = text.str();
    return out;
  }
  json config;
  try {
    config = json::parse(text.str());
  } catch (const json::exception& e) {
    MT_THROW("--chat-template '", path, "' is not valid JSON: ", e.what());
  }
  const json t = config.is_object() ? config.value("chat_template", json()) : json();
  if (t.is_string()) {
    out.source = t.get<std::string>();
  } else if (t.is_array()) {
    for (const json& named : t)
      if (named.is_object() && named.value("name", std::string()) == "default" &&
          named.contains("template") && named["template"].is_string())
        out.source = named["template"].get<std::string>();
  }
  MT_REQUIRE(!out.source.empty(), "--chat-template '", path,
             "' has no \"chat_template\" string (nor a list with a \"default\" one): give the "
             "model's tokenizer_config.json, or a file holding the Jinja template itself");
  out.bos_token = token_text(config, "bos_token");
  out.eos_token = token_text(config, "eos_token");
  return out;
}

std::string chat_template_beside(const std::string& tokenizer_model) {
  if (tokenizer_model.empty()) return "";
  const fs::path model(tokenizer_model);
  const fs::path config =
      (fs::is_directory(model) ? model : model.parent_path()) / "tokenizer_config.json";
  if (!fs::exists(config)) return "";
  json parsed;
  try {
    parsed = json::parse(std::ifstream(config));
  } catch (const json::exception&) {
    return "";  // the tokenizer itself reports a broken tokenizer_config.json
  }
  return parsed.is_object() && parsed.contains("chat_template") ? config.string() : "";
}

}  // namespace megatron
