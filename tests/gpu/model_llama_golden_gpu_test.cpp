// The PyTorch Llama-family goldens on a GPU: the LlamaForCausalLM fixture (GQA, untied head)
// and the Qwen2 fixture (q/k/v biases) imported into models whose parameters and activations
// live on cuda:0 reproduce PyTorch's logits, loss and gradients with the tolerances of the CPU
// golden test (tests/unit/model_llama_pytorch_golden_test.cpp). Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include "../common/llama_golden.h"
#include "core/device_runtime.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(LlamaPytorchGoldenGpu, LogitsLossAndGradientsMatchPytorch) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  const ParallelState solo = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  for (const char* fixture : {"llama_tiny", "qwen2_tiny"})
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(::testing::Message() << fixture << " recompute=" << recompute);
      expect_matches_llama_golden(load_llama_golden(fixture, 128), solo, recompute, gpu);
    }
}

}  // namespace
}  // namespace megatron
