#include "convert/gguf_tokenizer.h"

#include <sstream>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/logging.h"
#include "data/tokenizers/sentencepiece_model_file.h"
#include "data/tokenizers/tokenizer_identity.h"

namespace megatron {

namespace {

// llama.cpp's token types (llama_token_type in llama.h).
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4;

void add_gpt2_bpe(GgufWriter& gguf, const nlohmann::json& tokenizer, int64_t vocab_size,
                  const TokenizerFileOverrides& overrides) {
  const std::string vocab_path =
      tokenizer_file(tokenizer, "vocab_file", overrides.vocab_file, "--vocab-file");
  const std::string merge_path =
      tokenizer_file(tokenizer, "merge_file", overrides.merge_file, "--merge-file");
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_path, "GPT-2 vocabulary"));
  } catch (const nlohmann::json::exception& e) {
    MT_THROW("GPT-2 vocabulary '", vocab_path, "' is not valid JSON (", e.what(), ")");
  }
  MT_REQUIRE(vocab.is_object() && int64_t(vocab.size()) == vocab_size, "GPT-2 vocabulary '",
             vocab_path, "' holds ", vocab.is_object() ? int64_t(vocab.size()) : 0,
             " tokens but the model ", vocab_size, ": pass the vocabulary it was trained with");
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<bool> seen(static_cast<size_t>(vocab_size), false);
  for (const auto& [token, id] : vocab.items()) {
    MT_REQUIRE(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size &&
                   !seen[id.get<size_t>()],
               "GPT-2 vocabulary '", vocab_path, "': token ", nlohmann::json(token).dump(),
               " has id ", id.dump(), ", not a distinct id below ", vocab_size);
    tokens[id.get<size_t>()] = token;
    seen[id.get<size_t>()] = true;
  }
  const int64_t eod = tokenizer.value("eod", int64_t(-1));
  MT_REQUIRE(eod >= 0 && eod < vocab_size, "the checkpoint's tokenizer record has no ",
             "end-of-document id below ", vocab_size);
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), kNormal);
  types[size_t(eod)] = kControl;

  std::vector<std::string> merges;
  std::istringstream lines(read_file(merge_path, "GPT-2 merges"));
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    MT_REQUIRE(line.find(' ') != std::string::npos && line.find(' ') == line.rfind(' '),
               "GPT-2 merges '", merge_path, "' line ", n, ": expected two symbols, got '", line,
               "'");
    merges.push_back(line);
  }
  gguf.add_string("tokenizer.ggml.model", "gpt2");
  gguf.add_string("tokenizer.ggml.pre", "gpt-2");
  gguf.add_string_array("tokenizer.ggml.tokens", tokens);
  gguf.add_int32_array("tokenizer.ggml.token_type", types);
  gguf.add_string_array("tokenizer.ggml.merges", merges);
  gguf.add_uint32("tokenizer.ggml.bos_token_id", uint32_t(eod));
  gguf.add_uint32("tokenizer.ggml.eos_token_id", uint32_t(eod));
  gguf.add_bool("tokenizer.ggml.add_bos_token", false);
}

