// Checkpoint save and load with Megatron-LM's directory layout, atomic saves and resharding
// on load (see docs/checkpoints.md).
//
//   SAVE/latest_checkpointed_iteration.txt         written last: names complete checkpoints only
//   SAVE/iter_0000100/mp_rank_00[_000]/model.safetensors      this rank's parameter slices
//                                     /optimizer.safetensors  optimizer buffer slices
//                                     /optimizer_dpRRR_of_DDD.safetensors
//                                        or each DP rank's shard of them (distributed optimizer)
//                                     /state.json             the trainer's state
//
// Saving is atomic: every writer fills SAVE/iter_XXXXXXX.tmp-<nonce>/, fsyncs, and after a
// barrier rank 0 swaps the directory into place and only then rewrites the tracker. A crash at
// any point leaves the previous checkpoint and tracker intact; leftover .tmp-* directories are
// never read. Loading reads, for every local parameter slice, the overlapping slices of all
// stored shards, so a checkpoint saved at one tensor-parallel size loads at any other.
// Checkpoints are device-independent: a store (and optimizer buffers) on a GPU is copied to
// the host to be saved and filled through a host copy on load, so a run saved on a GPU
// resumes on a CPU and back.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/shards.h"
#include "distributed/parallel_state.h"
#include "parallel/parameter.h"

namespace megatron {

// Saves iteration `iteration` to `save_dir`. Collective over ps.world: every rank calls it;
// the ranks with dp_cp_rank 0 write (data- and context-parallel ranks hold identical weights),
// rank 0 commits.
//   params                  this rank's parameter slices (the fp32 master values)
//   optimizer_flat_buffers  name -> f32 [range length], laid out like elements
//                           optimizer_shard.range of params' flat values (e.g. "exp_avg",
//                           "exp_avg_sq"); may be empty
//   state                   this rank's trainer state, stored as state.json
//   optimizer_shard         the whole flat space (default), or this DP rank's shard of the
//                           distributed optimizer ({range, ps.dp_cp_rank, ps.dp_cp_size}): then
//                           every DP × CP rank writes its own shard, with no gather and no
//                           full-size copy
// Replaces an existing checkpoint of the same iteration. On failure on any rank every rank
// throws Error and the previous checkpoint and tracker stay as they were.
// With expert parallelism (ps.ep_size > 1), or experts split over an etp group other than TP,
// the expert parameters and their optimizer state are first all-gathered (over the EP group, or
// over tp_ep) into a copy laid out as at EP 1 with the experts split over TP, which the replica 0
// ranks write: the files are those of an EP 1 run at the same TP size, so a checkpoint loads at
// any EP and ETP size (docs/moe.md). Not with the distributed optimizer.
void save_checkpoint(const std::string& save_dir, int64_t iteration, const ParameterStore& params,
                     const std::map<std::string, Tensor>& optimizer_flat_buffers,
                     const nlohmann::json& state, const ParallelState& ps,
                     const OptimizerShard& optimizer_shard = {});

// Loads iteration `iteration` (-1: the one named by the tracker) from `load_dir` into this
// rank's parameter slices, resharding from whatever tensor-parallel size it was saved at.
// When `optimizer_flat_buffers` is not null, each buffer it names (f32, laid out like elements
// `optimizer_range` of the flat values: all of them, or the distributed optimizer's shard) is
// filled from the checkpoint's optimizer state — sharded or not, saved at any DP size — reading
// only the stored pieces that overlap it. With expert parallelism (or an etp group other than
// TP) every expert is read, in this rank's etp slice (into a copy laid out as at EP 1), and
// this rank keeps its own experts. Returns the stored state.json
// (of the same rank when the checkpoint has it, else of mp_rank_00).
// Throws Error, before changing anything, when there is no such checkpoint, or when its
// parameters differ from the model's — listing every parameter whose full shape differs
// (name, checkpoint shape, model shape), every model parameter it lacks and, when this rank
// holds the whole model (PP = 1), every checkpoint parameter the model lacks. A vocabulary
// padded for another TP size is not a difference (ParamSpec::vocab_rows): its padding is cut,
// or extended with zeros, in the values and the optimizer buffers alike.
// Not collective: each rank reads the files it needs.
nlohmann::json load_checkpoint(const std::string& load_dir, int64_t iteration,
                               ParameterStore& params,
                               std::map<std::string, Tensor>* optimizer_flat_buffers,
                               const ParallelState& ps, FlatRange optimizer_range = {});

// ---- Building blocks, shared with offline tools (megatron convert) ----

// Resolves `iteration` (-1: the tracker's); throws Error naming the directory and the
// tracker file when there is no tracker.
int64_t resolve_checkpoint_iteration(const std::string& load_dir, int64_t iteration);
// LOAD/iter_XXXXXXX for `iteration` (-1: the tracker's); throws Error when it does not exist.
std::string checkpoint_iteration_dir(const std::string& load_dir, int64_t iteration);

// The model parameters a load leaves alone (they keep their values), by name; empty: none.
using ParameterFilter = std::function<bool(const std::string& name)>;

// Throws Error listing every difference between the checkpoint's parameters and `params`
// (see load_checkpoint). `model_is_complete`: report checkpoint parameters the model lacks.
// Parameters for which `skip` is true are not compared.
void check_checkpoint_matches(const CheckpointShardReader& reader, const ParameterStore& params,
                              bool model_is_complete, const ParameterFilter& skip = {});
// Fills every parameter slice of `params` (and the optimizer buffers, when not null: f32
// [range length], laid out like elements `optimizer_range` of the flat values) from `reader`,
// except those for which `skip` is true; call check_checkpoint_matches first for a complete
// error report. A checkpoint with optimizer state but no kMasterWeightsBuffer (saved by a run
// whose values were its fp32 weights) gives the master weights its f32 model values.
void read_parameters(const CheckpointShardReader& reader, ParameterStore& params,
                     std::map<std::string, Tensor>* optimizer_flat_buffers,
                     const ParameterFilter& skip = {}, FlatRange optimizer_range = {});

// A save in progress: creates SAVE/iter_XXXXXXX.tmp-<nonce>/ (SAVE included) so that shards
// can be written into rank_dir(...), then commit() swaps it into place and updates the
// tracker. Destroyed uncommitted, it removes its temporary directory.
class CheckpointTransaction {
 public:
  CheckpointTransaction(const std::string& save_dir, int64_t iteration, uint64_t nonce);
  ~CheckpointTransaction();
  CheckpointTransaction(const CheckpointTransaction&) = delete;
  CheckpointTransaction& operator=(const CheckpointTransaction&) = delete;

