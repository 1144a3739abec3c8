// Training on a GPU against training on the CPU (tests/common/tiny_gpt_training.h: a tiny GPT,
// fp32, dropout on, 10-12 iterations, one rank):
//   - the same run on cuda:0 and on the CPU logs the same losses (relative <= 1e-4), also with
//     the fused attention on the GPU against the batched-GEMM attention on the CPU (the same
//     attention dropout mask, so the same function);
//   - checkpoints are device-independent: a checkpoint saved on the GPU, loaded on the CPU and
//     saved again (and the other way round) holds bit-identical tensors, and a run resumed on
//     the other device continues with the same losses (relative <= 1e-4);
//   - a GPU run resumed on the GPU repeats the uninterrupted one bit for bit.
// Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>

#include "../common/temp_dir.h"
#include "../common/tiny_gpt_training.h"
#include "core/device_runtime.h"

namespace megatron {
namespace {

using namespace megatron::testing;

#define SKIP_WITHOUT_GPU() \
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible"

constexpr double kRtol = 1e-4;

void expect_close(const std::map<int64_t, TrainMetrics>& want,
                  const std::map<int64_t, TrainMetrics>& got, int64_t from, int64_t to) {
  for (int64_t it = from; it <= to; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    ASSERT_TRUE(want.count(it) && got.count(it));
    const double a = want.at(it).lm_loss, b = got.at(it).lm_loss;
    EXPECT_NEAR(b, a, kRtol * std::fabs(a));
    const double na = want.at(it).grad_norm, nb = got.at(it).grad_norm;
    EXPECT_NEAR(nb, na, 1e-3 * std::fabs(na));
  }
}

TEST(TrainGpu, TenIterationsOnGpuGiveTheCpuLosses) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto cpu = run_tiny_gpt(tiny_run(Device::CPU, dir.file("cpu.jsonl")));
  const auto gpu = run_tiny_gpt(tiny_run(Device::cuda(0), dir.file("gpu.jsonl")));
  ASSERT_EQ(cpu.size(), 10u);
  ASSERT_EQ(gpu.size(), 10u);
  expect_close(cpu, gpu, 1, 10);
  EXPECT_LT(gpu.at(10).lm_loss, gpu.at(1).lm_loss);  // the comparison could fail
}

TEST(TrainGpu, FusedAttentionOnGpuGivesTheCpuLosses) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto cpu = run_tiny_gpt(tiny_run(Device::CPU, dir.file("cpu.jsonl")));
  TinyGptRun fused = tiny_run(Device::cuda(0), dir.file("gpu.jsonl"));
  fused.flash_attention = true;
  const auto gpu = run_tiny_gpt(fused);
  ASSERT_EQ(gpu.size(), 10u);
  expect_close(cpu, gpu, 1, 10);
}

// `from` trains iterations 1-6 and saves at 6; `to` loads that checkpoint and saves it again
// at once: the two checkpoints must hold bit-identical tensors. Then iterations 7-12 resumed
// from the first checkpoint on `to` must match `reference` (iterations 7-12 on `from`, or an
// uninterrupted run).
void check_cross_device_resume(Device from, Device to) {
  TempDir dir;
  const auto reference = run_tiny_gpt(tiny_run(from, dir.file("reference.jsonl"), 12));

  TinyGptRun first = tiny_run(from, dir.file("first.jsonl"), 12);
  first.exit_interval = 6;
  first.save = dir.file("ckpt");
  run_tiny_gpt(first);

  TinyGptRun copy = tiny_run(to, dir.file("copy.jsonl"), 6);
  copy.load = dir.file("ckpt");
  copy.save = dir.file("copy");
  run_tiny_gpt(copy);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(checkpoint_tensors_differing(dir.file("ckpt"), dir.file("copy"), 6, file), 0)
        << file << " changed on the way " << from.str() << " -> " << to.str();

  TinyGptRun resume = tiny_run(to, dir.file("resumed.jsonl"), 12);
  resume.load = dir.file("ckpt");
  const auto resumed = run_tiny_gpt(resume);
  ASSERT_EQ(resumed.size(), 6u);
  ASSERT_EQ(resumed.begin()->first, 7);
  expect_close(reference, resumed, 7, 12);
}

TEST(TrainGpu, GpuCheckpointReloadsOnCpuBitForBitAndResumes) {
  SKIP_WITHOUT_GPU();
  check_cross_device_resume(Device::cuda(0), Device::CPU);
}

TEST(TrainGpu, CpuCheckpointReloadsOnGpuBitForBitAndResumes) {
  SKIP_WITHOUT_GPU();
  check_cross_device_resume(Device::CPU, Device::cuda(0));
}

TEST(TrainGpu, GpuResumeOnGpuIsExact) {
  SKIP_WITHOUT_GPU();
  // Our CUDA kernels and GEMM settings are deterministic, so a GPU run resumed on the GPU
  // repeats the uninterrupted GPU run bit for bit, as on the CPU.
  TempDir dir;
  const Device gpu = Device::cuda(0);
  const auto full = run_tiny_gpt(tiny_run(gpu, dir.file("full.jsonl"), 12));
  TinyGptRun first = tiny_run(gpu, dir.file("first.jsonl"), 12);
  first.exit_interval = 6;
  first.save = dir.file("ckpt");
  run_tiny_gpt(first);
  TinyGptRun resume = tiny_run(gpu, dir.file("resumed.jsonl"), 12);
  resume.load = dir.file("ckpt");
  const auto resumed = run_tiny_gpt(resume);
  ASSERT_EQ(resumed.size(), 6u);
  for (int64_t it = 7; it <= 12; ++it) {
    EXPECT_EQ(resumed.at(it).lm_loss, full.at(it).lm_loss) << it;
    EXPECT_EQ(resumed.at(it).grad_norm, full.at(it).grad_norm) << it;
  }
}

}  // namespace
}  // namespace megatron
