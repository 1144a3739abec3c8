#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace megatron {

MappedFile::MappedFile(const std::string& path, Access access) : path_(path), access_(access) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) MT_THROW("cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    MT_THROW("cannot stat '", path, "': ", std::strerror(err));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    const bool cow = access == Access::kCopyOnWrite;
    void* p = ::mmap(nullptr, size_, cow ? PROT_READ | PROT_WRITE : PROT_READ,
                     cow ? MAP_PRIVATE : MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      MT_THROW("cannot memory-map '", path, "': ", std::strerror(err));
    }
    data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

uint8_t* MappedFile::writable_data() const {
  MT_CHECK(access_ == Access::kCopyOnWrite, "'", path_,
           "' is mapped read-only; writable_data() needs Access::kCopyOnWrite");
  return data_;
}

}  // namespace megatron
