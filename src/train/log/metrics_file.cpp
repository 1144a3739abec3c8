#include "train/log/metrics_file.h"

#include <filesystem>
#include <sstream>

#include "core/durable_file.h"
#include "core/error.h"
#include "data/atomic_file.h"

namespace megatron {

namespace {

// The rows of `text` (the file's contents), each with its raw line for rewriting.
std::vector<std::pair<nlohmann::json, std::string>> parse_rows(const std::string& path,
                                                               const std::string& text) {
  std::vector<std::pair<nlohmann::json, std::string>> rows;
  std::istringstream in(text);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      MT_THROW("metrics file '", path, "' line ", number, " is not JSON: ", e.what());
    }
    MT_REQUIRE(row.is_object() && row.contains("iteration") && row["iteration"].is_number_integer(),
               "metrics file '", path, "' line ", number,
               " is not a metrics row (a JSON object with an integer \"iteration\")");
    rows.emplace_back(std::move(row), line);
  }
  return rows;
}

}  // namespace

std::vector<nlohmann::json> read_metrics_file(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (auto& [row, line] : parse_rows(path, read_file(path, "metrics file")))
    out.push_back(std::move(row));
  return out;
}

int64_t truncate_metrics_file(const std::string& path, int64_t iteration) {
  // Only a regular file can be rewritten (not a FIFO, /dev/stdout or /dev/full).
  if (!std::filesystem::is_regular_file(path)) return 0;
  const auto rows = parse_rows(path, read_file(path, "metrics file"));
  std::string kept;
  int64_t removed = 0;
  for (const auto& [row, line] : rows) {
    if (row["iteration"].get<int64_t>() > iteration) {
      ++removed;
    } else {
      kept += line + "\n";
    }
  }
  if (removed == 0) return 0;
  AtomicFile file(path);
  file.write(kept.data(), kept.size());
  file.commit();
  return removed;
}

}  // namespace megatron
