// The CUDA dropout mask's per-thread work (kernels/cuda/philox.cuh: Philox4x32-10, the keep
// threshold, one Philox block's mask bytes), run on the HOST — those functions are
// __host__ __device__ — against core/philox.h and the CPU's dropout_mask. The kernel's own
// thread -> (row, block) mapping is replayed in a loop. Needs the CUDA headers but no GPU, so
// unlike the other tests here it runs on the CI machines too; the on-GPU bit comparison is
// kernels_dropout_gpu_test.cpp.
#ifdef MEGATRON_CUDA

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/philox.h"
#include "kernels/cuda/philox.cuh"
#include "kernels/dropout.h"

namespace megatron {
namespace {

using kernels::MaskRow;

TEST(DropoutPhiloxHost, BlockFunctionMatchesCorePhilox) {
  std::mt19937_64 gen(7);
  for (int t = 0; t < 20000; ++t) {
    const uint64_t seed = gen(), key = gen(), block = gen() >> (t % 64);
    const PhiloxCounter want = PhiloxStream(seed, key).block(block);
    const kernels::cuda::PhiloxWords got = kernels::cuda::philox4x32_10(seed, key, block);
    for (int q = 0; q < 4; ++q) ASSERT_EQ(got.w[q], want[size_t(q)]) << "draw " << t;
  }
}

TEST(DropoutPhiloxHost, KernelWorkMatchesCpuMask) {
  std::mt19937_64 gen(11);
  for (float p : {0.f, 1e-7f, 0.1f, 1.f / 3, 0.5f, 0.9f, 0.999f})
    for (int64_t cols : {1, 2, 3, 4, 5, 7, 13, 17, 64, 129}) {
      const int64_t n = 1 + int64_t(gen() % 70);
      std::vector<MaskRow> rows;
      for (int64_t r = 0; r < n; ++r) {
        const uint64_t base = r % 3 == 0   ? gen() % 1000
                              : r % 3 == 1 ? (uint64_t(1) << 33) + gen() % 16
                                           : gen() % 7;
        rows.push_back({gen(), base});
      }
      const uint64_t seed = gen();
      Tensor cpu = Tensor::empty({n, cols}, DType::U8);
      kernels::dropout_mask(seed, rows, p, cpu);

      // The kernel's loop: thread t draws block t % per_row of row t / per_row.
      std::vector<uint8_t> replay(size_t(n * cols), 2);  // 2: never written
      const uint32_t threshold = kernels::cuda::dropout_keep_threshold(p);
      const int64_t per_row = kernels::cuda::dropout_blocks_per_row(cols);
      for (int64_t t = 0; t < n * per_row; ++t) {
        const int64_t r = t / per_row, kb = t - r * per_row;
        kernels::cuda::dropout_mask_block(seed, rows[size_t(r)].key, rows[size_t(r)].counter_base,
                                          kb, cols, threshold, replay.data() + r * cols);
      }
      const uint8_t* want = cpu.data<uint8_t>();
      for (int64_t i = 0; i < n * cols; ++i)
        ASSERT_EQ(replay[size_t(i)], want[i])
            << "p=" << p << " cols=" << cols << " row " << i / cols << " col " << i % cols;
    }
}

}  // namespace
}  // namespace megatron

#endif  // MEGATRON_CUDA
