#include "model/pipeline_layout.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace megatron {

namespace {

constexpr int kMaxCount = 100000;          // a repetition count
constexpr size_t kMaxExpanded = 10000000;  // symbols after unrolling

std::string flag_of(std::string_view layout) {
  return "--pipeline-model-parallel-layout \"" + std::string(layout) + "\"";
}

bool digit(char c) {
  return c >= '0' && c <= '9';
}

// The count of a "*N" whose digits start at text[at]; `end` receives the index after them.
// Megatron's `\d+` takes every digit; counts past kMaxCount are refused (no model has that many
// stages or layers, and unrolling them would only exhaust memory).
int count_at(std::string_view text, size_t at, size_t& end, std::string_view layout) {
  end = at;
  long long n = 0;
  while (end < text.size() && digit(text[end])) {
    n = std::min<long long>(n * 10 + (text[end] - '0'), kMaxCount + 1LL);
    ++end;
  }
  MT_REQUIRE(n <= kMaxCount, flag_of(layout), ": the repetition count ", text.substr(at, end - at),
             " is larger than ", kMaxCount);
  return int(n);
}

void append_copies(std::string& out, std::string_view what, int n, std::string_view layout) {
  MT_REQUIRE(out.size() + what.size() * size_t(n) <= kMaxExpanded, flag_of(layout),
             " unrolls to more than ", kMaxExpanded, " symbols");
  for (int i = 0; i < n; ++i) out.append(what);
}

// Why `c`, left over after unrolling, is not part of a layout.
std::string why_not_a_symbol(char c) {
  if (std::isspace(static_cast<unsigned char>(c)))
    return "a space is not a layer symbol (Megatron-LM refuses it too): write the layout "
           "without spaces; commas may separate layers";
  switch (c) {
    case '(':
      return "a '(' must open a group written (X)*N, with X not empty and without parentheses "
             "(groups do not nest), e.g. (tt|)*3";
    case ')':
      return "a ')' must close a group written (X)*N, e.g. (tt|)*3";
    case '*':
      return "a '*' must follow a layer symbol, a '|' or a group (X) and be followed by a count, "
             "e.g. t*3";
    default:
      if (digit(c)) return "a count must follow a '*', e.g. t*3";
      return std::string("'") + c +
             "' is not a layer symbol: the symbols are E (embedding), t (transformer layer), "
             "m (MTP layer) and L (loss), with '|' between stages, ',' as a cosmetic separator, "
             "and c*N, (X)*N for repetition";
  }
}

}  // namespace

std::string expand_pipeline_layout(std::string_view layout) {
  std::string text;
  for (char c : layout)
    if (c != ',') text += c;

  // Pass 1: "(X)*N", X any characters but ')' (at least one), the leftmost first.
  std::string groups;
  for (size_t i = 0; i < text.size();) {
    const size_t close = text[i] == '(' ? text.find(')', i + 1) : std::string::npos;
    if (close != std::string::npos && close > i + 1 && close + 2 < text.size() &&
        text[close + 1] == '*' && digit(text[close + 2])) {
      size_t end = 0;
      const int n = count_at(text, close + 2, end, layout);
      append_copies(groups, std::string_view(text).substr(i + 1, close - i - 1), n, layout);
      i = end;
    } else {
      groups += text[i++];
    }
  }

  // Pass 2: "c*N", c any one character.
  std::string out;
  for (size_t i = 0; i < groups.size();) {
    if (i + 2 < groups.size() && groups[i + 1] == '*' && digit(groups[i + 2])) {
      size_t end = 0;
      const int n = count_at(groups, i + 2, end, layout);
      append_copies(out, std::string_view(groups).substr(i, 1), n, layout);
      i = end;
    } else {
      out += groups[i++];
    }
  }
  return out;
}

std::vector<std::string> parse_pipeline_layout(std::string_view layout) {
  const std::string text = expand_pipeline_layout(layout);
  std::vector<std::string> stages(1);
  for (char c : text) {
    if (c == '|') {
      stages.emplace_back();
      continue;
    }
    MT_REQUIRE(c == 'E' || c == 't' || c == 'm' || c == 'L', flag_of(layout), ": ",
               why_not_a_symbol(c));
    stages.back() += c;
  }
  return stages;
}

std::vector<int> pipeline_layout_stage_layers(std::string_view layout, int num_layers,
                                              int pipeline_size, int mtp_num_layers) {
  const std::vector<std::string> stages = parse_pipeline_layout(layout);
  const int n = int(stages.size());
  MT_REQUIRE(pipeline_size >= 1, "--pipeline-model-parallel-size must be >= 1, got ",
             pipeline_size);
  MT_REQUIRE(n % pipeline_size == 0, flag_of(layout), " has ", n,
             " stages ('|' separates them), not a multiple of --pipeline-model-parallel-size ",
             pipeline_size, ": every pipeline rank holds the same number of virtual stages");
  MT_REQUIRE(pipeline_size > 1 || n == 1, flag_of(layout), " has ", n,
             " stages for --pipeline-model-parallel-size 1: more than one stage per pipeline "
             "rank is the interleaved schedule, which needs --pipeline-model-parallel-size > 1");

  std::string all;
  for (const std::string& s : stages) all += s;
  const auto count = [&](char c) { return int(std::count(all.begin(), all.end(), c)); };
  MT_REQUIRE(count('m') == mtp_num_layers, flag_of(layout), " places ", count('m'),
             " MTP layers ('m'), but --mtp-num-layers is ", mtp_num_layers,
             " (Megatron's rule: the layout names every MTP layer)");
  const std::string& last = stages.back();
  MT_REQUIRE(std::count(last.begin(), last.end(), 'm') == mtp_num_layers &&
                 (mtp_num_layers == 0 || last.find('t', last.find('m')) == std::string::npos),
             flag_of(layout),
             " must place the MTP layers ('m') in the last stage, after its transformer layers "
             "and with the loss (L): MTP on a stage of its own (Megatron's standalone MTP) is not "
             "implemented here");
  MT_REQUIRE(!stages.front().empty() && stages.front().front() == 'E' && count('E') == 1,
             flag_of(layout),
             " must name the embedding (E) once, as the first symbol of the first stage: the "
             "embedding is built on the first virtual stage");
  MT_REQUIRE(!stages.back().empty() && stages.back().back() == 'L' && count('L') == 1,
             flag_of(layout),
             " must name the loss (L: the final norm, the output layer and the loss) once, as "
             "the last symbol of the last stage: they are built on the last virtual stage");
  MT_REQUIRE(count('t') == num_layers, flag_of(layout), " holds ", count('t'),
             " transformer layers (t), but --num-layers is ", num_layers);

  std::vector<int> layers;
  for (const std::string& s : stages) layers.push_back(int(std::count(s.begin(), s.end(), 't')));
  return layers;
}

}  // namespace megatron
