// Asynchronous copies from global to shared memory (PTX cp.async, sm_80 and later; internal to
// src/kernels/cuda): a thread issues 16-byte copies, closes them into a group with
// async_copy_commit, and async_copy_wait<N> waits until at most its N newest groups are still
// in flight. The copies bypass registers and overlap the thread's own work; as with any
// shared-memory write, other threads see them only after the wait and a barrier.
//
// Under the SIMT emulator (tests/simt) a copy lands at once in some blocks and only at its wait
// in others, so a kernel that reads a tile before waiting, or refills a tile before every
// reader has passed a barrier, fails there.
#pragma once

#include <cstddef>
#include <cstdint>

namespace megatron::kernels::cuda {

// 16 bytes from `from` (global, 16-byte aligned) to `to` (shared, 16-byte aligned).
__device__ __forceinline__ void async_copy_16(void* to, const void* from) {
#if defined(MEGATRON_SIMT)
  ::megatron::simt::async_copy(to, from, 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = unsigned(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(from));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

__device__ __forceinline__ void async_copy_commit() {
#if defined(MEGATRON_SIMT)
  ::megatron::simt::async_copy_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most the kNewestPending most recently committed groups are in flight.
template <int kNewestPending>
__device__ __forceinline__ void async_copy_wait() {
#if defined(MEGATRON_SIMT)
  ::megatron::simt::async_copy_wait(kNewestPending);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kNewestPending));
#endif
}

}  // namespace megatron::kernels::cuda
