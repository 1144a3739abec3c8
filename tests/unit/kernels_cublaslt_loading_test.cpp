// cuBLASLt is opened on the first CUDA GEMM, never at start-up (kernels/cuda/cublaslt_library.h):
// a CPU process does not map it (it cost ~150 MB of resident memory per process when it was
// linked), the first cublaslt() call does, and a library that cannot be loaded is an Error
// naming the file and the fix. Runs without a GPU: opening libcublasLt needs none.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/gemm.h"
#ifdef MEGATRON_CUDA
#include "kernels/cuda/cublaslt_library.h"
#endif

namespace megatron {
namespace {

using ::testing::HasSubstr;

// True when this process has a file whose name contains "libcublasLt" mapped.
bool cublaslt_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libcublasLt") != std::string::npos;
}

TEST(CublasLtLoadingTest, CpuGemmLeavesCublasLtUnmapped) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA: nothing could map cuBLASLt";
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::from_vector<float>({5, 6, 7, 8}, {2, 2});
  Tensor c = Tensor::zeros({2, 2}, DType::F32, Device::CPU);
  kernels::gemm(a, false, b, false, c);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{19, 22, 43, 50}));
  EXPECT_FALSE(cublaslt_mapped())
      << "libcublasLt is mapped in a process that ran no CUDA GEMM: is it linked again?";
}

#ifdef MEGATRON_CUDA

TEST(CublasLtLoadingTest, FirstUseMapsTheLibrary) {
  // In a child process (re-executed, not forked, as other tests may have started threads), so
  // this process stays without cuBLASLt for the test above.
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const bool before = cublaslt_mapped();
        const kernels::cuda::CublasLtApi& lt = kernels::cuda::cublaslt();
        const bool resolved = lt.cublasLtMatmul != nullptr && lt.cublasLtCreate != nullptr;
        std::exit(!before && resolved && cublaslt_mapped() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  GTEST_FLAG_SET(death_test_style, style);
}

TEST(CublasLtLoadingTest, MissingLibraryNamesEveryPathAndTheFix) {
  try {
    kernels::cuda::load_cublaslt({"/nonexistent/libcublasLt.so.13", "libcublasLt.so.0"});
    ADD_FAILURE() << "a missing cuBLASLt loaded";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("CUDA GEMMs need cuBLASLt, which could not be loaded"));
    EXPECT_THAT(e.message(), HasSubstr("/nonexistent/libcublasLt.so.13: "));
    EXPECT_THAT(e.message(), HasSubstr("; libcublasLt.so.0: "));
    EXPECT_THAT(e.message(), HasSubstr("to LD_LIBRARY_PATH"));
  }
  EXPECT_FALSE(cublaslt_mapped());
}

TEST(CublasLtLoadingTest, LibraryWithoutTheFunctionsNamesTheFirstMissing) {
  try {
    kernels::cuda::load_cublaslt({"libc.so.6"});  // opens, but has no cuBLASLt function
    ADD_FAILURE() << "libc accepted as cuBLASLt";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(),
                HasSubstr("the cuBLASLt library libc.so.6 has no function cublasLtCreate"));
    EXPECT_THAT(e.message(), HasSubstr("rebuild megatron against the installed cuBLAS"));
  }
}

#endif  // MEGATRON_CUDA

}  // namespace
}  // namespace megatron
