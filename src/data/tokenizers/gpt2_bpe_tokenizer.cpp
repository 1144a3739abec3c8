// GPT-2 byte-level BPE. Reference: openai/gpt-2 src/encoder.py (also Megatron-LM's
// megatron/tokenizer/gpt2_tokenization.py, which is the same algorithm).
#include "data/tokenizers/gpt2_bpe_tokenizer.h"

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "data/read_file.h"
#include "data/tokenizers/bpe_merge.h"
#include "data/tokenizers/byte_level.h"
#include "data/tokenizers/piece_cache.h"
#include "data/tokenizers/regex_splitter.h"
#include "data/tokenizers/string_hash.h"
#include "data/utf8.h"

namespace megatron {
namespace {

// GPT-2's pattern; RegexSplitter spells \s out as the Unicode White_Space set that Python's
// `regex` module (used by GPT-2 and Megatron) matches.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

struct GPT2BPETokenizer::State {
  std::vector<std::string> id_to_bytes;           // [vocab_size] raw bytes of each token
  std::array<int32_t, 256> byte_ids{};            // id of each single-byte token
  std::unordered_map<uint64_t, BpeMerge> merges;  // (first id, second id) -> merge
  int32_t eod = -1;
  // encoder.json's entries as written (byte-unicode form): token_to_id's lookup.
  StringMap<int32_t> token_ids;
  std::unique_ptr<RegexSplitter> splitter;
  mutable PieceCache cache;  // thread-safe, so encode() can stay const

  // Appends the BPE ids of one piece (raw bytes) to out.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
};

void GPT2BPETokenizer::State::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t hash = StringHash{}(piece);
  if (cache.find(piece, hash, out)) return;
  std::vector<int32_t> ids(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_ids[static_cast<uint8_t>(piece[i])];
  bpe_merge(ids, [&](int32_t left, int32_t right) -> std::optional<BpeMerge> {
    auto it = merges.find(bpe_pair_key(left, right));
    if (it == merges.end()) return std::nullopt;
    return it->second;
  });
  out.insert(out.end(), ids.begin(), ids.end());
  // Long pieces are rare and would crowd the cache out; they are fast to redo anyway.
  if (piece.size() <= PieceCache::kMaxPieceBytes) cache.insert(piece, hash, std::move(ids));
}

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : state_(std::make_unique<State>()) {
  State& s = *state_;

  // encoder.json: {"token in byte-unicode form": id, ...}, ids dense from 0.
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_file, "--vocab-file"));
  } catch (const nlohmann::json::exception& e) {
    MT_THROW("--vocab-file '", vocab_file, "' is not valid JSON: ", e.what());
  }
  MT_REQUIRE(vocab.is_object() && !vocab.empty(), "--vocab-file '", vocab_file,
             "' must be a non-empty JSON object mapping tokens to ids (GPT-2 encoder.json)");
  s.id_to_bytes.resize(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  std::unordered_map<std::string, int32_t> bytes_to_id;
  for (const auto& [token, id_json] : vocab.items()) {
    MT_REQUIRE(id_json.is_number_integer(), "--vocab-file '", vocab_file, "': id of token '", token,
               "' is not an integer");
    const int64_t id = id_json.get<int64_t>();
    MT_REQUIRE(id >= 0 && id < static_cast<int64_t>(vocab.size()) && !seen[id], "--vocab-file '",
               vocab_file, "': token '", token, "' has id ", id, "; expected unique ids 0..",
               vocab.size() - 1);
    seen[id] = true;
    s.id_to_bytes[id] = byte_level_token_bytes(token, vocab_file);
    bytes_to_id.emplace(s.id_to_bytes[id], static_cast<int32_t>(id));
    s.token_ids.emplace(token, static_cast<int32_t>(id));
    if (token == "<|endoftext|>") s.eod = static_cast<int32_t>(id);
  }
  MT_REQUIRE(s.eod >= 0, "--vocab-file '", vocab_file, "' has no '<|endoftext|>' token");
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    MT_REQUIRE(it != bytes_to_id.end(), "--vocab-file '", vocab_file,
               "' lacks the single-byte token for byte ", b, "; byte-level BPE needs all 256");
    s.byte_ids[b] = it->second;
  }

  // vocab.bpe: a "#version" line, then one merge "first second" per line in rank order.
  const std::string merges = read_file(merge_file, "--merge-file");
  size_t line_start = 0;
  int line_number = 0;
  int32_t rank = 0;
  while (line_start < merges.size()) {
    size_t line_end = merges.find('\n', line_start);
    if (line_end == std::string::npos) line_end = merges.size();
    const std::string_view line(merges.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_number;
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    MT_REQUIRE(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                   line.find(' ', space + 1) == std::string_view::npos,
               "--merge-file '", merge_file, "' line ", line_number,
               ": expected two tokens separated by one space, got '", line, "'");
    const std::string first = byte_level_token_bytes(line.substr(0, space), merge_file);
    const std::string second = byte_level_token_bytes(line.substr(space + 1), merge_file);
    const auto first_id = bytes_to_id.find(first);
    const auto second_id = bytes_to_id.find(second);
    const auto merged_id = bytes_to_id.find(first + second);
    MT_REQUIRE(first_id != bytes_to_id.end() && second_id != bytes_to_id.end() &&
                   merged_id != bytes_to_id.end(),
               "--merge-file '", merge_file, "' line ", line_number, ": merge '", line,
               "' uses or makes a token that is not in --vocab-file '", vocab_file, "'");
    // A repeated pair takes the later rank, as dict(zip(merges, range(...))) does.
    s.merges.insert_or_assign(bpe_pair_key(first_id->second, second_id->second),
                              BpeMerge{rank++, merged_id->second});
  }
  MT_REQUIRE(rank > 0, "--merge-file '", merge_file, "' has no merges");

  s.splitter = std::make_unique<RegexSplitter>(kGpt2Pattern, "GPT-2 pre-tokenization");
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

std::vector<std::string_view> GPT2BPETokenizer::pre_tokenize(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::vector<std::string_view> pieces;
  state_->splitter->split(text, pieces);
  return pieces;
}

std::vector<int32_t> GPT2BPETokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  for (std::string_view piece : pre_tokenize(text)) state_->bpe(piece, ids);
  return ids;
}

std::string GPT2BPETokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    MT_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the GPT-2 vocabulary [0, ",
             vocab_size(), ")");
    bytes += state_->id_to_bytes[id];
  }
  return replace_invalid_utf8(bytes);
}

int64_t GPT2BPETokenizer::vocab_size() const {
  return static_cast<int64_t>(state_->id_to_bytes.size());
}

int32_t GPT2BPETokenizer::eod() const {
  return state_->eod;
}

std::optional<int32_t> GPT2BPETokenizer::token_to_id(std::string_view token) const {
  const auto it = state_->token_ids.find(token);
  if (it == state_->token_ids.end()) return std::nullopt;
  return it->second;
}

}  // namespace megatron