// A SentencePiece BPE model as llama.cpp's "llama" (SPM) tokenizer: its pieces, scores and types
// by id, the special ids, no BOS/EOS added (Megatron encodes with the model alone) and the
// model's dummy prefix as add_space_prefix.
void add_sentencepiece(GgufWriter& gguf, const nlohmann::json& tokenizer, int64_t vocab_size,
                       const TokenizerFileOverrides& overrides) {
  const std::string path =
      tokenizer_file(tokenizer, "tokenizer_model", overrides.tokenizer_model, "--tokenizer-model");
  const SentencePieceModelFile model =
      parse_sentencepiece_model(read_file(path, "SentencePiece model"), path);
  MT_REQUIRE(int64_t(model.pieces.size()) == vocab_size, "SentencePiece model '", path, "' holds ",
             model.pieces.size(), " pieces but the model ", vocab_size,
             ": pass the --tokenizer-model it was trained with");
  // llama.cpp's SPM tokenizer merges pairs by score, which is BPE's algorithm; a unigram model
  // (sentencepiece's default) would be tokenized differently there.
  MT_REQUIRE(
      model.model_type == SentencePieceModelFile::ModelType::kBpe, "SentencePiece model '", path,
      "' is a ",
      model.model_type == SentencePieceModelFile::ModelType::kUnigram ? "unigram" : "word/char",
      " model: llama.cpp's llama tokenizer reproduces BPE SentencePiece models (Llama's, "
      "spm_train --model_type=bpe) only, so this export is refused");
  if (!(model.normalizer_name.empty() || model.normalizer_name == "identity") ||
      model.remove_extra_whitespaces)
    log_warning("SentencePiece model '" + path + "' normalizes text (" +
                (model.normalizer_name.empty() ? "default" : model.normalizer_name) +
                (model.remove_extra_whitespaces ? ", extra whitespace removed" : "") +
                "), which llama.cpp's llama tokenizer does not: texts that normalization "
                "changes will tokenize differently there");
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const SentencePieceModelFile::Piece& p : model.pieces) {
    tokens.push_back(p.piece);
    scores.push_back(p.score);
    types.push_back(int32_t(p.type));  // sentencepiece's type values are llama.cpp's
  }
  gguf.add_string("tokenizer.ggml.model", "llama");
  gguf.add_string("tokenizer.ggml.pre", "default");
  gguf.add_string_array("tokenizer.ggml.tokens", tokens);
  gguf.add_float32_array("tokenizer.ggml.scores", scores);
  gguf.add_int32_array("tokenizer.ggml.token_type", types);
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.unknown_token_id", model.unk_id},
                                                 {"tokenizer.ggml.bos_token_id", model.bos_id},
                                                 {"tokenizer.ggml.eos_token_id", model.eos_id},
                                                 {"tokenizer.ggml.padding_token_id", model.pad_id}};
  for (const auto& [key, id] : ids)
    if (id >= 0) gguf.add_uint32(key, uint32_t(id));
  gguf.add_bool("tokenizer.ggml.add_bos_token", false);
  gguf.add_bool("tokenizer.ggml.add_eos_token", false);
  gguf.add_bool("tokenizer.ggml.add_space_prefix", model.add_dummy_prefix);
}

}  // namespace

void add_gguf_tokenizer(GgufWriter& gguf, const nlohmann::json& tokenizer, int64_t vocab_size,
                        const TokenizerFileOverrides& overrides) {
  const std::string type = tokenizer.is_object() ? tokenizer.value("type", std::string()) : "";
  if (tokenizer.is_object() && tokenizer.contains("vocab_size")) {
    const int64_t vocab = tokenizer["vocab_size"].get<int64_t>();
    MT_REQUIRE(vocab == vocab_size, "the checkpoint's tokenizer (", type, ") has ", vocab,
               " entries but its model ", vocab_size);
  }
  if (type == "GPT2BPETokenizer") {
    add_gpt2_bpe(gguf, tokenizer, vocab_size, overrides);
    return;
  }
  if (type == "GPTSentencePieceTokenizer" || type == "Llama2Tokenizer") {
    add_sentencepiece(gguf, tokenizer, vocab_size, overrides);
    return;
  }
  MT_REQUIRE(tokenizer.is_null() || type == "NullTokenizer", "--tokenizer-type ", type,
             " has no GGUF export yet (GPT2BPETokenizer, GPTSentencePieceTokenizer and "
             "Llama2Tokenizer have; a checkpoint without a tokenizer exports placeholder "
             "tokens)");
  log_warning(
      "the checkpoint records no tokenizer (--mock-data, NullTokenizer or an HF import): the "
      "GGUF file's tokens are placeholders <|0|>, <|1|>, ... (user-defined tokens, so the text "
      "'<|5|><|17|>' is the ids 5, 17 in llama.cpp)");
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<size_t>(vocab_size));
  for (int64_t id = 0; id < vocab_size; ++id) tokens.push_back("<|" + std::to_string(id) + "|>");
  gguf.add_string("tokenizer.ggml.model", "gpt2");
  gguf.add_string("tokenizer.ggml.pre", "default");
  gguf.add_string_array("tokenizer.ggml.tokens", tokens);
  gguf.add_int32_array("tokenizer.ggml.token_type",
                       std::vector<int32_t>(static_cast<size_t>(vocab_size), kUserDefined));
  gguf.add_string_array("tokenizer.ggml.merges", {});
  if (tokenizer.is_object() && tokenizer.contains("eod")) {
    const auto eod = tokenizer["eod"].get<uint32_t>();
    gguf.add_uint32("tokenizer.ggml.bos_token_id", eod);
    gguf.add_uint32("tokenizer.ggml.eos_token_id", eod);
  }
  gguf.add_bool("tokenizer.ggml.add_bos_token", false);
}

}  // namespace megatron
