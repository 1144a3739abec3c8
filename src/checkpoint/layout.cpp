#include "checkpoint/layout.h"

#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "core/durable_file.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace megatron {

std::string iteration_dir_name(int64_t iteration) {
  if (iteration == kReleaseIteration) return "release";
  MT_REQUIRE(iteration >= 0, "checkpoint iteration must be non-negative, got ", iteration);
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::string rank_dir_name(int tp_rank, int pp_rank, int pp_size) {
  char buf[32];
  if (pp_size == 1)
    std::snprintf(buf, sizeof buf, "mp_rank_%02d", tp_rank);
  else
    std::snprintf(buf, sizeof buf, "mp_rank_%02d_%03d", tp_rank, pp_rank);
  return buf;
}

std::string optimizer_shard_file_name(int dp_rank, int dp_size) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer_dp%03d_of_%03d.safetensors", dp_rank, dp_size);
  return buf;
}

std::vector<std::string> optimizer_files(const std::string& rank_dir) {
  const std::string whole = rank_dir + "/" + kOptimizerFileName;
  static const std::regex pattern(R"(optimizer_dp(\d{3})_of_(\d{3})\.safetensors)");
  std::set<int> sizes, ranks;
  for (const fs::directory_entry& e : fs::directory_iterator(rank_dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    ranks.insert(std::stoi(m[1].str()));
    sizes.insert(std::stoi(m[2].str()));
  }
  if (sizes.empty())
    return fs::exists(whole) ? std::vector<std::string>{whole} : std::vector<std::string>{};
  MT_REQUIRE(!fs::exists(whole), "checkpoint directory '", rank_dir, "' holds both ",
             kOptimizerFileName,
             " and distributed-optimizer shard files, of which a save writes one kind: it was "
             "altered after it was saved");
  MT_REQUIRE(sizes.size() == 1, "checkpoint directory '", rank_dir,
             "' holds distributed-optimizer shard files of ", sizes.size(),
             " different data-parallel sizes");
  const int dp_size = *sizes.begin();
  std::vector<std::string> files;
  std::string missing;
  int num_missing = 0;
  for (int r = 0; r < dp_size; ++r) {
    const std::string name = optimizer_shard_file_name(r, dp_size);
    if (ranks.count(r)) {
      files.push_back(rank_dir + "/" + name);
    } else {
      missing += (missing.empty() ? "" : ", ") + name;
      ++num_missing;
    }
  }
  MT_REQUIRE(num_missing == 0, "checkpoint directory '", rank_dir, "' lacks ", num_missing,
             " of its ", dp_size, " distributed-optimizer shard files: ", missing);
  return files;
}

std::optional<int64_t> read_latest_iteration(const std::string& save_dir) {
  std::string path = save_dir + "/" + kTrackerFileName;
  if (!fs::exists(path)) return std::nullopt;
  std::string text = read_file(path, "checkpoint tracker file");
  static const std::regex number(R"(\s*(\d{1,18})\s*)");
  static const std::regex release(R"(\s*release\s*)");
  if (std::regex_match(text, release)) return kReleaseIteration;
  std::smatch m;
  MT_REQUIRE(std::regex_match(text, m, number), "checkpoint tracker file '", path, "' holds '",
             text, "', expected an iteration number or \"release\"");
  return std::stoll(m[1].str());
}

void write_latest_iteration(const std::string& save_dir, int64_t iteration) {
  std::string path = save_dir + "/" + kTrackerFileName;
  std::string tmp = path + ".tmp";
  write_file_durably(tmp, std::to_string(iteration));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  MT_REQUIRE(!ec, "cannot rename '", tmp, "' to '", path, "': ", ec.message());
  fsync_directory(save_dir);
}

namespace {

// Megatron-LM's own formats, recognised so that loading one says what it is and how to convert
// it instead of failing on a missing model.safetensors.
// An entry of the iteration directory that is not a rank directory: a PyTorch Distributed
// Checkpoint file makes the directory Megatron-LM's torch_dist format.
void refuse_torch_dist(const std::string& iteration_dir, const fs::path& entry) {
  MT_REQUIRE(entry.extension() != ".distcp" && entry.filename() != ".metadata",
             "checkpoint directory '", iteration_dir,
             "' is Megatron-LM's torch_dist format (PyTorch Distributed Checkpoint: ",
             entry.filename().string(),
             "). Convert it once with `megatron convert --model-type gpt --from megatron-lm "
             "--load <its parent directory> --save <new directory>` and load that (GPT-family "
             "models; pretrain-gpt --load with --finetune converts it itself)");
}

// A rank directory in the other format than the one asked for.
void check_rank_dir_format(const std::string& iteration_dir, const fs::path& rank_dir,
                           RankDirFormat format) {
  const bool torch = fs::exists(rank_dir / kMegatronLmTorchFileName);
  const bool ours = fs::exists(rank_dir / kModelFileName);
  if (format == RankDirFormat::kMegatronCpp) {
    MT_REQUIRE(!torch || ours, "checkpoint directory '", iteration_dir,
               "' is Megatron-LM's torch format (", (rank_dir / kMegatronLmTorchFileName).string(),
               ", a PyTorch pickle). Convert it once with `megatron convert --model-type gpt "
               "--from megatron-lm --load <its parent directory> --save <new directory>` and "
               "load that");
  } else {
    MT_REQUIRE(torch, "checkpoint directory '", iteration_dir, "': ", rank_dir.string(), " has no ",
               kMegatronLmTorchFileName, ", so it is not Megatron-LM's torch format",
               ours ? " (it is megatron-cpp's own: load it as it is)" : "");
  }
}

}  // namespace

std::vector<RankDir> list_rank_dirs(const std::string& iteration_dir, RankDirFormat format) {
  MT_REQUIRE(fs::is_directory(iteration_dir), "checkpoint directory '", iteration_dir,
             "' does not exist");
  static const std::regex pattern(R"(mp_rank_(\d{2})(_(\d{3}))?)");
  std::vector<RankDir> dirs;
  std::set<bool> styles;  // with or without the pipeline suffix
  for (const fs::directory_entry& e : fs::directory_iterator(iteration_dir)) {
    std::string name = e.path().filename().string();
    std::smatch m;
    if (!e.is_directory() || !std::regex_match(name, m, pattern)) {
      refuse_torch_dist(iteration_dir, e.path());
      continue;
    }
    check_rank_dir_format(iteration_dir, e.path(), format);
    styles.insert(m[2].matched);
    dirs.push_back(
        {std::stoi(m[1].str()), m[2].matched ? std::stoi(m[3].str()) : 0, e.path().string()});
  }
  MT_REQUIRE(!dirs.empty(), "checkpoint directory '", iteration_dir,
             "' holds no mp_rank_* directories");
  MT_REQUIRE(styles.size() == 1, "checkpoint directory '", iteration_dir,
             "' mixes mp_rank_XX and mp_rank_XX_YYY directories");
  std::sort(dirs.begin(), dirs.end(), [](const RankDir& a, const RankDir& b) {
    return a.pp_rank != b.pp_rank ? a.pp_rank < b.pp_rank : a.tp_rank < b.tp_rank;
  });
  int tp = 0, pp = 0;
  for (const RankDir& d : dirs) {
    tp = std::max(tp, d.tp_rank + 1);
    pp = std::max(pp, d.pp_rank + 1);
  }
  MT_REQUIRE(int(dirs.size()) == tp * pp, "checkpoint directory '", iteration_dir, "' holds ",
             dirs.size(), " mp_rank_* directories, expected a complete grid of ", tp, " tensor × ",
             pp, " pipeline ranks");
  return dirs;
}

}  // namespace megatron
