// Device: where a tensor's bytes live — the host, or one CUDA GPU of this process.
//
// `Device::CPU` is the host; `Device::cuda(i)` is GPU i as the CUDA runtime numbers the GPUs
// visible to this process. One rank drives one GPU (DESIGN.md §3), so in practice every CUDA
// tensor of a process has the same index. Devices compare by value.
#pragma once

#include <cstdint>
#include <string>

namespace megatron {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // 0 for the CPU

  static const Device CPU;
  static constexpr Device cuda(int index = 0) { return Device{DeviceType::CUDA, index}; }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

inline constexpr Device Device::CPU{DeviceType::CPU, 0};

// "cpu", "cuda", "cuda:N" (what --device accepts); anything else is an Error naming the choices.
Device parse_device(const std::string& name);

}  // namespace megatron
