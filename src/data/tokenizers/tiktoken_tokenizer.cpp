// TikTokenizer. References: Megatron-LM megatron/core/tokenizers/text/libraries/
// tiktoken_tokenizer.py (TikTokenTokenizer, reload_mergeable_ranks) and openai/tiktoken
// src/lib.rs (encode with allowed_special="all", byte_pair_merge).
#include "data/tokenizers/tiktoken_tokenizer.h"

#include <array>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "data/read_file.h"
#include "data/tokenizers/bpe_merge.h"
#include "data/tokenizers/piece_cache.h"
#include "data/tokenizers/regex_splitter.h"
#include "data/tokenizers/string_hash.h"
#include "data/utf8.h"

namespace megatron {
namespace {

// Megatron's PATTERN_TIKTOKEN (v1) and PATTERN_TIKTOKEN_V2.
constexpr const char* kPatternV1 =
    "[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)"
    "|\\s+";
constexpr const char* kPatternV2 =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Megatron's default vocabulary size when --vocab-size is not given.
constexpr int64_t kDefaultVocabSize = int64_t{1} << 17;

// Standard base64 (RFC 4648, with padding), as Python's base64.b64decode; nullopt when
// malformed.
std::optional<std::string> base64_decode(std::string_view text) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> table;
    table.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) table[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return table;
  }();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t bits = 0;
    int padding = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        ++padding;
        bits <<= 6;
        continue;
      }
      if (padding > 0 || value[static_cast<uint8_t>(c)] < 0) return std::nullopt;
      bits = (bits << 6) | static_cast<uint32_t>(value[static_cast<uint8_t>(c)]);
    }
    out += static_cast<char>(bits >> 16);
    if (padding < 2) out += static_cast<char>((bits >> 8) & 0xFF);
    if (padding < 1) out += static_cast<char>(bits & 0xFF);
  }
  return out;
}

}  // namespace

struct TikTokenizer::State {
  std::vector<std::string> special;  // [num_special_tokens] text of each special token
  StringMap<int32_t> special_to_id;
  std::vector<std::string> rank_bytes;  // [ranks] bytes of the token of each rank
  StringMap<int32_t> bytes_to_rank;
  std::unique_ptr<RegexSplitter> splitter;
  int64_t vocab_size = 0;
  mutable PieceCache cache;  // piece -> ranks (not yet shifted by the special tokens)

  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // Length of the special token starting at text[at], 0 when none does. Every special token
  // is "<" + text without ">" + ">", so the candidate is text[at] up to the next '>'.
  size_t special_at(std::string_view text, size_t at, int32_t& id) const;
};

size_t TikTokenizer::State::special_at(std::string_view text, size_t at, int32_t& id) const {
  if (text[at] != '<') return 0;
  const size_t close = text.find('>', at + 1);
  if (close == std::string_view::npos) return 0;
  const std::string_view candidate = text.substr(at, close + 1 - at);
  const auto it = special_to_id.find(candidate);
  if (it == special_to_id.end()) return 0;
  id = it->second;
  return candidate.size();
}

void TikTokenizer::State::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t hash = StringHash{}(piece);
  if (cache.find(piece, hash, out)) return;
  std::vector<int32_t> ranks;
  // tiktoken takes a piece that is itself a token whole, before any merging.
  if (auto whole = bytes_to_rank.find(piece); whole != bytes_to_rank.end()) {
    ranks.push_back(whole->second);
  } else {
    ranks.resize(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) ranks[i] = static_cast<uint8_t>(piece[i]);
    std::string pair;
    bpe_merge(ranks, [&](int32_t left, int32_t right) -> std::optional<BpeMerge> {
      pair.assign(rank_bytes[left]);
      pair += rank_bytes[right];
      auto it = bytes_to_rank.find(pair);
      if (it == bytes_to_rank.end()) return std::nullopt;
      return BpeMerge{it->second, it->second};
    });
  }
  out.insert(out.end(), ranks.begin(), ranks.end());
  if (piece.size() <= PieceCache::kMaxPieceBytes) cache.insert(piece, hash, std::move(ranks));
}

