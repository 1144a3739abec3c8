// data_dir: the same default as scripts/fetch_data.sh.
#include "data/data_dir.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace megatron {

std::string data_dir() {
  if (const char* dir = std::getenv("MEGATRON_DATA_DIR"); dir != nullptr && *dir != 0) {
    return dir;
  }
  const char* home = std::getenv("HOME");
  MT_REQUIRE(home != nullptr,
             "neither MEGATRON_DATA_DIR nor HOME is set; expected one of them to "
             "locate the data fetched by scripts/fetch_data.sh");
  return (std::filesystem::path(home) / ".cache" / "megatron-cpp").string();
}

std::string fetched_data_file(const std::string& name) {
  const std::string path = (std::filesystem::path(data_dir()) / name).string();
  MT_REQUIRE(std::filesystem::exists(path), path, " does not exist; run scripts/fetch_data.sh ",
             "(it writes to $MEGATRON_DATA_DIR, default $HOME/.cache/megatron-cpp)");
  return path;
}

}  // namespace megatron
