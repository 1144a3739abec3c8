// GPT-2 byte-level BPE. Reference: openai/gpt-2 src/encoder.py (also Megatron-LM's
// megatron/tokenizer/gpt2_tokenization.py, which is the same algorithm).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/gpt2_bpe_tokenizer.h"

#include <pcre2.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "data/piece_cache.h"
#include "data/read_file.h"
#include "data/string_hash.h"
#include "data/utf8.h"

namespace megatron {
namespace {

// GPT-2's pattern, with \s spelled out as the Unicode White_Space set that Python's `regex`
// module (used by GPT-2 and Megatron) matches. PCRE2's own \s under UCP omits U+0085, so
// it would split some texts differently.
constexpr const char* kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";

std::string gpt2_pattern() {
  const std::string ws = kWhiteSpace;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + ws + "\\p{L}\\p{N}]+|[" + ws +
         "]+(?![^" + ws + "])|[" + ws + "]+";
}

// bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the other 68 bytes map,
// in byte order, to U+0100 onwards, so every byte has a visible, non-space character.
constexpr std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}
constexpr std::array<char32_t, 256> kByteToUnicode = make_byte_to_unicode();

// The raw bytes a vocabulary/merges token stands for (the byte-to-unicode table undone).
std::string unicode_to_bytes(std::string_view token, std::string_view file) {
  static const std::array<int, 512> unicode_to_byte = [] {
    std::array<int, 512> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[kByteToUnicode[b]] = b;
    return table;
  }();
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t cp = next_code_point(token, pos);
    MT_REQUIRE(cp < unicode_to_byte.size() && unicode_to_byte[cp] >= 0, file, ": token '", token,
               "' has a character outside GPT-2's byte-to-unicode table");
    bytes += static_cast<char>(unicode_to_byte[cp]);
  }
  return bytes;
}

uint64_t pair_key(int32_t first, int32_t second) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(first)) << 32) |
         static_cast<uint32_t>(second);
}

// Pieces longer than this are not cached.
constexpr size_t kMaxCachedPieceBytes = 256;

struct Merge {
  int32_t rank;    // line index in the merges file: lower merges first
  int32_t merged;  // id of the concatenated token
};

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

char32_t gpt2_byte_to_unicode(uint8_t byte) {
  return kByteToUnicode[byte];
}

struct GPT2BPETokenizer::State {
  std::vector<std::string> id_to_bytes;        // [vocab_size] raw bytes of each token
  std::array<int32_t, 256> byte_ids{};         // id of each single-byte token
  std::unordered_map<uint64_t, Merge> merges;  // (first id, second id) -> merge
  int32_t eod = -1;
  std::unique_ptr<pcre2_code, CodeDeleter> pattern;
  mutable PieceCache cache;  // thread-safe, so encode() can stay const

  // Appends the BPE ids of one piece (raw bytes) to out.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
};

void GPT2BPETokenizer::State::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t hash = StringHash{}(piece);
  if (cache.find(piece, hash, out)) return;
  // encoder.py repeatedly takes the lowest-ranked adjacent pair and merges all its
  // non-overlapping occurrences left to right: O(n^2) per piece, which stalls on long runs of
  // letters (DNA, base64, "aaaa..."). A heap ordered by (rank, position) pops the same merges
  // in the same order in O(n log n): a merge never recreates the pair just merged (the merged
  // token is longer than either part), so all occurrences of one rank are popped left to right
  // before any higher rank, and an occurrence that overlaps a merged one is found stale.
  const auto n = static_cast<int32_t>(piece.size());
  if (n == 0) return;
  struct Symbol {
    int32_t id;    // token id; -1 once merged into its left neighbour
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
  };
  // symbols: [n] one per byte at first, a doubly linked list of the live ones.
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  struct Candidate {
    int32_t rank, left, left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> candidates;
  const auto consider = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges.find(pair_key(symbols[left].id, symbols[right].id));
    if (it == merges.end()) return;
    candidates.push(
        {it->second.rank, left, symbols[left].id, symbols[right].id, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!candidates.empty()) {
    const Candidate c = candidates.top();
    candidates.pop();
    Symbol& left = symbols[c.left];
    // Stale when either symbol has changed since the pair was seen.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    if (left.prev >= 0) consider(left.prev);
    consider(c.left);
  }
  std::vector<int32_t> ids;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  out.insert(out.end(), ids.begin(), ids.end());
  // Long pieces are rare and would crowd the cache out; they are fast to redo anyway.
  if (piece.size() <= kMaxCachedPieceBytes) cache.insert(piece, hash, std::move(ids));
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
    s.id_to_bytes[id] = unicode_to_bytes(token, vocab_file);
    bytes_to_id.emplace(s.id_to_bytes[id], static_cast<int32_t>(id));
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
    const std::string first = unicode_to_bytes(line.substr(0, space), merge_file);
    const std::string second = unicode_to_bytes(line.substr(space + 1), merge_file);
    const auto first_id = bytes_to_id.find(first);
    const auto second_id = bytes_to_id.find(second);
    const auto merged_id = bytes_to_id.find(first + second);
    MT_REQUIRE(first_id != bytes_to_id.end() && second_id != bytes_to_id.end() &&
                   merged_id != bytes_to_id.end(),
               "--merge-file '", merge_file, "' line ", line_number, ": merge '", line,
               "' uses or makes a token that is not in --vocab-file '", vocab_file, "'");
    // A repeated pair takes the later rank, as dict(zip(merges, range(...))) does.
    s.merges.insert_or_assign(pair_key(first_id->second, second_id->second),
                              Merge{rank++, merged_id->second});
  }
  MT_REQUIRE(rank > 0, "--merge-file '", merge_file, "' has no merges");

  const std::string pattern = gpt2_pattern();
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  s.pattern.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr));
  MT_CHECK(s.pattern != nullptr, "GPT-2 pre-tokenization pattern failed to compile (PCRE2 error ",
           error_code, " at offset ", error_offset, ")");
  // JIT is an optimization only: without it pcre2_match interprets the same pattern.
  pcre2_jit_compile(s.pattern.get(), PCRE2_JIT_COMPLETE);
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

std::vector<std::string_view> GPT2BPETokenizer::pre_tokenize(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(state_->pattern.get(), nullptr));
  MT_CHECK(match != nullptr, "out of memory allocating PCRE2 match data");
  std::vector<std::string_view> pieces;
  size_t offset = 0;
  while (offset < text.size()) {
    // NO_UTF_CHECK: validated once above; PCRE2 would otherwise re-scan the whole text on
    // every call, making encode quadratic.
    const int rc = pcre2_match(state_->pattern.get(), reinterpret_cast<PCRE2_SPTR>(text.data()),
                               text.size(), offset, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    // Every character is matched by some alternative (whitespace, letter, number or other),
    // so a failure here is a PCRE2 resource error, not a property of the text.
    MT_CHECK(rc > 0, "GPT-2 pre-tokenization failed at byte ", offset, " (PCRE2 error ", rc, ")");
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    MT_CHECK(ovector[0] == offset && ovector[1] > offset,
             "GPT-2 pre-tokenization skipped text at byte ", offset);
    pieces.push_back(text.substr(ovector[0], ovector[1] - ovector[0]));
    offset = ovector[1];
  }
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

}  // namespace megatron
