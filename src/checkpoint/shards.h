// The shard files of one checkpoint iteration: writing one rank's files, and reading any
// slice of any full tensor back from whichever ranks' files hold it (resharding on read).
//
// Each mp_rank_* directory holds
//   model.safetensors      this rank's slice of every parameter, under its logical name (a
//                          pipeline stage's copy of a tied parameter, StageTie::kCopy, is left
//                          to the stage that holds the original), and every persistent model
//                          buffer (parallel/parameter.h: the MoE routers' expert_bias), whole
//   optimizer.safetensors  the same slices of each optimizer flat buffer, as "<buffer>.<name>"
//                          (e.g. "exp_avg.layers.0.mlp.dense_h_to_4h.weight"); absent when
//                          the checkpoint carries no optimizer state (e.g. an HF import)
//   optimizer_dpRRR_of_DDD.safetensors
//                          instead of optimizer.safetensors when the distributed optimizer
//                          saved: one file per data-parallel rank, each holding the pieces of
//                          the slices its shard of the flat space covers (a slice cut by a
//                          shard boundary is stored as a 1-D range of its row-major elements)
//   state.json             what the trainer handed over (iteration, scheduler, RNG, args, ...)
// In both safetensors files the __metadata__ holds, per tensor name, where the stored slice
// sits in the full tensor — {"full_shape":[3072,768],"partition_dim":0,"slice_start":768}
// (partition_dim -1: replicated, the whole tensor; "vocab_rows": N for a vocabulary padded
// past N real rows, ParamSpec::vocab_rows; for a piece of a slice "slice_shape": the whole
// slice's shape and "flat_range": [begin, end), the row-major elements of the slice the 1-D
// stored tensor holds) and "crc32c", the CRC-32C of the stored bytes,
// verified before any byte of the tensor is used (a mismatch is an Error naming the file and
// the tensor; checkpoints written before checksums load unverified) — plus the file's own
// coordinates:
// format "megatron-cpp", iteration, tensor/pipeline model-parallel size and rank, and for
// the optimizer file the buffer names ("optimizer_buffers": ["exp_avg","exp_avg_sq"]) — and for
// a shard file "data_parallel_rank" and "data_parallel_size" — and for the model file
// "state_crc32c", the checksum of the rank's state.json. Pieces are described in full-tensor
// coordinates only, never by a flat-buffer offset, so a checkpoint saved at any TP × PP × DP
// layout, sharded or not, loads at any other: a reader copies, for what it asks, the overlap
// of every stored piece (checkpoint/regions.h) and touches no other piece.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/regions.h"
#include "core/safetensors.h"
#include "optim/optimizer.h"
#include "parallel/parameter.h"

namespace megatron {

// Where a stored tensor sits inside its full (unsplit) tensor.
struct ShardPlacement {
  Shape full_shape;
  int partition_dim = -1;  // -1: the stored tensor is the whole tensor
  int64_t slice_start = 0;
  int64_t vocab_rows = 0;  // > 0: dim 0 is a vocabulary padded past this many real rows
  int64_t crc32c = -1;     // CRC-32C of the stored bytes; -1: not recorded (older checkpoints)
  // A piece of a slice (flat_end >= 0; distributed-optimizer shards): the stored 1-D tensor
  // holds elements [flat_begin, flat_end), row-major, of the slice of shape slice_shape that
  // starts at slice_start. Otherwise the stored tensor is the whole slice.
  Shape slice_shape = {};
  int64_t flat_begin = 0, flat_end = -1;
};

struct RankCoordinates {
  int tp_rank = 0, tp_size = 1, pp_rank = 0, pp_size = 1;
};

// Writes model.safetensors, optimizer.safetensors (unless `optimizer_flat_buffers` is empty)
// and state.json of one rank into the existing directory `rank_dir`, each fsync'ed.
// `optimizer_flat_buffers`: name -> f32 [params.flat_values().numel()], same layout as the
// flat values (each parameter's slice at its flat_offset).
void write_rank_shards(const std::string& rank_dir, int64_t iteration, const ParameterStore& params,
                       const std::map<std::string, Tensor>& optimizer_flat_buffers,
                       const nlohmann::json& state, const RankCoordinates& coords);

// Which optimizer state a rank holds: its whole flat space (dp_size 1: the data-parallel
// replicas are identical and DP rank 0 writes optimizer.safetensors), or the distributed
// optimizer's shard `dp_rank` of `dp_size`, elements `range` of the flat space (every DP rank
// writes its own optimizer_dpRRR_of_DDD.safetensors).
struct OptimizerShard {
  FlatRange range;  // end -1: through the last element
  int dp_rank = 0, dp_size = 1;
};

// Writes the optimizer file of `shard` into the existing directory `rank_dir`, fsync'ed.
// `buffers`: name -> f32 [range length], laid out like that range of the flat values.
void write_optimizer_shard(const std::string& rank_dir, int64_t iteration,
                           const ParameterStore& params,
                           const std::map<std::string, Tensor>& buffers,
                           const OptimizerShard& shard, const RankCoordinates& coords);

class CheckpointShardReader {
 public:
  // Indexes every rank directory of `iteration_dir` (maps the files, reads no tensor data).
  // Throws Error naming the file when one is missing, corrupt or inconsistent with the others.
  explicit CheckpointShardReader(const std::string& iteration_dir);
  ~CheckpointShardReader();

