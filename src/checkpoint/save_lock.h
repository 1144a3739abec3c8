// The lock on a training job's --save directory (docs/reliability.md): two jobs saving into one
// directory would replace each other's checkpoints and tracker, silently.
//
// SAVE/megatron-save.lock is flock(2)'ed by the job's rank 0 for the job's life and holds one
// line, "host=<host> pid=<pid> start=<UTC time>", naming the job:
//   - a second job on the same --save finds the lock taken and is refused at start, with the
//     holder's line;
//   - a lock file whose flock is free was left by a job that ended without removing it (killed):
//     one of this host is taken over, with a message (its process no longer holds the lock, so
//     it no longer runs); one of another host is refused — on a filesystem that does not share
//     locks between hosts that job may still run — and the message says to remove the file
//     once that job has ended;
//   - before each checkpoint commit the file is read again: it must still hold this job's line
//     (someone removed the file, or took it over, and another job may now write there).
// The file is removed when the lock is released.
#pragma once

#include <string>

namespace megatron {

inline constexpr const char* kSaveLockFileName = "megatron-save.lock";

class SaveLock {
 public:
  // Takes the lock on `save_dir` (which exists); throws Error naming the holder when another
  // job holds it.
  explicit SaveLock(const std::string& save_dir);
  ~SaveLock();
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

  // Throws Error when the lock file no longer holds this job's line.
  void check_held() const;

 private:
  std::string save_dir_, path_, record_;
  int fd_ = -1;
};

}  // namespace megatron
