// --async-save (Megatron's flag): a checkpoint written by a background thread while training
// goes on, committed only once every rank's files are durable.
//
//   step boundary, iteration N          later step boundaries             commit
//   ─ begin_save (collective) ─┐        ─ try_commit: one all-reduce ─    ─ rank 0 renames
//   ─ snapshot to host memory ─┤          "every rank done?" no → train    iter_N into place,
//   ─ thread: write_rank_files ┘          ... yes → commit ──────────────→ then the tracker
//
// The training stall is the snapshot: a copy of this rank's parameter values and optimizer
// buffers into host memory (from the GPU, or within the host), where a synchronous save stalls
// for the whole write. Atomicity is the synchronous save's (checkpoint.h): the files go to the
// temporary directory and nothing names them until the commit, so a crash or kill while a
// save is in flight leaves the previous checkpoint and tracker as they were. The thread only
// writes files; every collective stays on the training thread. With expert parallelism the
// snapshot is of the EP 1 layout (SaveSource, checkpoint.h): the experts are all-gathered over
// the EP group at the step boundary, as a synchronous save does, and the writer writes that.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "checkpoint/checkpoint.h"

namespace megatron {

class AsyncCheckpointSave {
 public:
  // Collective over ps.world: starts saving iteration `iteration` to `save_dir` (arguments as
  // save_checkpoint's; with EP > 1 also over ps.ep). Returns once this rank's state, in the
  // layout it is saved in, is snapshotted.
  AsyncCheckpointSave(const std::string& save_dir, int64_t iteration, const ParameterStore& params,
                      const std::map<std::string, Tensor>& optimizer_flat_buffers,
                      nlohmann::json state, const ParallelState& ps,
                      const OptimizerShard& optimizer_shard);
  // Waits for the writer; an uncommitted save's temporary directory is removed.
  ~AsyncCheckpointSave();
  AsyncCheckpointSave(const AsyncCheckpointSave&) = delete;
  AsyncCheckpointSave& operator=(const AsyncCheckpointSave&) = delete;

  // Collective: commits and returns true once every rank's writes are done; false while any
  // rank still writes (with `wait`, never: it waits for this rank's writer first). When a
  // write failed on any rank, every rank throws Error with that rank's reason, and the
  // checkpoint is not committed. `before_commit` (collective, e.g. the --save lock's check)
  // runs once the writes are done, before the commit.
  bool try_commit(bool wait, const std::function<void()>& before_commit);

  int64_t iteration() const { return iteration_; }
  const std::string& save_dir() const { return save_dir_; }

 private:
  bool writer_done() const;

  std::string save_dir_;
  int64_t iteration_;
  const ParallelState& ps_;  // the training's: the commit's collectives
  ParallelState write_ps_;   // the writer's view: as at EP 1 (SaveSource::ps)
  std::unique_ptr<CheckpointTransaction> transaction_;  // rank 0
  // The snapshot the writer reads: a host copy of the parameter store and of the buffers, laid
  // out as at EP 1.
  std::unique_ptr<ParameterStore> params_;
  std::map<std::string, Tensor> buffers_;
  nlohmann::json state_;
  mutable std::mutex mutex_;
  bool done_ = false;           // guarded by mutex_
  std::exception_ptr failure_;  // guarded by mutex_; set before done_
  std::thread writer_;
};

}  // namespace megatron
