#include "optim/grad_buckets.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "optim/grad_reduction.h"

namespace megatron {

std::vector<GradBucket> make_grad_buckets(const ParameterStore& store, int64_t bucket_elements) {
  MT_REQUIRE(bucket_elements > 0, "--ddp-bucket-size must be positive, got ", bucket_elements);
  const std::vector<Parameter>& params = store.params();
  std::vector<GradBucket> buckets;
  size_t end = params.size();  // the open bucket is parameters [p, end)
  auto close = [&](size_t first, bool tied) {
    if (first == end) return;
    const Parameter& last = params[end - 1];
    buckets.push_back(
        {first,
         end,
         {params[first].flat_offset, last.flat_offset + shape_numel(last.local_shape)},
         tied,
         last.spec.expert});
    end = first;
  };
  for (size_t p = params.size(); p-- > 0;) {
    const int64_t begin = params[p].flat_offset;
    const int64_t size = shape_numel(params[p].local_shape);
    const bool tied = params[p].spec.stage_tie != StageTie::kNone;
    const bool expert = params[p].spec.expert;
    // Expert and dense parameters are reduced over different groups: never in one bucket.
    if (end > p + 1 && params[end - 1].spec.expert != expert) close(p + 1, false);
    // A tied parameter gets buckets of its own; so does one larger than a bucket, cut from its
    // end into pieces of at most bucket_elements. Not a sequence-parallel one: each piece would
    // sum the whole parameter over TP again (they are norms and biases, far below a bucket).
    if (tied || (size > bucket_elements && !params[p].spec.sequence_parallel)) {
      close(p + 1, false);
      for (int64_t piece_end = begin + size; piece_end > begin; piece_end -= bucket_elements)
        buckets.push_back(
            {p, p + 1, {std::max(begin, piece_end - bucket_elements), piece_end}, tied, expert});
      end = p;
      continue;
    }
    const Parameter& last = params[end - 1];
    if (last.flat_offset + shape_numel(last.local_shape) - begin >= bucket_elements)
      close(p, false);
  }
  close(0, false);
  return buckets;
}

GradBuckets::GradBuckets(ParameterStore& store, const ParallelState& ps, int64_t bucket_elements,
                         bool overlap, const DistributedShards* shards)
    : store_(store),
      ps_(ps),
      overlap_(overlap),
      sharded_(shards != nullptr),
      buckets_(make_grad_buckets(store, bucket_elements)) {
  MT_CHECK(store.flat_grads().defined(), "GradBuckets: the parameter store is not allocated");
  if (shards != nullptr)
    MT_CHECK(shards->dense.begin + shards->dense.total +
                     (shards->experts ? shards->experts->total : 0) <=
                 store.flat_grads().numel(),
             "GradBuckets: shards of ", shards->dense.total, " and ",
             shards->experts ? shards->experts->total : 0, " elements for a store of ",
             store.flat_grads().numel());
  // Buckets are in launch order, so a parameter's pieces are consecutive.
  buckets_of_.assign(store.params().size(), {buckets_.size(), 0});
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t p = buckets_[b].first_param; p < buckets_[b].end_param; ++p) {
      buckets_of_[p].first = std::min(buckets_of_[p].first, b);
      buckets_of_[p].end = b + 1;
    }
  if (shards != nullptr) {
    for (const GradBucket& bucket : buckets_) {
      const DpShard& shard = shards->of_kind(bucket.expert);
      const Communicator& group = bucket_group(bucket);
      const int d = group.size();
      std::vector<int64_t>& counts = shard_counts_.emplace_back(size_t(d));
      for (int r = 0; r < d; ++r) {
        const DpShard theirs = DpShard::of({shard.begin, shard.begin + shard.total}, d, r);
        counts[size_t(r)] =
            std::max<int64_t>(0, std::min(bucket.range.end, theirs.range.end) -
                                     std::max(bucket.range.begin, theirs.range.begin));
      }
      MT_CHECK(bucket.range.begin >= shard.begin && bucket.range.end <= shard.begin + shard.total,
               "GradBuckets: a bucket of flat elements [", bucket.range.begin, ", ",
               bucket.range.end, ") outside its part [", shard.begin, ", ",
               shard.begin + shard.total, ")");
      // This rank's segment of the bucket, where its reduced sums land (in place).
      const int64_t count = counts[size_t(group.rank())];
      const int64_t begin = count > 0 ? std::max(bucket.range.begin, shard.range.begin) : 0;
      shard_segments_.push_back(store.flat_grads().slice(0, begin, begin + count));
    }
  }
  remaining_.resize(store.params().size());
  incomplete_.resize(buckets_.size());
  launched_.resize(buckets_.size());
  requests_.resize(buckets_.size());
  if (overlap_) store_.set_grad_ready_listener(this);
}

