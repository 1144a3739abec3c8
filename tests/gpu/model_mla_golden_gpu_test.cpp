// The PyTorch multi-latent-attention goldens (tools/reference/mla_reference.py) on a GPU: models
// whose parameters and activations live on cuda:0 reproduce PyTorch's logits, loss and
// gradients with the tolerances of the CPU golden test (tests/unit/mla_pytorch_golden_test.cpp),
// with the unfused and the fused attention core and full recompute — the strided copies
// (the RoPE key broadcast to every head) and the ones-row batched GEMM (its gradient summed over
// heads) of model/mla_projection on the CUDA kernels. Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include "../common/mla_golden.h"
#include "core/device_runtime.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(MlaPytorchGoldenGpu, LogitsLossAndGradientsMatchPytorch) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  const ParallelState solo = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  for (const char* fixture : {"mla", "mla_rms", "mla_yarn"})
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(::testing::Message() << fixture << " variant=" << variant);
      expect_matches_gpt_variants_golden(
          load_mla_golden(fixture), solo,
          [&](GptConfig& c) {
            c.flash_attention = variant == 1;
            c.recompute_activations = variant == 2;
          },
          gpu);
    }
}

}  // namespace
}  // namespace megatron
