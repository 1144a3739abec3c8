// AtomicFile: writes a file under a temporary name and renames it into place on commit().
//
// Why: a crash or an error half-way through preprocessing or index caching must never leave
// a truncated file that a later run would take for a good one. If commit() is not reached
// (exception, early return) the destructor deletes the temporary file, so no partial output
// survives. The temporary name is unique per process and object, so several ranks may race
// to write the same cache file: the last rename wins and every reader sees a whole file.
#pragma once

#include <cstdio>
#include <string>

namespace megatron {

class AtomicFile {
 public:
  // Opens PATH.tmp.<pid>.<n> for writing, creating PATH's missing parent directories.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  template <typename T>
  void write_value(const T& v) {
    write(&v, sizeof(T));
  }
  size_t bytes_written() const { return written_; }
  // Flushes, closes and renames to the final path. Throws Error on any I/O failure.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string tmp_path_;
  FILE* file_ = nullptr;
  size_t written_ = 0;
  bool committed_ = false;
};

}  // namespace megatron
