#include "distributed/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/host_name.h"
#include "distributed/broadcast_bytes.h"
#include "distributed/runtime.h"

namespace megatron {

namespace fs = std::filesystem;

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::max(0.0, s));
  return buf;
}

std::string heartbeat_file(const std::string& dir, int rank) {
  return (fs::path(dir) / ("rank_" + std::to_string(rank) + ".heartbeat")).string();
}

// "in all_reduce (member 0 of 2) for 6.0 s, operation #18" or "computing for 7.1 s after
// operation #17".
std::string where(const Heartbeat& h, double now) {
  std::string s = h.operation.empty()
                      ? "computing for " + seconds_text(now - h.since) + " after operation #" +
                            std::to_string(h.operations)
                      : "in " + h.operation + " (member " + std::to_string(h.group_rank) + " of " +
                            std::to_string(h.group_size) + ") for " + seconds_text(now - h.since) +
                            ", operation #" + std::to_string(h.operations);
  return s + ", iteration " + std::to_string(h.iteration);
}

}  // namespace

std::string format_heartbeat(const Heartbeat& h) {
  std::ostringstream out;
  out.precision(17);
  out << "rank=" << h.rank << " host=" << h.host << " pid=" << h.pid << " iteration=" << h.iteration
      << " operation=" << (h.operation.empty() ? "-" : h.operation)
      << " group_rank=" << h.group_rank << " group_size=" << h.group_size
      << " operations=" << h.operations << " since=" << h.since << " beat=" << h.beat;
  return out.str();
}

std::optional<Heartbeat> parse_heartbeat(const std::string& line) {
  Heartbeat h;
  std::istringstream in(line);
  std::string field;
  int seen = 0;
  try {
    while (in >> field) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) return std::nullopt;
      const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "rank")
        h.rank = std::stoi(value);
      else if (key == "host")
        h.host = value;
      else if (key == "pid")
        h.pid = std::stoll(value);
      else if (key == "iteration")
        h.iteration = std::stoll(value);
      else if (key == "operation")
        h.operation = value == "-" ? "" : value;
      else if (key == "group_rank")
        h.group_rank = std::stoi(value);
      else if (key == "group_size")
        h.group_size = std::stoi(value);
      else if (key == "operations")
        h.operations = std::stoll(value);
      else if (key == "since")
        h.since = std::stod(value);
      else if (key == "beat")
        h.beat = std::stod(value);
      else
        return std::nullopt;
      ++seen;
    }
  } catch (const std::exception&) {  // std::stoi and friends on a malformed value
    return std::nullopt;
  }
  if (seen != 10) return std::nullopt;
  return h;
}

std::string hang_report(const Heartbeat& self, const std::vector<std::optional<Heartbeat>>& ranks,
                        double now, double timeout, double stale_after, const std::string& flag,
                        const std::string& dir) {
  std::ostringstream out;
  out << "rank " << self.rank << " has waited " << seconds_text(now - self.since) << " in "
      << self.operation << " (member " << self.group_rank << " of a group of " << self.group_size
      << ", its operation #" << self.operations << "), longer than the timeout of "
      << seconds_text(timeout) << " (" << flag << "). Where every rank is (heartbeats in " << dir
      << "):";
  std::vector<int> outside, silent, unseen;
  for (size_t r = 0; r < ranks.size(); ++r) {
    out << "\n  rank " << r;
    if (!ranks[r]) {
      out << ": no heartbeat file (not started, or on a host that does not share the heartbeat "
             "directory: give --heartbeat-dir a shared directory)";
      unseen.push_back(int(r));
      continue;
    }
    const Heartbeat& h = *ranks[r];
    out << " (host " << h.host << ", pid " << h.pid << "): " << where(h, now);
    if (now - h.beat > stale_after) {
      out << "; no heartbeat for " << seconds_text(now - h.beat) << ": stopped, hung or dead";
      silent.push_back(int(r));
    } else if (h.operation.empty()) {
      outside.push_back(int(r));
    }
  }
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
  };
  if (!silent.empty())
    out << "\nNot responding: rank" << (silent.size() > 1 ? "s " : " ") << list(silent) << ".";
  if (!outside.empty())
    out << "\nNot in communication (the ranks the others wait for, or stuck in computation): rank"
        << (outside.size() > 1 ? "s " : " ") << list(outside) << ".";
  if (silent.empty() && outside.empty())
    out << "\nEvery rank is inside communication: they wait in operations that do not match (a "
           "collective called by some ranks only, or in another order).";
  out << "\nEnding the job; the last committed checkpoint is kept (resume from it with --load).";
  return out.str();
}

