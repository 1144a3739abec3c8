// Communicator's non-virtual helpers, shared by every implementation.
#include "distributed/communicator.h"

namespace megatron {

double Communicator::all_reduce_scalar(double value, ReduceOp op) {
  // A one-element f64 tensor over the caller's stack value: no allocation per call.
  Tensor t = Tensor::from_blob(&value, {1}, DType::F64);
  all_reduce(t, op);
  return value;
}

void Communicator::sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  std::unique_ptr<CommRequest> received, sent;
  if (in.defined()) received = irecv(in, src, tag);
  if (out.defined()) sent = isend(out, dst, tag);
  if (received) received->wait();
  if (sent) sent->wait();
}

}  // namespace megatron
