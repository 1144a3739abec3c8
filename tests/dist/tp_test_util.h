// Helpers for the tensor-parallel tests: a TP group over the whole world next to a one-process
// (SoloCommunicator) "dense" copy in the same process, slicing full tensors into this rank's
// shard and gathering shards back into full tensors.
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "../unit/model_test_util.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"
#include "parallel/parameter.h"

namespace megatron::test {

// TP over every rank of the job (TP = world size, DP = 1).
inline ParallelState tp_world_state() {
  return ParallelState::create(world(), world_size(), 1);
}
inline ParallelState dense_state() {
  return solo_parallel_state();
}

// Deterministic f32 values in [-scale, scale), the same on every rank.
inline Tensor uniform_tensor(const Shape& shape, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<float> v(size_t(shape_numel(shape)));
  for (float& x : v) x = float(dist(gen));
  return Tensor::from_vector(v, shape);
}

// The slice of a full tensor that parameter `shard` holds on this rank.
inline Tensor shard_of(const Parameter& shard, const Tensor& full) {
  if (shard.replicated()) return full;
  const int d = shard.spec.partition_dim;
  return full.slice(d, shard.local_start, shard.local_start + shard.local_shape[d]);
}

// Randomizes the dense store (as randomize_parameters) and copies each full parameter's slice into
// the TP store.
inline void copy_dense_into_shards(ParameterStore& dense, ParameterStore& sharded, uint64_t seed,
                                   double scale) {
  randomize_parameters(dense, seed, scale);
  for (const Parameter& p : dense.params()) {
    Parameter& s = sharded.get(p.spec.name);
    s.value.copy_from(shard_of(s, p.value));
  }
}

// Full tensor [full shape] assembled from every rank's `local` shard of parameter p.
inline Tensor gather_full(Communicator& tp, const Parameter& p, const Tensor& local) {
  if (p.replicated()) return local.clone();
  const int64_t t = tp.size();
  Shape stacked = p.local_shape;
  stacked.insert(stacked.begin(), t);
  Tensor gathered = Tensor::empty({t * shape_numel(p.local_shape)}, DType::F32);
  tp.all_gather(local.clone().flatten(), gathered);
  Tensor parts = gathered.view(stacked);
  Tensor full = Tensor::empty(p.spec.full_shape, DType::F32);
  const int d = p.spec.partition_dim;
  const int64_t len = p.local_shape[d];
  for (int64_t r = 0; r < t; ++r)
    full.slice(d, r * len, (r + 1) * len).copy_from(parts.select(0, r));
  return full;
}

// ‖a − b‖₂ / ‖b‖₂ over two tensors of one shape (b is the reference).
inline double rel_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.clone().to_vector<float>(), y = b.clone().to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size() && i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(y[i]) * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Every parameter's gradient in `sharded`, gathered over `tp` (a collective: every rank calls
// it), within `tolerance` (rel_error) of the same parameter's gradient in `dense`.
inline void expect_grads_match_dense(Communicator& tp, const ParameterStore& sharded,
                                     const ParameterStore& dense, double tolerance) {
  for (const Parameter& p : sharded.params())
    EXPECT_LE(rel_error(gather_full(tp, p, p.grad), dense.get(p.spec.name).grad), tolerance)
        << p.spec.name;
}

}  // namespace megatron::test
