#include "data/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace megatron {

namespace {
std::atomic<uint64_t> g_counter{0};
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_path_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_counter++);
  // Outputs may name a directory that does not exist yet (e.g. --output-prefix data/corpus).
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec)
    MT_THROW("cannot create the directory '", parent.string(), "' for '", path_,
             "': ", ec.message());
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (file_ == nullptr) MT_THROW("cannot create '", tmp_path_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  MT_CHECK(file_ != nullptr, "write to '", path_, "' after commit");
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes)
    MT_THROW("cannot write '", tmp_path_, "': ", std::strerror(errno));
  written_ += bytes;
}

void AtomicFile::commit() {
  MT_CHECK(file_ != nullptr, "'", path_, "' committed twice");
  bool ok = std::fflush(file_) == 0;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) MT_THROW("cannot write '", tmp_path_, "': ", std::strerror(errno));
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    MT_THROW("cannot rename '", tmp_path_, "' to '", path_, "': ", std::strerror(errno));
  committed_ = true;
}

}  // namespace megatron
