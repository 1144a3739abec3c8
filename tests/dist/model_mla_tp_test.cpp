// Multi-latent attention split over tensor-parallel ranks (mpirun -np 2 / 4) against the
// PyTorch fixtures of tools/reference/mla_reference.py: each rank's logits, loss and gradient
// slices — the up projections split by heads, the output projection by its input, the down
// projections and latent norms replicated (their gradients whole on every rank, or with
// sequence parallelism summed from the ranks' sequence shards), the shared RoPE key's gradient
// summed over the ranks' heads — also with the fused attention core.
#include <gtest/gtest.h>

#include "../common/mla_golden.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(MlaPytorchGoldenDist, TensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    for (const char* name : {"mla", "mla_rms"}) {
      const GptVariantsGolden g = load_mla_golden(name);
      for (bool sp : {false, true})
        for (bool flash : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << name << " tp=" << tp << " sp=" << sp << " flash=" << flash);
          expect_matches_gpt_variants_golden(g, ParallelState::create(test::world(), tp, 1),
                                             [&](GptConfig& c) {
                                               c.sequence_parallel = sp;
                                               c.flash_attention = flash;
                                             });
        }
    }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

}  // namespace
}  // namespace megatron
