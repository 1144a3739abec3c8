// QkvProjection: the fused query/key/value projection of ParallelAttention, with grouped-query
// attention (GQA, Ainslie et al. 2023) as Megatron-Core lays it out.
//
// The weight "<prefix>.query_key_value.weight" [g·(q+2)·d, h] (q = heads/g query heads per
// KV group, d the head dim) holds its rows per group: the group's q query heads, then its key
// head, then its value head — [g, q + 2, d] (with g = heads this is the [heads, 3, d] of
// multi-head attention). Its output per position is [groups, q + 2, d], so:
//  * g >= t (g divisible by t): a column split gives each rank g/t whole groups (partition
//    dim 0, as ColumnParallelLinear);
//  * g <  t (t divisible by g): the groups cannot be split, so the weight is replicated and
//    rank r computes its heads/t query heads and the key/value head of the group they belong
//    to — output [1, heads/t + 2, d]. Each rank's weight gradient touches only its rows;
//    they are summed over the TP group per micro-batch (the key/value rows are shared by t/g
//    ranks), so the replicated gradient is whole and identical on every rank.
// The bias (optional) follows the weight's rows and split.
// With sequence parallelism the input is this rank's sequence shard [s/t, b, h], all-gathered
// before the projection (TpRegionInput), and dx is reduce-scattered back to the shard.
#pragma once

#include <memory>
#include <string>

#include "model/transformer_config.h"
#include "parallel/column_parallel_linear.h"

namespace megatron {

// Views into a contiguous qkv [s, b, groups, q + 2, d] (the projection's output layout): its
// query heads [s, b, groups, q, d] and its key heads [s, b, groups, d], with qkv's strides.
Tensor qkv_query_heads(const Tensor& qkv);
Tensor qkv_key_heads(const Tensor& qkv);

class QkvProjection {
 public:
  struct Ctx {
    ColumnParallelLinear::Ctx split;
    Tensor input;  // replicated: x [N, h]
    Tensor w;      // replicated: this rank's rows of the weight [(ql+2)·d, h]
  };

  QkvProjection(const std::string& name, const TransformerConfig& config, const ParallelState& ps,
                ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  int64_t groups_local() const { return groups_local_; }              // g/t, or 1 when replicated
  int64_t queries_per_group_local() const { return queries_local_; }  // q, or heads/t

  // x [s, b, h] (a shard [s/t, b, h] with sequence parallelism) → [s, b, groups_local,
  // queries_local + 2, d] (biased), over the whole sequence.
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dqkv shaped like the output → dx shaped like x, all-reduced (reduce-scattered) over TP.
  Tensor backward(const Ctx& ctx, const Tensor& dqkv, Arena& arena) const;

 private:
  // Replicated mode: this rank's rows of a [g·(q+2)·d, ...] tensor into `out` (q rows, kv rows).
  void gather_rows(const Tensor& full, Tensor& out) const;

  int64_t hidden_, head_dim_, groups_local_, queries_local_;
  bool bias_, sequence_parallel_;
  std::unique_ptr<ColumnParallelLinear> split_;  // g >= t
  // g < t:
  std::shared_ptr<Communicator> tp_;
  const ComputeWeights& weights_;
  size_t weight_index_ = 0, bias_index_ = 0;
  int64_t q_row_begin_ = 0, kv_row_begin_ = 0;  // first rows (in units of d) of the two runs
  float init_std_ = 0.02f;
};

}  // namespace megatron
