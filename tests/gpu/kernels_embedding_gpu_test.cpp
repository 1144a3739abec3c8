// Embedding gather and scatter-add on the GPU against the CPU twin, bit for bit: the gather
// copies bits, and the backward adds each table row's token contributions in token order on
// both devices (the GPU sorts tokens by row with a stable sort), so even repeated ids sum
// identically. Vocab shards (rows owned by other ranks give zeros / no gradient), repeated and
// heavily repeated ids, more than one 256-column tile, and run-to-run determinism.
#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"

namespace megatron {
namespace {

using gpu_test::on_gpu;
using gpu_test::random_ids;
using gpu_test::random_tensor;
using gpu_test::same_bits;

struct Shard {
  int64_t vocab, vocab_start, local_rows, columns, tokens;
};

const Shard kShards[] = {
    {37, 0, 37, 19, 101},      // whole table
    {100, 40, 30, 19, 257},    // middle shard: ids below and above it
    {1000, 0, 500, 300, 513},  // two column tiles, first half of the vocabulary
    {50, 50, 50, 7, 64},       // shard that owns none of the ids
};

TEST(GpuEmbedding, ForwardMatchesCpuBitExact) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : {DType::F32, DType::BF16})
    for (const Shard& s : kShards) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " vocab_start " << s.vocab_start
                                        << " rows " << s.local_rows << " C " << s.columns);
      const Tensor table = random_tensor({s.local_rows, s.columns}, dt, 1);
      const Tensor ids = random_ids(s.tokens, 0, int32_t(s.vocab - 1), 2);
      Tensor cpu = Tensor::empty({s.tokens, s.columns}, dt);
      kernels::embedding_forward(ids, table, s.vocab_start, cpu);
      Tensor gpu = Tensor::empty({s.tokens, s.columns}, dt, gpu_test::gpu());
      kernels::fill(gpu, 123.f);  // every element must be written
      kernels::embedding_forward(on_gpu(ids), on_gpu(table), s.vocab_start, gpu);
      EXPECT_TRUE(same_bits(gpu, cpu));
    }
}

// dtable starts non-zero (gradients accumulate), so the order of additions onto it shows.
void check_backward(const Tensor& ids, DType dout_dtype, int64_t vocab_start, int64_t local_rows,
                    int64_t columns, uint64_t seed) {
  const int64_t n = ids.numel();
  const Tensor dout = random_tensor({n, columns}, dout_dtype, seed, -1.0, 1.0);
  const Tensor dtable0 = random_tensor({local_rows, columns}, DType::F32, seed + 1, -1e-3, 1e-3);
  Tensor cpu = dtable0.clone();
  kernels::embedding_backward(dout, ids, vocab_start, cpu);
  const Tensor dout_gpu = on_gpu(dout), ids_gpu = on_gpu(ids);
  Tensor gpu = on_gpu(dtable0);
  kernels::embedding_backward(dout_gpu, ids_gpu, vocab_start, gpu);
  EXPECT_TRUE(same_bits(gpu, cpu));
  for (int run = 0; run < 2; ++run) {
    Tensor again = on_gpu(dtable0);
    kernels::embedding_backward(dout_gpu, ids_gpu, vocab_start, again);
    EXPECT_TRUE(same_bits(again, gpu)) << "run " << run;
  }
}

TEST(GpuEmbedding, BackwardMatchesCpuBitExact) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  uint64_t seed = 10;
  for (DType dt : {DType::F32, DType::BF16})
    for (const Shard& s : kShards) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " vocab_start " << s.vocab_start
                                        << " rows " << s.local_rows << " C " << s.columns);
      check_backward(random_ids(s.tokens, 0, int32_t(s.vocab - 1), seed), dt, s.vocab_start,
                     s.local_rows, s.columns, seed + 1);
      seed += 2;
    }
}

// Few distinct ids over many tokens: long groups of one row (the position embedding of a
// batch, frequent tokens), including one id repeated by every token.
TEST(GpuEmbedding, BackwardHeavilyRepeatedIds) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    check_backward(random_ids(20011, 3, 9, 5), dt, 0, 11, 257, 6);
    check_backward(Tensor::from_vector(std::vector<int32_t>(5003, 7), {5003}), dt, 2, 9, 33, 7);
    // Position ids of 3 sequences of 513 tokens, seq-major: each row 3 times.
    std::vector<int32_t> pos;
    for (int32_t i = 0; i < 513; ++i)
      for (int b = 0; b < 3; ++b) pos.push_back(i);
    check_backward(Tensor::from_vector(pos, {int64_t(pos.size())}), dt, 0, 1024, 64, 8);
  }
}

}  // namespace
}  // namespace megatron
