// The CUDA runtime of the emulated GPU: the part of libcudart's API that megatron calls, on the
// host. Linked into the emulated build (megatron_simt) instead of libcudart, so that the
// library's own CUDA host code — the caching allocator, the streams and events of
// core/cuda/cuda_context.cpp, pinned staging, Tensor::to(Device::cuda()) — runs unchanged.
//
// Eight devices, as on one node (so that the dist tests' NCCL paths find a GPU per rank), with
// an H100's opt-in shared memory per block (227 KiB) and 80 GB counted for all of them together
// in the process's memory. Device memory is simt_device_memory.h's: host code cannot touch it,
// and freeing a pointer never allocated, or copying "to the device" into memory that is not
// device memory, fails the call as it would on a GPU. Everything runs in program order on the
// calling thread: streams and events are accepted and order nothing (the emulator cannot find a
// missing wait between two streams). A function megatron does not call is not defined here: using a
// new one is a link error in the emulated build until it is added.
#include <cuda_runtime_api.h>

#include <cstring>

#include "simt_device_memory.h"
#include "simt_streams.h"

using megatron::simt::is_device_memory;
using megatron::simt::is_pinned_memory;

namespace {

constexpr int kDevices = 8;
constexpr size_t kDeviceBytes = size_t(80) << 30;
constexpr int kOptInSharedBytes = 227 << 10;

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= kDevices) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= kDevices) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = kOptInSharedBytes;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:  // an H100 / H200 (sm_90): mma.sync, ldmatrix
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && value >= 0 &&
      value <= kOptInSharedBytes)
    return cudaSuccess;
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = kDeviceBytes;
  *free_bytes = kDeviceBytes - megatron::simt::device_bytes_in_use();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (megatron::simt::device_bytes_in_use() + bytes > kDeviceBytes)
    return fail(cudaErrorMemoryAllocation);
  *p = megatron::simt::device_allocate(bytes);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  megatron::simt::synchronize_all();  // as CUDA's: the device's work is done first
  return megatron::simt::device_free(p) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = megatron::simt::pinned_allocate(bytes);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  megatron::simt::synchronize_all();
  return megatron::simt::pinned_free(p) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

// A copy that involves pageable host memory runs now, after its stream's work (CUDA stages it
// synchronously); device and page-locked memory are copied when the stream gets there.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const bool dst_device = is_device_memory(dst, bytes), src_device = is_device_memory(src, bytes);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dst_device || src_device) return fail(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToHost:
      if (dst_device || !src_device) return fail(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToDevice:
      if (!dst_device || !src_device) return fail(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDefault:
    case cudaMemcpyHostToHost:
      break;
  }
  const bool pageable = (!dst_device && !is_pinned_memory(dst, bytes)) ||
                        (!src_device && !is_pinned_memory(src, bytes));
  if (pageable) megatron::simt::synchronize(stream);
  megatron::simt::enqueue(pageable ? nullptr : stream, [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  if (width > dst_pitch || width > src_pitch) return fail(cudaErrorInvalidPitchValue);
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e =
        cudaMemcpyAsync(static_cast<char*>(dst) + r * dst_pitch,
                        static_cast<const char*>(src) + r * src_pitch, width, kind, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_memory(p, bytes)) return fail(cudaErrorInvalidValue);
  megatron::simt::enqueue(stream, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = megatron::simt::new_stream();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  megatron::simt::synchronize(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  megatron::simt::wait(stream, event);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  megatron::simt::synchronize_all();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = megatron::simt::new_event((flags & cudaEventDisableTiming) == 0);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  megatron::simt::destroy_event(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  megatron::simt::record(event, stream);
  return cudaSuccess;
}

// The host time between the streams reaching the two records: emulation time, not a GPU's.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  const double a = megatron::simt::seconds_reached(start), b = megatron::simt::seconds_reached(end);
  if (a < 0 || b < 0) return fail(cudaErrorNotReady);
  *ms = float((b - a) * 1e3);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  megatron::simt::synchronize(event);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDeviceFunction:
      return "cudaErrorInvalidDeviceFunction";
    default:
      return "cudaError (emulated runtime)";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument (emulated runtime: e.g. a copy whose pointers are not the memory "
             "its kind names)";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    default:
      return cudaGetErrorName(e);
  }
}

}  // extern "C"
