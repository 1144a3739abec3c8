// The data-parallel gradient reduction on the host: megatron's ring (distributed/
// ring_reduction.h, what MpiCommunicator's iall_reduce / ireduce_scatter run) against OpenMPI's
// own non-blocking collectives (libnbc, what they ran before) and its blocking all-reduce, side
// by side in one run. Under mpirun, for each bucket size (f32 elements): best of `reps`, slowest
// rank, posted and waited at once (as GradBuckets::finish does without overlap). Reduce-scatter
// twice: even segments, and every element in rank 0's segment ("owner"), which is what most of
// the distributed optimizer's buckets are (its shards are contiguous ranges of the whole
// gradient buffer, so a bucket usually lies inside one rank's shard).
//   mpirun -np 2 build/bench/bench_ring_reduction [reps]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "distributed/ring_reduction.h"

namespace {

using megatron::DType;
using megatron::ReduceOp;
using megatron::RingReduction;
using megatron::Tensor;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  uint64_t sequence = 0;
  auto pool = std::make_shared<megatron::RingBufferPool>();
  if (rank == 0)
    std::printf(
        "%d ranks, best of %d, slowest rank (ms)\n%12s %10s %10s %11s %11s %10s %10s %11s %8s "
        "%8s %8s\n",
        size, reps, "f32 elements", "libnbc RS", "ring RS", "libnbc RS1", "ring RS1", "libnbc AR",
        "ring AR", "blocking AR", "RS x", "RS1 x", "AR x");
  for (int64_t n : {int64_t(1) << 20, int64_t(1) << 22, int64_t(1) << 24, int64_t(1) << 26}) {
    Tensor buffer = Tensor::empty({n}, DType::F32);
    float* p = buffer.data<float>();
    const std::vector<int64_t> counts = RingReduction::even_segments(n, size);
    std::vector<int> int_counts(counts.begin(), counts.end());
    std::vector<int64_t> owner(size_t(size), 0);
    owner[0] = n;
    std::vector<int> int_owner(owner.begin(), owner.end());
    auto time = [&](const std::function<void()>& op) {
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        std::fill(p, p + n, 1.0f + float(rank));
        MPI_Barrier(comm);
        const double t0 = now();
        op();
        best = std::min(best, now() - t0);
      }
      double slowest = 0;
      MPI_Allreduce(&best, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
      return 1e3 * slowest;
    };
    const double nbc_rs = time([&] {
      MPI_Request r;
      MPI_Ireduce_scatter(MPI_IN_PLACE, p, int_counts.data(), MPI_FLOAT, MPI_SUM, comm, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    });
    const double ring_rs = time([&] {
      RingReduction(comm, rank, size, buffer, counts, ReduceOp::SUM, false, sequence++, pool)
          .wait();
    });
    const double nbc_rs1 = time([&] {
      MPI_Request r;
      MPI_Ireduce_scatter(MPI_IN_PLACE, p, int_owner.data(), MPI_FLOAT, MPI_SUM, comm, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    });
    const double ring_rs1 = time([&] {
      RingReduction(comm, rank, size, buffer, owner, ReduceOp::SUM, false, sequence++, pool).wait();
    });
    const double nbc_ar = time([&] {
      MPI_Request r;
      MPI_Iallreduce(MPI_IN_PLACE, p, int(n), MPI_FLOAT, MPI_SUM, comm, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    });
    const double ring_ar = time([&] {
      RingReduction(comm, rank, size, buffer, counts, ReduceOp::SUM, true, sequence++, pool).wait();
    });
    const double blocking_ar =
        time([&] { MPI_Allreduce(MPI_IN_PLACE, p, int(n), MPI_FLOAT, MPI_SUM, comm); });
    if (rank == 0)
      std::printf("%12lld %10.2f %10.2f %11.2f %11.2f %10.2f %10.2f %11.2f %7.2fx %7.2fx %7.2fx\n",
                  static_cast<long long>(n), nbc_rs, ring_rs, nbc_rs1, ring_rs1, nbc_ar, ring_ar,
                  blocking_ar, nbc_rs / ring_rs, nbc_rs1 / ring_rs1, nbc_ar / ring_ar);
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
}
