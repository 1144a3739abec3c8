#include "convert/hf_tokenizer_files.h"

#include <filesystem>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/logging.h"
#include "data/tokenizers/sentencepiece_model_file.h"
#include "data/tokenizers/tokenizer_identity.h"

namespace fs = std::filesystem;

namespace megatron {

namespace {

void copy_file(const std::string& from, const std::string& hf_dir, const std::string& name) {
  write_file_durably(hf_dir + "/" + name, read_file(from, "tokenizer file"));
}

void write_json(const std::string& hf_dir, const std::string& name, const nlohmann::json& j) {
  write_file_durably(hf_dir + "/" + name, j.dump(2) + "\n");
}

}  // namespace

nlohmann::json checkpoint_tokenizer(const nlohmann::json& state) {
  if (state.contains("tokenizer") && state["tokenizer"].is_object()) return state["tokenizer"];
  const nlohmann::json args = state.value("args", nlohmann::json::object());
  const std::string type = args.value("tokenizer_type", std::string());
  if (type.empty() || type == "None" || args.value("mock_data", false)) return nullptr;
  nlohmann::json files = nlohmann::json::object();
  for (const char* key : {"vocab_file", "merge_file", "tokenizer_model"}) {
    const std::string path = args.value(key, std::string());
    if (!path.empty() && path != "None") files[key] = {{"path", path}};
  }
  return {{"type", type}, {"files", files}};
}

std::vector<std::string> write_hf_tokenizer_files(const std::string& hf_dir,
                                                  const nlohmann::json& tokenizer,
                                                  int64_t model_vocab_size, int64_t max_length,
                                                  const TokenizerFileOverrides& overrides) {
  if (tokenizer.is_null()) {
    log_warning(
        "the checkpoint was trained without a tokenizer (--mock-data): no tokenizer "
        "files written to " +
        hf_dir);
    return {};
  }
  const std::string type = tokenizer.value("type", std::string());
  if (tokenizer.contains("vocab_size")) {
    const int64_t vocab = tokenizer["vocab_size"].get<int64_t>();
    MT_REQUIRE(vocab == model_vocab_size, "the checkpoint's tokenizer (", type, ") has ", vocab,
               " entries but its model ", model_vocab_size);
  }
  fs::create_directories(hf_dir);
  if (type == "GPT2BPETokenizer") {
    copy_file(tokenizer_file(tokenizer, "vocab_file", overrides.vocab_file, "--vocab-file"), hf_dir,
              "vocab.json");
    copy_file(tokenizer_file(tokenizer, "merge_file", overrides.merge_file, "--merge-file"), hf_dir,
              "merges.txt");
    const std::string eod = "<|endoftext|>";
    const nlohmann::json special = {{"bos_token", eod}, {"eos_token", eod}, {"unk_token", eod}};
    nlohmann::json config = special;
    config["add_prefix_space"] = false;
    config["model_max_length"] = max_length;
    config["tokenizer_class"] = "GPT2Tokenizer";
    write_json(hf_dir, "tokenizer_config.json", config);
    write_json(hf_dir, "special_tokens_map.json", special);
    return {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"};
  }
  if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") {
    copy_file(tokenizer_file(tokenizer, "vocab_file", overrides.vocab_file, "--vocab-file"), hf_dir,
              "vocab.txt");
    const nlohmann::json special = {{"cls_token", "[CLS]"},
                                    {"mask_token", "[MASK]"},
                                    {"pad_token", "[PAD]"},
                                    {"sep_token", "[SEP]"},
                                    {"unk_token", "[UNK]"}};
    nlohmann::json config = special;
    config["do_lower_case"] = type == "BertWordPieceLowerCase";
    config["model_max_length"] = max_length;
    config["tokenizer_class"] = "BertTokenizer";
    write_json(hf_dir, "tokenizer_config.json", config);
    write_json(hf_dir, "special_tokens_map.json", special);
    return {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"};
  }
  if (type == "GPTSentencePieceTokenizer" || type == "Llama2Tokenizer") {
    const std::string path = tokenizer_file(tokenizer, "tokenizer_model", overrides.tokenizer_model,
                                            "--tokenizer-model");
    const std::string bytes = read_file(path, "SentencePiece model");
    const SentencePieceModelFile model = parse_sentencepiece_model(bytes, path);
    MT_REQUIRE(int64_t(model.pieces.size()) == model_vocab_size, "SentencePiece model '", path,
               "' holds ", model.pieces.size(), " pieces but the model ", model_vocab_size,
               ": pass the --tokenizer-model it was trained with");
    write_file_durably(hf_dir + "/tokenizer.model", bytes);
    const auto piece = [&](int32_t id) -> nlohmann::json {
      return id >= 0 ? nlohmann::json(model.pieces[size_t(id)].piece) : nlohmann::json(nullptr);
    };
    nlohmann::json special = {{"unk_token", piece(model.unk_id)},
                              {"bos_token", piece(model.bos_id)},
                              {"eos_token", piece(model.eos_id)}};
    if (model.pad_id >= 0) special["pad_token"] = piece(model.pad_id);
    nlohmann::json config = special;
    // Megatron's SentencePiece tokenizers encode with the model alone: no BOS, no EOS.
    config["add_bos_token"] = false;
    config["add_eos_token"] = false;
    // legacy: LlamaTokenizer encodes plain text with the model itself (sp.encode), as Megatron.
    config["legacy"] = true;
    config["model_max_length"] = max_length;
    config["tokenizer_class"] = "LlamaTokenizer";
    write_json(hf_dir, "tokenizer_config.json", config);
    write_json(hf_dir, "special_tokens_map.json", special);
    return {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"};
  }
  log_warning("HF has no GPT-2/BERT/SentencePiece tokenizer files for --tokenizer-type " + type +
              ": only the model was written to " + hf_dir);
  return {};
}

}  // namespace megatron
