// ForwardingCommunicator: a Communicator that hands every call to another one. Tests derive
// from it to change one behaviour — count the reductions posted, drop the tags — and keep the
// rest of the real (MPI) communicator.
#pragma once

#include <memory>
#include <span>
#include <utility>

#include "distributed/communicator.h"

namespace megatron::test {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(Tensor& t, ReduceOp op) override { inner_->all_reduce(t, op); }
  void all_gather(const Tensor& in, Tensor& out) override { inner_->all_gather(in, out); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    inner_->reduce_scatter(in, out, op);
  }
  void broadcast(Tensor& t, int root) override { inner_->broadcast(t, root); }
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                    std::span<const int64_t> recv_rows) override {
    inner_->all_to_all_v(in, send_rows, out, recv_rows);
  }
  void send(const Tensor& t, int dst, int tag) override { inner_->send(t, dst, tag); }
  void recv(Tensor& t, int src, int tag) override { inner_->recv(t, src, tag); }
  std::unique_ptr<CommRequest> isend(const Tensor& t, int dst, int tag) override {
    return inner_->isend(t, dst, tag);
  }
  std::unique_ptr<CommRequest> irecv(Tensor& t, int src, int tag) override {
    return inner_->irecv(t, src, tag);
  }
  std::unique_ptr<CommRequest> iall_reduce(Tensor& t, ReduceOp op) override {
    return inner_->iall_reduce(t, op);
  }
  std::unique_ptr<CommRequest> ireduce_scatter(Tensor& t, std::span<const int64_t> counts,
                                               ReduceOp op) override {
    return inner_->ireduce_scatter(t, counts, op);
  }
  void barrier() override { inner_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return inner_->split(color, key);
  }

 private:
  std::shared_ptr<Communicator> inner_;
};

}  // namespace megatron::test
