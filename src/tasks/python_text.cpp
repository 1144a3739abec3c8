#include "tasks/python_text.h"

#include "data/utf8.h"

namespace megatron {

bool is_python_space(char32_t cp) {
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

const std::string& python_space_class() {
  static const std::string kClass =
      "[\\t-\\r\\x{1c}-\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
      "\\x{202f}\\x{205f}\\x{3000}]";
  return kClass;
}

namespace {

// The byte ranges [begin, end) of the maximal runs of characters whose whitespace-ness is
// `space`, scanning the whole text once.
template <typename Visit>
void for_each_run(std::string_view text, bool space, Visit visit) {
  size_t pos = 0, run_begin = std::string_view::npos;
  while (pos < text.size()) {
    const size_t begin = pos;
    const bool is_space = is_python_space(next_code_point(text, pos));
    if (is_space == space && run_begin == std::string_view::npos) run_begin = begin;
    if (is_space != space && run_begin != std::string_view::npos) {
      visit(run_begin, begin);
      run_begin = std::string_view::npos;
    }
  }
  if (run_begin != std::string_view::npos) visit(run_begin, text.size());
}

}  // namespace

std::string_view python_strip(std::string_view text) {
  size_t first = std::string_view::npos, last = 0;
  for_each_run(text, false, [&](size_t begin, size_t end) {
    if (first == std::string_view::npos) first = begin;
    last = end;
  });
  return first == std::string_view::npos ? std::string_view() : text.substr(first, last - first);
}

std::vector<std::string_view> python_split(std::string_view text) {
  std::vector<std::string_view> words;
  for_each_run(text, false,
               [&](size_t begin, size_t end) { words.push_back(text.substr(begin, end - begin)); });
  return words;
}

}  // namespace megatron
