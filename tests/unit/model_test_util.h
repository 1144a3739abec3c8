// Helpers for the model tests: a one-process parallel state and random parameter values.
#pragma once

#include <memory>
#include <random>

#include "distributed/parallel_state.h"
#include "distributed/solo_communicator.h"
#include "parallel/parameter.h"

namespace megatron::test {

inline ParallelState solo_parallel_state() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

// Overwrites every parameter with deterministic random values (LayerNorm γ around 1), so that
// biases, γ and β take part in the checks instead of sitting at their 0/1 init.
inline void randomize_parameters(ParameterStore& store, uint64_t seed, double scale) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  for (Parameter& p : store.params()) {
    const bool gamma = p.spec.name.find("layernorm.weight") != std::string::npos;
    float* v = p.value.data<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) v[i] = float((gamma ? 1.0 : 0.0) + dist(gen));
  }
}

}  // namespace megatron::test
