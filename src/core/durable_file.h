// Durable file helpers: write bytes so that they survive a crash, and fsync directories.
//
// Why: a checkpoint is only "saved" once its bytes and the directory entries naming them are
// on stable storage; rename() alone is atomic but not durable. These helpers are the only
// place the project calls open/write/fsync directly.
#pragma once

#include <string>
#include <string_view>

namespace megatron {

// A file opened for writing (created or truncated) that is fsync'ed before it is closed.
// Every failure throws Error naming the path and the OS error.
class DurableFile {
 public:
  explicit DurableFile(const std::string& path);
  ~DurableFile();  // closes without syncing if close() was not called (an error path)
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, size_t bytes);
  void close();  // fsync + close; required for the data to count as written

 private:
  std::string path_;
  int fd_ = -1;
};

// Writes `content` to `path` and fsyncs it.
void write_file_durably(const std::string& path, std::string_view content);
// fsyncs a directory so that entries created or renamed in it are durable.
void fsync_directory(const std::string& path);
// Reads a whole file; throws Error naming `what` and the path when it cannot.
std::string read_file(const std::string& path, const char* what);

}  // namespace megatron
