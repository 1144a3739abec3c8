// `megatron bench` — implemented by the kernels work (issue 2); see docs/kernels.md.
#include "cli/subcommands.h"
#include "core/error.h"

namespace megatron::cli {

int run_bench(int, char**) {
  MT_THROW("megatron bench is not built yet");
}

}  // namespace megatron::cli
