// MappedFile: a whole file mapped into memory (RAII over open/mmap/munmap).
//
// The indexed dataset reads token ids straight out of the page cache through a shared
// read-only mapping, so many DataLoader threads and several ranks on one node share one copy
// of the data. The safetensors reader uses a copy-on-write mapping instead: tensors handed
// out as views may be modified in memory without ever changing the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace megatron {

class MappedFile {
 public:
  enum class Access {
    kReadOnly,     // MAP_SHARED, PROT_READ: shares the page cache; writing faults
    kCopyOnWrite,  // MAP_PRIVATE, PROT_READ|PROT_WRITE: writes stay private to this process
  };

  explicit MappedFile(const std::string& path,
                      Access access = Access::kReadOnly);  // throws Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  // The mapping as writable memory; only for Access::kCopyOnWrite (throws otherwise).
  uint8_t* writable_data() const;
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Access access_;
  uint8_t* data_ = nullptr;  // nullptr for an empty file (mmap cannot map 0 bytes)
  size_t size_ = 0;
};

}  // namespace megatron