GradBuckets::~GradBuckets() {
  if (overlap_) store_.set_grad_ready_listener(nullptr);
}

void GradBuckets::start(int64_t micro_batches, double post_scale) {
  MT_CHECK(micro_batches >= 1, "GradBuckets::start: ", micro_batches, " micro-batches");
  MT_CHECK(in_flight_.empty(), "GradBuckets::start: the previous step was not finished");
  std::fill(remaining_.begin(), remaining_.end(), micro_batches);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    incomplete_[b] = buckets_[b].end_param - buckets_[b].first_param;
    launched_[b] = false;
  }
  post_scale_ = post_scale;
  started_ = true;
}

void GradBuckets::grads_accumulated(size_t first, size_t end) {
  MT_CHECK(started_,
           "a backward announced complete gradients outside a training step (GradBuckets::start "
           "was not called)");
  MT_CHECK(first <= end && end <= remaining_.size(), "gradients of parameters [", first, ", ", end,
           ") announced; the store has ", remaining_.size());
  for (size_t p = first; p < end; ++p) {
    MT_CHECK(remaining_[p] > 0, "the gradient of '", store_.params()[p].spec.name,
             "' was announced complete more often than the step has micro-batches");
    if (--remaining_[p] == 0)
      for (size_t b = buckets_of_[p].first; b < buckets_of_[p].end; ++b) --incomplete_[b];
  }
  // Buckets complete now, in bucket order (every rank of the group sees the same announcements,
  // so all launch alike); a tied bucket waits for finish().
  if (first < end) {
    const size_t low = buckets_of_[end - 1].first, high = buckets_of_[first].end;
    for (size_t b = low; b < high; ++b)
      if (!launched_[b] && incomplete_[b] == 0 && !buckets_[b].tied) launch(b);
  }
  for (const size_t b : in_flight_)
    if (requests_[b]) requests_[b]->progress();
}

void GradBuckets::launch(size_t b) {
  // On the host each reduction in flight holds a receive buffer (distributed/ring_reduction.h,
  // up to a bucket): with every bucket in flight at once that is one more gradient-sized buffer
  // per rank (+475 MB at GPT-2 124M, DP 2, with OpenMPI's own collectives: bench/RESULTS.md).
  // Two in flight keep one bucket moving while the next is posted. NCCL needs no such buffer,
  // and waiting there would make the compute stream wait, so device buckets are not bounded.
  if (store_.flat_grads().device().is_cpu())
    while (in_flight_.size() >= kHostBucketsInFlight) retire_oldest();
  const GradBucket& bucket = buckets_[b];
  launched_[b] = true;
  in_flight_.push_back(b);
  reduce_sequence_parallel_gradients(store_, ps_, &sp_scratch_, bucket.first_param,
                                     bucket.end_param);
  Tensor grads = store_.flat_grads().slice(0, bucket.range.begin, bucket.range.end);
  Communicator& dp = bucket_group(bucket);
  if (!sharded_) {
    if (dp.size() > 1) requests_[b] = dp.iall_reduce(grads, ReduceOp::SUM);
    return;
  }
  // In place: this rank's segment of the bucket receives its sums (at DP 1 it is the bucket).
  if (dp.size() > 1) requests_[b] = dp.ireduce_scatter(grads, shard_counts_[b], ReduceOp::SUM);
}

Communicator& GradBuckets::bucket_group(const GradBucket& bucket) const {
  // The ranks holding the same weights: data × context parallel, or for experts the expert
  // data-parallel group (the same ranks without an expert grid of their own).
  return bucket.expert ? *ps_.edp : *ps_.dp_cp;
}

void GradBuckets::retire_oldest() {
  const size_t b = in_flight_.front();
  in_flight_.pop_front();
  if (requests_[b]) requests_[b]->wait();
  requests_[b].reset();
  if (post_scale_ == 1.0) return;
  if (!sharded_) {
    const FlatRange& r = buckets_[b].range;
    Tensor grads = store_.flat_grads().slice(0, r.begin, r.end);
    kernels::scale(grads, float(post_scale_));
  } else if (shard_segments_[b].numel() > 0) {
    kernels::scale(shard_segments_[b], float(post_scale_));
  }
}

void GradBuckets::finish() {
  MT_CHECK(started_, "GradBuckets::finish without start");
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!launched_[b]) launch(b);
  while (!in_flight_.empty()) retire_oldest();
  started_ = false;
}

}  // namespace megatron
