// `megatron comm-check` — a diagnostic for a cluster or an MPI install: verifies every
// communicator operation on every dtype across all ranks, the Megatron rank grid for the
// given parallel sizes, and prints the bandwidth of a large all-reduce. `--fail-rank N`
// makes rank N fail on purpose, to check that a failing rank takes the whole job down
// with its message instead of leaving the others waiting (tests/e2e/rank_failure.sh).
#include "distributed/comm_check.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/args/arg_table.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "distributed/agreement.h"
#include "distributed/runtime.h"

namespace megatron::cli {

int run_comm_check(int argc, char** argv) {
  int tensor_parallel = 1, pipeline_parallel = 1, fail_rank = -1, iterations = 5;
  double bandwidth_mb = 64;
  CLI::App app{
      "Verify collectives and the rank grid across all ranks; measure all-reduce "
      "bandwidth.",
      "megatron comm-check"};
  app.add_option("--tensor-model-parallel-size", tensor_parallel,
                 "tensor-parallel size whose groups to verify")
      ->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", pipeline_parallel,
                 "pipeline-parallel size whose groups to verify")
      ->capture_default_str();
  app.add_option("--bandwidth-mb", bandwidth_mb, "size of the timed f32 all-reduce, MB (0: skip)")
      ->capture_default_str();
  app.add_option("--bandwidth-iters", iterations, "number of timed all-reduces")
      ->capture_default_str();
  app.add_option("--fail-rank", fail_rank,
                 "diagnostic: this rank throws an error at the start (tests job-wide abort)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  auto world = world_communicator();
  const int n = world->size(), me = world->rank();
  // Every rank checks the same flags: one reports a bad one, and all end cleanly.
  run_on_all_ranks(*world, "", [&] {
    MT_REQUIRE(fail_rank < n, "--fail-rank ", fail_rank, " is outside the world of ", n,
               " processes (expected 0..", n - 1, ")");
    MT_REQUIRE(bandwidth_mb >= 0, "--bandwidth-mb must be >= 0, got ", bandwidth_mb);
    MT_REQUIRE(iterations >= 1, "--bandwidth-iters must be >= 1, got ", iterations);
    check_parallel_sizes(n, tensor_parallel, pipeline_parallel);
  });
  if (me == fail_rank) MT_THROW("comm-check: failure injected on rank ", me, " by --fail-rank");

  verify_collectives(*world);
  log_info("comm-check: ", n, " rank(s): all_reduce (SUM, MAX), all_gather, reduce_scatter, ",
           "broadcast, send/recv, split verified for f32, f64, bf16, i32, i64");

  ParallelState state = ParallelState::create(world, tensor_parallel, pipeline_parallel);
  verify_groups(state);
  log_info("comm-check: rank grid verified: tensor-parallel ", state.tp_size, " x data-parallel ",
           state.dp_size, " x pipeline-parallel ", state.pp_size);

  if (n == 1) {
    log_info("comm-check: one process, no all-reduce bandwidth to measure");
  } else if (bandwidth_mb > 0) {
    AllReduceBandwidth bw =
        measure_all_reduce_bandwidth(*world, int64_t(bandwidth_mb * 1e6), iterations);
    char line[256];
    std::snprintf(line, sizeof line,
                  "comm-check: all_reduce f32 %.1f MB over %d rank(s): %.3f ms, algbw %.2f "
                  "GB/s, busbw %.2f GB/s",
                  double(bw.bytes) / 1e6, n, bw.seconds * 1e3, bw.algbw_gbps, bw.busbw_gbps);
    log_info(line);
  }
  log_info("comm-check: OK");
  return 0;
}

}  // namespace megatron::cli
