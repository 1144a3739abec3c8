#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace megatron {

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::CPU;
  if (name == "cuda") return Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* first = name.data() + 5;
    const char* last = name.data() + name.size();
    auto [end, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && end == last && first != last && index >= 0) return Device::cuda(index);
  }
  MT_THROW("unknown device '", name, "': expected cpu, cuda or cuda:N");
}

}  // namespace megatron
