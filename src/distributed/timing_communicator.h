// TimingCommunicator: a Communicator decorator that forwards every operation and adds its wall
// time to a clock shared with every group split from it, so a whole job's communication time
// (TP and DP collectives alike) can be read off one counter. Used by `megatron bench --mode
// step` to report the communication share of a training step.
#pragma once

#include <memory>

#include "core/timer.h"
#include "distributed/communicator.h"

namespace megatron {

class TimingCommunicator final : public Communicator {
 public:
  explicit TimingCommunicator(std::shared_ptr<Communicator> inner,
                              std::shared_ptr<Timer> clock = std::make_shared<Timer>());
  // Seconds spent inside operations of this communicator and of every group split from it.
  double seconds() const { return clock_->seconds(); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
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
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<Timer> clock_;
};

}  // namespace megatron
