// HuggingFaceTokenizer. References: huggingface/tokenizers (tokenizers/src: models/bpe,
// pre_tokenizers/{byte_level,split,sequence}, normalizers/unicode, processors/template,
// added_vocabulary) and transformers' PreTrainedTokenizerFast.decode.
#include "data/tokenizers/huggingface_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "data/read_file.h"
#include "data/tokenizers/bpe_merge.h"
#include "data/tokenizers/byte_level.h"
#include "data/tokenizers/clean_up_tokenization.h"
#include "data/tokenizers/piece_cache.h"
#include "data/tokenizers/regex_splitter.h"
#include "data/tokenizers/string_hash.h"
#include "data/utf8.h"

namespace megatron {
namespace {

using nlohmann::json;

// GPT-2's pattern, which ByteLevel's use_regex applies.
constexpr const char* kByteLevelPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// A pre-tokenization step: a regex split, or ByteLevel's optional prefix space (+ GPT-2 split).
struct PreTokenizer {
  std::unique_ptr<RegexSplitter> splitter;  // null: no split
  bool add_prefix_space = false;
};

struct AddedToken {
  std::string content;
  int32_t id;
};

}  // namespace

struct HuggingFaceTokenizer::State {
  std::string file;                      // tokenizer.json, for messages
  StringMap<int32_t> bytes_to_id;        // model vocabulary, tokens as raw bytes
  std::vector<std::string> id_to_bytes;  // [vocab_size] bytes of each id
  std::vector<bool> is_added;            // [vocab_size] added token: decoded as its text
  std::array<int32_t, 256> byte_ids{};   // id of each single-byte token
  std::unordered_map<uint64_t, BpeMerge> merges;
  bool ignore_merges = false;
  std::vector<int> normalizers;  // utf8proc option sets, applied in order
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<AddedToken> added;             // longest first, for leftmost-longest matching
  std::array<bool, 256> added_first_byte{};  // some added token starts with this byte
  std::vector<int32_t> prefix, suffix;       // ids the post-processor puts around a sequence
  bool clean_up = false;
  int32_t eos = -1, bos = -1, pad = -1;
  mutable PieceCache cache;

  std::string where(std::string_view key) const {
    return "--tokenizer-model '" + file + "' " + std::string(key);
  }
  int32_t token_id(std::string_view token) const;
  void load_model(const json& model);
  void load_normalizer(const json& normalizer);
  void load_pre_tokenizer(const json& pre_tokenizer);
  void load_post_processor(const json& post);
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
};

int32_t HuggingFaceTokenizer::State::token_id(std::string_view token) const {
  for (const AddedToken& a : added)
    if (a.content == token) return a.id;
  // Vocabulary tokens are stored as bytes; a token that is not byte-level text is not in it.
  std::string bytes;
  try {
    bytes = byte_level_token_bytes(token, file);
  } catch (const Error&) {
    return -1;
  }
  auto it = bytes_to_id.find(bytes);
  return it == bytes_to_id.end() ? -1 : it->second;
}

void HuggingFaceTokenizer::State::load_model(const json& model) {
  MT_REQUIRE(model.is_object() && model.value("type", std::string()) == "BPE", where("model.type"),
             " must be \"BPE\" (byte-level BPE models only; WordPiece, "
             "Unigram and WordLevel tokenizer.json files are not supported)");
  MT_REQUIRE(model.value("byte_fallback", false) == false, where("model.byte_fallback"),
             " is true: that is a SentencePiece-style BPE, not byte-level; use "
             "--tokenizer-type Llama2Tokenizer or GPTSentencePieceTokenizer with its .model");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    MT_REQUIRE(
        !model.contains(key) || model[key].is_null() || model[key].get<std::string>().empty(),
        where(std::string("model.") + key), " is not supported");
  }
  MT_REQUIRE(!model.contains("dropout") || model["dropout"].is_null() ||
                 model["dropout"].get<double>() == 0.0,
             where("model.dropout"),
             " is not supported (BPE dropout is a training-time "
             "augmentation)");
  ignore_merges = model.value("ignore_merges", false);
  const json& vocab = model.at("vocab");
  MT_REQUIRE(vocab.is_object() && !vocab.empty(), where("model.vocab"),
             " must be a non-empty object mapping tokens to ids");
  for (const auto& [token, id_json] : vocab.items()) {
    MT_REQUIRE(id_json.is_number_integer() && id_json.get<int64_t>() >= 0, where("model.vocab"),
               ": token '", token, "' has no non-negative integer id");
    const auto id = static_cast<int32_t>(id_json.get<int64_t>());
    if (static_cast<size_t>(id) >= id_to_bytes.size()) id_to_bytes.resize(id + 1);
    id_to_bytes[id] = byte_level_token_bytes(token, file);
    bytes_to_id.emplace(id_to_bytes[id], id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    MT_REQUIRE(it != bytes_to_id.end(), where("model.vocab"), " lacks the token of byte ", b,
               "; byte-level BPE needs all 256");
    byte_ids[b] = it->second;
  }
  const json& merge_list = model.at("merges");
  MT_REQUIRE(merge_list.is_array(), where("model.merges"), " must be a list");
  int32_t rank = 0;
  for (const json& merge : merge_list) {
    std::string first, second;
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      MT_REQUIRE(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string::npos,
                 where("model.merges"), "[", rank, "]: expected \"first second\", got '", line,
                 "'");
      first = line.substr(0, space);
      second = line.substr(space + 1);
    } else {
      MT_REQUIRE(
          merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
          where("model.merges"), "[", rank,
          "]: expected \"first second\" or [first, "
          "second]");
      first = merge[0].get<std::string>();
      second = merge[1].get<std::string>();
    }
    const std::string a = byte_level_token_bytes(first, file);
    const std::string b = byte_level_token_bytes(second, file);
    const auto a_id = bytes_to_id.find(a);
    const auto b_id = bytes_to_id.find(b);
    const auto merged = bytes_to_id.find(a + b);
    MT_REQUIRE(
        a_id != bytes_to_id.end() && b_id != bytes_to_id.end() && merged != bytes_to_id.end(),
        where("model.merges"), "[", rank, "]: '", first, " ", second,
        "' uses or makes a token that is not in model.vocab");
    // The first occurrence of a pair keeps its rank, as HuggingFace's BPE builder does.
    merges.try_emplace(bpe_pair_key(a_id->second, b_id->second), BpeMerge{rank, merged->second});
    ++rank;
  }
}

