#include "distributed/timing_communicator.h"

namespace megatron {

TimingCommunicator::TimingCommunicator(std::shared_ptr<Communicator> inner,
                                       std::shared_ptr<Timer> clock)
    : inner_(std::move(inner)), clock_(std::move(clock)) {
  MT_CHECK(inner_ != nullptr, "TimingCommunicator needs a communicator to wrap");
}

void TimingCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  ScopedTimer timed(*clock_);
  inner_->all_reduce(t, op);
}

void TimingCommunicator::all_gather(const Tensor& in, Tensor& out) {
  ScopedTimer timed(*clock_);
  inner_->all_gather(in, out);
}

void TimingCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  ScopedTimer timed(*clock_);
  inner_->reduce_scatter(in, out, op);
}

void TimingCommunicator::broadcast(Tensor& t, int root) {
  ScopedTimer timed(*clock_);
  inner_->broadcast(t, root);
}

void TimingCommunicator::all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows,
                                      Tensor& out, std::span<const int64_t> recv_rows) {
  ScopedTimer timed(*clock_);
  inner_->all_to_all_v(in, send_rows, out, recv_rows);
}

void TimingCommunicator::send(const Tensor& t, int dst, int tag) {
  ScopedTimer timed(*clock_);
  inner_->send(t, dst, tag);
}

void TimingCommunicator::recv(Tensor& t, int src, int tag) {
  ScopedTimer timed(*clock_);
  inner_->recv(t, src, tag);
}

namespace {
// A request whose wait() and progress() are timed on the communicator's clock (posting is
// timed by the caller).
class TimedRequest final : public CommRequest {
 public:
  TimedRequest(std::unique_ptr<CommRequest> inner, std::shared_ptr<Timer> clock)
      : inner_(std::move(inner)), clock_(std::move(clock)) {}
  void wait() override {
    ScopedTimer timed(*clock_);
    inner_->wait();
  }
  void progress() override {
    ScopedTimer timed(*clock_);
    inner_->progress();
  }

 private:
  std::unique_ptr<CommRequest> inner_;
  std::shared_ptr<Timer> clock_;
};
}  // namespace

std::unique_ptr<CommRequest> TimingCommunicator::isend(const Tensor& t, int dst, int tag) {
  ScopedTimer timed(*clock_);
  return std::make_unique<TimedRequest>(inner_->isend(t, dst, tag), clock_);
}

std::unique_ptr<CommRequest> TimingCommunicator::irecv(Tensor& t, int src, int tag) {
  ScopedTimer timed(*clock_);
  return std::make_unique<TimedRequest>(inner_->irecv(t, src, tag), clock_);
}

std::unique_ptr<CommRequest> TimingCommunicator::iall_reduce(Tensor& t, ReduceOp op) {
  ScopedTimer timed(*clock_);
  return std::make_unique<TimedRequest>(inner_->iall_reduce(t, op), clock_);
}

std::unique_ptr<CommRequest> TimingCommunicator::ireduce_scatter(Tensor& t,
                                                                 std::span<const int64_t> counts,
                                                                 ReduceOp op) {
  ScopedTimer timed(*clock_);
  return std::make_unique<TimedRequest>(inner_->ireduce_scatter(t, counts, op), clock_);
}

void TimingCommunicator::barrier() {
  ScopedTimer timed(*clock_);
  inner_->barrier();
}

std::unique_ptr<Communicator> TimingCommunicator::split(int color, int key) {
  return std::make_unique<TimingCommunicator>(
      std::shared_ptr<Communicator>(inner_->split(color, key)), clock_);
}

}  // namespace megatron
