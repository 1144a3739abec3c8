// ScheduledLoader<Batch>: what the GPT and BERT data loaders share — this rank's micro-batches
// in MicroBatchSchedule order (Megatron's sampler), built ahead on a Prefetcher thread, and the
// consumed-samples count a checkpoint records. The loaders supply only how one micro-batch is
// built from its first global sample index.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "data/micro_batch_schedule.h"
#include "data/prefetcher.h"

namespace megatron {

template <typename Batch>
class ScheduledLoader {
 public:
  // make(first_sample) builds the micro-batch whose row 0 is global sample `first_sample`; it
  // runs on the prefetch thread and must depend on its argument only.
  ScheduledLoader(const MicroBatchSchedule& schedule, std::function<Batch(int64_t)> make,
                  int prefetch)
      : schedule_(schedule),
        make_(std::move(make)),
        prefetcher_([this](int64_t n) { return make_(schedule_.first_sample(n)); }, prefetch) {}

  Batch next() {
    Batch batch = prefetcher_.next();
    ++served_;
    return batch;
  }
  // Global samples consumed by the global batches completed so far.
  int64_t consumed_samples() const { return schedule_.consumed_after(served_); }

 private:
  MicroBatchSchedule schedule_;
  std::function<Batch(int64_t)> make_;
  int64_t served_ = 0;
  Prefetcher<Batch> prefetcher_;  // last: its thread uses the members above
};

}  // namespace megatron