  const std::string& iteration_dir() const { return iteration_dir_; }
  int tensor_parallel_size() const { return tp_size_; }
  int pipeline_parallel_size() const { return pp_size_; }

  // Model tensors (logical parameter names), sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return model_.count(name) > 0; }
  // Full shape and partition dim as stored (slice_start of the first stored shard).
  const ShardPlacement& placement(const std::string& name) const;

  // Optimizer buffer names ("exp_avg", ...); empty when the checkpoint has no optimizer state.
  const std::vector<std::string>& optimizer_buffer_names() const { return optimizer_buffers_; }

  // Fills `dst`, the slice of full tensor `name` that starts at `start` along `partition_dim`
  // (-1: `dst` is the whole tensor), from every stored shard that overlaps it. The stored
  // partitioning may differ from the requested one (resharding). Throws Error when the stored
  // shards do not cover `dst` exactly or dtypes/shapes disagree.
  void read_model(const std::string& name, Tensor dst, int partition_dim, int64_t start) const;
  // The same for `part` of that slice only: `dst` is shaped like the whole slice (part whole)
  // or 1-D contiguous [part.end - part.begin] (part_boxes).
  void read_model(const std::string& name, Tensor dst, int partition_dim, int64_t start,
                  const SlicePart& part) const;
  // The same for "<buffer>.<name>" in the optimizer files, of which only the pieces that
  // overlap `part` are read (and checksummed).
  void read_optimizer(const std::string& buffer, const std::string& name, Tensor dst,
                      int partition_dim, int64_t start, const SlicePart& part) const;

  // state.json of the rank directory (tp_rank, pp_rank) when the checkpoint has it, else of
  // mp_rank_00: the trainer's state is identical on every rank except rank-local fields.
  nlohmann::json state(int tp_rank, int pp_rank) const;

 private:
  struct Piece {
    const SafetensorsReader* file;
    ShardPlacement placement;
    size_t rank_dir;  // index into rank_dirs_
  };
  // Throws Error when the piece's bytes do not match its recorded checksum; each piece is
  // verified once.
  void verify(const Piece& piece, const std::string& name) const;
  struct ShardedTensor {
    ShardPlacement placement;
    std::vector<Piece> pieces;
  };
  void index_file(const SafetensorsReader& file, size_t rank_dir,
                  std::map<std::string, ShardedTensor>& index);
  void read(const std::map<std::string, ShardedTensor>& index, const std::string& name, Tensor dst,
            int partition_dim, int64_t start, const SlicePart& part) const;

  std::string iteration_dir_;
  int tp_size_ = 1, pp_size_ = 1;
  std::vector<std::string> rank_dirs_;  // in (pp_rank, tp_rank) order
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, ShardedTensor> model_, optimizer_;
  std::vector<std::string> optimizer_buffers_;
  mutable std::set<std::pair<const SafetensorsReader*, std::string>> verified_;
};

}  // namespace megatron
