// MappedFile: a whole file mapped read-only into memory (RAII over open/mmap/munmap).
//
// The indexed dataset reads token ids straight out of the page cache through this, so many
// DataLoader threads and several ranks on one node share one copy of the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace megatron {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;  // nullptr for an empty file (mmap cannot map 0 bytes)
  size_t size_ = 0;
};

}  // namespace megatron
