#include "pipeline/pipeline_executor.h"

#include <chrono>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"

namespace megatron {

namespace {

enum Direction { kActivation = 0, kGradient = 1 };

// pipeline_receive_wait_seconds(): only the thread that trains runs schedules.
double receive_wait_seconds = 0;

// MPI guarantees tags up to 32767; a tag repeats only 16384/chunks micro-batches apart, and
// messages with one tag between two ranks arrive in order, so a repeat cannot mismatch.
int message_tag(Direction direction, int receiving_chunk, int64_t micro_batch, int chunks) {
  return int((2 * (micro_batch * chunks + receiving_chunk) + direction) % 32768);
}

class Exchange {
 public:
  Exchange(Communicator* pp, int chunks, const StageActivation& activation)
      : pp_(pp),
        p_(pp ? pp->size() : 1),
        r_(pp ? pp->rank() : 0),
        chunks_(chunks),
        activation_(activation) {}

  bool first_virtual_stage(int chunk) const { return chunk == 0 && r_ == 0; }
  bool last_virtual_stage(int chunk) const { return chunk == chunks_ - 1 && r_ == p_ - 1; }

  // The input of (chunk, m) from the previous virtual stage.
  Tensor receive_activation(int chunk, int64_t m) {
    return receive((r_ + p_ - 1) % p_, message_tag(kActivation, chunk, m, chunks_));
  }
  // The output gradient of (chunk, m) from the next virtual stage.
  Tensor receive_gradient(int chunk, int64_t m) {
    return receive((r_ + 1) % p_, message_tag(kGradient, chunk, m, chunks_));
  }
  // (chunk, m)'s output to the next virtual stage: chunk + 1 of rank 0 after the last rank.
  void send_activation(int chunk, int64_t m, const Tensor& output) {
    const int to_chunk = r_ == p_ - 1 ? chunk + 1 : chunk;
    activation_sends_.emplace(
        std::make_pair(chunk, m),
        send(output, (r_ + 1) % p_, message_tag(kActivation, to_chunk, m, chunks_), "output"));
  }
  // (chunk, m)'s input gradient to the previous virtual stage.
  void send_gradient(int chunk, int64_t m, const Tensor& grad_input) {
    const int to_chunk = r_ == 0 ? chunk - 1 : chunk;
    gradient_sends_.push_back(send(grad_input, (r_ + p_ - 1) % p_,
                                   message_tag(kGradient, to_chunk, m, chunks_), "input gradient"));
  }
  // Once (chunk, m)'s output gradient has arrived, the next stage has received its output:
  // that send is complete, and its copy can go.
  void release_activation_send(int chunk, int64_t m) {
    auto it = activation_sends_.find({chunk, m});
    if (it == activation_sends_.end()) return;
    it->second.request->wait();
    activation_sends_.erase(it);
  }

  void wait_for_sends() {
    for (auto& [key, pending] : activation_sends_) pending.request->wait();
    for (auto& pending : gradient_sends_) pending.request->wait();
    activation_sends_.clear();
    gradient_sends_.clear();
  }

 private:
  Tensor receive(int src, int tag) {
    MT_CHECK(pp_ != nullptr, "a pipeline stage expects a message but there is one stage");
    Tensor t = Tensor::empty(activation_.shape, activation_.dtype, activation_.device);
    const auto start = std::chrono::steady_clock::now();
    pp_->irecv(t, src, tag)->wait();
    receive_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return t;
  }
  // A send in flight and the copy it reads, alive until the request completes.
  struct PendingSend {
    Tensor buffer;
    std::unique_ptr<CommRequest> request;
  };

  PendingSend send(const Tensor& t, int dst, int tag, const char* what) {
    MT_CHECK(pp_ != nullptr, "a pipeline stage sends but there is one stage");
    MT_CHECK(t.shape() == activation_.shape && t.dtype() == activation_.dtype,
             "a pipeline stage's ", what, " is ", t.describe(), ", expected ",
             dtype_name(activation_.dtype), shape_str(activation_.shape));
    PendingSend pending{Tensor::empty(t.shape(), t.dtype(), t.device()), nullptr};
    pending.buffer.copy_from(t);
    pending.request = pp_->isend(pending.buffer, dst, tag);
    return pending;
  }

  Communicator* pp_;
  int p_, r_, chunks_;
  StageActivation activation_;
  std::map<std::pair<int, int64_t>, PendingSend> activation_sends_;  // by (chunk, micro-batch)
  std::vector<PendingSend> gradient_sends_;
};

}  // namespace

void run_pipeline_schedule(const std::vector<PipelineOp>& ops, Communicator* pp, int chunks,
                           const StageActivation& activation, const PipelineStageFunctions& fns) {
  MT_CHECK(chunks >= 1, "model chunks per pipeline rank must be >= 1, got ", chunks);
  MT_CHECK(fns.forward, "run_pipeline_schedule: no forward function");
  Exchange exchange(pp, chunks, activation);
  for (const PipelineOp& op : ops) {
    MT_CHECK(op.chunk >= 0 && op.chunk < chunks, "schedule operation ", op_name(op),
             " names a chunk outside [0, ", chunks, ")");
    if (op.kind == PipelineOp::kForward) {
      const Tensor input = exchange.first_virtual_stage(op.chunk)
                               ? Tensor()
                               : exchange.receive_activation(op.chunk, op.micro_batch);
      const Tensor output = fns.forward(op.chunk, op.micro_batch, input);
      if (!exchange.last_virtual_stage(op.chunk))
        exchange.send_activation(op.chunk, op.micro_batch, output);
    } else {
      MT_CHECK(fns.backward,
               "run_pipeline_schedule: a backward operation but no backward function");
      const Tensor grad_output = exchange.last_virtual_stage(op.chunk)
                                     ? Tensor()
                                     : exchange.receive_gradient(op.chunk, op.micro_batch);
      exchange.release_activation_send(op.chunk, op.micro_batch);
      const Tensor grad_input = fns.backward(op.chunk, op.micro_batch, grad_output);
      if (!exchange.first_virtual_stage(op.chunk))
        exchange.send_gradient(op.chunk, op.micro_batch, grad_input);
    }
  }
  exchange.wait_for_sends();
}

double pipeline_receive_wait_seconds() {
  return receive_wait_seconds;
}

}  // namespace megatron
