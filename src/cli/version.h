// `megatron --version`: what this binary is and what it runs on, for bug reports and for
// comparing timings between machines — the version and git commit it was built from, how it
// was built (build type, -march, compiler, CUDA backend, optional libraries), this CPU's
// instruction-set features that the kernels use, and the GEMM kernel chosen at run time.
#pragma once

#include <string>

namespace megatron::cli {

// The report, several "name: value" lines, each ending in '\n'.
std::string version_report();

}  // namespace megatron::cli
