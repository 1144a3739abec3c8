#include "cli/setup/device_setup.h"

#include "core/device_runtime.h"
#include "core/error.h"
#include "core/logging.h"
#include "distributed/runtime.h"
#include "kernels/cpu/gemm_backend.h"

namespace megatron::cli {

Device resolve_device(const std::string& flag, int local_rank) {
  if (flag.empty()) return default_device(local_rank);
  Device device = parse_device(flag);  // throws on anything but cpu, cuda, cuda:N
  if (device.is_cpu()) return device;
  MT_REQUIRE(cuda_built(), "--device ", flag,
             ": this binary was built without CUDA; rebuild with -DMEGATRON_CUDA=ON (needs nvcc) "
             "or use --device cpu");
  const int gpus = cuda_device_count();
  MT_REQUIRE(gpus > 0, "--device ", flag,
             ": no GPU is visible to this process (check CUDA_VISIBLE_DEVICES and the driver), "
             "or use --device cpu");
  if (flag == "cuda") return Device::cuda(local_rank % gpus);
  MT_REQUIRE(device.index < gpus, "--device ", flag, ": this process sees ", gpus, " GPU",
             gpus == 1 ? "" : "s", " (cuda:0 .. cuda:", gpus - 1, ")");
  return device;
}

Device select_device(const std::string& flag) {
  const Device device = resolve_device(flag, local_rank());
  use_device(device);
  if (device.is_cpu()) {
    const std::string note = kernels::cpu::gemm_library_note();
    if (!note.empty()) log_warning(note);
  }
  return device;
}

}  // namespace megatron::cli
