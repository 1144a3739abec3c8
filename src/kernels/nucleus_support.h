// The top-p support of one row of sorted sampling candidates (kernels/sampling.h,
// sample_candidates): shared by the CPU kernel and its CUDA twin, which walk a row the same way.
//   values [c] descending, ids [c] (−1 = empty slot); row_max, sum_exp: the row's global max
//   and Σ exp(value − max) under the FULL distribution.
// Candidate j is kept when the probability mass of the candidates before it is <= top_p (the
// first always is). The support is [0, keep). It is complete unless the list ran out while the
// nucleus was still open: every candidate kept, no empty slot, and the list not known to hold
// the whole vocabulary.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace megatron::kernels {

struct NucleusSupport {
  int64_t keep;
  bool complete;
};

MT_HOST_DEVICE inline NucleusSupport nucleus_support(const float* values, const int32_t* ids,
                                                     int64_t c, float row_max, float sum_exp,
                                                     float top_p, bool whole_vocabulary) {
  const double inv_sum = 1.0 / double(sum_exp);
  double mass_before = 0.0;  // probability of the candidates before j
  bool has_empty = false;
  int64_t keep = 0;
  for (int64_t j = 0; j < c; ++j) {
    if (ids[j] < 0) {
      has_empty = true;
      break;
    }
    if (j > 0 && mass_before > double(top_p)) break;
    keep = j + 1;
    mass_before += exp(double(values[j]) - double(row_max)) * inv_sum;
  }
  return {keep, keep < c || has_empty || whole_vocabulary || mass_before > double(top_p)};
}

}  // namespace megatron::kernels
