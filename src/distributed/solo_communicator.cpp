#include "distributed/solo_communicator.h"

#include "distributed/collective_checks.h"

namespace megatron {

void SoloCommunicator::all_reduce(Tensor& t, ReduceOp) {
  check_comm_tensor(t, "all_reduce", "tensor");
}

void SoloCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_comm_tensor(in, "all_gather", "input");
  check_comm_tensor(out, "all_gather", "output");
  check_chunked_dim0(in, "input", out, "output", 1, "all_gather");
  out.copy_from(in);
}

void SoloCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) {
  check_comm_tensor(in, "reduce_scatter", "input");
  check_comm_tensor(out, "reduce_scatter", "output");
  check_chunked_dim0(out, "output", in, "input", 1, "reduce_scatter");
  out.copy_from(in);
}

void SoloCommunicator::broadcast(Tensor& t, int root) {
  check_comm_tensor(t, "broadcast", "tensor");
  check_peer_rank(root, 1, "broadcast", "root");
}

void SoloCommunicator::all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows,
                                    Tensor& out, std::span<const int64_t> recv_rows) {
  check_all_to_all_v(in, send_rows, out, recv_rows, 1);
  out.copy_from(in);  // the only peer is this rank: both counts are the one block
}

void SoloCommunicator::send(const Tensor& t, int dst, int) {
  check_comm_tensor(t, "send", "tensor");
  MT_THROW("send: a world of one process has no peer ", dst,
           " (run under mpirun with more processes)");
}

void SoloCommunicator::recv(Tensor& t, int src, int) {
  check_comm_tensor(t, "recv", "tensor");
  MT_THROW("recv: a world of one process has no peer ", src,
           " (run under mpirun with more processes)");
}

std::unique_ptr<CommRequest> SoloCommunicator::isend(const Tensor& t, int dst, int) {
  check_comm_tensor(t, "isend", "tensor");
  MT_THROW("isend: a world of one process has no peer ", dst,
           " (run under mpirun with more processes)");
}

std::unique_ptr<CommRequest> SoloCommunicator::irecv(Tensor& t, int src, int) {
  check_comm_tensor(t, "irecv", "tensor");
  MT_THROW("irecv: a world of one process has no peer ", src,
           " (run under mpirun with more processes)");
}

namespace {
// A non-blocking operation that completed when it was posted.
class DoneRequest final : public CommRequest {
 public:
  void wait() override {}
  void progress() override {}
};
}  // namespace

std::unique_ptr<CommRequest> SoloCommunicator::iall_reduce(Tensor& t, ReduceOp) {
  check_comm_tensor(t, "iall_reduce", "tensor");
  check_nonblocking_reduction(t, "iall_reduce");
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<CommRequest> SoloCommunicator::ireduce_scatter(Tensor& t,
                                                               std::span<const int64_t> counts,
                                                               ReduceOp) {
  check_comm_tensor(t, "ireduce_scatter", "tensor");
  check_nonblocking_reduction(t, "ireduce_scatter");
  check_scatter_counts(t, counts, 1, "ireduce_scatter");
  return std::make_unique<DoneRequest>();  // one rank: its segment is all of t, already reduced
}

std::unique_ptr<Communicator> SoloCommunicator::split(int color, int) {
  check_split_color(color);
  return std::make_unique<SoloCommunicator>();
}

}  // namespace megatron
