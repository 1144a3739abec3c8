#include "core/host_name.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace megatron {

std::string host_name() {
  if (const char* name = std::getenv("MEGATRON_TEST_NODE_NAME")) return name;
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

}  // namespace megatron