  // SAVE/iter_XXXXXXX.tmp-<nonce>: a pure function, so that every rank can name it.
  static std::string tmp_dir(const std::string& save_dir, int64_t iteration, uint64_t nonce);
  const std::string& path() const { return tmp_dir_; }
  void commit();

 private:
  std::string save_dir_, tmp_dir_;
  int64_t iteration_;
  bool committed_ = false;
};

// What a save writes: the state laid out as at expert-parallel size 1, so that a checkpoint
// loads at any EP size (docs/moe.md "Checkpoints"). On an expert grid of its own (ps.ep_size > 1
// or ps.etp_size != ps.tp_size) its construction is a collective over ps.ep (at etp = TP) or
// ps.tp_ep (every rank calls it): the groups holding a rank that writes (dp × cp rank 0)
// all-gather the expert parameters and their optimizer state into a copy with every expert
// whole and split over TP, and ps() is the parallel state as at EP 1 with etp = TP. Otherwise it
// refers to `params` and `optimizer_flat_buffers` as they are, which then must outlive it.
// Arguments as save_checkpoint's; throws Error for the layout a checkpoint cannot hold (the
// distributed optimizer's shards on an expert grid of its own).
class SaveSource {
 public:
  SaveSource(const ParameterStore& params,
             const std::map<std::string, Tensor>& optimizer_flat_buffers, const ParallelState& ps,
             const OptimizerShard& optimizer_shard);
  ~SaveSource();
  SaveSource(const SaveSource&) = delete;
  SaveSource& operator=(const SaveSource&) = delete;

  const ParameterStore& params() const;
  const std::map<std::string, Tensor>& buffers() const;
  const ParallelState& ps() const { return ps_; }

  struct Ep1Layout;  // the gathered copy (checkpoint.cpp)

 private:
  const ParameterStore& params_;
  const std::map<std::string, Tensor>& buffers_;
  ParallelState ps_;
  std::unique_ptr<Ep1Layout> gathered_;  // on the ranks that gathered
};

// save_checkpoint's steps after its SaveSource, for a save whose writes run elsewhere
// (checkpoint/async_save.h), each given the SaveSource's params, buffers and ps:
//  1. begin_save — collective over ps.world: rank 0 creates the temporary directory (the
//     transaction it returns; null on the other ranks), every rank learns its path (tmp_dir);
//  2. write_rank_files — local, no communication: this rank's files, if it writes (the ranks
//     with dp_cp_rank 0, and every DP rank's shard of the distributed optimizer); throws Error;
//  3. commit_save — rank 0, once every rank's writes succeeded: the rename and the tracker.
std::unique_ptr<CheckpointTransaction> begin_save(const std::string& save_dir, int64_t iteration,
                                                  const ParallelState& ps, std::string& tmp_dir);
void write_rank_files(const std::string& tmp_dir, int64_t iteration, const ParameterStore& params,
                      const std::map<std::string, Tensor>& optimizer_flat_buffers,
                      const nlohmann::json& state, const ParallelState& ps,
                      const OptimizerShard& optimizer_shard);
void commit_save(CheckpointTransaction& transaction, const std::string& save_dir);

// Creates `tmp_iteration_dir`/mp_rank_* for these coordinates (unless a data-parallel peer
// did) and writes the model, state and (whole) optimizer files.
void write_checkpoint_rank(const std::string& tmp_iteration_dir, int64_t iteration,
                           const ParameterStore& params,
                           const std::map<std::string, Tensor>& optimizer_flat_buffers,
                           const nlohmann::json& state, const RankCoordinates& coords);

}  // namespace megatron
