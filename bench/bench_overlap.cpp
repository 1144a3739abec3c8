// Does overlapping the data-parallel gradient all-reduce with backward GEMMs pay on this CPU?
// (issue 12, --overlap-grad-reduce). Under mpirun, every rank times, side by side in one run:
//   gemm      K f32 GEMMs [m, m] x [m, m] (the backward's compute)
//   reduce    one all-reduce of a gradient bucket of `bucket` f32
//   serial    the GEMMs, then the all-reduce (what the trainer does today)
//   overlap   the all-reduce on a second thread while the main thread runs the GEMMs (what
//             --overlap-grad-reduce would do; MPI_THREAD_SERIALIZED holds: only that thread
//             calls MPI meanwhile)
// Best of `reps`, slowest rank. overlap/serial < 1 means overlapping pays. On a CPU the cores
// that progress MPI (copies, reductions) are the ones running the GEMMs, so it may not.
//   mpirun -np 2 build/bench/bench_overlap [m K bucket reps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/tensor.h"
#include "distributed/runtime.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace megatron;
  DistRuntime runtime(argc, argv);
  const int64_t m = argc > 1 ? std::atoll(argv[1]) : 512;
  const int k = argc > 2 ? std::atoi(argv[2]) : 8;
  const int64_t bucket = argc > 3 ? std::atoll(argv[3]) : int64_t(1) << 22;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 5;
  auto world = world_communicator();

  Tensor a = Tensor::empty({m, m}, DType::F32), b = Tensor::empty({m, m}, DType::F32);
  Tensor c = Tensor::empty({m, m}, DType::F32);
  Tensor grads = Tensor::empty({bucket}, DType::F32);
  kernels::fill(a, 0.01f);
  kernels::fill(b, 0.02f);
  kernels::fill(grads, 1.0f);
  auto gemms = [&] {
    for (int i = 0; i < k; ++i) kernels::gemm(a, false, b, true, c);
  };
  auto reduce = [&] { world->all_reduce(grads); };
  // Slowest rank's best time of `fn`, ranks started together.
  auto timed = [&](auto&& fn) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      world->barrier();
      const double t0 = now();
      fn();
      best = std::min(best, now() - t0);
    }
    return world->all_reduce_scalar(best, ReduceOp::MAX);
  };
  gemms();  // warm up the GEMM backend and the communicator
  reduce();
  const double t_gemm = timed(gemms);
  const double t_reduce = timed(reduce);
  const double t_serial = timed([&] {
    gemms();
    reduce();
  });
  const double t_overlap = timed([&] {
    std::thread comm(reduce);
    gemms();
    comm.join();
  });
  if (world->rank() == 0) {
    std::printf("ranks %d | %d GEMMs of %lld^3 f32 | all-reduce of %lld f32 (%.1f MiB)\n",
                world->size(), k, static_cast<long long>(m), static_cast<long long>(bucket),
                double(bucket) * 4 / (1 << 20));
    std::printf(
        "gemm %.1f ms | reduce %.1f ms | serial %.1f ms | overlap %.1f ms | "
        "overlap/serial %.3f | ideal (max/sum) %.3f\n",
        t_gemm * 1e3, t_reduce * 1e3, t_serial * 1e3, t_overlap * 1e3, t_overlap / t_serial,
        std::max(t_gemm, t_reduce) / (t_gemm + t_reduce));
  }
  return 0;
}
