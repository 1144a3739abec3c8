// The emulated GPU's own checks fail when they should: what makes a passing simt.* test mean
// something. Host code touching device memory dies naming the allocation; a stream does not see
// another's writes unless it waited for them; a barrier that one thread skips is an error naming
// the block; copies whose pointers are not the memory their kind names, and frees of pointers
// never allocated, fail as on a GPU; fresh device memory is NaN; a race between two threads
// shows, also between two warps across warp barriers; cp.async copies land at once or only at
// their wait; mma.sync and ldmatrix hold the ISA's fragments, and they and cp.async refuse local
// memory; a kernel sees its block's shared memory and its warp's shuffles.
#include "simt_emulator.h"
// The kernel headers after the emulator: their CUDA built-ins are the emulator's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/mma_fragments.cuh"
#include "simt_device_memory.h"

namespace megatron {
namespace {

TEST(EmulatedGpu, HostCodeTouchingDeviceMemoryDiesNamingTheAllocation) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor t = Tensor::zeros({64}, DType::F32, Device::cuda(0));
  float* device = static_cast<float*>(t.raw_data());
  EXPECT_DEATH({ device[3] = 1.0f; }, "host code touched device memory at .*allocation of");
  // Through the runtime, the same memory is fine.
  std::vector<float> host(64, 2.0f);
  t.copy_from(Tensor::from_blob(host.data(), {64}, DType::F32));
  EXPECT_EQ(t.to(Device::CPU).to_vector<float>()[3], 2.0f);
}

// What another stream wrote is seen only after a wait for it: without one, the emulator runs
// the reader first (a GPU would, some of the time).
TEST(EmulatedGpu, AStreamSeesAnotherStreamsWriteOnlyAfterWaitingForIt) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4), cudaSuccess);
  cudaStream_t writer = nullptr, reader = nullptr;
  cudaEvent_t written = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);
  for (bool wait : {false, true}) {
    SCOPED_TRACE(wait ? "with the wait" : "without the wait");
    void* staging = nullptr;  // page-locked: the read-back runs in the reader's order
    ASSERT_EQ(cudaMallocHost(&staging, 4), cudaSuccess);
    std::memset(staging, 0, 4);
    ASSERT_EQ(cudaMemsetAsync(p, 0, 4, reader), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(p, 0x11, 4, writer), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(written, writer), cudaSuccess);
    if (wait) {
      ASSERT_EQ(cudaStreamWaitEvent(reader, written, 0), cudaSuccess);
    }
    ASSERT_EQ(cudaMemcpyAsync(staging, p, 4, cudaMemcpyDeviceToHost, reader), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
    uint32_t seen = 0;
    std::memcpy(&seen, staging, 4);
    EXPECT_EQ(seen, wait ? 0x11111111u : 0u);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaFreeHost(staging), cudaSuccess);
  }
  EXPECT_EQ(cudaEventDestroy(written), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// Fresh device memory is NaN in every float type: a kernel reading what nothing wrote shows it.
TEST(EmulatedGpu, FreshDeviceMemoryIsNaN) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 8), cudaSuccess);
  float f32 = 0;
  bf16 b16[2];
  ASSERT_EQ(cudaMemcpyAsync(&f32, p, 4, cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b16, static_cast<char*>(p) + 4, 4, cudaMemcpyDeviceToHost, nullptr),
            cudaSuccess);
  EXPECT_TRUE(std::isnan(f32));
  EXPECT_TRUE(std::isnan(float(b16[0])));
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(EmulatedGpu, RuntimeRefusesCopiesAndFreesAGpuWouldFault) {
  std::vector<float> host(16), other(16);
  EXPECT_EQ(cudaMemcpyAsync(host.data(), other.data(), sizeof(float) * 16, cudaMemcpyHostToDevice,
                            nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST(EmulatedGpu, ABarrierOneThreadSkipsIsAnErrorNamingTheBlock) {
  try {
    simt::launch(dim3(2), dim3(64), 0, [] {
      if (blockIdx.x == 1 && threadIdx.x == 5) return;
      __syncthreads();
    });
    FAIL() << "the divergent barrier was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::strstr(e.what(), "block (1, 0, 0): a __syncthreads that not every thread"),
              nullptr)
        << e.what();
  }
}

// A read of what another thread writes, with no barrier between, gives a different result in
// the two orders the blocks alternate between: the race shows instead of hiding.
TEST(EmulatedGpu, ARaceWithoutABarrierShowsAsDifferentResultsInTwoBlocks) {
  std::vector<float> out(2 * 64);
  float* o = out.data();
  simt::launch(dim3(2), dim3(64), 0, [o] {
    __shared__ float stage[65];
    const unsigned t = threadIdx.x;
    stage[t] = 0.0f;
    if (t == 0) stage[64] = 0.0f;
    __syncthreads();
    stage[t] = 1.0f;
    o[blockIdx.x * 64 + t] = stage[t + 1];  // the neighbour's write: racy
  });
  float first = 0, second = 0;
  for (unsigned t = 0; t < 63; ++t) {
    first += out[t];
    second += out[64 + t];
  }
  // First to last: nobody's neighbour has written yet; last to first: every neighbour has.
  EXPECT_EQ(first, 0.0f);
  EXPECT_EQ(second, 63.0f);
}

// Between two __syncthreads each warp runs to the end before the next starts, whatever warp
// barriers it passes: a read of another warp's write that only a __syncwarp "orders" is seen
// unwritten by one warp or the other.
TEST(EmulatedGpu, AWarpRunsToItsNextBlockBarrierBeforeTheNextWarpStarts) {
  std::vector<float> out(2 * 64);
  float* o = out.data();
  simt::launch(dim3(2), dim3(64), 0, [o] {
    __shared__ float stage[64];
    const unsigned t = threadIdx.x;
    stage[t] = 0.0f;
    __syncthreads();
    stage[t] = 1.0f;
    __syncwarp();                                   // orders nothing between warps
    o[blockIdx.x * 64 + t] = stage[(t + 32) % 64];  // the other warp's write: racy
  });
  float seen[2][2] = {};  // [block][warp]
  for (unsigned b = 0; b < 2; ++b)
    for (unsigned t = 0; t < 64; ++t) seen[b][t / 32] += out[b * 64 + t];
  // Block 0 runs warp 0 first (it sees nothing of warp 1), block 1 warp 1 first.
  EXPECT_EQ(seen[0][0], 0.0f);
  EXPECT_EQ(seen[0][1], 32.0f);
  EXPECT_EQ(seen[1][0], 32.0f);
  EXPECT_EQ(seen[1][1], 0.0f);
}

// A cp.async copy lands at once (odd blocks) or only at the wait that covers it (even blocks):
// reading the tile before the wait shows the difference, after the wait both agree.
TEST(EmulatedGpu, AsyncCopiesLandAtOnceOrOnlyAtTheirWait) {
  alignas(16) float source[4 * 32];
  for (int i = 0; i < 4 * 32; ++i) source[i] = 1.0f;
  std::vector<float> before(2 * 32), after(2 * 32);
  float *b = before.data(), *a = after.data();
  const float* src = source;
  simt::launch(dim3(2), dim3(32), 0, [=] {
    alignas(16) __shared__ float tile[4 * 32];
    const unsigned t = threadIdx.x;
    for (int k = 0; k < 4; ++k) tile[4 * t + k] = 0.0f;
    kernels::cuda::async_copy_16(&tile[4 * t], &src[4 * t]);
    kernels::cuda::async_copy_commit();
    b[blockIdx.x * 32 + t] = tile[4 * t];
    kernels::cuda::async_copy_wait<0>();
    a[blockIdx.x * 32 + t] = tile[4 * t];
  });
  for (unsigned t = 0; t < 32; ++t) {
    EXPECT_EQ(before[t], 0.0f) << "block 0 lands copies at the wait";
    EXPECT_EQ(before[32 + t], 1.0f) << "block 1 lands them at once";
    EXPECT_EQ(after[t], 1.0f);
    EXPECT_EQ(after[32 + t], 1.0f);
  }
}

// mma.sync m16n8k16 and ldmatrix against the ISA's fragment tables, written out here a second
// time: lane 4g + t holds A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..] and B[2t..][g],
// B[2t+8..][g]; C = A·B lands in C[g][2t..], C[g+8][2t..]. ldmatrix of A's 16×16 block gives the
// same registers as indexing A; .trans of a row-major B [16, 8·2] gives B's fragments.
TEST(EmulatedGpu, MmaSyncAndLdmatrixHoldTheIsasFragments) {
  std::vector<float> A(16 * 16), B(16 * 16), C(16 * 16, -1.0f);
  for (int i = 0; i < 16 * 16; ++i) {
    A[i] = float((i * 7) % 13 - 6);  // small integers: every product and sum exact
    B[i] = float((i * 5) % 11 - 5);
  }
  int mismatched_registers = 0;
  float* c = C.data();
  int* bad = &mismatched_registers;
  const float *a = A.data(), *b = B.data();
  simt::launch(dim3(1), dim3(32), 0, [=] {
    alignas(16) __shared__ __nv_bfloat16 sa[16 * 16], sb[16 * 16];
    const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
    for (int e = lane; e < 256; e += 32) {
      sa[e] = __float2bfloat16(a[e]);
      sb[e] = __float2bfloat16(b[e]);
    }
    __syncwarp();
    auto pair = [](float lo, float hi) { return kernels::cuda::mma::pack2<__nv_bfloat16>(lo, hi); };
    const uint32_t fa[4] = {pair(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                            pair(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                            pair(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                            pair(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
    uint32_t la[4], lb[4];
    kernels::cuda::mma::ldmatrix_x4<false>(la, kernels::cuda::mma::block_rows(sa, 16, 0, 0));
    kernels::cuda::mma::ldmatrix_x4<true>(lb, kernels::cuda::mma::block_rows(sb, 16, 0, 0));
    for (int r = 0; r < 4; ++r) *bad += la[r] != fa[r];
    for (int n = 0; n < 2; ++n) {  // B's n-tiles: columns 8n .. 8n + 7
      const int col = 8 * n + g;
      const uint32_t fb[2] = {pair(b[2 * t * 16 + col], b[(2 * t + 1) * 16 + col]),
                              pair(b[(2 * t + 8) * 16 + col], b[(2 * t + 9) * 16 + col])};
      *bad += lb[2 * n] != fb[0];
      *bad += lb[2 * n + 1] != fb[1];
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      kernels::cuda::mma::mma_m16n8k16<__nv_bfloat16>(d, fa, fb);
      for (int e = 0; e < 4; ++e) c[(g + 8 * (e / 2)) * 16 + 8 * n + 2 * t + e % 2] = d[e];
    }
  });
  EXPECT_EQ(mismatched_registers, 0);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float want = 0.0f;
      for (int k = 0; k < 16; ++k) want += A[i * 16 + k] * B[k * 16 + j];
      EXPECT_EQ(C[i * 16 + j], want) << "C[" << i << "][" << j << "]";
    }
}

// ldmatrix and cp.async take shared memory: a thread's local array (a GPU would read or write
// somewhere else entirely) is an error naming the instruction.
TEST(EmulatedGpu, LdmatrixAndCpAsyncRefuseLocalMemory) {
  for (bool async_copy : {false, true}) {
    try {
      simt::launch(dim3(1), dim3(32), 0, [async_copy] {
        alignas(16) uint16_t local[8] = {};
        alignas(16) static float source[4];
        if (async_copy) {
          kernels::cuda::async_copy_16(local, source);
        } else {
          uint32_t r[4];
          kernels::cuda::mma::ldmatrix_x4<false>(r, local);
        }
      });
      FAIL() << "local memory was taken for shared memory";
    } catch (const Error& e) {
      EXPECT_NE(std::strstr(e.what(), async_copy ? "cp.async: the destination" : "ldmatrix: row"),
                nullptr)
          << e.what();
      EXPECT_NE(std::strstr(e.what(), "is not shared memory"), nullptr) << e.what();
    }
  }
}

TEST(EmulatedGpu, SharedMemoryAndShufflesAreTheBlocksAndTheWarps) {
  std::vector<float> out(128);
  float* o = out.data();
  simt::launch(dim3(1), dim3(128), 0, [o] {
    __shared__ float stage[128];
    const unsigned t = threadIdx.x;
    stage[t] = float(t);
    __syncthreads();
    float v = stage[127 - t];  // another warp's write, visible after the barrier
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
    o[t] = v;  // the sum over the warp of 127 - t
  });
  for (unsigned t = 0; t < 128; ++t) {
    const unsigned w = t / 32;
    float want = 0;
    for (unsigned l = 0; l < 32; ++l) want += float(127 - (w * 32 + l));
    EXPECT_EQ(out[t], want) << "thread " << t;
  }
}

}  // namespace
}  // namespace megatron
