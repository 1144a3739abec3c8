// `megatron bench` — kernel benchmarks are implemented by the kernels work (issue 2); see
// docs/kernels.md. `--mode step` runs whole training steps (cli/bench_step.h).
#include <cstring>

#include "cli/bench_step.h"
#include "cli/subcommands.h"
#include "core/error.h"

namespace megatron::cli {

int run_bench(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--mode") && !std::strcmp(argv[i + 1], "step"))
      return run_step_bench(argc, argv);
  MT_THROW("megatron bench: only --mode step is built yet");
}

}  // namespace megatron::cli
