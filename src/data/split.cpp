#include "data/split.h"

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace megatron {

int64_t round_half_even(double x) {
  double r = std::floor(x);
  double frac = x - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return int64_t(r);
}

std::array<double, 3> parse_split(const std::string& split) {
  const char sep = split.find(',') != std::string::npos ? ',' : '/';
  std::vector<double> parts;
  size_t start = 0;
  while (true) {
    size_t end = split.find(sep, start);
    std::string part = split.substr(start, end == std::string::npos ? end : end - start);
    char* stop = nullptr;
    double v = std::strtod(part.c_str(), &stop);
    MT_REQUIRE(!part.empty() && stop == part.c_str() + part.size() && v >= 0 && std::isfinite(v),
               "--split '", split, "': '", part,
               "' is not a non-negative number (expected e.g. 949,50,1)");
    parts.push_back(v);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  MT_REQUIRE(parts.size() <= 3, "--split '", split, "' has ", parts.size(),
             " parts, expected at most 3 (train,valid,test)");
  std::array<double, 3> weights{0, 0, 0};
  for (size_t i = 0; i < parts.size(); ++i) weights[i] = parts[i];
  MT_REQUIRE(weights[0] + weights[1] + weights[2] > 0, "--split '", split,
             "' sums to 0, expected a positive sum");
  return weights;
}

std::array<int64_t, 4> split_boundaries(const std::string& split, int64_t size) {
  std::array<double, 3> w = parse_split(split);
  const double sum = w[0] + w[1] + w[2];
  std::array<int64_t, 4> b{0, 0, 0, 0};
  for (int k = 0; k < 3; ++k) b[k + 1] = b[k] + round_half_even(w[k] / sum * double(size));
  const int64_t excess = b[3] - size;
  for (int k = 1; k < 4; ++k) b[k] -= excess;
  return b;
}

}  // namespace megatron
