#include "checkpoint/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/host_name.h"
#include "core/logging.h"

namespace megatron {

namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The whole file behind `fd`, from its start.
std::string read_fd(int fd) {
  std::string out;
  char buf[512];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, size_t(n));
    at += n;
  }
  return trimmed(out);
}

std::string read_path(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return trimmed(s.str());
}

// The value of `name=` in a lock line ("" when absent).
std::string field(const std::string& record, const std::string& name) {
  std::istringstream words(record);
  for (std::string w; words >> w;)
    if (w.rfind(name + "=", 0) == 0) return w.substr(name.size() + 1);
  return "";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// Whether `fd` is the file at `path` now (the holder may remove it between our open and flock:
// a lock on a removed file keeps no other job out).
bool same_file(int fd, const std::string& path) {
  struct stat by_fd {};
  struct stat by_path {};
  return ::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 &&
         by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

}  // namespace

SaveLock::SaveLock(const std::string& save_dir)
    : save_dir_(save_dir), path_((std::filesystem::path(save_dir) / kSaveLockFileName).string()) {
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    MT_REQUIRE(fd_ >= 0, "cannot open the lock file '", path_, "' of --save '", save_dir,
               "': ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = read_fd(fd_);
      ::close(fd_);
      fd_ = -1;
      MT_REQUIRE(err != EWOULDBLOCK, "--save '", save_dir, "' is in use by another job (",
                 holder.empty() ? "starting now" : holder, "; lock file '", path_,
                 "'): two jobs saving into one directory replace each other's checkpoints. "
                 "Stop that job first, or give this one another --save");
      MT_THROW("cannot lock '", path_, "': ", std::strerror(err));
    }
    if (same_file(fd_, path_)) break;
    ::close(fd_);
    fd_ = -1;
    MT_REQUIRE(attempt < 10, "cannot lock '", path_, "': another job keeps replacing it");
  }
  const std::string previous = read_fd(fd_);
  const std::string host = host_name();
  if (!previous.empty() && field(previous, "host") != host) {
    ::close(fd_);
    fd_ = -1;
    MT_THROW("--save '", save_dir, "' has the lock file '", path_, "' of a job on another host (",
             previous,
             "), which does not hold it from here: on a filesystem that does not share locks "
             "between hosts that job may still be running. Remove the file once that job has "
             "ended, or give this job another --save");
  }
  if (!previous.empty())
    log_warning("taking over the stale lock of --save '" + save_dir + "' (" + previous +
                "): that process no longer holds it");
  record_ = "host=" + host + " pid=" + std::to_string(::getpid()) + " start=" + utc_now();
  const std::string line = record_ + "\n";
  const bool written = ::ftruncate(fd_, 0) == 0 &&
                       ::pwrite(fd_, line.data(), line.size(), 0) == ssize_t(line.size()) &&
                       ::fsync(fd_) == 0;
  if (!written) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    MT_THROW("cannot write the lock file '", path_, "' of --save '", save_dir,
             "': ", std::strerror(err));
  }
}

SaveLock::~SaveLock() {
  if (fd_ < 0) return;
  // Removed only while it still names this job (else it is another job's now).
  if (read_path(path_) == record_) ::unlink(path_.c_str());
  ::close(fd_);
}

void SaveLock::check_held() const {
  const std::string now = read_path(path_);
  MT_REQUIRE(now == record_, "the lock file '", path_, "' of --save '", save_dir_,
             "' no longer names this job (", record_,
             "): ", now.empty() ? "it was removed" : "it names " + now,
             ", so another job may be saving there. Not saving this checkpoint: stop the other "
             "job, then resume this one from its last checkpoint");
}

}  // namespace megatron
