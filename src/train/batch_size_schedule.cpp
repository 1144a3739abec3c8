// BatchSizeSchedule. Reference: Megatron-LM megatron/core/num_microbatches_calculator.py
// (StepBatchsizeNumMicroBatchesCalculator: _parse_numeric_value, _parse_schedule,
// _validate_schedule, _get_batch_size_for_samples, update) and megatron/training/training.py
// (update_train_iters).
#include "train/batch_size_schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace megatron {
namespace {

constexpr const char* kFlag = "--step-batch-size-schedule";

// Python's float() of an already stripped, upper-cased string: decimal digits (an underscore
// allowed between two digits), an optional sign, point and exponent. nullopt otherwise
// (also for inf and nan, which int() would refuse).
bool parse_python_float(std::string text, double& value) {
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_') {
      const bool between_digits = i > 0 && i + 1 < text.size() &&
                                  std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                  std::isdigit(static_cast<unsigned char>(text[i + 1]));
      if (!between_digits) return false;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(text[i])) &&
        std::string_view("+-.E").find(text[i]) == std::string_view::npos)
      return false;
    digits += text[i];
  }
  if (digits.empty() || digits.find_first_of("0123456789") == std::string::npos) return false;
  char* end = nullptr;
  value = std::strtod(digits.c_str(), &end);
  return end == digits.c_str() + digits.size() && std::isfinite(value);
}

// Megatron's _parse_numeric_value: int(float(value) * multiplier) with a K/M/B/T suffix.
int64_t parse_numeric_value(const std::string& entry, const std::string& raw) {
  std::string text;
  for (char c : raw) text += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double multiplier = 1;
  if (!text.empty()) {
    const char suffix = text.back();
    multiplier = suffix == 'T'   ? 1e12
                 : suffix == 'B' ? 1e9
                 : suffix == 'M' ? 1e6
                 : suffix == 'K' ? 1e3
                                 : 1;
    if (multiplier != 1) text.pop_back();
  }
  double value = 0;
  MT_REQUIRE(parse_python_float(text, value), kFlag, " entry \"", entry, "\": '", raw,
             "' is not a number (a float with an optional K, M, B or T suffix)");
  const double product = value * multiplier;
  MT_REQUIRE(std::fabs(product) < 9.2e18, kFlag, " entry \"", entry, "\": ", raw,
             " does not fit in 64 bits");
  return static_cast<int64_t>(std::trunc(product));  // Python's int() truncates
}

// Python's floor division.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

}  // namespace

BatchSizeSchedule BatchSizeSchedule::constant(int64_t global_batch) {
  MT_REQUIRE(global_batch >= 1, "--global-batch-size must be positive, got ", global_batch);
  return BatchSizeSchedule({{0, global_batch}});
}

BatchSizeSchedule BatchSizeSchedule::parse(const std::string& schedule, int64_t seq_length) {
  MT_CHECK(seq_length >= 0, "seq_length must be >= 0");
  std::string text = schedule;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::vector<Step> steps;
  size_t at = 0;
  while (true) {
    at = text.find_first_not_of(" \t\n\r\f\v", at);
    if (at == std::string::npos) break;
    const size_t end = std::min(text.find_first_of(" \t\n\r\f\v", at), text.size());
    const std::string entry = text.substr(at, end - at);
    at = end;
    const size_t colon = entry.find(':');
    MT_REQUIRE(colon != std::string::npos, kFlag, ": invalid schedule entry \"", entry,
               "\". Expected format: \"THRESHOLD:BATCH_SIZE\"");
    int64_t threshold = parse_numeric_value(entry, entry.substr(0, colon));
    const int64_t batch = parse_numeric_value(entry, entry.substr(colon + 1));
    if (seq_length > 0) threshold = floor_div(threshold, seq_length);
    steps.emplace_back(threshold, batch);
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const Step& a, const Step& b) { return a.first < b.first; });
  MT_REQUIRE(!steps.empty(), kFlag, ": the schedule must have at least one entry");
  MT_REQUIRE(steps[0].first == 0, kFlag, ": the first schedule entry must have threshold 0, got ",
             steps[0].first,
             seq_length > 0 ? " samples (thresholds are tokens / --seq-length)" : "");
  for (size_t i = 1; i < steps.size(); ++i) {
    MT_REQUIRE(steps[i].first > steps[i - 1].first, kFlag,
               ": schedule thresholds must be strictly increasing, got ", steps[i - 1].first,
               " before ", steps[i].first,
               seq_length > 0 ? " (samples: thresholds are tokens / --seq-length)" : "");
  }
  for (const Step& step : steps) {
    MT_REQUIRE(step.second > 0, kFlag, ": batch size must be positive, got ", step.second);
  }
  return BatchSizeSchedule(std::move(steps));
}

int64_t BatchSizeSchedule::global_batch_at(int64_t consumed_samples) const {
  int64_t batch = steps_[0].second;
  for (const Step& step : steps_) {
    if (consumed_samples < step.first) break;
    batch = step.second;
  }
  return batch;
}

int64_t BatchSizeSchedule::num_micro_batches_at(int64_t consumed_samples, int64_t micro_batch,
                                                int64_t dp_size) const {
  const int64_t batch = global_batch_at(consumed_samples);
  const int64_t per_step = micro_batch * dp_size;
  MT_REQUIRE(batch % per_step == 0, "current global batch size (", batch,
             ") is not divisible by micro_batch_size (", micro_batch, ") * data_parallel_size (",
             dp_size, ")", is_constant() ? "" : " (--step-batch-size-schedule)");
  return batch / per_step;
}

void BatchSizeSchedule::check_divisible_from(int64_t consumed_samples, int64_t micro_batch,
                                             int64_t dp_size) const {
  for (size_t i = 0; i < steps_.size(); ++i) {
    const bool passed = i + 1 < steps_.size() && steps_[i + 1].first <= consumed_samples;
    if (passed) continue;
    MT_REQUIRE(steps_[i].second % (micro_batch * dp_size) == 0,
               "--step-batch-size-schedule: "
               "the batch size ",
               steps_[i].second, " from ", steps_[i].first,
               " consumed samples on is not divisible by micro_batch_size (", micro_batch,
               ") * data_parallel_size (", dp_size, "); make every batch size a multiple of ",
               micro_batch * dp_size);
  }
}

int64_t BatchSizeSchedule::iterations_for_samples(int64_t train_samples) const {
  // Megatron steps one iteration at a time; whole runs of one batch size are counted at once.
  int64_t consumed = 0;
  int64_t iterations = 0;
  for (size_t i = 0; i < steps_.size() && consumed < train_samples; ++i) {
    const int64_t end =
        i + 1 < steps_.size() ? std::min(steps_[i + 1].first, train_samples) : train_samples;
    if (consumed >= end) continue;
    const int64_t batch = steps_[i].second;
    const int64_t n = (end - consumed + batch - 1) / batch;
    consumed += n * batch;
    iterations += n;
  }
  return iterations;
}

int64_t BatchSizeSchedule::max_global_batch() const {
  int64_t batch = 0;
  for (const Step& step : steps_) batch = std::max(batch, step.second);
  return batch;
}

}  // namespace megatron
