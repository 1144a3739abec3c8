#include "checkpoint/housekeeping.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "checkpoint/layout.h"
#include "core/durable_file.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace megatron {

namespace {

bool is_complete_iteration_dir(const fs::path& dir) {
  try {
    for (const RankDir& r : list_rank_dirs(dir.string())) {
      if (!fs::exists(fs::path(r.path) / kModelFileName) ||
          !fs::exists(fs::path(r.path) / kStateFileName))
        return false;
    }
    return true;
  } catch (const Error&) {
    return false;  // no or an incomplete grid of mp_rank_* directories
  }
}

uint64_t bytes_under(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return fs::is_regular_file(p, ec) ? fs::file_size(p, ec) : 0;
  uint64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) total += it->file_size(size_ec);
  }
  return total;
}

std::string list_iterations(const std::vector<int64_t>& its) {
  std::string s;
  const size_t shown = 5, first = its.size() > shown ? its.size() - shown : 0;
  if (first > 0) s = "..., ";
  for (size_t i = first; i < its.size(); ++i) s += (i > first ? ", " : "") + std::to_string(its[i]);
  return s;
}

std::string canonical_or_same(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p : c.string();
}

}  // namespace

std::vector<int64_t> complete_checkpoint_iterations(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex pattern(R"(iter_(\d{7,18}))");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, pattern) || !e.is_directory()) continue;
    if (is_complete_iteration_dir(e.path())) out.push_back(std::stoll(m[1].str()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

LoadPlan plan_load(const std::string& load_dir, bool finetune) {
  std::error_code ec;
  const bool exists = fs::exists(load_dir, ec);
  MT_REQUIRE(!exists || fs::is_directory(load_dir, ec), "--load '", load_dir,
             "' is not a directory; expected a checkpoint directory (the --save of a run)");
  if (std::optional<int64_t> it = read_latest_iteration(load_dir)) return {it, ""};

  const std::vector<int64_t> its = complete_checkpoint_iterations(load_dir);
  const std::string tracker = (fs::path(load_dir) / kTrackerFileName).string();
  MT_REQUIRE(its.empty(), "--load '", load_dir, "' has no ", kTrackerFileName,
             " but holds complete checkpoints (iteration", its.size() > 1 ? "s " : " ",
             list_iterations(its),
             "); refusing to start from random weights beside them. To "
             "resume from the newest, write its iteration into the tracker: echo ",
             its.empty() ? 0 : its.back(), " > ", tracker);
  const std::string what = !exists ? "does not exist"
                                   : "holds no checkpoint (no " + std::string(kTrackerFileName) +
                                         ", no complete iter_* directory)";
  MT_REQUIRE(!finetune, "--load '", load_dir, "' ", what,
             "; --finetune starts from the weights of a checkpoint and needs one");
  return {std::nullopt, "--load '" + load_dir + "' " + what + ": starting from random weights"};
}

void check_save_dir_writable(const std::string& save_dir, int rank) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  MT_REQUIRE(!ec, "--save '", save_dir, "' cannot be created: ", ec.message());
  MT_REQUIRE(fs::is_directory(save_dir, ec), "--save '", save_dir, "' is not a directory");
  const std::string probe = (fs::path(save_dir) / (".write-test.rank" + std::to_string(rank) + "." +
                                                   std::to_string(::getpid())))
                                .string();
  try {
    DurableFile f(probe);
    const char byte = 0;
    f.write(&byte, 1);
    f.close();
  } catch (const Error& e) {
    fs::remove(probe, ec);
    MT_THROW("--save '", save_dir, "' is not writable: ", e.message());
  }
  fs::remove(probe, ec);
  MT_REQUIRE(!ec, "--save '", save_dir, "': cannot remove the probe file '", probe,
             "': ", ec.message());
}

void check_save_dir_not_foreign(const std::string& save_dir, const std::string& loaded_from) {
  if (!loaded_from.empty() && canonical_or_same(loaded_from) == canonical_or_same(save_dir)) return;
  const std::vector<int64_t> its = complete_checkpoint_iterations(save_dir);
  MT_REQUIRE(its.empty(), "--save '", save_dir, "' already holds the checkpoints of another run (",
             "iteration", its.size() > 1 ? "s " : " ", list_iterations(its),
             ") and this run did not load from it; its saves would replace them. Give --load '",
             save_dir, "' to resume that run, or choose an empty --save directory");
}

RemovedTemporaries remove_stale_checkpoint_temporaries(const std::string& save_dir) {
  RemovedTemporaries removed;
  static const std::regex pattern(R"(iter_\d+\.tmp-.*)");
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& e : fs::directory_iterator(save_dir, ec))
    if (std::regex_match(e.path().filename().string(), pattern)) stale.push_back(e.path());
  for (const fs::path& p : stale) {
    const uint64_t bytes = bytes_under(p);
    std::error_code remove_ec;
    if (fs::remove_all(p, remove_ec) > 0 && !remove_ec) {
      ++removed.count;
      removed.bytes += bytes;
    }
  }
  return removed;
}

bool retire_previous_checkpoint(const std::string& save_dir, std::optional<int64_t> previous,
                                int64_t saved, int64_t retain_interval) {
  if (!previous || *previous <= 0 || *previous >= saved || *previous % retain_interval == 0)
    return false;
  const fs::path dir = fs::path(save_dir) / iteration_dir_name(*previous);
  std::error_code ec;
  if (fs::is_symlink(dir, ec) || !fs::is_directory(dir, ec)) return false;
  const fs::path retired = fs::path(save_dir) / (iteration_dir_name(*previous) + ".tmp-retired");
  fs::rename(dir, retired, ec);
  if (ec) return false;
  fs::remove_all(retired, ec);
  return true;
}

}  // namespace megatron
