// The planner's megatron-cpp activation accounting (plan/activation_memory.h) against the arenas
// of a real GPT at CP = world size (2, 4) with every --cp-comm-type: one training step, then
// GptModel::activation_bytes() (this rank's arena and scratch high-water marks: its s/c
// positions, its chunks of the inputs, the exchange's kept tensors and temporaries) must equal
// the prediction to the byte, under no and full recompute, in f32 and bf16, for a GPT and a
// Llama-family GPT (GQA, RoPE, SwiGLU, RMSNorm). TP 1 cases are in plan_memory_test.cpp and
// plan_arena_tp_test.cpp.
#include <gtest/gtest.h>

#include "../common/plan_arena_harness.h"
#include "model/gpt_model.h"
#include "mpi_test_util.h"
#include "plan/activation_memory.h"
#include "plan/layout.h"

namespace megatron::plan {
namespace {

struct CpArenaCase {
  CpCommType type;
  int a2a = 0;  // a2a+p2p: the all-to-all level A
  Recompute recompute;
  bool bf16;
  bool llama;  // 2 KV groups of 4 heads (else 4 heads, 4 groups)
};

void expect_cp_arenas_predicted(const CpArenaCase& k) {
  const int c = test::world_size();
  SCOPED_TRACE(::testing::Message()
               << "CP " << c << " " << cp_comm_type_name(k.type) << " A " << k.a2a << " recompute "
               << int(k.recompute) << " bf16 " << k.bf16 << " llama " << k.llama);
  GptConfig gc = arena_gpt_config(2, k.llama);
  gc.recompute_activations = k.recompute == Recompute::kFull;
  gc.compute_dtype = k.bf16 ? DType::BF16 : DType::F32;
  gc.cp_comm_type = {k.type};
  const ParallelState ps = ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, c, k.a2a);
  ParameterStore store(ps.tp_rank, ps.tp_size);
  GptModel model(gc, ps, store);
  store.allocate();
  model.init_weights(7);
  const int64_t b = 2;
  model.forward_backward(arena_batch(gc, b), 1.0f, 11);

  const ModelSpec m = arena_model_spec(gc);
  Layout l;
  l.context_parallel = c;
  l.cp_comm = k.type;
  l.cp_a2a_size = k.a2a;
  l.micro_batch = b;
  l.recompute = k.recompute;
  l.precision = k.bf16 ? Precision::kBf16 : Precision::kFp32;
  validate_layout(m, l, Implementation::kMegatronCpp);
  const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(a.first_stage + a.workspace, double(model.activation_bytes()));
}

TEST(PlanArenaContextParallel, GptPredictsTheArenasExactly) {
  const int c = test::world_size();
  if (c < 2) GTEST_SKIP() << "context parallelism needs 2 or more ranks";
  for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
    for (bool bf16 : {false, true}) {
      for (bool llama : {false, true}) {
        expect_cp_arenas_predicted({CpCommType::kP2P, 0, rc, bf16, llama});
        expect_cp_arenas_predicted({CpCommType::kAllGather, 0, rc, bf16, llama});
        // Ulysses takes whole KV groups: the Llama GPT's 2 split over at most 2 ranks.
        if (!llama || c == 2) expect_cp_arenas_predicted({CpCommType::kA2A, 0, rc, bf16, llama});
        if (c == 4) expect_cp_arenas_predicted({CpCommType::kA2AP2P, 2, rc, bf16, llama});
      }
    }
  }
}

}  // namespace
}  // namespace megatron::plan
