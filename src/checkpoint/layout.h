// Megatron-LM's checkpoint directory layout: names and the "latest" tracker file.
//
//   SAVE/latest_checkpointed_iteration.txt      "100" — the newest complete checkpoint
//   SAVE/iter_0000100/mp_rank_00/               one directory per model-parallel rank:
//   SAVE/iter_0000100/mp_rank_01/                 mp_rank_{tp:02d}          when PP = 1
//   SAVE/iter_0000100/mp_rank_00_001/             mp_rank_{tp:02d}_{pp:03d} when PP > 1
//   SAVE/iter_0000100/mp_rank_00/optimizer_dp001_of_004.safetensors
//                                               a distributed-optimizer shard (one per DP rank)
//   SAVE/iter_0000100.tmp-<nonce>/              a save in progress (ignored by loaders)
//   SAVE/release/                               a "release" checkpoint: the tracker holds
//                                               "release" (Megatron's; loaded weights-only)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatron {

inline constexpr const char* kTrackerFileName = "latest_checkpointed_iteration.txt";
inline constexpr const char* kModelFileName = "model.safetensors";
inline constexpr const char* kOptimizerFileName = "optimizer.safetensors";
inline constexpr const char* kStateFileName = "state.json";
// A rank's file in Megatron-LM's torch format (checkpoint/megatron_lm_torch.h).
inline constexpr const char* kMegatronLmTorchFileName = "model_optim_rng.pt";
// The distributed optimizer's state beside it (checkpoint/megatron_lm_distrib_optim.h).
inline constexpr const char* kMegatronLmDistribOptimFileName = "distrib_optim.pt";
// The iteration that stands for Megatron's "release" checkpoint (tracker text "release").
inline constexpr int64_t kReleaseIteration = -2;

std::string iteration_dir_name(int64_t iteration);                 // "iter_0000100", or "release"
std::string rank_dir_name(int tp_rank, int pp_rank, int pp_size);  // "mp_rank_01[_002]"
// "optimizer_dp001_of_004.safetensors": data-parallel rank 1's shard of 4.
std::string optimizer_shard_file_name(int dp_rank, int dp_size);

// The optimizer files of the rank directory `rank_dir`: optimizer.safetensors, or every
// shard file optimizer_dp000_of_DDD ... optimizer_dp(D-1)_of_DDD in rank order, or none.
// Throws Error naming the directory when it holds both kinds, shards of different sizes, or
// an incomplete set of shards (naming the missing ones).
std::vector<std::string> optimizer_files(const std::string& rank_dir);

// The iteration in SAVE's tracker file (kReleaseIteration for "release"), or nullopt when
// there is none. A tracker that holds neither a non-negative integer nor "release" is an
// Error naming the file.
std::optional<int64_t> read_latest_iteration(const std::string& save_dir);
// Replaces the tracker atomically (temporary file, fsync, rename, fsync of SAVE).
void write_latest_iteration(const std::string& save_dir, int64_t iteration);

struct RankDir {
  int tp_rank = 0, pp_rank = 0;
  std::string path;
};
// What the rank directories hold: megatron-cpp's files, or Megatron-LM's torch format
// (model_optim_rng.pt, checkpoint/megatron_lm_torch.h).
enum class RankDirFormat { kMegatronCpp, kMegatronLmTorch };
// The mp_rank_* directories of an iteration directory, sorted by (pp_rank, tp_rank).
// Throws Error when there are none, when both naming styles are mixed, when the ranks
// found do not form a complete tp × pp grid, or when they hold another format than `format`
// (naming the format found and how to convert it).
std::vector<RankDir> list_rank_dirs(const std::string& iteration_dir,
                                    RankDirFormat format = RankDirFormat::kMegatronCpp);

}  // namespace megatron
