// Per-kernel wall time for `megatron bench --mode step --breakdown`: every CPU kernel that
// MT_DISPATCH hands to its backend is timed while profiling is on, keyed by the kernel's name
// (GEMMs by name and shape, so each GEMM group of a layer is a row of its own), with the work it
// implies — FLOPs for GEMMs (2·batch·M·N·K) and the bytes of its tensor operands, the two floors
// the breakdown sets each row against — and the page faults of the process while it ran. A
// kernel on a CUDA device is timed by the GPU: events recorded on the compute stream before and
// after it (core/device_runtime.h's DeviceTimePoint), read when the profile is (kernel_profile
// waits for the GPU); its page faults are the host's while it was queued. Off (the default) it
// costs a call and a relaxed load per kernel call. Only calls from the thread that turned
// profiling on are recorded; a kernel called inside another (or from another thread) is part
// of its caller's time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "core/tensor.h"
#include "kernels/gemm_problem.h"

namespace megatron::kernels {

struct KernelProfileRow {
  std::string name;  // "layernorm_forward", "gemm 1024x2304x768 NT", ...
  int64_t calls = 0;
  double seconds = 0, flops = 0, bytes = 0;
  double page_faults = 0;  // of the whole process while the kernel ran (minor + major)
};

// Starts (clearing what was recorded) or stops recording on the calling thread.
void set_kernel_profiling(bool on);
// What was recorded since profiling was last turned on, slowest first.
std::vector<KernelProfileRow> kernel_profile();

namespace detail {
// Profiling is on, this is its thread, and no profiled kernel is running on it already (a kernel
// called inside another is part of the outer one's time).
bool kernel_profiling_on();
struct KernelWork {
  std::string shape;  // the row's key after the kernel name ("" for non-GEMMs)
  double flops = 0, bytes = 0;
  Device device = Device::CPU;  // where it runs: a CUDA device if any tensor operand is on one
};
inline void add_work(KernelWork& w, const Tensor& t) {
  w.bytes += double(t.nbytes());
  if (t.device().is_cuda()) w.device = t.device();
}
void add_work(KernelWork& w, const GemmProblem& p);
template <typename T>
void add_work(KernelWork&, const T&) {}  // scalars, seeds, options: no work of their own
}  // namespace detail

// Times its lifetime as one call of `kernel` on `operands` when profiling is on.
class KernelProfileScope {
 public:
  template <typename... Operands>
  explicit KernelProfileScope(const char* kernel, const Operands&... operands) {
    if (!detail::kernel_profiling_on()) return;
    kernel_ = kernel;
    (detail::add_work(work_, operands), ...);
    enter();
  }
  ~KernelProfileScope();
  KernelProfileScope(const KernelProfileScope&) = delete;
  KernelProfileScope& operator=(const KernelProfileScope&) = delete;

 private:
  void enter();  // marks a profiled kernel running; reads the clock and the fault count
  const char* kernel_ = nullptr;
  detail::KernelWork work_;
  DeviceTimePoint start_;
  double start_faults_ = 0;
};

}  // namespace megatron::kernels
