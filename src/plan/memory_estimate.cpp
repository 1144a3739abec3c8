#include "plan/memory_estimate.h"

namespace megatron::plan {

BytesPerParameter bytes_per_parameter(const Layout& l, Implementation impl) {
  const double dp_shard = l.distributed_optimizer ? double(l.data_parallel) : 1.0;
  BytesPerParameter b;
  switch (impl) {
    case Implementation::kMegatronCpp:
      b.weights = l.precision == Precision::kBf16 ? 6 : 4;
      b.gradients = 4;
      b.optimizer = l.precision == Precision::kFp16 ? 14 : 8;
      break;
    case Implementation::kMegatronLm:
      if (l.precision == Precision::kFp32) {
        b = {4, 4, 8 / dp_shard};
      } else {
        b = {2, 4, 12 / dp_shard};
      }
      break;
    case Implementation::kMegatronLm2019:
      b = l.precision == Precision::kFp32 ? BytesPerParameter{4, 4, 8}
                                          : BytesPerParameter{2, 2, 16};
      break;
  }
  return b;
}

MemoryEstimate estimate_memory(const ModelSpec& model, const Layout& layout, const Machine& machine,
                               Implementation impl) {
  MemoryEstimate est;
  est.parameters = count_parameters(model, layout);
  est.activations = activation_memory(model, layout, impl);
  est.bytes_per_parameter = bytes_per_parameter(layout, impl);
  auto fill = [&](RankMemory& r, double params, double activations) {
    r.parameters = params;
    r.weights = params * est.bytes_per_parameter.weights;
    r.gradients = params * est.bytes_per_parameter.gradients;
    r.optimizer = params * est.bytes_per_parameter.optimizer;
    r.activations = activations;
    r.workspace = est.activations.workspace;
    r.reserved = machine.reserved_bytes;
  };
  fill(est.first_stage, est.parameters.first_stage_rank, est.activations.first_stage);
  fill(est.last_stage, est.parameters.last_stage_rank, est.activations.last_stage);
  return est;
}

}  // namespace megatron::plan
