#include "cli/version.h"

#include <fstream>
#include <set>
#include <sstream>

#include "kernels/cpu/gemm_backend.h"

namespace megatron::cli {

namespace {

// Written at each build by cmake/MegatronGitCommit.cmake; MEGATRON_VERSION, MEGATRON_BUILD_TYPE
// and MEGATRON_MARCH_FLAG are set by src/CMakeLists.txt on this file alone, so that a new
// commit or a reconfigure recompiles one file.
constexpr const char* kGitCommit =
#include "git_commit.inc"
    ;

// The optional dependencies this build found (cmake/MegatronDependencies.cmake), by name.
std::string optional_libraries() {
  std::string built;
  for (const char* name : {
#ifdef MEGATRON_HAS_MPI
           "MPI",
#endif
#ifdef MEGATRON_HAS_OPENBLAS
           "OpenBLAS",
#endif
#ifdef MEGATRON_HAS_ONEDNN
           "oneDNN",
#endif
#ifdef MEGATRON_HAS_SENTENCEPIECE
           "SentencePiece",
#endif
#ifdef MEGATRON_HAS_HTTPLIB
           "cpp-httplib (serve)",
#endif
           ""})
    if (*name != '\0') built.append(built.empty() ? "" : ", ").append(name);
  return built.empty() ? "none" : built;
}

// The /proc/cpuinfo flags that select a kernel path here (AVX2/FMA loops, AVX-512 loops,
// oneDNN's native bf16 and AMX kernels), named as /proc/cpuinfo names them.
std::string cpu_features() {
  static const char* const kRelevant[] = {"avx2",     "fma",      "f16c",        "avx512f",
                                          "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                                          "amx_tile", "amx_bf16"};
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  std::set<std::string> flags;
  while (std::getline(cpuinfo, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) continue;
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    if (key == "model" && line.rfind("model name", 0) == 0 && model == "unknown CPU")
      model = line.substr(colon + 2);
    if (key == "flags" && flags.empty()) {
      std::istringstream words(line.substr(colon + 2));
      for (std::string w; words >> w;) flags.insert(w);
    }
  }
  std::string present;
  for (const char* f : kRelevant)
    if (flags.count(f) != 0) present.append(present.empty() ? "" : " ").append(f);
  return model + " (" + (present.empty() ? "none of avx2/avx512/amx" : present) + ")";
}

// The kernel a 1024^3 GEMM of `dtype` runs: the choice made at run time from this CPU and the
// libraries found (kernels/cpu/gemm_backend.h).
std::string gemm_choice(DType dtype) {
  kernels::GemmProblem p;
  p.m = p.n = p.k = p.lda = p.ldb = p.ldc = 1024;
  p.ab_dtype = dtype;
  return kernels::cpu::gemm_backend_name(p);
}

}  // namespace

std::string version_report() {
  std::ostringstream out;
  out << "megatron " << MEGATRON_VERSION << " (megatron-cpp)\n"
      << "git commit: " << kGitCommit << "\n"
      << "build: " << MEGATRON_BUILD_TYPE << ", -march=" << MEGATRON_MARCH_FLAG << ", "
#ifdef __clang__
      << "clang "
#else
      << "GCC "
#endif
      << __VERSION__ << "\n"
      << "CUDA backend: "
#ifdef MEGATRON_CUDA
      << "built (--device cuda)\n"
#else
      << "not built (CPU only)\n"
#endif
      << "optional libraries built in: " << optional_libraries() << "\n"
      << "CPU: " << cpu_features() << "\n"
      << "GEMM kernel (1024^3): f32 " << gemm_choice(DType::F32) << "; bf16 "
      << gemm_choice(DType::BF16) << "\n";
  const std::string note = kernels::cpu::gemm_library_note();
  if (!note.empty()) out << "note: " << note << "\n";
  return out.str();
}

}  // namespace megatron::cli
