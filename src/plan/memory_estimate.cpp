#include "plan/memory_estimate.h"

#include <algorithm>

namespace megatron::plan {

BytesPerParameter bytes_per_parameter(const Layout& l, Implementation impl) {
  BytesPerParameter b;
  switch (impl) {
    case Implementation::kMegatronCpp:
      // --bf16: bf16 parameters and a separate fp32 master in the optimizer (optim/optimizer.h);
      // the f32 copies of the few parameters read in f32 (LayerNorm, BERT's pooler and heads:
      // parallel/compute_weights.h) are not counted. --fp16: the f16-rounded weights in f32.
      b.weights = l.precision == Precision::kBf16 ? 2 : 4;
      b.gradients = 4;
      // The distributed optimizer keeps the moments and, with 16-bit weights, the fp32 master
      // (and fp16's f16 scratch) of its shard only; its gradients are reduced in place
      // (optim/distributed_optimizer.h).
      switch (l.precision) {
        case Precision::kFp32:
          b.optimizer = 8;
          break;
        case Precision::kBf16:
          b.optimizer = 8 + 4;
          break;
        case Precision::kFp16:
          b.optimizer = 8 + 4 + 2;
          break;
      }
      break;
    case Implementation::kMegatronLm:
      b = l.precision == Precision::kFp32 ? BytesPerParameter{4, 4, 8}
                                          : BytesPerParameter{2, 4, 12};
      break;
    case Implementation::kMegatronLm2019:
      return l.precision == Precision::kFp32 ? BytesPerParameter{4, 4, 8, 8}
                                             : BytesPerParameter{2, 2, 16, 16};
  }
  // The distributed optimizer shards the dense state over the gradient group (d·c ranks) and
  // the routed experts' over the expert-data-parallel group (ed = world / (et·e·p)), as
  // Megatron-Core's expert-data-parallel distributed optimizer and megatron-cpp's
  // (optim/distributed_optimizer.h: two shards per rank) do.
  b.expert_optimizer = b.optimizer;
  if (l.distributed_optimizer) {
    b.optimizer /= double(l.gradient_group());
    b.expert_optimizer /= double(l.expert_data_parallel());
  }
  return b;
}

MemoryEstimate estimate_memory(const ModelSpec& model, const Layout& layout, const Machine& machine,
                               Implementation impl) {
  MemoryEstimate est;
  est.parameters = count_parameters(model, layout);
  est.activations = activation_memory(model, layout, impl);
  est.bytes_per_parameter = bytes_per_parameter(layout, impl);
  const double experts = est.parameters.stage_expert_rank;
  auto fill = [&](RankMemory& r, double params, double activations) {
    r.parameters = params;
    r.expert_parameters = experts;
    r.weights = params * est.bytes_per_parameter.weights;
    r.gradients = params * est.bytes_per_parameter.gradients;
    r.optimizer = (params - experts) * est.bytes_per_parameter.optimizer +
                  experts * est.bytes_per_parameter.expert_optimizer;
    r.activations = activations;
    r.workspace = est.activations.workspace;
    r.reserved = machine.reserved_bytes;
    // megatron-cpp's step, after the backward, on top of the arenas, the largest of:
    //   the DP reduction of the 2^22-element gradient buckets (optim/grad_buckets.h), a ring
    //   (distributed/ring_reduction.h) whose receive buffer holds the largest segment a rank
    //   receives, for each of the at most 2 buckets in flight (kHostBucketsInFlight): an
    //   all-reduce's segments are a bucket's 1/d; the distributed optimizer's shards are
    //   contiguous ranges of the whole buffer, so a bucket is mostly one rank's segment, which
    //   the ring carries whole (measured: bench/plan_memory.sh);
    //   the all-reduce of the tied word embedding's gradient between the first and last stage:
    //   half of it, the part of a message-sized temporary that a 2-member group's large-message
    //   all-reduce fills (measured: the PP 2 run of bench/plan_memory.sh).
    // (The distributed optimizer's all-gather of the values adds nothing: it writes in place
    // into the store's padded value buffer, optim/distributed_optimizer.h.)
    if (impl == Implementation::kMegatronCpp) {
      const double bucket_elements = double(int64_t(1) << 22);
      const double in_flight = params > bucket_elements ? 2 : 1;
      const double d = layout.gradient_group();  // d·c ranks reduce the gradients
      const double segment =
          std::min(params, bucket_elements) / (layout.distributed_optimizer ? 1 : d);
      if (d > 1) r.step_buffers = in_flight * 4 * segment;
      if (layout.pipeline_parallel > 1 && !model.arch.untie_embeddings_and_output_weights)
        r.step_buffers =
            std::max(r.step_buffers, 2 * est.parameters.word_embedding / layout.tensor_parallel);
    }
  };
  fill(est.first_stage, est.parameters.first_stage_rank, est.activations.first_stage);
  fill(est.last_stage, est.parameters.last_stage_rank, est.activations.last_stage);
  return est;
}

}  // namespace megatron::plan
