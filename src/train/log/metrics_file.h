// The --metrics-file: one JSON object per line, written by TrainingLog — {"type": "train", ...}
// for each logged iteration, {"type": "validation", ...} for each evaluation, both with
// "iteration" — and read back by `megatron plot` and the tests.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace megatron {

// Every row of the file in order. Throws Error naming the file and line number when a line
// is not a JSON object with an integer "iteration", or when the file cannot be read.
std::vector<nlohmann::json> read_metrics_file(const std::string& path);

// Removes, atomically (written aside, then renamed over), every row whose iteration is past
// `iteration`, so that a run resumed (or restarted) at `iteration` leaves one row per
// iteration. Nothing happens when the file does not exist, is not a regular file (a FIFO, a
// device) or has no such row. Returns the
// number of rows removed.
int64_t truncate_metrics_file(const std::string& path, int64_t iteration);

}  // namespace megatron
