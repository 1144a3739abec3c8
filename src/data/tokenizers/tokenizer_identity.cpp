#include "data/tokenizers/tokenizer_identity.h"

#include <filesystem>

#include "core/crc32c.h"
#include "core/durable_file.h"
#include "core/error.h"

namespace megatron {

namespace {

uint32_t file_crc32c(const std::string& path) {
  const std::string bytes = read_file(path, "tokenizer file");
  return crc32c(bytes.data(), bytes.size());
}

nlohmann::json file_record(const std::string& path) {
  return {{"path", std::filesystem::absolute(path).lexically_normal().string()},
          {"crc32c", file_crc32c(path)}};
}

}  // namespace

nlohmann::json tokenizer_identity(const TokenizerOptions& o, const Tokenizer& tokenizer) {
  nlohmann::json files = nlohmann::json::object();
  const bool uses_vocab_merges = o.type == "GPT2BPETokenizer";
  const bool uses_vocab = uses_vocab_merges || o.type.starts_with("BertWordPiece");
  if (!o.vocab_file.empty() && uses_vocab) files["vocab_file"] = file_record(o.vocab_file);
  if (!o.merge_file.empty() && uses_vocab_merges) files["merge_file"] = file_record(o.merge_file);
  // Every other type but Null reads --tokenizer-model; a HuggingFace directory has no single
  // CRC, so only a file is recorded.
  if (!o.model_file.empty() && !uses_vocab && o.type != "NullTokenizer" &&
      std::filesystem::is_regular_file(o.model_file))
    files["tokenizer_model"] = file_record(o.model_file);
  return {{"type", o.type},
          {"vocab_size", tokenizer.vocab_size()},
          {"eod", tokenizer.eod()},
          {"files", files}};
}

std::string tokenizer_file(const nlohmann::json& identity, const std::string& key,
                           const std::string& override_path, const std::string& flag) {
  const nlohmann::json files = identity.value("files", nlohmann::json::object());
  MT_REQUIRE(files.contains(key) || !override_path.empty(), "the checkpoint records no ", key,
             " for its ", identity.value("type", std::string("(unknown)")),
             " tokenizer; give it with ", flag);
  const std::string path =
      override_path.empty() ? files[key].at("path").get<std::string>() : override_path;
  MT_REQUIRE(std::filesystem::exists(path), "tokenizer file '", path, "' (the checkpoint's ", key,
             ") does not exist; give its new place with ", flag);
  if (files.contains(key) && files[key].contains("crc32c")) {
    const uint32_t want = files[key].at("crc32c").get<uint32_t>();
    MT_REQUIRE(file_crc32c(path) == want, "tokenizer file '", path,
               "' is not the one the checkpoint was trained with (CRC32C differs); give the "
               "original with ",
               flag);
  }
  return path;
}

}  // namespace megatron
