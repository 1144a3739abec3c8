// cuBLASLt opened on first use (contract: kernels/cuda/cublaslt_library.h).
#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include "core/error.h"

#ifndef MEGATRON_CUBLASLT_PATH
#error "MEGATRON_CUBLASLT_PATH (the libcublasLt found at configure time) is set by CMakeLists.txt"
#endif

namespace megatron::kernels::cuda {

namespace {

// The soname the headers' major version promises the ABI of, e.g. libcublasLt.so.13.
std::string cublaslt_soname() {
  return detail::concat("libcublasLt.so.", CUBLAS_VER_MAJOR);
}

}  // namespace

CublasLtApi load_cublaslt(const std::vector<std::string>& candidates) {
  std::string failures;
  for (const std::string& path : candidates) {
    // RTLD_NOW: a library whose own dependencies are missing fails here, not mid-training.
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char* error = dlerror();
      const std::string why = error ? error : "dlopen failed";
      // dlerror() usually names the file already; name it once.
      failures += detail::concat(failures.empty() ? "" : "; ",
                                 why.find(path) == std::string::npos ? path + ": " : "", why);
      continue;
    }
    CublasLtApi api;
#define MEGATRON_CUBLASLT_RESOLVE(name)                                                        \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, #name));                      \
  if (!api.name) {                                                                             \
    dlclose(library);                                                                          \
    MT_THROW("the cuBLASLt library ", path, " has no function " #name ": it is not cuBLASLt ", \
             CUBLAS_VER_MAJOR, ".x, the version megatron was built against (headers ",         \
             CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, "); install cuBLAS ", CUBLAS_VER_MAJOR,  \
             " or rebuild megatron against the installed cuBLAS");                             \
  }
    MEGATRON_CUBLASLT_FUNCTIONS(MEGATRON_CUBLASLT_RESOLVE)
#undef MEGATRON_CUBLASLT_RESOLVE
    return api;
  }
  MT_THROW("CUDA GEMMs need cuBLASLt, which could not be loaded (", failures, "); install cuBLAS ",
           CUBLAS_VER_MAJOR,
           " (the CUDA toolkit, or pip's nvidia-cublas) or add the directory holding ",
           cublaslt_soname(), " to LD_LIBRARY_PATH");
}

const CublasLtApi& cublaslt() {
  // A function-local static: loaded once, under the C++ runtime's initialisation lock; an
  // exception leaves it unloaded, so the next GEMM tries again.
  static const CublasLtApi api = load_cublaslt({MEGATRON_CUBLASLT_PATH, cublaslt_soname()});
  return api;
}

}  // namespace megatron::kernels::cuda
