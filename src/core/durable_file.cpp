#include "core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace megatron {

DurableFile::DurableFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_REQUIRE(fd_ >= 0, "cannot create file '", path, "': ", std::strerror(errno));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write(const void* data, size_t bytes) {
  MT_CHECK(fd_ >= 0, "write to closed file '", path_, "'");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    MT_REQUIRE(n > 0, "cannot write to '", path_, "': ", std::strerror(errno));
    p += n;
    bytes -= size_t(n);
  }
}

void DurableFile::close() {
  MT_CHECK(fd_ >= 0, "file '", path_, "' closed twice");
  int fd = fd_;
  fd_ = -1;
  bool synced = ::fsync(fd) == 0;
  int sync_errno = errno;
  bool closed = ::close(fd) == 0;
  MT_REQUIRE(synced, "cannot fsync '", path_, "': ", std::strerror(sync_errno));
  MT_REQUIRE(closed, "cannot close '", path_, "': ", std::strerror(errno));
}

void write_file_durably(const std::string& path, std::string_view content) {
  DurableFile f(path);
  f.write(content.data(), content.size());
  f.close();
}

void fsync_directory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MT_REQUIRE(fd >= 0, "cannot open directory '", path, "': ", std::strerror(errno));
  bool synced = ::fsync(fd) == 0;
  int sync_errno = errno;
  ::close(fd);
  MT_REQUIRE(synced, "cannot fsync directory '", path, "': ", std::strerror(sync_errno));
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  MT_REQUIRE(in.good(), "cannot open ", what, " '", path, "': ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  MT_REQUIRE(!in.bad(), "cannot read ", what, " '", path, "'");
  return os.str();
}

}  // namespace megatron
