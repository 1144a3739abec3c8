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
  const std::array<double, 3> w = parse_split(split);
  // numpy's sum of three values, then each weight normalised, then summed in order: the same
  // doubles as Megatron's, so the same ties.
  const double sum = (w[0] + w[1]) + w[2];
  std::array<int64_t, 4> b{0, 0, 0, 0};
  double cumulative = 0.0;
  for (int k = 0; k < 3; ++k) {
    cumulative += w[k] / sum;
    b[k + 1] = round_half_even(cumulative * double(size));
  }
  return b;
}

}  // namespace megatron
