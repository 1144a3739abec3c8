// The kernel dispatch seam: how every kernels/<concept>.cpp hands validated work to a backend.
//
// A kernel's contract header (kernels/<concept>.h) is device-free. Its kernels/<concept>.cpp
// checks shapes and dtypes once, asks operand_device() which device all operands live on, and
// calls the backend twin of the same name and signature:
//   kernels::cpu::<fn>   declared in kernels/cpu/cpu_kernels.h,   built always;
//   kernels::cuda::<fn>  declared in kernels/cuda/cuda_kernels.h, built with MEGATRON_CUDA.
// Backends may assume their arguments were validated. In a build without CUDA a CUDA operand is
// an Error naming the kernel and the fix, never a dereference of device memory.
#pragma once

#include <initializer_list>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/profile.h"
#ifdef MEGATRON_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace megatron::kernels {

// The device shared by every defined operand (the CPU when none is defined); an Error naming
// `kernel` and both devices when two operands live on different devices, and (in a build
// without CUDA) an Error naming `kernel` when it is a CUDA device.
Device operand_device(const char* kernel, std::initializer_list<const Tensor*> operands);

// "<kernel>: the operands are CUDA tensors, but this binary was built without CUDA ...".
[[noreturn]] void throw_cuda_not_built(const char* kernel);

// Argument checks shared by the kernels/<concept>.cpp files (core/tensor.h has check_shape,
// check_dtype and check_contiguous). None of them reads an element, so they are safe on any
// device.
void check_defined(const Tensor& t, const char* what);  // "<what> is undefined"
// Defined, contiguous and of dtype f32 or bf16 (the activation dtypes).
void check_float_contiguous(const Tensor& t, const char* what);
// Defined, contiguous and of dtype i32 (token ids, positions, sampled ids).
void check_i32_contiguous(const Tensor& t, const char* what);
// A kernel operand with the name its messages use (a string literal, so a check that passes
// builds no string).
struct NamedOperand {
  const Tensor* tensor = nullptr;
  const char* name = "";
};
// The operands of a bias + activation kernel (kernels/gelu.h, kernels/squared_relu.h): x [N, C]
// f32 or bf16, contiguous; bias [C] of x's dtype, or undefined; each of `like_x` x's shape,
// dtype and contiguity; dbias, when given and defined, [C] f32.
void check_bias_activation(NamedOperand x, NamedOperand bias,
                           std::initializer_list<NamedOperand> like_x, NamedOperand dbias = {});

}  // namespace megatron::kernels

// return MT_DISPATCH(device, fn, args...): cpu::fn(args...) or cuda::fn(args...). Either call is
// timed by kernels/profile.h while profiling is on (the arguments are named twice: they are
// plain operands, never expressions with effects).
#define MT_CPU_CALL(fn, ...)                                  \
  (::megatron::kernels::KernelProfileScope(#fn, __VA_ARGS__), \
   ::megatron::kernels::cpu::fn(__VA_ARGS__))
#ifdef MEGATRON_CUDA
#define MT_CUDA_CALL(fn, ...)                                 \
  (::megatron::kernels::KernelProfileScope(#fn, __VA_ARGS__), \
   ::megatron::kernels::cuda::fn(__VA_ARGS__))
#define MT_DISPATCH(device, fn, ...) \
  ((device).is_cuda() ? MT_CUDA_CALL(fn, __VA_ARGS__) : MT_CPU_CALL(fn, __VA_ARGS__))
#else
#define MT_DISPATCH(device, fn, ...)                                     \
  ((device).is_cuda() ? (::megatron::kernels::throw_cuda_not_built(#fn), \
                         ::megatron::kernels::cpu::fn(__VA_ARGS__))      \
                      : MT_CPU_CALL(fn, __VA_ARGS__))
#endif
