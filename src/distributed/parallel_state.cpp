#include "distributed/parallel_state.h"

#include <string>

#include "core/error.h"
#include "distributed/solo_communicator.h"

namespace megatron {

void check_parallel_sizes(int world_size, int tensor_parallel, int pipeline_parallel,
                          int context_parallel) {
  MT_REQUIRE(tensor_parallel >= 1, "--tensor-model-parallel-size must be >= 1, got ",
             tensor_parallel);
  MT_REQUIRE(pipeline_parallel >= 1, "--pipeline-model-parallel-size must be >= 1, got ",
             pipeline_parallel);
  MT_REQUIRE(context_parallel >= 1, "--context-parallel-size must be >= 1, got ", context_parallel);
  const int model_parallel = tensor_parallel * pipeline_parallel * context_parallel;
  if (world_size % model_parallel != 0) {
    MT_THROW("the world size ", world_size, " (processes started by mpirun -np) is not divisible",
             " by --tensor-model-parallel-size ", tensor_parallel,
             " x --pipeline-model-parallel-size ", pipeline_parallel,
             context_parallel > 1 ? " x --context-parallel-size " : "",
             context_parallel > 1 ? std::to_string(context_parallel) : "", " = ", model_parallel,
             "; choose sizes whose product divides ", world_size);
  }
}

void check_expert_parallel_sizes(int world_size, int expert_model_parallel,
                                 int expert_tensor_parallel, int pipeline_parallel) {
  MT_REQUIRE(expert_model_parallel >= 1, "--expert-model-parallel-size must be >= 1, got ",
             expert_model_parallel);
  MT_REQUIRE(expert_tensor_parallel >= 1, "--expert-tensor-parallel-size must be >= 1, got ",
             expert_tensor_parallel);
  const int expert_model = expert_tensor_parallel * expert_model_parallel * pipeline_parallel;
  if (world_size % expert_model != 0) {
    MT_THROW("the world size ", world_size, " (processes started by mpirun -np) is not divisible",
             " by --expert-tensor-parallel-size ", expert_tensor_parallel,
             " x --expert-model-parallel-size ", expert_model_parallel,
             " x --pipeline-model-parallel-size ", pipeline_parallel, " = ", expert_model,
             "; choose expert sizes whose product divides ", world_size);
  }
}

void check_expert_count(int num_experts, int expert_model_parallel) {
  if (num_experts == 0) {
    MT_REQUIRE(expert_model_parallel == 1, "--expert-model-parallel-size ", expert_model_parallel,
               " splits the experts of a mixture-of-experts model, but the model has none; give "
               "--num-experts or drop --expert-model-parallel-size");
    return;
  }
  MT_REQUIRE(num_experts % expert_model_parallel == 0, "--num-experts ", num_experts,
             " is not divisible by --expert-model-parallel-size ", expert_model_parallel,
             ": each expert-parallel rank holds an equal share of the experts; choose an expert "
             "count that is a multiple of it");
}

ParallelState ParallelState::create(std::shared_ptr<Communicator> world, int tensor_parallel,
                                    int pipeline_parallel, RankOrder order, int context_parallel,
                                    int cp_a2a_size, int expert_model_parallel,
                                    int expert_tensor_parallel) {
  MT_CHECK(world != nullptr, "ParallelState::create: no world communicator");
  const int world_size = world->size();
  check_parallel_sizes(world_size, tensor_parallel, pipeline_parallel, context_parallel);
  if (expert_tensor_parallel == 0) expert_tensor_parallel = tensor_parallel;
  check_expert_parallel_sizes(world_size, expert_model_parallel, expert_tensor_parallel,
                              pipeline_parallel);
  // Without expert parallelism and with the experts split like the dense layers, the expert
  // grid is the dense one folded (etp = tp, edp = dp × cp): no groups of its own, whatever the
  // order and the context parallelism.
  const bool own_expert_grid =
      expert_model_parallel > 1 || expert_tensor_parallel != tensor_parallel;
  if (own_expert_grid && order == RankOrder::kTpPpDp &&
      expert_tensor_parallel * expert_model_parallel != tensor_parallel * context_parallel) {
    MT_THROW("--use-tp-pp-dp-mapping needs --expert-tensor-parallel-size ", expert_tensor_parallel,
             " x --expert-model-parallel-size ", expert_model_parallel,
             " to equal --tensor-model-parallel-size ", tensor_parallel,
             " x --context-parallel-size ", context_parallel,
             " (the expert and the dense layers must see the same pipeline stages and data-"
             "parallel size, as in Megatron); choose sizes that match or drop the flag");
  }

  ParallelState s;
  s.world_size = world_size;
  s.rank = world->rank();
  s.tp_size = tensor_parallel;
  s.cp_size = context_parallel;
  s.pp_size = pipeline_parallel;
  s.dp_size = world_size / (tensor_parallel * context_parallel * pipeline_parallel);
  s.tp_rank = s.rank % s.tp_size;
  s.cp_rank = (s.rank / s.tp_size) % s.cp_size;
  const int tc = s.tp_size * s.cp_size;
  if (order == RankOrder::kTpDpPp) {
    s.dp_rank = (s.rank / tc) % s.dp_size;
    s.pp_rank = s.rank / (tc * s.dp_size);
  } else {
    s.pp_rank = (s.rank / tc) % s.pp_size;
    s.dp_rank = s.rank / (tc * s.pp_size);
  }
  s.dp_cp_size = s.dp_size * s.cp_size;
  s.dp_cp_rank = s.dp_rank * s.cp_size + s.cp_rank;
  s.etp_size = expert_tensor_parallel;
  s.ep_size = expert_model_parallel;
  s.edp_size = world_size / (s.etp_size * s.ep_size * s.pp_size);
  s.etp_rank = s.rank % s.etp_size;
  s.ep_rank = (s.rank / s.etp_size) % s.ep_size;
  const int te = s.etp_size * s.ep_size;
  // The pipeline rank of the expert grid equals the dense one: world / p = t·c·d = et·e·ed
  // (etp-ep-edp-pp), and et·e = t·c was required above for etp-ep-pp-edp. Folded, edp is
  // dp × cp in either order.
  if (!own_expert_grid)
    s.edp_rank = s.dp_cp_rank;
  else
    s.edp_rank =
        order == RankOrder::kTpDpPp ? (s.rank / te) % s.edp_size : s.rank / (te * s.pp_size);

  // Every rank takes part in every split, in the same order (split is collective). Colors
  // name the coordinates the group members share; keys order members by the coordinate
  // that varies inside the group, so group rank == that coordinate.
  const int t = s.tp_size, c = s.cp_size, d = s.dp_size;
  s.tp = world->split(/*color=*/(s.pp_rank * d + s.dp_rank) * c + s.cp_rank, /*key=*/s.tp_rank);
  s.cp = world->split(/*color=*/(s.pp_rank * d + s.dp_rank) * t + s.tp_rank, /*key=*/s.cp_rank);
  if (cp_a2a_size > 0) {
    MT_REQUIRE(c % cp_a2a_size == 0, "--hierarchical-context-parallel-sizes: the a2a level ",
               cp_a2a_size, " must divide --context-parallel-size ", c);
    s.hcp_a2a = s.cp->split(/*color=*/s.cp_rank / cp_a2a_size, /*key=*/s.cp_rank % cp_a2a_size);
    s.hcp_p2p = s.cp->split(/*color=*/s.cp_rank % cp_a2a_size, /*key=*/s.cp_rank / cp_a2a_size);
  }
  s.dp = world->split(/*color=*/(s.pp_rank * c + s.cp_rank) * t + s.tp_rank, /*key=*/s.dp_rank);
  // Without context parallelism dp × cp is the data-parallel group itself.
  s.dp_cp = c == 1 ? s.dp : world->split(/*color=*/s.pp_rank * t + s.tp_rank, s.dp_cp_rank);
  s.pp = world->split(/*color=*/(s.dp_rank * c + s.cp_rank) * t + s.tp_rank, /*key=*/s.pp_rank);
  s.mp = world->split(/*color=*/s.dp_rank * c + s.cp_rank, /*key=*/s.pp_rank * t + s.tp_rank);
  if (own_expert_grid) {
    const int et = s.etp_size, e = s.ep_size, ed = s.edp_size;
    s.ep = world->split(/*color=*/(s.pp_rank * ed + s.edp_rank) * et + s.etp_rank, s.ep_rank);
    s.etp = world->split(/*color=*/(s.pp_rank * ed + s.edp_rank) * e + s.ep_rank, s.etp_rank);
    s.tp_ep = world->split(/*color=*/s.pp_rank * ed + s.edp_rank, s.ep_rank * et + s.etp_rank);
    s.edp = world->split(/*color=*/(s.pp_rank * e + s.ep_rank) * et + s.etp_rank, s.edp_rank);
    s.emp = world->split(/*color=*/s.edp_rank, (s.pp_rank * e + s.ep_rank) * et + s.etp_rank);
  } else {
    s.ep = std::make_shared<SoloCommunicator>();
    s.etp = s.tp_ep = s.tp;
    s.edp = s.dp_cp;
    s.emp = s.mp;
  }
  // Middle stages get singleton groups of their own (colors past every member color), unused.
  const bool embedding_member = s.pp_size > 1 && (s.pp_rank == 0 || s.pp_rank == s.pp_size - 1);
  const int replica = (s.dp_rank * c + s.cp_rank) * t + s.tp_rank;
  std::shared_ptr<Communicator> embedding = world->split(
      /*color=*/embedding_member ? replica : t * c * d + s.rank, /*key=*/s.pp_rank);
  if (embedding_member) s.embedding = std::move(embedding);
  s.world = std::move(world);
  return s;
}

}  // namespace megatron
