// GradBuckets: the data-parallel reduction of the flat gradient buffer (ParameterStore) in
// buckets, after the backward or, with --overlap-grad-reduce, during it, as Megatron-Core's
// distributed/param_and_grad_buffer.py and distributed_data_parallel.py do.
//
// Buckets: the parameters in reverse registration order (the order in which a backward completes
// their gradients; registration follows the forward), cut at a parameter boundary once a bucket
// holds at least `bucket_elements`, so each bucket is a contiguous range of the flat buffer. A
// parameter two pipeline stages hold (StageTie) gets buckets of its own: its gradient is first
// summed over the embedding group, after the backward. A parameter larger than a bucket (the
// word embedding) is cut into pieces of at most `bucket_elements`, its own buckets, all complete
// when it is: with MPI's message-sized temporary buffers and two buckets in flight, no bucket
// may be a whole embedding. Every TP rank of a stage cuts the same
// buckets (a parameter's local size is the same on each), and so does every DP rank.
//
// Expert parameters (ParamSpec::expert) and dense ones never share a bucket: an expert bucket is
// summed over the expert data-parallel group (ParallelState::edp: the ranks holding the same
// experts) instead of dp × cp, and scaled alike (Megatron's 1 / (DP × CP) for both).
//
// Each bucket, in this order: the sequence-parallel gradients in it are summed over TP
// (reduce_sequence_parallel_gradients), the bucket is summed over DP — all-reduced in place, or,
// with the distributed optimizer, reduce-scattered in place: the bucket's segment of each rank's
// DpShard (of the bucket's kind, DistributedShards::of_kind: an expert bucket's over edp when
// the experts have a grid of their own) goes to that rank, into the same elements of its
// gradient buffer, so after finish() each shard's range of the flat gradients holds its reduced
// sums (Megatron's gradient buffer; the other elements keep this rank's own, unreduced ones) —
// and after the wait it is multiplied by post_scale.
//
// When: start() begins a step. With overlap, the backward's announcements (GradReadyListener,
// through the store) count each parameter's micro-batches down; a bucket whose parameters have
// all had their last one (on the earlier micro-batches gradients only accumulate: Megatron's
// no_sync) is launched at once, non-blocking, and every announcement gives the buckets in flight
// a chance to progress (MPI advances a non-blocking collective only inside MPI calls). finish(),
// after the backward and the tied-embedding reduction, launches every bucket not launched yet —
// all of them without overlap — in order, then waits for all and scales. Each bucket is scaled
// once its wait returns; on the host at most kHostBucketsInFlight are in flight, so launching
// another first waits for the oldest. A bucket's reduction is
// the same call on the same data either way, so overlapping changes when the reductions run,
// never their result: gradients are bit-identical with and without it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "distributed/communicator.h"
#include "distributed/parallel_state.h"
#include "optim/distributed_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/parameter.h"

namespace megatron {

// Megatron-LM's default is max(40M, 1M · DP) elements; this smaller one gives a GPT-2-small
// layer (7M parameters) about two buckets, so a reduction can start after half a layer.
constexpr int64_t kDefaultGradBucketElements = int64_t(1) << 22;

// Host buckets in flight at once (see GradBuckets::launch): bounds MPI's temporary buffers.
constexpr size_t kHostBucketsInFlight = 2;

struct GradBucket {
  size_t first_param = 0, end_param = 0;  // store indices [first, end)
  FlatRange range;                        // flat elements [begin, end)
  bool tied = false;                      // a StageTie parameter's own bucket
  bool expert = false;                    // expert parameters (summed over the edp group)
};

// The buckets of `store` (allocated), in launch order: the end of the flat buffer first.
std::vector<GradBucket> make_grad_buckets(const ParameterStore& store, int64_t bucket_elements);

class GradBuckets final : public GradReadyListener {
 public:
  // `shards`, for the distributed optimizer: only their ranges of the gradients are reduced (in
  // place); null: all of them. With `overlap` this object is the store's GradReadyListener
  // while it lives.
  GradBuckets(ParameterStore& store, const ParallelState& ps, int64_t bucket_elements, bool overlap,
              const DistributedShards* shards = nullptr);
  ~GradBuckets() override;
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  const std::vector<GradBucket>& buckets() const { return buckets_; }

  // Before a step's backward passes: `micro_batches` of them accumulate into every gradient;
  // the reduced sums are multiplied by `post_scale` (e.g. 1 / (DP · loss scale)).
  void start(int64_t micro_batches, double post_scale);
  void grads_accumulated(size_t first, size_t end) override;
  // After the backward and reduce_tied_gradients: launches the buckets not launched yet, waits
  // for every bucket and scales it. The gradients (or the shard) are then reduced.
  void finish();

 private:
  void launch(size_t bucket);
  Communicator& bucket_group(const GradBucket& bucket) const;
  // Waits for the oldest bucket in flight and scales it by post_scale.
  void retire_oldest();

  ParameterStore& store_;
  const ParallelState& ps_;
  bool overlap_;
  bool sharded_;  // reduce-scattered into a distributed-optimizer shard, not all-reduced
  std::vector<GradBucket> buckets_;
  struct BucketRange {
    size_t first, end;
  };
  std::vector<BucketRange> buckets_of_;  // per parameter: its buckets [first, end)
  std::vector<int64_t> remaining_;       // per parameter: backward passes still to come
  std::vector<size_t> incomplete_;       // per bucket: parameters not complete yet
  std::vector<bool> launched_;           // per bucket
  std::vector<std::unique_ptr<CommRequest>> requests_;  // per bucket, null when nothing to wait
  // With shards, per bucket: each rank of the bucket's group's count of the bucket's elements in
  // its shard (rank order, the reduce-scatter's counts), and this rank's segment of the gradients
  // (in place).
  std::vector<std::vector<int64_t>> shard_counts_;
  std::vector<Tensor> shard_segments_;
  std::deque<size_t> in_flight_;  // launched, not yet waited for: buckets in launch order
  bool started_ = false;
  double post_scale_ = 1.0;
  Tensor sp_scratch_;  // reduce_sequence_parallel_gradients' packing buffer
};

}  // namespace megatron
