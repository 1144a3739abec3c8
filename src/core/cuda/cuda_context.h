// The process's CUDA context: which GPU it drives, its compute stream and its communication
// stream, and the events that order one after the other. Built only with MEGATRON_CUDA.
//
// One rank drives one GPU (DESIGN.md §3). Every kernel and every copy goes on the compute
// stream, so program order on the host is execution order on the GPU and a freed block can be
// reused at once by the next allocation (see caching_allocator.h). Collectives run on the
// communication stream: communication_begins() makes it wait for the compute work queued so
// far, communication_ends() makes the compute stream wait for the collective. Non-blocking
// collectives (the data-parallel gradient buckets of --overlap-grad-reduce) run on a third
// stream, the overlap stream, so that the blocking collectives the backward issues meanwhile
// (tensor parallelism, pipeline transfers) do not queue behind a bucket in flight: each one
// waits for the compute work queued before it and records an event that the compute stream
// waits for when the caller waits for the collective.
//
// Any host thread may call these functions: every one but visible_device_count, bind_device and
// check_launch first makes the bound GPU current on the calling thread (cudaSetDevice is per
// thread), so a thread's own CUDA calls go to that GPU once it has called any of them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/error.h"

// MT_CUDA_CHECK(cudaMemcpyAsync(...)) — an Error naming the call and CUDA's message.
#define MT_CUDA_CHECK(expr)                                                                   \
  do {                                                                                        \
    const cudaError_t mt_cuda_status_ = (expr);                                               \
    if (mt_cuda_status_ != cudaSuccess) [[unlikely]]                                          \
      MT_THROW("CUDA call `", #expr, "` failed: ", cudaGetErrorString(mt_cuda_status_), " (", \
               cudaGetErrorName(mt_cuda_status_), ")");                                       \
  } while (0)

namespace megatron::cuda {

int visible_device_count();   // 0 when the driver sees no GPU (never throws)
void bind_device(int index);  // cudaSetDevice + stream creation; idempotent for one index
int bound_device();           // the GPU bound by bind_device (binds GPU 0 on first use)

cudaStream_t compute_stream();
cudaStream_t communication_stream();
void communication_begins();  // communication stream waits for the compute stream
void communication_ends();    // compute stream waits for the communication stream
// For an operation queued on the communication stream later than it was requested (a deferred
// isend/irecv): compute_point() records a new event on the compute stream after the work queued
// so far (the caller owns it); communication_waits makes the communication stream wait for it
// and releases it.
cudaEvent_t compute_point();
void communication_waits(cudaEvent_t compute_point);

cudaStream_t overlap_stream();
void overlap_begins();  // overlap stream waits for the compute stream
// An event recorded on the overlap stream after the work queued there so far; compute_waits
// makes the compute stream wait for it and releases it.
cudaEvent_t overlap_ends();
void compute_waits(cudaEvent_t overlap_done);

// Timing the GPU's own work: an event (with timing) recorded on the compute stream after the
// work queued so far, which the caller releases with release_event; elapsed_seconds(a, b) is
// the GPU's time between the two, waiting until b has been reached.
cudaEvent_t timing_point();
double elapsed_seconds(cudaEvent_t start, cudaEvent_t end);
void release_event(cudaEvent_t event);

// Copies on the compute stream. With host_involved the call returns when the copy is done, so
// pageable host memory may be reused (cudaMemcpyAsync is synchronous for it anyway).
void copy_async(void* dst, const void* src, size_t bytes, bool host_involved);
void zero_async(void* p, size_t bytes);
void synchronize_compute();
// The bound device's free and total memory (cudaMemGetInfo).
void memory_info(size_t& free_bytes, size_t& total_bytes);

// Checks the last kernel launch (cudaGetLastError) and names the kernel in the Error.
void check_launch(const char* kernel);

}  // namespace megatron::cuda
