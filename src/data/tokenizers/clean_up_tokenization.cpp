#include "data/tokenizers/clean_up_tokenization.h"

#include <string_view>
#include <utility>

namespace megatron {

std::string clean_up_tokenization(std::string text) {
  // Applied one after another, in transformers' order.
  constexpr std::pair<std::string_view, std::string_view> kCleanups[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kCleanups) {
    std::string cleaned;
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      cleaned.append(text, pos, hit - pos).append(to);
    }
    text = cleaned.append(text, pos);
  }
  return text;
}

}  // namespace megatron
