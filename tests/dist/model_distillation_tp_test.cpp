// Knowledge distillation under tensor parallelism (run at world size 1, 2 and 4): the student
// and teacher of tools/reference/distillation_reference.py split over TP 2 and 4, with and
// without sequence parallelism, give PyTorch's logged terms and every student gradient slice —
// the vocab-parallel KL reduces only per-token statistics, the cosine loss on sequence shards
// sums over TP.
#include <gtest/gtest.h>

#include "../common/distillation_golden.h"
#include "mpi_test_util.h"
#include "optim/grad_reduction.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(DistillationPytorchGoldenDist, TensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    for (bool sp : {false, true})
      for (const char* name : {"mixed", "skip"}) {
        SCOPED_TRACE(::testing::Message() << "tp=" << tp << " sp=" << sp << " " << name);
        expect_matches_distillation_golden(load_distillation_golden(),
                                           ParallelState::create(test::world(), tp, 1), name, sp);
      }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

}  // namespace
}  // namespace megatron
