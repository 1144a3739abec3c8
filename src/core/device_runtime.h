// Device memory and copies, one interface for every device, so that core/ (Storage, Tensor,
// Arena) and the layers above never name CUDA.
//
// On the CPU these are aligned_alloc/free/memcpy/memset. On a CUDA device (built with
// MEGATRON_CUDA) memory comes from the caching allocator (core/cuda/caching_allocator.h) and
// copies and fills are queued on this process's compute stream; a copy that reads or writes
// host memory returns only when the host side is safe to use. In a build without CUDA every
// CUDA request is an Error that says how to get a CUDA build.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace megatron {

bool cuda_built();        // this binary was compiled with MEGATRON_CUDA
int cuda_device_count();  // GPUs this process can use; 0 without a CUDA build or a GPU

// The device a process computes on when the user did not say: cuda:<local rank mod GPUs> when
// the build has CUDA and a GPU is visible, else the CPU.
Device default_device(int local_rank);

// Binds this process to `device` (cudaSetDevice and stream creation for CUDA; nothing for the
// CPU). Call once, before the first CUDA allocation.
void use_device(Device device);

void* device_allocate(size_t bytes, Device device);  // 64-byte aligned; nullptr for 0 bytes
void device_free(void* p, Device device);

// A device's memory in the terms of Megatron's report_memory (PyTorch's allocated / reserved),
// in bytes. CUDA: allocated = the caching allocator's live blocks, reserved = live + cached
// blocks (what cudaMalloc gave). CPU: allocated = the live tensor storage that device_allocate
// handed out (malloc's usable sizes), reserved = this process's resident set (VmRSS, peak
// VmHWM from /proc/self/status), which also holds code, libraries, MPI's and BLAS's buffers and
// every other heap allocation. Peaks are since the process started.
struct DeviceMemoryStats {
  size_t allocated = 0;
  size_t max_allocated = 0;
  size_t reserved = 0;
  size_t max_reserved = 0;
  size_t allocations = 0;  // live blocks
};
DeviceMemoryStats device_memory_stats(Device device);

// A device's memory capacity and what is free on it now, in bytes: on a GPU cudaMemGetInfo's
// (free counts other processes' use too), on the CPU MemTotal and MemAvailable of
// /proc/meminfo (0 where it is not there).
struct DeviceCapacity {
  size_t total = 0;
  size_t free = 0;
};
DeviceCapacity device_capacity(Device device);

// Copies `bytes` from src (on src_device) to dst (on dst_device); any direction.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void zero_bytes(void* p, Device device, size_t bytes);

// Waits until every operation queued on the device's compute stream has finished.
void synchronize(Device device);

// A point in a device's queue of work, for timing that work: on a CUDA device an event recorded
// on the compute stream after what is queued so far (timed by the GPU's clock, with no host
// synchronisation); on the CPU the host clock now.
struct DeviceTimePoint {
  Device device;
  void* event = nullptr;  // CUDA: the cudaEvent_t
  double host_seconds = 0;
};
DeviceTimePoint device_time_point(Device device);
// The device's seconds from `start` to `end` (waiting until it has reached `end`); releases
// both points.
double elapsed_seconds(DeviceTimePoint& start, DeviceTimePoint& end);

}  // namespace megatron
