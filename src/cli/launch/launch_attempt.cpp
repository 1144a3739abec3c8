#include "cli/launch/launch_attempt.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace megatron::cli {

int64_t launch_attempt_from_environment() {
  const char* text = std::getenv(kLaunchAttemptVariable);
  if (text == nullptr) return 0;
  const std::string value = text;
  size_t end = 0;
  int64_t attempt = -1;
  try {
    attempt = std::stoll(value, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  MT_REQUIRE(end == value.size() && !value.empty() && attempt >= 0, kLaunchAttemptVariable,
             " must be a non-negative integer (megatron launch sets it), got '", value,
             "': unset it");
  return attempt;
}

}  // namespace megatron::cli
