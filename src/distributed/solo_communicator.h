// SoloCommunicator: a world of one process, used when the binary runs without a launcher.
//
// Collectives are identities (the reduction of one value is that value; gathering one chunk
// is a copy; the non-blocking ones are done when they return), broadcast from rank 0 and barrier do
// nothing, and send/recv have no peer to talk to, so they throw. Arguments are validated exactly as
// MpiCommunicator validates them, so a shape bug shows up in single-process tests too.
#pragma once

#include "distributed/communicator.h"

namespace megatron {

class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::SUM) override;
  void broadcast(Tensor& t, int root) override;
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                    std::span<const int64_t> recv_rows) override;
  void send(const Tensor& t, int dst, int tag = 0) override;
  void recv(Tensor& t, int src, int tag = 0) override;
  std::unique_ptr<CommRequest> isend(const Tensor& t, int dst, int tag = 0) override;
  std::unique_ptr<CommRequest> irecv(Tensor& t, int src, int tag = 0) override;
  std::unique_ptr<CommRequest> iall_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  std::unique_ptr<CommRequest> ireduce_scatter(Tensor& t, std::span<const int64_t> counts,
                                               ReduceOp op = ReduceOp::SUM) override;
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key) override;
};

}  // namespace megatron
