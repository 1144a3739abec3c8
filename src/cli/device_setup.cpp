#include "cli/device_setup.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/device_runtime.h"
#include "core/error.h"

namespace megatron::cli {

int local_rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    int rank = -1;
    const char* end = value + std::strlen(value);
    auto [last, ec] = std::from_chars(value, end, rank);
    MT_CHECK(ec == std::errc() && last == end && rank >= 0, "environment variable ", name, "='",
             value, "' is not a local rank (a non-negative integer)");
    return rank;
  }
  return 0;
}

Device resolve_device(const std::string& flag, int local_rank) {
  if (flag.empty()) return default_device(local_rank);
  Device device = parse_device(flag);  // throws on anything but cpu, cuda, cuda:N
  if (device.is_cpu()) return device;
  MT_CHECK(cuda_built(), "--device ", flag,
           ": this binary was built without CUDA; rebuild with -DMEGATRON_CUDA=ON (needs nvcc) "
           "or use --device cpu");
  const int gpus = cuda_device_count();
  MT_CHECK(gpus > 0, "--device ", flag,
           ": no GPU is visible to this process (check CUDA_VISIBLE_DEVICES and the driver), "
           "or use --device cpu");
  if (flag == "cuda") return Device::cuda(local_rank % gpus);
  MT_CHECK(device.index < gpus, "--device ", flag, ": this process sees ", gpus, " GPU",
           gpus == 1 ? "" : "s", " (cuda:0 .. cuda:", gpus - 1, ")");
  return device;
}

Device select_device(const std::string& flag) {
  const Device device = resolve_device(flag, local_rank_from_environment());
  use_device(device);
  return device;
}

}  // namespace megatron::cli