std::string make_heartbeat_dir(Communicator& world, const std::string& base) {
  std::string root = base;
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    root = tmp && *tmp ? tmp : "/tmp";
  }
  std::string made, failure;
  if (world.rank() == 0) {
    std::string pattern = (fs::path(root) / "megatron-heartbeat-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr)
      made = pattern;
    else
      failure = io_error_reason();
  }
  // The path, or "" and the reason, from rank 0.
  made = broadcast_string(world, made, 0);
  failure = broadcast_string(world, failure, 0);
  MT_REQUIRE(!made.empty(), "cannot create the heartbeat directory under '", root, "' (", failure,
             "); give --heartbeat-dir a writable directory");
  std::error_code ec;
  fs::create_directories(made, ec);  // a host that does not share rank 0's filesystem
  MT_REQUIRE(fs::is_directory(made), "rank ", world.rank(),
             " cannot create the heartbeat directory '", made, "' (", ec.message(),
             "); give --heartbeat-dir a writable directory");
  return made;
}

CollectiveWatchdog::CollectiveWatchdog(WatchdogOptions options)
    : options_(std::move(options)), file_(heartbeat_file(options_.heartbeat_dir, options_.rank)) {
  MT_CHECK(options_.timeout_seconds > 0 && options_.heartbeat_seconds > 0,
           "the watchdog needs a positive timeout and heartbeat period");
  state_.rank = options_.rank;
  state_.host = host_name();
  state_.pid = int64_t(::getpid());
  state_.since = wall_seconds();
  write_heartbeat(snapshot());
  thread_ = std::thread([this] { run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::error_code ec;
  fs::remove(file_, ec);
  fs::remove(options_.heartbeat_dir, ec);  // only when empty: the last rank out removes it
}

void CollectiveWatchdog::enter(const char* operation, int group_rank, int group_size) {
  std::lock_guard lock(mutex_);
  if (depth_++ > 0) return;
  operation_ = operation;
  state_.group_rank = group_rank;
  state_.group_size = group_size;
  ++state_.operations;
  state_.since = wall_seconds();
}

void CollectiveWatchdog::leave() {
  std::lock_guard lock(mutex_);
  if (--depth_ > 0) return;
  operation_ = nullptr;
  state_.since = wall_seconds();
}

void CollectiveWatchdog::set_iteration(int64_t iteration) {
  std::lock_guard lock(mutex_);
  state_.iteration = iteration;
}

Heartbeat CollectiveWatchdog::snapshot() {
  std::lock_guard lock(mutex_);
  Heartbeat h = state_;
  h.operation = operation_ ? operation_ : "";
  h.beat = wall_seconds();
  return h;
}

// Written to a temporary and renamed, so that a reader sees the old line or the new one.
void CollectiveWatchdog::write_heartbeat(const Heartbeat& h) {
  const std::string tmp = file_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << format_heartbeat(h) << "\n";
    if (!out) return;  // the directory went away (the job is ending) or the disk is full
  }
  std::error_code ec;
  fs::rename(tmp, file_, ec);
}

void CollectiveWatchdog::run() {
  const auto period = std::chrono::duration<double>(options_.heartbeat_seconds);
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    const Heartbeat self = snapshot();
    write_heartbeat(self);
    const double now = wall_seconds();
    if (!self.operation.empty() && now - self.since > options_.timeout_seconds) {
      std::vector<std::optional<Heartbeat>> ranks(size_t(options_.world_size));
      for (int r = 0; r < options_.world_size; ++r) {
        std::ifstream in(heartbeat_file(options_.heartbeat_dir, r));
        std::string line;
        if (in && std::getline(in, line)) ranks[size_t(r)] = parse_heartbeat(line);
      }
      ranks[size_t(options_.rank)] = self;
      const double stale_after = std::max(3 * options_.heartbeat_seconds, 2.0);
      abort_job(hang_report(self, ranks, now, options_.timeout_seconds, stale_after,
                            options_.timeout_flag, options_.heartbeat_dir));
    }
    lock.lock();
  }
}

}  // namespace megatron
