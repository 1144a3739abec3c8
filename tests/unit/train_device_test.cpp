// Device plumbing that a CPU-only machine can check: --device resolution, the one-copy batch
// upload, the flat-buffer ranges of the gradient norm, and a tiny GPT trained in this process
// on an explicit CPU device (exact resume, and a loaded checkpoint saves back bit for bit —
// what tests/gpu/train_gpu_test.cpp asserts between a GPU and the CPU).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../common/temp_dir.h"
#include "../common/tiny_gpt_training.h"
#include "cli/setup/device_setup.h"
#include "core/device_runtime.h"
#include "core/upload.h"
#include "parallel/parameter.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using namespace megatron::testing;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(DeviceSetup, ResolvesTheDeviceFlag) {
  EXPECT_EQ(cli::resolve_device("cpu", 3), Device::CPU);
  EXPECT_EQ(cli::resolve_device("", 0), default_device(0));
  EXPECT_THAT(error_of([] { cli::resolve_device("gpu", 0); }),
              HasSubstr("unknown device 'gpu': expected cpu, cuda or cuda:N"));
  if (cuda_device_count() == 0) {
    EXPECT_EQ(cli::resolve_device("", 1), Device::CPU);  // no GPU: the CPU by default
    EXPECT_THAT(error_of([] { cli::resolve_device("cuda:0", 0); }), HasSubstr("--device cuda:0"));
  } else {
    const int gpus = cuda_device_count();
    EXPECT_EQ(cli::resolve_device("cuda", gpus + 1), Device::cuda((gpus + 1) % gpus));
    EXPECT_THAT(error_of([&] { cli::resolve_device("cuda:" + std::to_string(gpus), 0); }),
                HasSubstr("this process sees"));
  }
}

TEST(Upload, OnTheCpuHandsBackTheSameTensors) {
  Arena arena;
  Tensor a = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{0.5f, 1.5f}, {2});
  std::vector<Tensor> out = upload({a, Tensor(), b}, arena);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].raw_data(), a.raw_data());
  EXPECT_FALSE(out[1].defined());
  EXPECT_EQ(out[2].raw_data(), b.raw_data());
  EXPECT_EQ(arena.used(), 0u);  // nothing copied
}

TEST(ParameterStoreNormRanges, CountReplicatedParametersOnTpRankZeroOnly) {
  auto make = [](int rank) {
    ParameterStore s(rank, 2);
    s.add({"a", {4, 2}, 0});  // partitioned: 4 local elements
    s.add({"b", {3}, -1});    // replicated: 3
    s.add({"c", {2, 4}, 1});  // partitioned: 4
    s.add({"d", {6}, 0});     // partitioned: 3
    s.add({"e", {5}, -1});    // replicated: 5
    s.allocate();
    return s.norm_ranges();
  };
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(make(0), (R{{0, 19}}));
  EXPECT_EQ(make(1), (R{{0, 4}, {7, 14}}));
}

TEST(TrainOnDevice, ExplicitCpuRunResumesExactlyAndResavesBitForBit) {
  TempDir dir;
  const auto full = run_tiny_gpt(tiny_run(Device::CPU, dir.file("full.jsonl"), 12));
  ASSERT_EQ(full.size(), 12u);
  EXPECT_LT(full.at(12).lm_loss, full.at(1).lm_loss);

  TinyGptRun first = tiny_run(Device::CPU, dir.file("first.jsonl"), 12);
  first.exit_interval = 6;  // saves at 6 and exits
  first.save = dir.file("ckpt");
  run_tiny_gpt(first);

  TinyGptRun copy = tiny_run(Device::CPU, dir.file("copy.jsonl"), 6);  // load, save at once
  copy.load = dir.file("ckpt");
  copy.save = dir.file("copy");
  run_tiny_gpt(copy);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(checkpoint_tensors_differing(dir.file("ckpt"), dir.file("copy"), 6, file), 0) << file;

  TinyGptRun resume = tiny_run(Device::CPU, dir.file("resumed.jsonl"), 12);
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
