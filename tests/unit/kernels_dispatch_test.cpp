// The dispatch seam (kernels/dispatch.h) on a machine without a GPU: CUDA operands in a build
// without CUDA are an Error naming the kernel for every public kernel, and operands on two
// devices are an Error naming both. The "CUDA" tensors borrow an address in the never-mapped
// first page, so any kernel that dereferenced one would crash the test instead of passing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "core/error.h"
#include "kernels/adamw.h"
#include "kernels/bias_add.h"
#include "kernels/bias_tanh.h"
#include "kernels/cross_entropy.h"
#include "kernels/dispatch.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/indexing.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rotary.h"
#include "kernels/softmax.h"
#include "kernels/swiglu.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

// A tensor that claims to live on cuda:0 at an address no process maps.
Tensor fake_cuda(const Shape& shape, DType dtype) {
  void* nowhere = reinterpret_cast<void*>(uintptr_t{256});
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(Storage::borrow(nowhere, bytes, Device::cuda(0)), 0, shape,
                contiguous_strides(shape), dtype);
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

struct Call {
  const char* kernel;
  std::function<void()> run;
};

// Every public kernel with operands of valid shapes and dtypes (so that only the device can
// be the problem), all on cuda:0.
std::vector<Call> every_kernel() {
  const int64_t n = 13, c = 17;
  auto f32 = [](const Shape& s) { return fake_cuda(s, DType::F32); };
  auto i32 = [](const Shape& s) { return fake_cuda(s, DType::I32); };
  auto u8 = [](const Shape& s) { return fake_cuda(s, DType::U8); };
  const kernels::AdamWHyper hyper{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1};
  return {
      {"gemm",
       [=] {
         Tensor y = f32({n, n});
         kernels::gemm(f32({n, c}), false, f32({n, c}), true, y);
       }},
      {"gemm",
       [=] {
         Tensor y = f32({0, n});
         kernels::gemm(f32({0, c}), false, f32({n, c}), true, y);
       }},
      {"gemm",
       [=] {
         Tensor y = f32({n, n});
         kernels::gemm(f32({n, 0}), false, f32({0, n}), false, y, 1, 1);
       }},
      {"batched_gemm",
       [=] {
         Tensor y = f32({3, n, n});
         kernels::batched_gemm(f32({3, n, c}), false, f32({3, c, n}), false, y);
       }},
      {"cast",
       [=] {
         Tensor d = fake_cuda({n}, DType::BF16);
         kernels::cast(f32({n}), d);
       }},
      {"copy",
       [=] {
         Tensor d = i32({n, c});
         kernels::copy(i32({c, n}).transpose(0, 1), d);
       }},
      {"fill",
       [=] {
         Tensor t = f32({n});
         kernels::fill(t, 1.f);
       }},
      {"scale",
       [=] {
         Tensor t = f32({n});
         kernels::scale(t, 2.f);
       }},
      {"axpy",
       [=] {
         Tensor y = f32({n});
         kernels::axpy(2.f, f32({n}), y);
       }},
      {"sum_squares", [=] { kernels::sum_squares(f32({n})); }},
      {"has_inf_or_nan", [=] { kernels::has_inf_or_nan(f32({n})); }},
      {"weighted_sum", [=] { kernels::weighted_sum(f32({n}), f32({n})); }},
      {"fill_positions",
       [=] {
         Tensor ids = i32({n * 3});
         kernels::fill_positions(ids, 3, 0);
       }},
      {"first_out_of_range", [=] { kernels::first_out_of_range(i32({n}), 0, 10); }},
      {"layernorm_forward",
       [=] {
         Tensor y = f32({n, c}), mean = f32({n}), rstd = f32({n});
         kernels::layernorm_forward(f32({n, c}), f32({c}), f32({c}), 1e-5f, y, mean, rstd);
       }},
      {"layernorm_backward",
       [=] {
         Tensor dx = f32({n, c}), dg = f32({c}), db = f32({c});
         kernels::layernorm_backward(f32({n, c}), f32({n, c}), f32({c}), f32({n}), f32({n}), dx, dg,
                                     db);
       }},
      {"rmsnorm_forward",
       [=] {
         Tensor y = f32({n, c}), rstd = f32({n});
         kernels::rmsnorm_forward(f32({n, c}), f32({c}), 1e-6f, y, rstd);
       }},
      {"rmsnorm_backward",
       [=] {
         Tensor dx = f32({n, c}), dg = f32({c});
         kernels::rmsnorm_backward(f32({n, c}), f32({n, c}), f32({c}), f32({n}), dx, dg);
       }},
      {"rotary_embedding",
       [=] {
         Tensor y = f32({n, 3, 16});
         kernels::rotary_embedding(
             f32({n, 3, 16}), 5,
             {.rotary_dim = 16, .base = 10000.0f, .seq_interpolation_factor = 1.0f, .llama3 = {}},
             false, y);
       }},
      {"swiglu_forward",
       [=] {
         Tensor y = f32({n, c});
         kernels::swiglu_forward(f32({n, 2 * c}), y);
       }},
      {"swiglu_backward",
       [=] {
         Tensor dx = f32({n, 2 * c});
         kernels::swiglu_backward(f32({n, c}), f32({n, 2 * c}), dx);
       }},
      {"bias_add_forward",
       [=] {
         Tensor y = f32({n, c});
         kernels::bias_add_forward(y, f32({c}));
       }},
      {"bias_add_backward",
       [=] {
         Tensor db = f32({c});
         kernels::bias_add_backward(f32({n, c}), db);
       }},
      {"bias_gelu_forward",
       [=] {
         Tensor y = f32({n, c});
         kernels::bias_gelu_forward(f32({n, c}), f32({c}), y, kernels::GeluForm::kErf);
       }},
      {"bias_gelu_backward",
       [=] {
         Tensor dx = f32({n, c}), db = f32({c});
         kernels::bias_gelu_backward(f32({n, c}), f32({n, c}), f32({c}), dx, db,
                                     kernels::GeluForm::kErf);
       }},
      {"bias_tanh_forward",
       [=] {
         Tensor y = f32({n, c});
         kernels::bias_tanh_forward(f32({n, c}), f32({c}), y);
       }},
      {"bias_tanh_backward",
       [=] {
         Tensor dx = f32({n, c}), db = f32({c});
         kernels::bias_tanh_backward(f32({n, c}), f32({n, c}), dx, db);
       }},
      {"dropout_mask",
       [=] {
         Tensor m = u8({2, c});
         kernels::dropout_mask(1, {{1, 0}, {2, 0}}, 0.1f, m);
       }},
      {"dropout_forward",
       [=] {
         Tensor y = f32({n, c});
         kernels::dropout_forward(f32({n, c}), u8({n, c}), 0.1f, y);
       }},
      {"dropout_backward",
       [=] {
         Tensor dx = f32({n, c});
         kernels::dropout_backward(f32({n, c}), u8({n, c}), 0.1f, dx);
       }},
      {"bias_dropout_add_forward",
       [=] {
         Tensor y = f32({n, c});
         kernels::bias_dropout_add_forward(f32({n, c}), f32({c}), f32({n, c}), u8({n, c}), 0.1f, y);
       }},
      {"bias_dropout_add_backward",
       [=] {
         Tensor dx = f32({n, c}), db = f32({c});
         kernels::bias_dropout_add_backward(f32({n, c}), u8({n, c}), 0.1f, dx, db);
       }},
      {"scaled_masked_softmax_forward",
       [=] {
         Tensor p = f32({2, 3, 5, 5});
         kernels::scaled_masked_softmax_forward(f32({2, 3, 5, 5}), 0.5f, true, u8({2, 5}), p);
       }},
      {"scaled_masked_softmax_backward",
       [=] {
         Tensor ds = f32({2, 3, 5, 5});
         kernels::scaled_masked_softmax_backward(f32({2, 3, 5, 5}), f32({2, 3, 5, 5}), 0.5f, ds);
       }},
      {"cross_entropy_row_max",
       [=] {
         Tensor mx = f32({n});
         kernels::cross_entropy_row_max(f32({n, c}), c, mx);
       }},
      {"cross_entropy_sum_exp_target",
       [=] {
         Tensor se = f32({n}), tl = f32({n});
         kernels::cross_entropy_sum_exp_target(f32({n, c}), i32({n}), 0, c, f32({n}), se, tl);
       }},
      {"cross_entropy_loss",
       [=] {
         Tensor l = f32({n});
         kernels::cross_entropy_loss(f32({n}), f32({n}), f32({n}), l);
       }},
      {"cross_entropy_backward",
       [=] {
         Tensor d = f32({n, c});
         kernels::cross_entropy_backward(f32({n, c}), i32({n}), 0, c, f32({n}), f32({n}), f32({n}),
                                         d);
       }},
      {"embedding_forward",
       [=] {
         Tensor out = f32({n, c});
         kernels::embedding_forward(i32({n}), f32({50, c}), 0, out);
       }},
      {"embedding_backward",
       [=] {
         Tensor dt = f32({50, c});
         kernels::embedding_backward(f32({n, c}), i32({n}), 0, dt);
       }},
      {"adamw_update",
       [=] {
         Tensor p = f32({n}), m = f32({n}), v = f32({n});
         kernels::adamw_update(p, f32({n}), m, v, hyper);
       }},
  };
}

TEST(Dispatch, CudaOperandsWithoutACudaBuildNameTheKernel) {
  if (cuda_built()) GTEST_SKIP() << "this binary has CUDA: tests/gpu/ covers its kernels";
  for (const Call& call : every_kernel()) {
    const std::string message = error_of(call.run);
    EXPECT_THAT(message, HasSubstr("built without CUDA")) << call.kernel;
    EXPECT_THAT(message, HasSubstr(call.kernel)) << message;
  }
}

TEST(Dispatch, OperandsOnTwoDevicesAreAnError) {
  // Checked before anything touches memory, so a fake CUDA tensor tests it on any machine.
  Tensor host = Tensor::zeros({13, 17}, DType::F32);
  Tensor gpu = fake_cuda({13, 17}, DType::F32);
  const std::string message = error_of([&] { kernels::axpy(1.f, host, gpu); });
  EXPECT_THAT(message, HasSubstr("axpy: operands live on different devices"));
  EXPECT_THAT(message, HasSubstr("on cpu"));
  EXPECT_THAT(message, HasSubstr("on cuda:0"));
  Tensor c = Tensor::zeros({13, 13}, DType::F32);
  EXPECT_THAT(error_of([&] { kernels::gemm(host, false, gpu, true, c); }),
              HasSubstr("gemm: operands live on different devices"));
}

TEST(Dispatch, OperandDeviceOfHostAndUndefinedTensors) {
  Tensor a = Tensor::zeros({3}, DType::F32), undefined;
  EXPECT_EQ(kernels::operand_device("k", {&a, &undefined}), Device::CPU);
  EXPECT_EQ(kernels::operand_device("k", {&undefined}), Device::CPU);
  Tensor g = fake_cuda({3}, DType::F32);
  if (!cuda_built()) {
    EXPECT_THAT(error_of([&] {
                  kernels::operand_device("k", {&undefined, &g});
                }),
                HasSubstr("k: the operands are CUDA tensors"));
  } else {
    EXPECT_EQ(kernels::operand_device("k", {&undefined, &g}), Device::cuda(0));
  }
}

}  // namespace
}  // namespace megatron
