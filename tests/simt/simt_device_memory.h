// The emulated GPU's device memory (tests/simt): host memory that host code cannot touch; and
// its page-locked host memory.
//
// On a GPU, host code that dereferences a device pointer crashes; on the emulated GPU device
// memory is host memory, so such a bug would pass unnoticed. Here it is kept inaccessible
// (PROT_NONE) except while a DeviceAccess lives: a kernel launch, the runtime's copies and
// memsets, cuBLASLt, NCCL and CUB's sorts open one. Host code that reads or writes device
// memory outside them faults, and the fault handler names the address, the allocation it falls
// in and the fix before the process dies.
//
// All of it is one reserved address range, allocated by bumping (freed pages are returned to
// the system, addresses are not reused), so opening and closing access is one mprotect each.
#pragma once

#include <cstddef>

namespace megatron::simt {

// A fresh allocation of `bytes` (page-aligned), filled with 0xFF bytes (NaN in every float
// type), or nullptr when the reserved range is spent.
void* device_allocate(size_t bytes);

// Frees an allocation device_allocate returned; false if `p` is not one.
bool device_free(void* p);

// Whether [p, p + bytes) lies inside one live allocation.
bool is_device_memory(const void* p, size_t bytes);

// Bytes of live allocations.
size_t device_bytes_in_use();

// Page-locked host memory (cudaMallocHost): ordinary host memory, tracked so that frees and
// copies can be checked. pinned_allocate returns nullptr when out of memory; pinned_free false
// if `p` is not an allocation's base.
void* pinned_allocate(size_t bytes);
bool pinned_free(void* p);
bool is_pinned_memory(const void* p, size_t bytes);

// Host code may touch device memory while one lives (nestable).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

}  // namespace megatron::simt
