// VocabParallelEmbedding: an embedding table [V, h] split along the vocabulary: rank r owns
// the contiguous rows [r·V/t, (r+1)·V/t). Each rank looks up the ids it owns (others give zero
// rows) and one all-reduce assembles the full lookup — or, with sequence parallelism, the caller
// reduce-scatters the partial lookup along the sequence (InputEmbedding): half the bytes, and
// each rank receives only its shard. Backward needs no communication: the gradient of the full
// lookup is replicated (all-gathered first under sequence parallelism), so every rank scatters
// it into its own rows.
#pragma once

#include <string>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "parallel/compute_weights.h"

namespace megatron {

struct VocabParallelEmbeddingConfig {
  std::string name;            // parameter "<name>.weight"
  int64_t num_embeddings = 0;  // V, already padded so that the TP size divides it
  int64_t vocab_rows = 0;      // the real vocabulary (ParamSpec::vocab_rows); 0: unknown
  int64_t embedding_dim = 0;
  float init_std = 0.02f;
};

class VocabParallelEmbedding {
 public:
  struct Ctx {
    Tensor ids;  // i32 [N]
  };

  // Registers "<name>.weight" [V, h] partition dim 0.
  VocabParallelEmbedding(const VocabParallelEmbeddingConfig& config, const ParallelState& ps,
                         ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // ids i32 [...] (contiguous, in [0, V)) → [..., h] in the compute dtype, all-reduced.
  Tensor forward(Ctx& ctx, const Tensor& ids, Arena& arena) const;
  // ids i32 [...] → [..., h], this rank's partial sum: its own rows, zeros for the others'
  // ids. The caller reduces it over the TP group (forward is lookup + all-reduce).
  Tensor lookup(Ctx& ctx, const Tensor& ids, Arena& arena) const;
  // dout [..., h], the gradient of the full lookup (replicated) → accumulates the table
  // gradient of the owned rows.
  void backward(const Ctx& ctx, const Tensor& dout) const;

  const Tensor& weight() const { return weights_.weight(weight_index_); }  // [V/t, h]
  Tensor& weight_grad() const { return weights_.grad(weight_index_); }     // f32 [V/t, h]

 private:
  VocabParallelEmbeddingConfig config_;
  std::shared_ptr<Communicator> tp_;
  const ComputeWeights& weights_;
  size_t weight_index_ = 0;
  int64_t vocab_start_ = 0;
};

}  // namespace megatron