void HuggingFaceTokenizer::State::load_normalizer(const json& normalizer) {
  if (normalizer.is_null()) return;
  const std::string type = normalizer.value("type", std::string());
  if (type == "Sequence") {
    for (const json& n : normalizer.at("normalizers")) load_normalizer(n);
    return;
  }
  const int forms[] = {UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                       UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
  const char* names[] = {"NFC", "NFD", "NFKC", "NFKD"};
  for (int i = 0; i < 4; ++i) {
    if (type == names[i]) {
      normalizers.push_back(UTF8PROC_STABLE | forms[i]);
      return;
    }
  }
  MT_THROW(where("normalizer"), " has type '", type,
           "'; supported: NFC, NFD, NFKC, NFKD and a Sequence of them");
}

void HuggingFaceTokenizer::State::load_pre_tokenizer(const json& pre) {
  MT_REQUIRE(pre.is_object(), where("pre_tokenizer"),
             " is missing: a byte-level BPE needs a ByteLevel pre-tokenizer");
  const std::string type = pre.value("type", std::string());
  if (type == "Sequence") {
    for (const json& p : pre.at("pretokenizers")) load_pre_tokenizer(p);
    return;
  }
  PreTokenizer step;
  if (type == "ByteLevel") {
    step.add_prefix_space = pre.value("add_prefix_space", false);
    if (pre.value("use_regex", true)) {
      step.splitter = std::make_unique<RegexSplitter>(kByteLevelPattern, where("ByteLevel"));
    }
  } else if (type == "Split") {
    MT_REQUIRE(pre.value("behavior", std::string()) == "Isolated" && !pre.value("invert", false),
               where("pre_tokenizer Split"),
               ": only behavior \"Isolated\" with invert false is supported");
    const json& pattern = pre.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern["Regex"].get<std::string>();
    } else {
      // A literal string: quote it (\Q...\E) unless it contains \E itself.
      const std::string literal = pattern.at("String").get<std::string>();
      MT_REQUIRE(literal.find("\\E") == std::string::npos, where("pre_tokenizer Split"),
                 ": the string pattern contains '\\E'");
      regex = "\\Q" + literal + "\\E";
    }
    step.splitter = std::make_unique<RegexSplitter>(regex, where("pre_tokenizer Split"));
  } else {
    MT_THROW(where("pre_tokenizer"), " has type '", type,
             "'; supported: ByteLevel, Split (Isolated) and a Sequence of them");
  }
  pre_tokenizers.push_back(std::move(step));
}

