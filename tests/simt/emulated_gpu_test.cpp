// The emulated GPU's own checks fail when they should: what makes a passing simt.* test mean
// something. Host code touching device memory dies naming the allocation; a stream does not see
// another's writes unless it waited for them; a barrier that one thread skips is an error naming
// the block; copies whose pointers are not the memory their kind names, and frees of pointers
// never allocated, fail as on a GPU; fresh device memory is NaN; a race between two threads
// shows; a kernel sees its
// block's shared memory and its warp's shuffles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "simt_device_memory.h"
#include "simt_emulator.h"

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
