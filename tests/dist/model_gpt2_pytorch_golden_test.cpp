// GPT-2 against PyTorch at TP = 2 and 4: the HF fixture imported into each rank's slices
// gives PyTorch's logits and loss on every rank, and each rank's gradient slices equal the
// matching slices of PyTorch's gradients (mapped into our layout).
#include <gtest/gtest.h>

#include "../common/gpt2_golden.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(Gpt2PytorchGoldenDist, TensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    SCOPED_TRACE(::testing::Message() << "tp=" << tp);
    ParallelState ps = ParallelState::create(test::world(), tp, 1);
    Gpt2Golden g = load_gpt2_golden(128);
    Gpt2FromFixture m(g, ps);

    Tensor logits = m.model->forward_logits(g.batch.tokens);
    m.store.zero_grads();
    const double loss = m.model->forward_backward(g.batch, 1.0f, 1234);

    EXPECT_LE(max_relative_error(logits, g.file->get("logits")), 1e-4);
    EXPECT_NEAR(loss, golden_loss(g), 1e-4 * golden_loss(g));
    for (const Parameter& p : m.store.params()) {
      SCOPED_TRACE(p.spec.name);
      EXPECT_LE(max_relative_error(p.grad, local_slice(p, g.our_grads.at(p.spec.name)).clone()),
                1e-3);
    }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

}  // namespace
}  // namespace megatron
