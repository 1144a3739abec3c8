// NullTokenizer: parse and print integer ids.
#include "data/tokenizers/null_tokenizer.h"

#include <charconv>
#include <limits>

#include "core/error.h"

namespace megatron {

NullTokenizer::NullTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {
  MT_REQUIRE(vocab_size > 0 && vocab_size <= std::numeric_limits<int32_t>::max(),
             "NullTokenizer needs --vocab-size in [1, 2^31 - 1], got ", vocab_size);
}

std::vector<int32_t> NullTokenizer::encode(std::string_view text) const {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  std::vector<int32_t> ids;
  size_t pos = text.find_first_not_of(kSpace);
  while (pos != std::string_view::npos) {
    size_t end = text.find_first_of(kSpace, pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(pos, end - pos);
    int64_t id = -1;
    const auto [last, error] = std::from_chars(word.data(), word.data() + word.size(), id);
    MT_REQUIRE(
        error == std::errc() && last == word.data() + word.size() && id >= 0 && id < vocab_size_,
        "NullTokenizer: '", word, "' at byte ", pos, " is not a token id in [0, ", vocab_size_,
        ")");
    ids.push_back(static_cast<int32_t>(id));
    pos = text.find_first_not_of(kSpace, end);
  }
  return ids;
}

std::string NullTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text += ' ';
    text += std::to_string(ids[i]);
  }
  return text;
}

}  // namespace megatron
