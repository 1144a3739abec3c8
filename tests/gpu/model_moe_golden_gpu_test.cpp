// The PyTorch mixture-of-experts goldens (tools/reference/moe_reference.py) on a GPU: the MoE
// layer with its parameters and activations on cuda:0 reproduces PyTorch's output, router losses,
// tokens per expert and gradients with the tolerances of the CPU golden test
// (tests/unit/model_moe_golden_test.cpp), for every fixture — the router's score functions,
// capacity, the Sinkhorn choice (and the evaluation routing) and the shared expert's gate on the
// CUDA kernels. Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include "../common/moe_golden.h"
#include "core/device_runtime.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(MoePytorchGoldenGpu, LayerMatchesPytorch) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  const ParallelState solo = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  for (const char* name : {"softmax", "sigmoid", "capacity", "sinkhorn", "sinkhorn_top1"}) {
    SCOPED_TRACE(name);
    expect_matches_moe_golden(
        load_moe_golden(name), solo, [](TransformerConfig&) {}, gpu);
  }
}

}  // namespace
}  // namespace megatron
