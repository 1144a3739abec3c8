// Streams and events of the emulated GPU (tests/simt), so that a missing cross-stream wait is a
// wrong result in CI rather than a race on some GPU, some day.
//
// Work given to a stream — kernel launches, copies that involve no pageable host memory,
// memsets, cuBLASLt GEMMs — is not run when it is issued but queued, and a queue runs only
// when something orders it: a host synchronisation (cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize, cudaFree, a copy to or from pageable host memory, which CUDA performs
// synchronously), or, inside another stream's queue, a cudaStreamWaitEvent reached in order.
// So a kernel that reads what another stream writes sees it only if the program made its stream
// wait for the writer, as on a GPU — and, unlike on a GPU, the emulator never happens to run the
// writer first. NCCL operations run when issued, after their stream's queue (they need every
// rank at once): their inputs are ordered like everything else, their outputs are not delayed.
// The null stream runs its work at once.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace megatron::simt {

cudaStream_t new_stream();

// Queues `work` on `stream` (runs it now on the null stream).
void enqueue(cudaStream_t stream, std::function<void()> work);

// Runs everything queued on `stream` so far (and what it waits for).
void synchronize(cudaStream_t stream);

// Runs every stream's queue.
void synchronize_all();

cudaEvent_t new_event(bool timing);
void destroy_event(cudaEvent_t event);
// The event's mark: what is queued on `stream` now.
void record(cudaEvent_t event, cudaStream_t stream);
// `stream`'s later work runs after the event's current mark (a later record does not move it).
void wait(cudaStream_t stream, cudaEvent_t event);
// Runs the event's stream up to its mark.
void synchronize(cudaEvent_t event);
// A timing event's host clock (seconds) when its stream reached its latest record; negative if it
// has not yet, or the event does not time.
double seconds_reached(cudaEvent_t event);

}  // namespace megatron::simt
