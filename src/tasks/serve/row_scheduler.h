// Rank 0's bookkeeping of continuous batching (tasks/continuous_batch.h) in `megatron serve`:
// which row of which request holds which slot of the running batch, the request whose rows are
// being admitted, and each request's finished rows until all have ended.
//
// At every token boundary the server asks next_row() for rows while the batch has free slots:
// the rows of the oldest request first, in order (a request with more rows than free slots
// starts some now and the rest as slots free up; later requests wait behind it, so none
// starves), then the next request the queue hands over. The scheduler never touches the
// model: it is tested alone with fake jobs and slot numbers (tests/unit/tasks_row_scheduler_
// test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "tasks/continuous_batch.h"
#include "tasks/serve/job_queue.h"

namespace megatron {

class RowScheduler {
 public:
  struct Row {
    std::shared_ptr<Job> job;
    size_t row = 0;
  };

  explicit RowScheduler(int64_t slots) : running_(size_t(slots)) {}

  // The next row to start: the admitted request's next row, else the first row of the request
  // `next_job` hands over (null: none waiting; a cancelled one is answered and skipped).
  std::optional<Row> next_row(const std::function<std::shared_ptr<Job>()>& next_job);
  // next_row()'s row now holds `slot`.
  void started(int64_t slot, Row row);
  // The running slots whose clients left; a request being admitted whose client left starts
  // no more rows (and is answered when its running rows have ended).
  std::vector<int64_t> cancelled_slots();
  // A running row generated a token: its job (when streaming) sees the sequence so far.
  void advanced(int64_t slot, const SequenceState& sequence);
  // A row ended with its output (one row); when it was its request's last, the request is
  // answered with every row's output in order. Returns whether a request was answered.
  bool finished(int64_t slot, GenerationOutput output);
  // Every running and admitted request is answered with `error` (a failed step, shutdown).
  void fail_all(const std::string& error);

  int64_t running_rows() const;
  // Requests handed over by next_job and not yet answered.
  int64_t open_requests() const { return int64_t(progress_.size()); }

 private:
  struct Progress {
    GenerationOutput output;  // per row, filled as rows end
    size_t started = 0, ended = 0;
  };

  std::vector<std::optional<Row>> running_;  // by slot
  std::shared_ptr<Job> admitting_;           // the request whose rows are starting
  std::map<Job*, Progress> progress_;
};

}  // namespace megatron
