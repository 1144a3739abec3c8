#include "tasks/finetune_data.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/logging.h"
#include "core/replace_all.h"
#include "data/utf8.h"
#include "tasks/python_text.h"

namespace megatron {

namespace {

// The lines of a text file as Python's text mode yields them: "\n", "\r\n" and "\r" all end a
// line (universal newlines), the terminator dropped.
std::vector<std::string> read_lines(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in, what, " '", path, "' cannot be read");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_utf8(text, std::string(what) + " '" + path + "'");
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n' && text[i] != '\r') continue;
    lines.emplace_back(text, begin, i - begin);
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    begin = i + 1;
  }
  if (begin < text.size()) lines.emplace_back(text, begin, std::string::npos);
  return lines;
}

// line.strip().split('\t')
std::vector<std::string> tsv_row(const std::string& line) {
  const std::string_view stripped = python_strip(line);
  std::vector<std::string> row;
  size_t begin = 0;
  for (size_t tab; (tab = stripped.find('\t', begin)) != std::string_view::npos; begin = tab + 1)
    row.emplace_back(stripped.substr(begin, tab - begin));
  row.emplace_back(stripped.substr(begin));
  return row;
}

// int(s.strip()) for a non-negative decimal uid.
int64_t parse_uid(const std::string& field, const std::string& path, size_t line) {
  const std::string_view s = python_strip(field);
  int64_t value = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  MT_CHECK(ec == std::errc() && end == s.data() + s.size() && value >= 0, "'", path, "' line ",
           line, ": the id '", field, "' is not a non-negative integer");
  return value;
}

std::string clean_field(const std::string& field) {
  return clean_text(python_strip(field));
}

}  // namespace

std::string clean_text(std::string_view text) {
  // "\n" → " " is subsumed by collapsing whitespace runs, which include "\n".
  std::string out;
  size_t pos = 0;
  bool in_space = false;
  while (pos < text.size()) {
    const size_t begin = pos;
    const bool space = is_python_space(next_code_point(text, pos));
    if (space && !in_space) out += ' ';
    if (!space) out.append(text, begin, pos - begin);
    in_space = space;
  }
  for (int pass = 0; pass < 3; ++pass) replace_all(out, " . ", ". ");
  return out;
}

std::vector<PairSample> read_mnli(const std::string& path, const std::string& test_label) {
  static const std::vector<std::string> kLabels = {"contradiction", "entailment", "neutral"};
  const auto label_id = [&](const std::string& label) {
    return int(std::find(kLabels.begin(), kLabels.end(), label) - kLabels.begin());
  };
  MT_CHECK(label_id(test_label) < 3, "MNLI test label '", test_label, "' is not one of ",
           "contradiction, entailment, neutral");
  const std::vector<std::string> lines = read_lines(path, "MNLI file");
  MT_CHECK(!lines.empty(), "MNLI file '", path, "' is empty: expected a header line and rows");
  const bool is_test = tsv_row(lines[0]).size() == 10;
  std::vector<PairSample> samples;
  for (size_t n = 1; n < lines.size(); ++n) {
    const std::vector<std::string> row = tsv_row(lines[n]);
    MT_CHECK(row.size() >= 10, "MNLI file '", path, "' line ", n + 1, ": ", row.size(),
             " tab-separated columns, expected at least 10 (sentence1 and sentence2 are "
             "columns 8 and 9)");
    PairSample s;
    s.text_a = clean_field(row[8]);
    s.text_b = clean_field(row[9]);
    s.uid = parse_uid(row[0], path, n + 1);
    const std::string label = is_test ? test_label : std::string(python_strip(row.back()));
    MT_CHECK(!s.text_a.empty() && !s.text_b.empty(), "MNLI file '", path, "' line ", n + 1,
             ": an empty sentence");
    s.label = label_id(label);
    MT_CHECK(s.label < 3, "MNLI file '", path, "' line ", n + 1, ": label '", label,
             "' is not contradiction, entailment or neutral");
    samples.push_back(std::move(s));
  }
  return samples;
}

