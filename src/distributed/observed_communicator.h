// ObservedCommunicator: a Communicator decorator that forwards every operation to the
// communicator it wraps and tells an observer when this rank enters and leaves it. Posting a
// non-blocking operation and each wait() / progress() of its request are observed as their own
// spans. Every group split from an observed communicator is observed by the same observer, so
// one observer sees all of a job's communication (TP, CP, DP, PP and expert groups alike).
//
// Observers: CommunicationTimer (communication_timer.h: the seconds spent communicating, for
// `megatron bench --mode step`) and CollectiveWatchdog (watchdog.h: hang detection).
#pragma once

#include <memory>

#include "distributed/communicator.h"

namespace megatron {

class CommunicationObserver {
 public:
  virtual ~CommunicationObserver() = default;
  // This rank starts `operation` ("all_reduce", "wait", ...: a string literal) as member
  // `group_rank` of a group of `group_size`. Called from the thread that communicates.
  virtual void enter(const char* operation, int group_rank, int group_size) = 0;
  // The operation entered last has returned (or thrown).
  virtual void leave() = 0;
};

class ObservedCommunicator final : public Communicator {
 public:
  ObservedCommunicator(std::shared_ptr<Communicator> inner,
                       std::shared_ptr<CommunicationObserver> observer);

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
  std::shared_ptr<CommunicationObserver> observer_;
};

}  // namespace megatron
