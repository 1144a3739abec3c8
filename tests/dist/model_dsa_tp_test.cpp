// DeepSeek sparse attention split over tensor-parallel ranks (mpirun -np 2 / 4) against the
// PyTorch fixtures of tools/reference/dsa_reference.py: each rank's logits, loss and gradient
// slices. The indexer is replicated (its gradients whole and equal on every rank), the top-k
// keys are selected alike on every rank, and the indexer loss's target sums every rank's heads;
// also with sequence parallelism (the indexer gathers its inputs) and selective recompute.
#include <gtest/gtest.h>

#include "../common/dsa_golden.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(DsaPytorchGoldenDist, TensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    for (const char* name : {"dsa", "dsa_sparse"}) {
      const GptVariantsGolden g = load_dsa_golden(name);
      for (bool sp : {false, true})
        for (bool selective : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << name << " tp=" << tp << " sp=" << sp << " selective=" << selective);
          expect_matches_gpt_variants_golden(g, ParallelState::create(test::world(), tp, 1),
                                             [&](GptConfig& c) {
                                               c.sequence_parallel = sp;
                                               c.selective_recompute = selective;
                                             });
        }
    }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

}  // namespace
}  // namespace megatron
