#include "train/rerun_tracker.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/local_time.h"
#include "core/logging.h"
#include "core/number_format.h"

namespace megatron {

const char* rerun_validation_status_name(RerunValidationStatus status) {
  switch (status) {
    case RerunValidationStatus::kRerunDisabled:
      return "rerun_disabled";
    case RerunValidationStatus::kInitialRun:
      return "initial_run";
    case RerunValidationStatus::kFirstRerunNotReproducible:
      return "first_rerun_not_reproducible";
    case RerunValidationStatus::kFirstRerunReproducible:
      return "first_rerun_reproducible";
    case RerunValidationStatus::kSecondRerunNotReproducible:
      return "second_rerun_not_reproducible";
    case RerunValidationStatus::kSecondRerunReproducible:
      return "second_rerun_reproducible";
  }
  MT_CHECK(false, "unknown rerun validation status");
}

void check_tracker_appendable(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "a");
  MT_REQUIRE(f != nullptr, "--result-rejected-tracker-filename '", file,
             "' cannot be opened for appending: ", std::strerror(errno),
             "; name a file in a writable directory");
  std::fclose(f);
}

void append_tracker_record(const std::string& file, const RerunTrackerRecord& r) {
  const char* job = std::getenv("SLURM_JOBID");
  const std::string line = "ts=" + local_time_with_micros() + " node=" + r.node +
                           " device=" + r.device + " jobID=" + (job != nullptr ? job : "N/A") +
                           " rank=" + std::to_string(r.rank) +
                           " iteration=" + std::to_string(r.iteration) +
                           " status=" + rerun_validation_status_name(r.status) +
                           " result=" + format_number(r.result, "%.9g") + " message='" + r.message +
                           "' samples=" + std::to_string(r.first_sample) + ".." +
                           std::to_string(r.first_sample + r.samples - 1) + "\n";
  std::FILE* f = std::fopen(file.c_str(), "a");
  bool written = f != nullptr && std::fputs(line.c_str(), f) >= 0;
  if (f != nullptr) written = std::fclose(f) == 0 && written;
  if (!written)
    log_warning("could not record the rejected result in --result-rejected-tracker-filename '" +
                file + "': " + std::strerror(errno));
}

std::vector<int64_t> iterations_to_skip_from_tracker(const std::string& file) {
  std::ifstream in(file);
  if (!in) return {};
  // Megatron's parser: the status may be written as a value ("first_rerun_reproducible") or
  // as Python writes an enum member ("RerunValidationStatus.FIRST_RERUN_REPRODUCIBLE").
  static const std::regex kLine(
      "ts=.+ node=.+ device=.+ jobID=(.+) rank=(.+) iteration=(.+) status=(.+) result=.+ "
      "message=.+");
  std::set<int64_t> potentially_skipped, ignored;
  std::set<std::pair<int64_t, int64_t>> seen;  // (rank, iteration)
  std::map<std::string, std::map<int64_t, std::set<int64_t>>> ranks_by_job;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, kLine)) continue;
    std::string status = m[4].str();
    status = status.substr(status.rfind('.') + 1);
    std::transform(status.begin(), status.end(), status.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (status != "rerun_disabled" && status != "first_rerun_reproducible" &&
        status != "second_rerun_reproducible")
      continue;
    int64_t rank = 0, iteration = 0;
    try {
      rank = std::stoll(m[2].str());
      iteration = std::stoll(m[3].str());
    } catch (const std::exception&) {
      continue;
    }
    if (!seen.insert({rank, iteration}).second) potentially_skipped.insert(iteration);
    std::set<int64_t>& ranks = ranks_by_job[m[1].str()][iteration];
    ranks.insert(rank);
    if (ranks.size() > 1) ignored.insert(iteration);
  }
  std::vector<int64_t> skipped;
  std::set_difference(potentially_skipped.begin(), potentially_skipped.end(), ignored.begin(),
                      ignored.end(), std::back_inserter(skipped));
  return skipped;
}

}  // namespace megatron
