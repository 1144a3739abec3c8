// Small per-call host data (dropout's mask rows, sampling's Philox row keys) copied to the device
// without a host synchronisation (internal to src/kernels/cuda).
//
// The bytes are copied into a pinned staging slot and from there with one cudaMemcpyAsync on the
// compute stream. Slots are reused round-robin; a slot is rewritten only after the copy that last
// read it has finished (its event), so the host never waits for the compute stream to drain, only,
// at worst, for a copy as many calls old as there are slots.
#pragma once

#include <cstddef>

namespace megatron::kernels::cuda {

// Queues the copy of `bytes` from host `src` to device `dst` on the compute stream and returns as
// soon as `src` may be reused. `dst` must stay allocated until the copy has run; a block freed to
// the caching allocator right after the call qualifies (it is reused only by work queued later).
void staged_upload(void* dst, const void* src, size_t bytes);

}  // namespace megatron::kernels::cuda
