// Training on a GPU against training on the CPU (tests/common/tiny_gpt_training.h: a tiny GPT,
// fp32, dropout on, 10-12 iterations, one rank):
//   - the same run on cuda:0 and on the CPU logs the same losses (relative <= 1e-4);
//   - checkpoints are device-independent: a checkpoint saved on the GPU, loaded on the CPU and
//     saved again (and the other way round) holds bit-identical tensors, and a run resumed on
//     the other device continues with the same losses (relative <= 1e-4).
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
  const auto cpu = run_tiny_gpt({.device = Device::CPU, .metrics_file = dir.file("cpu.jsonl")});
  const auto gpu =
      run_tiny_gpt({.device = Device::cuda(0), .metrics_file = dir.file("gpu.jsonl")});
  ASSERT_EQ(cpu.size(), 10u);
  ASSERT_EQ(gpu.size(), 10u);
  expect_close(cpu, gpu, 1, 10);
  EXPECT_LT(gpu.at(10).lm_loss, gpu.at(1).lm_loss);  // the comparison could fail
}

TEST(TrainGpu, GpuCheckpointReloadsOnCpuBitForBitAndResumes) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string gpu_ckpt = dir.file("gpu_ckpt"), cpu_copy = dir.file("cpu_copy");
  // GPU: iterations 1-6, save at 6 and exit.
  run_tiny_gpt({.device = Device::cuda(0),
                .train_iters = 12,
                .exit_interval = 6,
                .save = gpu_ckpt,
                .metrics_file = dir.file("gpu_first.jsonl")});
  // CPU: load it and save it again at once (train_iters = the loaded iteration).
  run_tiny_gpt({.device = Device::CPU,
                .train_iters = 6,
                .save = cpu_copy,
                .load = gpu_ckpt,
                .metrics_file = dir.file("cpu_copy.jsonl")});
  EXPECT_EQ(checkpoint_tensors_differing(gpu_ckpt, cpu_copy, 6, "model.safetensors"), 0);
  EXPECT_EQ(checkpoint_tensors_differing(gpu_ckpt, cpu_copy, 6, "optimizer.safetensors"), 0);

  // Iterations 7-12 resumed from the GPU checkpoint: on the CPU, and on the GPU.
  const auto on_cpu = run_tiny_gpt({.device = Device::CPU,
                                    .train_iters = 12,
                                    .load = gpu_ckpt,
                                    .metrics_file = dir.file("resumed_cpu.jsonl")});
  const auto on_gpu = run_tiny_gpt({.device = Device::cuda(0),
                                    .train_iters = 12,
                                    .load = gpu_ckpt,
                                    .metrics_file = dir.file("resumed_gpu.jsonl")});
  ASSERT_EQ(on_cpu.begin()->first, 7);
  expect_close(on_gpu, on_cpu, 7, 12);
}

TEST(TrainGpu, CpuCheckpointReloadsOnGpuBitForBitAndResumes) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string cpu_ckpt = dir.file("cpu_ckpt"), gpu_copy = dir.file("gpu_copy");
  const auto full = run_tiny_gpt(
      {.device = Device::CPU, .train_iters = 12, .metrics_file = dir.file("full.jsonl")});
  run_tiny_gpt({.device = Device::CPU,
                .train_iters = 12,
                .exit_interval = 6,
                .save = cpu_ckpt,
                .metrics_file = dir.file("cpu_first.jsonl")});
  run_tiny_gpt({.device = Device::cuda(0),
                .train_iters = 6,
                .save = gpu_copy,
                .load = cpu_ckpt,
                .metrics_file = dir.file("gpu_copy.jsonl")});
  EXPECT_EQ(checkpoint_tensors_differing(cpu_ckpt, gpu_copy, 6, "model.safetensors"), 0);
  EXPECT_EQ(checkpoint_tensors_differing(cpu_ckpt, gpu_copy, 6, "optimizer.safetensors"), 0);
  const auto resumed = run_tiny_gpt({.device = Device::cuda(0),
                                     .train_iters = 12,
                                     .load = cpu_ckpt,
                                     .metrics_file = dir.file("resumed_gpu.jsonl")});
  ASSERT_EQ(resumed.begin()->first, 7);
  expect_close(full, resumed, 7, 12);
}

}  // namespace
}  // namespace megatron
