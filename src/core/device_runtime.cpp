#include "core/device_runtime.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"
#ifdef MEGATRON_CUDA
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_context.h"
#endif

namespace megatron {

namespace {

#ifndef MEGATRON_CUDA
[[noreturn]] void no_cuda(const char* what) {
  MT_THROW(what,
           ": CUDA memory needs a binary built with CUDA (cmake -DMEGATRON_CUDA=ON, "
           "nvcc required); use --device cpu on this build");
}
#endif

size_t align64(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// Host tensor storage in use (malloc's usable sizes: what free() will return), for
// device_memory_stats. Relaxed atomics: the peak may miss a concurrent allocation's few bytes.
std::atomic<size_t> host_bytes{0}, host_peak_bytes{0}, host_blocks{0};

void count_host_allocation(void* p) {
  const size_t n = malloc_usable_size(p);
  const size_t now = host_bytes.fetch_add(n, std::memory_order_relaxed) + n;
  host_blocks.fetch_add(1, std::memory_order_relaxed);
  size_t peak = host_peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !host_peak_bytes.compare_exchange_weak(peak, now)) {
  }
}

void count_host_free(void* p) {
  host_bytes.fetch_sub(malloc_usable_size(p), std::memory_order_relaxed);
  host_blocks.fetch_sub(1, std::memory_order_relaxed);
}

// This process's resident set now (VmRSS) and at its peak (VmHWM), in bytes, from one read
// of /proc/self/status (0 where /proc is not there).
void resident_set_bytes(size_t& now, size_t& peak) {
  now = peak = 0;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) now = size_t(std::atoll(line.c_str() + 6)) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) peak = size_t(std::atoll(line.c_str() + 6)) * 1024;
  }
}

}  // namespace

bool cuda_built() {
#ifdef MEGATRON_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef MEGATRON_CUDA
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

Device default_device(int local_rank) {
  const int gpus = cuda_device_count();
  return gpus > 0 ? Device::cuda(local_rank % gpus) : Device::CPU;
}

void use_device(Device device) {
  if (device.is_cpu()) return;
#ifdef MEGATRON_CUDA
  cuda::bind_device(device.index);
#else
  no_cuda("use_device");
#endif
}

void* device_allocate(size_t bytes, Device device) {
  if (bytes == 0) return nullptr;
  if (device.is_cpu()) {
    // 64-byte alignment: one cache line, and what AVX-512 loads and oneDNN prefer.
    void* p = std::aligned_alloc(64, align64(bytes));
    MT_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    count_host_allocation(p);
    return p;
  }
#ifdef MEGATRON_CUDA
  return cuda::CachingAllocator::instance().allocate(bytes, device.index);
#else
  no_cuda("device_allocate");
#endif
}

void device_free(void* p, Device device) {
  if (p == nullptr) return;
  if (device.is_cpu()) {
    count_host_free(p);
    return std::free(p);
  }
#ifdef MEGATRON_CUDA
  cuda::CachingAllocator::instance().release(p);
#endif
}

DeviceMemoryStats device_memory_stats(Device device) {
  DeviceMemoryStats m;
  if (device.is_cpu()) {
    m.allocated = host_bytes.load(std::memory_order_relaxed);
    m.max_allocated = host_peak_bytes.load(std::memory_order_relaxed);
    m.allocations = host_blocks.load(std::memory_order_relaxed);
    resident_set_bytes(m.reserved, m.max_reserved);
    return m;
  }
#ifdef MEGATRON_CUDA
  const cuda::CachingAllocator::Stats s = cuda::CachingAllocator::instance().stats();
  m.allocated = s.in_use;
  m.max_allocated = s.peak_in_use;
  m.reserved = s.in_use + s.cached;
  m.max_reserved = s.peak_reserved;
  m.allocations = s.live_blocks;
  return m;
#else
  no_cuda("device_memory_stats");
#endif
}

DeviceCapacity device_capacity(Device device) {
  DeviceCapacity c;
  if (device.is_cpu()) {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    size_t kb = 0;
    while (meminfo >> key >> kb) {
      if (key == "MemTotal:") c.total = kb * 1024;
      if (key == "MemAvailable:") c.free = kb * 1024;
      std::getline(meminfo, key);  // the unit
    }
    return c;
  }
#ifdef MEGATRON_CUDA
  cuda::memory_info(c.free, c.total);
  return c;
#else
  no_cuda("device_capacity");
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
#ifdef MEGATRON_CUDA
  cuda::copy_async(dst, src, bytes, /*host_involved=*/dst_device.is_cpu() || src_device.is_cpu());
#else
  no_cuda("copy_bytes");
#endif
}

void zero_bytes(void* p, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(p, 0, bytes);
    return;
  }
#ifdef MEGATRON_CUDA
  cuda::zero_async(p, bytes);
#else
  no_cuda("zero_bytes");
#endif
}

void synchronize(Device device) {
  if (device.is_cpu()) return;
#ifdef MEGATRON_CUDA
  cuda::synchronize_compute();
#endif
}

DeviceTimePoint device_time_point(Device device) {
  DeviceTimePoint p{device};
  if (device.is_cpu()) {
    p.host_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return p;
  }
#ifdef MEGATRON_CUDA
  p.event = cuda::timing_point();
#else
  no_cuda("device_time_point");
#endif
  return p;
}

double elapsed_seconds(DeviceTimePoint& start, DeviceTimePoint& end) {
  MT_CHECK(start.device == end.device, "elapsed_seconds between points on ", start.device.str(),
           " and ", end.device.str());
  if (start.device.is_cpu()) return end.host_seconds - start.host_seconds;
#ifdef MEGATRON_CUDA
  auto* a = static_cast<cudaEvent_t>(start.event);
  auto* b = static_cast<cudaEvent_t>(end.event);
  const double seconds = cuda::elapsed_seconds(a, b);
  cuda::release_event(a);
  cuda::release_event(b);
  start.event = end.event = nullptr;
  return seconds;
#else
  no_cuda("elapsed_seconds");
#endif
}

}  // namespace megatron