void HuggingFaceTokenizer::State::load_post_processor(const json& post) {
  if (post.is_null()) return;
  const std::string type = post.value("type", std::string());
  if (type == "Sequence") {
    for (const json& p : post.at("processors")) load_post_processor(p);
  } else if (type == "ByteLevel") {
    // Adjusts offsets only; no ids.
  } else if (type == "TemplateProcessing") {
    const json& specials = post.at("special_tokens");
    bool before = true;
    for (const json& item : post.at("single")) {
      if (item.contains("Sequence")) {
        before = false;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      MT_REQUIRE(specials.contains(name), where("post_processor"), ": special token '", name,
                 "' of the template has no entry in special_tokens");
      for (const json& id : specials[name].at("ids")) {
        (before ? prefix : suffix).push_back(id.get<int32_t>());
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(post.at("cls").at(1).get<int32_t>());
    suffix.push_back(post.at("sep").at(1).get<int32_t>());
  } else {
    MT_THROW(where("post_processor"), " has type '", type,
             "'; supported: ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing");
  }
}

HuggingFaceTokenizer::HuggingFaceTokenizer(const std::string& path)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  namespace fs = std::filesystem;
  const bool is_dir = fs::is_directory(path);
  s.file = is_dir ? (fs::path(path) / "tokenizer.json").string() : path;
  json config;
  try {
    config = json::parse(read_file(s.file, "--tokenizer-model"));
  } catch (const json::exception& e) {
    MT_THROW("--tokenizer-model '", s.file, "' is not valid JSON: ", e.what());
  }
  MT_REQUIRE(config.is_object() && config.contains("model"), "--tokenizer-model '", s.file,
             "' is not a HuggingFace tokenizer.json (no \"model\" key)");
  try {
    s.load_model(config["model"]);
    if (config.contains("added_tokens")) {
      for (const json& a : config["added_tokens"]) {
        for (const char* key : {"lstrip", "rstrip", "single_word"}) {
          MT_REQUIRE(!a.value(key, false), s.where("added_tokens"), ": token '",
                     a.value("content", std::string()), "' sets ", key, ", which is not supported");
        }
        AddedToken token{a.at("content").get<std::string>(), a.at("id").get<int32_t>()};
        MT_REQUIRE(!token.content.empty() && token.id >= 0, s.where("added_tokens"),
                   ": an entry has empty content or a negative id");
        if (static_cast<size_t>(token.id) >= s.id_to_bytes.size())
          s.id_to_bytes.resize(token.id + 1);
        s.id_to_bytes[token.id] = token.content;
        s.added_first_byte[static_cast<uint8_t>(token.content[0])] = true;
        s.added.push_back(std::move(token));
      }
    }
    std::stable_sort(s.added.begin(), s.added.end(), [](const AddedToken& a, const AddedToken& b) {
      return a.content.size() > b.content.size();
    });
    s.is_added.assign(s.id_to_bytes.size(), false);
    for (const AddedToken& a : s.added) s.is_added[a.id] = true;
    std::vector<bool> has_id(s.id_to_bytes.size(), false);
    for (const auto& [bytes, id] : s.bytes_to_id) has_id[id] = true;
    for (size_t id = 0; id < has_id.size(); ++id) {
      MT_REQUIRE(has_id[id] || s.is_added[id], "--tokenizer-model '", s.file, "': id ", id,
                 " is neither in model.vocab nor in added_tokens; ids must be dense");
    }
    s.load_normalizer(config.value("normalizer", json()));
    s.load_pre_tokenizer(config.value("pre_tokenizer", json()));
    s.load_post_processor(config.value("post_processor", json()));
    const json decoder = config.value("decoder", json());
    MT_REQUIRE(decoder.is_null() || decoder.value("type", std::string()) == "ByteLevel",
               s.where("decoder"), " must be ByteLevel for a byte-level BPE");
  } catch (const json::exception& e) {
    MT_THROW("--tokenizer-model '", s.file, "' has an unexpected structure: ", e.what());
  }
  for (int32_t id : s.prefix)
    MT_REQUIRE(id >= 0 && id < vocab_size(), s.where("post_processor"), ": id ", id,
               " is outside the vocabulary");
  for (int32_t id : s.suffix)
    MT_REQUIRE(id >= 0 && id < vocab_size(), s.where("post_processor"), ": id ", id,
               " is outside the vocabulary");

  // tokenizer_config.json: the special tokens transformers reports, and the decode clean-up.
  const fs::path config_file = fs::path(s.file).parent_path() / "tokenizer_config.json";
  if (fs::exists(config_file)) {
    json tc;
    try {
      tc = json::parse(read_file(config_file.string(), "--tokenizer-model"));
    } catch (const json::exception& e) {
      MT_THROW("'", config_file.string(),
               "' (beside --tokenizer-model) is not valid JSON: ", e.what());
    }
    const auto special = [&](const char* key) {
      if (!tc.contains(key) || tc[key].is_null()) return -1;
      const json& v = tc[key];
      const std::string token =
          v.is_object() ? v.value("content", std::string()) : v.get<std::string>();
      const int32_t id = s.token_id(token);
      MT_REQUIRE(id >= 0, "'", config_file.string(), "': ", key, " '", token,
                 "' is not a token of '", s.file, "'");
      return id;
    };
    s.eos = special("eos_token");
    s.bos = special("bos_token");
    s.pad = special("pad_token");
    s.clean_up = tc.value("clean_up_tokenization_spaces", false);
  }
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

void HuggingFaceTokenizer::State::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t hash = StringHash{}(piece);
  if (cache.find(piece, hash, out)) return;
  std::vector<int32_t> ids;
  auto whole = ignore_merges ? bytes_to_id.find(piece) : bytes_to_id.end();
  if (whole != bytes_to_id.end()) {
    ids.push_back(whole->second);
  } else {
    ids.resize(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_ids[static_cast<uint8_t>(piece[i])];
    bpe_merge(ids, [&](int32_t left, int32_t right) -> std::optional<BpeMerge> {
      auto it = merges.find(bpe_pair_key(left, right));
      if (it == merges.end()) return std::nullopt;
      return it->second;
    });
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (piece.size() <= PieceCache::kMaxPieceBytes) cache.insert(piece, hash, std::move(ids));
}

void HuggingFaceTokenizer::State::encode_text(std::string_view text,
                                              std::vector<int32_t>& ids) const {
  std::string normalized(text);
  for (int options : normalizers) {
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(normalized.data()),
                     static_cast<utf8proc_ssize_t>(normalized.size()), &mapped,
                     static_cast<utf8proc_option_t>(options));
    MT_CHECK(n >= 0, "Unicode normalization failed: ", utf8proc_errmsg(n));
    normalized.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
  }
  // pieces own their text: ByteLevel's prefix space changes it.
  std::vector<std::string> pieces{std::move(normalized)};
  std::vector<std::string_view> split;
  for (const PreTokenizer& step : pre_tokenizers) {
    std::vector<std::string> next;
    for (std::string& piece : pieces) {
      if (step.add_prefix_space && !piece.starts_with(' ')) piece.insert(0, 1, ' ');
      if (!step.splitter) {
        next.push_back(std::move(piece));
        continue;
      }
      split.clear();
      step.splitter->split(piece, split);
      for (std::string_view p : split) next.emplace_back(p);
    }
    pieces = std::move(next);
  }
  for (const std::string& piece : pieces) bpe(piece, ids);
}

std::vector<int32_t> HuggingFaceTokenizer::encode(std::string_view text) const {
  const State& s = *state_;
  check_utf8(text, "text to encode");
  std::vector<int32_t> ids(s.prefix);
  ids.reserve(text.size() / 3);
  size_t start = 0;  // of the text not yet encoded
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!s.added_first_byte[static_cast<uint8_t>(text[pos])]) continue;
    for (const AddedToken& a : s.added) {  // longest first
      if (text.compare(pos, a.content.size(), a.content) != 0) continue;
      if (pos > start) s.encode_text(text.substr(start, pos - start), ids);
      ids.push_back(a.id);
      start = pos + a.content.size();
      pos = start - 1;
      break;
    }
  }
  if (start < text.size()) s.encode_text(text.substr(start), ids);
  ids.insert(ids.end(), s.suffix.begin(), s.suffix.end());
  return ids;
}

std::string HuggingFaceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    MT_CHECK(id >= 0 && id < vocab_size(), "token id ", id,
             " is outside the HuggingFace tokenizer's vocabulary [0, ", vocab_size(), ")");
    bytes += state_->id_to_bytes[id];
  }
  std::string text = replace_invalid_utf8(bytes);
  return state_->clean_up ? clean_up_tokenization(std::move(text)) : text;
}

int64_t HuggingFaceTokenizer::vocab_size() const {
  return static_cast<int64_t>(state_->id_to_bytes.size());
}
int32_t HuggingFaceTokenizer::eod() const {
  return state_->eos;
}
int32_t HuggingFaceTokenizer::pad() const {
  return state_->pad;
}
int32_t HuggingFaceTokenizer::bos() const {
  return state_->bos;
}

std::optional<int32_t> HuggingFaceTokenizer::token_to_id(std::string_view token) const {
  const int32_t id = state_->token_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace megatron