std::vector<PairSample> read_qqp(const std::string& path, int test_label) {
  MT_CHECK(test_label == 0 || test_label == 1, "QQP test label ", test_label, " is not 0 or 1");
  const std::vector<std::string> lines = read_lines(path, "QQP file");
  MT_CHECK(!lines.empty(), "QQP file '", path, "' is empty: expected a header line and rows");
  const size_t header = tsv_row(lines[0]).size();
  MT_CHECK(header == 3 || header == 6, "QQP file '", path, "' line 1: a header of ", header,
           " columns, expected 6 (id, qid1, qid2, question1, question2, is_duplicate) or 3 "
           "(test: id, question1, question2)");
  const bool is_test = header == 3;
  std::vector<PairSample> samples;
  for (size_t n = 1; n < lines.size(); ++n) {
    const std::vector<std::string> row = tsv_row(lines[n]);
    PairSample s;
    if (is_test) {
      MT_CHECK(row.size() == 3, "QQP test file '", path, "' line ", n + 1, ": ", row.size(),
               " columns, expected 3");
      s.uid = parse_uid(row[0], path, n + 1);
      s.text_a = clean_field(row[1]);
      s.text_b = clean_field(row[2]);
      s.label = test_label;
      MT_CHECK(!s.text_a.empty() && !s.text_b.empty(), "QQP test file '", path, "' line ", n + 1,
               ": an empty question");
    } else {
      if (row.size() != 6) {
        log_warning("QQP file '" + path + "' line " + std::to_string(n + 1) + ": " +
                    std::to_string(row.size()) + " columns, not 6: skipped");
        continue;
      }
      s.uid = parse_uid(row[0], path, n + 1);
      s.text_a = clean_field(row[3]);
      s.text_b = clean_field(row[4]);
      const std::string_view label = python_strip(row[5]);
      MT_CHECK(label == "0" || label == "1", "QQP file '", path, "' line ", n + 1,
               ": is_duplicate '", row[5], "' is not 0 or 1");
      s.label = label == "1" ? 1 : 0;
      if (s.text_a.empty() || s.text_b.empty()) {
        log_warning("QQP file '" + path + "' line " + std::to_string(n + 1) +
                    ": an empty question: skipped");
        continue;
      }
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

std::vector<RaceQuestion> read_race(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".txt") files.push_back(entry.path().string());
  MT_CHECK(!ec, "RACE directory '", dir, "' cannot be read: ", ec.message());
  MT_CHECK(!files.empty(), "RACE directory '", dir,
           "' holds no .txt files (RACE's layout: one JSON article per file, e.g. "
           "RACE/train/middle/1.txt)");
  std::sort(files.begin(), files.end());
  std::vector<RaceQuestion> questions;
  for (const std::string& file : files) {
    const std::vector<std::string> lines = read_lines(file, "RACE file");
    for (size_t n = 0; n < lines.size(); ++n) {
      const auto where = [&] { return "RACE file '" + file + "' line " + std::to_string(n + 1); };
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(lines[n]);
      } catch (const nlohmann::json::exception& e) {
        MT_THROW(where(), ": not valid JSON (", e.what(), ")");
      }
      MT_CHECK(j.is_object() && j.contains("article") && j["article"].is_string() &&
                   j.contains("questions") && j["questions"].is_array() && j.contains("options") &&
                   j["options"].is_array() && j.contains("answers") && j["answers"].is_array(),
               where(), ": expected an object with \"article\" (a string) and \"questions\", ",
               "\"options\", \"answers\" (lists)");
      const auto& qs = j["questions"];
      MT_CHECK(qs.size() == j["answers"].size() && qs.size() == j["options"].size(), where(), ": ",
               qs.size(), " questions, ", j["options"].size(), " option lists and ",
               j["answers"].size(), " answers: expected as many of each");
      const std::string context = clean_text(j["article"].get<std::string>());
      for (size_t q = 0; q < qs.size(); ++q) {
        const auto& options = j["options"][q];
        const auto& answer = j["answers"][q];
        MT_CHECK(qs[q].is_string() && options.is_array() && options.size() == kRaceChoices &&
                     answer.is_string(),
                 where(), ": question ", q, " needs a string, 4 options and an answer letter");
        const std::string a = answer.get<std::string>();
        MT_CHECK(a.size() == 1 && a[0] >= 'A' && a[0] < 'A' + kRaceChoices, where(), ": answer '",
                 a, "' of question ", q, " is not A, B, C or D");
        RaceQuestion r;
        r.context = context;
        r.label = a[0] - 'A';
        const std::string question = qs[q].get<std::string>();
        for (int c = 0; c < kRaceChoices; ++c) {
          MT_CHECK(options[size_t(c)].is_string(), where(), ": option ", c, " of question ", q,
                   " is not a string");
          const std::string choice = options[size_t(c)].get<std::string>();
          std::string qa = question;
          if (qa.find('_') != std::string::npos) {
            replace_all(qa, "_", choice);
          } else {
            qa += " " + choice;
          }
          r.qa[size_t(c)] = clean_text(qa);
        }
        questions.push_back(std::move(r));
      }
    }
  }
  return questions;
}

BertPairInput bert_pair_input(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                              bool has_b, int64_t max_seq_length, int32_t cls_id, int32_t sep_id,
                              int32_t pad_id) {
  BertPairInput in;
  in.ids.push_back(cls_id);
  in.ids.insert(in.ids.end(), a.begin(), a.end());
  in.ids.push_back(sep_id);
  in.types.assign(in.ids.size(), 0);
  if (has_b) {
    in.ids.insert(in.ids.end(), b.begin(), b.end());
    in.types.resize(in.ids.size(), 1);
  }
  in.paddings.assign(in.ids.size(), 1);
  const bool trimmed = int64_t(in.ids.size()) >= max_seq_length;
  if (trimmed) {
    in.ids.resize(size_t(max_seq_length - 1));
    in.types.resize(size_t(max_seq_length - 1));
    in.paddings.resize(size_t(max_seq_length - 1));
  }
  if (has_b || trimmed) {
    in.ids.push_back(sep_id);
    in.types.push_back(has_b ? 1 : 0);
    in.paddings.push_back(1);
  }
  // Megatron pads the token types with the pad id too (0 for BERT's vocabularies).
  in.ids.resize(size_t(max_seq_length), pad_id);
  in.types.resize(size_t(max_seq_length), pad_id);
  in.paddings.resize(size_t(max_seq_length), 0);
  return in;
}

}  // namespace megatron