TikTokenizer::TikTokenizer(const std::string& ranks_file, const std::string& pattern,
                           int64_t vocab_size, int64_t num_special_tokens)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  MT_REQUIRE(pattern == "v1" || pattern == "v2",
             "--tiktoken-pattern must be v1 or v2 for "
             "--tokenizer-type TikTokenizer (Megatron's two split regexes), got '",
             pattern, "'");
  s.vocab_size = vocab_size > 0 ? vocab_size : kDefaultVocabSize;
  // Megatron's SPECIAL_TOKENS, then fillers up to --tiktoken-num-special-tokens.
  s.special = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};
  MT_REQUIRE(num_special_tokens >= static_cast<int64_t>(s.special.size()) &&
                 num_special_tokens < s.vocab_size,
             "--tiktoken-num-special-tokens ", num_special_tokens, " must be at least ",
             s.special.size(),
             " (<unk> <s> </s> <mask> <pad> <cls> <sep>) and below the vocabulary size ",
             s.vocab_size, " (--vocab-size)");
  for (int64_t i = static_cast<int64_t>(s.special.size()); i < num_special_tokens; ++i)
    s.special.push_back("<SPECIAL_" + std::to_string(i) + ">");
  for (size_t i = 0; i < s.special.size(); ++i)
    s.special_to_id.emplace(s.special[i], static_cast<int32_t>(i));
  const int64_t inner = s.vocab_size - num_special_tokens;

  nlohmann::json ranks;
  try {
    ranks = nlohmann::json::parse(read_file(ranks_file, "--tokenizer-model"));
  } catch (const nlohmann::json::exception& e) {
    MT_THROW("--tokenizer-model '", ranks_file, "' is not valid JSON: ", e.what());
  }
  MT_REQUIRE(ranks.is_array(), "--tokenizer-model '", ranks_file,
             "' must be a JSON list of {\"rank\", \"token_bytes\", \"token_str\"} objects "
             "(Megatron's TikTokenizer vocabulary)");
  MT_REQUIRE(static_cast<int64_t>(ranks.size()) >= inner, "--tokenizer-model '", ranks_file,
             "' has ", ranks.size(), " ranks, fewer than --vocab-size ", s.vocab_size, " - ",
             num_special_tokens, " special tokens = ", inner, "; give --vocab-size ",
             static_cast<int64_t>(ranks.size()) + num_special_tokens, " or less");
  MT_REQUIRE(inner >= 256, "--vocab-size ", s.vocab_size, " leaves ", inner,
             " ranks after the special tokens; byte-level BPE needs at least the 256 bytes");
  s.rank_bytes.reserve(inner);
  for (int64_t i = 0; i < inner; ++i) {
    const nlohmann::json& entry = ranks[i];
    MT_REQUIRE(entry.is_object() && entry.contains("rank") && entry["rank"].is_number_integer() &&
                   entry["rank"].get<int64_t>() == i && entry.contains("token_bytes") &&
                   entry["token_bytes"].is_string(),
               "--tokenizer-model '", ranks_file, "' entry ", i, " must be {\"rank\": ", i,
               ", \"token_bytes\": base64, ...}");
    std::optional<std::string> bytes = base64_decode(entry["token_bytes"].get<std::string>());
    MT_REQUIRE(bytes && !bytes->empty(), "--tokenizer-model '", ranks_file, "' entry ", i,
               ": token_bytes is not non-empty base64");
    MT_REQUIRE(i >= 256 || (bytes->size() == 1 && static_cast<uint8_t>((*bytes)[0]) == i),
               "--tokenizer-model '", ranks_file, "' entry ", i,
               ": ranks 0..255 must be the single bytes 0..255 in order");
    MT_REQUIRE(s.bytes_to_rank.emplace(*bytes, static_cast<int32_t>(i)).second,
               "--tokenizer-model '", ranks_file, "' entry ", i,
               ": the same token_bytes as an earlier rank");
    s.rank_bytes.push_back(std::move(*bytes));
  }
  s.splitter = std::make_unique<RegexSplitter>(pattern == "v1" ? kPatternV1 : kPatternV2,
                                               "--tiktoken-pattern " + pattern);
}

TikTokenizer::~TikTokenizer() = default;

std::vector<int32_t> TikTokenizer::encode(std::string_view text) const {
  check_utf8(text, "text to encode");
  const State& s = *state_;
  const auto shift = static_cast<int32_t>(s.special.size());
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  std::vector<std::string_view> pieces;
  // Ordinary text up to the leftmost special token, then that token's id, as tiktoken's
  // encode(text, allowed_special="all").
  const auto encode_ordinary = [&](std::string_view ordinary) {
    pieces.clear();
    s.splitter->split(ordinary, pieces);
    const size_t first = ids.size();
    for (std::string_view piece : pieces) s.bpe(piece, ids);
    for (size_t i = first; i < ids.size(); ++i) ids[i] += shift;
  };
  size_t start = 0;
  for (size_t at = text.find('<'); at != std::string_view::npos; at = text.find('<', at + 1)) {
    int32_t id = 0;
    const size_t length = s.special_at(text, at, id);
    if (length == 0) continue;
    encode_ordinary(text.substr(start, at - start));
    ids.push_back(id);
    start = at + length;
    at = start - 1;
  }
  encode_ordinary(text.substr(start));
  return ids;
}

std::string TikTokenizer::decode(const std::vector<int32_t>& ids) const {
  const auto num_special = static_cast<int32_t>(state_->special.size());
  std::string bytes;
  for (int32_t id : ids) {
    MT_CHECK(id >= 0 && id < vocab_size(), "token id ", id,
             " is outside the TikTokenizer vocabulary [0, ", vocab_size(), ")");
    bytes += id < num_special ? state_->special[id] : state_->rank_bytes[id - num_special];
  }
  return replace_invalid_utf8(bytes);
}

int64_t TikTokenizer::vocab_size() const {
  return state_->vocab_size;
}

// Positions in Megatron's SPECIAL_TOKENS.
int32_t TikTokenizer::eod() const {
  return 2;
}  // </s>
int32_t TikTokenizer::mask() const {
  return 3;
}  // <mask>
int32_t TikTokenizer::pad() const {
  return 4;
}  // <pad>
int32_t TikTokenizer::cls() const {
  return 5;
}  // <cls>
int32_t TikTokenizer::sep() const {
  return 6;
}  // <sep>

}  // namespace megatron
