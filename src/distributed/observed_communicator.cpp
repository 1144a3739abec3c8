#include "distributed/observed_communicator.h"

#include "core/error.h"

namespace megatron {

namespace {

// Enters on construction, leaves on destruction (also when the operation throws).
class Observed {
 public:
  Observed(CommunicationObserver& observer, const char* operation, int group_rank, int group_size)
      : observer_(observer) {
    observer_.enter(operation, group_rank, group_size);
  }
  ~Observed() { observer_.leave(); }
  Observed(const Observed&) = delete;
  Observed& operator=(const Observed&) = delete;

 private:
  CommunicationObserver& observer_;
};

// A request whose wait() and progress() are observed (posting is observed by the caller).
class ObservedRequest final : public CommRequest {
 public:
  ObservedRequest(std::unique_ptr<CommRequest> inner,
                  std::shared_ptr<CommunicationObserver> observer, const char* wait_name,
                  int group_rank, int group_size)
      : inner_(std::move(inner)),
        observer_(std::move(observer)),
        wait_name_(wait_name),
        group_rank_(group_rank),
        group_size_(group_size) {}
  void wait() override {
    Observed observed(*observer_, wait_name_, group_rank_, group_size_);
    inner_->wait();
  }
  void progress() override {
    Observed observed(*observer_, "progress", group_rank_, group_size_);
    inner_->progress();
  }

 private:
  std::unique_ptr<CommRequest> inner_;
  std::shared_ptr<CommunicationObserver> observer_;
  const char* wait_name_;
  int group_rank_, group_size_;
};

}  // namespace

ObservedCommunicator::ObservedCommunicator(std::shared_ptr<Communicator> inner,
                                           std::shared_ptr<CommunicationObserver> observer)
    : inner_(std::move(inner)), observer_(std::move(observer)) {
  MT_CHECK(inner_ != nullptr && observer_ != nullptr,
           "ObservedCommunicator needs a communicator and an observer");
}

void ObservedCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  Observed observed(*observer_, "all_reduce", rank(), size());
  inner_->all_reduce(t, op);
}

void ObservedCommunicator::all_gather(const Tensor& in, Tensor& out) {
  Observed observed(*observer_, "all_gather", rank(), size());
  inner_->all_gather(in, out);
}

void ObservedCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  Observed observed(*observer_, "reduce_scatter", rank(), size());
  inner_->reduce_scatter(in, out, op);
}

void ObservedCommunicator::broadcast(Tensor& t, int root) {
  Observed observed(*observer_, "broadcast", rank(), size());
  inner_->broadcast(t, root);
}

void ObservedCommunicator::all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows,
                                        Tensor& out, std::span<const int64_t> recv_rows) {
  Observed observed(*observer_, "all_to_all_v", rank(), size());
  inner_->all_to_all_v(in, send_rows, out, recv_rows);
}

void ObservedCommunicator::send(const Tensor& t, int dst, int tag) {
  Observed observed(*observer_, "send", rank(), size());
  inner_->send(t, dst, tag);
}

void ObservedCommunicator::recv(Tensor& t, int src, int tag) {
  Observed observed(*observer_, "recv", rank(), size());
  inner_->recv(t, src, tag);
}

std::unique_ptr<CommRequest> ObservedCommunicator::isend(const Tensor& t, int dst, int tag) {
  Observed observed(*observer_, "isend", rank(), size());
  return std::make_unique<ObservedRequest>(inner_->isend(t, dst, tag), observer_, "wait(isend)",
                                           rank(), size());
}

std::unique_ptr<CommRequest> ObservedCommunicator::irecv(Tensor& t, int src, int tag) {
  Observed observed(*observer_, "irecv", rank(), size());
  return std::make_unique<ObservedRequest>(inner_->irecv(t, src, tag), observer_, "wait(irecv)",
                                           rank(), size());
}

std::unique_ptr<CommRequest> ObservedCommunicator::iall_reduce(Tensor& t, ReduceOp op) {
  Observed observed(*observer_, "iall_reduce", rank(), size());
  return std::make_unique<ObservedRequest>(inner_->iall_reduce(t, op), observer_,
                                           "wait(iall_reduce)", rank(), size());
}

std::unique_ptr<CommRequest> ObservedCommunicator::ireduce_scatter(Tensor& t,
                                                                   std::span<const int64_t> counts,
                                                                   ReduceOp op) {
  Observed observed(*observer_, "ireduce_scatter", rank(), size());
  return std::make_unique<ObservedRequest>(inner_->ireduce_scatter(t, counts, op), observer_,
                                           "wait(ireduce_scatter)", rank(), size());
}

void ObservedCommunicator::barrier() {
  Observed observed(*observer_, "barrier", rank(), size());
  inner_->barrier();
}

std::unique_ptr<Communicator> ObservedCommunicator::split(int color, int key) {
  Observed observed(*observer_, "split", rank(), size());
  return std::make_unique<ObservedCommunicator>(
      std::shared_ptr<Communicator>(inner_->split(color, key)), observer_);
}

}  // namespace megatron
