#include "plan/step_time.h"

#include <algorithm>
#include <cmath>

#include "plan/parameter_count.h"

namespace megatron::plan {

namespace {

// Bytes per gradient element in the data-parallel reduction.
double grad_reduce_bytes(const Layout& l, Implementation impl) {
  if (impl == Implementation::kMegatronLm2019) return l.precision == Precision::kFp32 ? 4 : 2;
  return 4;  // f32 gradients (megatron-cpp), fp32 main gradients (Megatron-LM)
}

// Bytes the optimizer step moves per local parameter (plan/memory_estimate.h's state), its
// state sharded over `group` ranks with the distributed optimizer (d·c, or the routed experts'
// expert-data-parallel group).
double optimizer_bytes_per_parameter(const Layout& l, Implementation impl, int group) {
  const double d = l.distributed_optimizer ? double(group) : 1.0;
  switch (impl) {
    case Implementation::kMegatronCpp:
      // zero gradients (w 4), norm (r 4), AdamW (r p g m v, w p m v = 28); bf16: refresh the
      // compute copy (r 4, w 2); fp16: overflow check (r 4), master → f16 → store (r 4 w 2 r 2 w
      // 4). The distributed optimizer (optim/distributed_optimizer.cpp) runs the norm and AdamW
      // on its shard, and pads the values into a zeroed copy for its all-gather (w 4, r 4 w 4)
      // and copies the gathered values back (r 4 w 4); the gradients are reduce-scattered in
      // place, bucket by bucket.
      if (l.distributed_optimizer)
        return 4 + 32 / d + (d > 1 ? 20 : 0) + (l.precision == Precision::kBf16 ? 6 : 0);
      return 36 + (l.precision == Precision::kBf16 ? 6 : 0) +
             (l.precision == Precision::kFp16 ? 16 : 0);
    case Implementation::kMegatronLm:
      // zero main grads (w 4), norm (r 4), Adam over the (sharded) fp32 state (28), write the
      // 16-bit parameters (2).
      return 8 + 28 / d + (l.precision == Precision::kFp32 ? 0 : 2);
    case Implementation::kMegatronLm2019:
      break;  // priced loop by loop: optimizer_seconds
  }
  return 0;
}

// One loop of the 2019 code's step over this rank's parameter tensors.
struct TensorLoop {
  double ops;    // framework ops the host issues per tensor
  double waits;  // results it reads back per tensor, waiting for the device each time
  double bytes;  // device memory traffic per parameter
};

// The fp16 optimizer of that code (fp16/fp16.py, an apex-era FP16_Optimizer around apex's
// FusedAdam), after the backward.
constexpr TensorLoop k2019Optimizer[] = {
    {0, 0, 6},   // zero the fp32 and fp16 gradients: issued before the backward, the host's
                 // ops hide behind the forward's queued kernels
    {3, 1, 10},  // overflow check: float(g.float().sum())
    {2, 0, 6},   // fp32 master gradient: allocate, copy_ from the fp16 one
    {1, 0, 8},   // unscale: mul_
    {2, 1, 4},   // gradient norm: g.norm().item() (mpu.clip_grad_norm; its slowest rank,
                 // model-parallel rank 0, takes the norm of every tensor)
    {2, 0, 28},  // FusedAdam: its Python and one kernel per tensor
    {1, 0, 6},   // fp32 → fp16 parameters: copy_
};
// Its own data-parallel reduction (model/distributed.py): the fp16 gradients are flattened
// into one buffer, scaled by 1/d, all-reduced, and copied back, in Python after the backward.
constexpr TensorLoop k2019LocalDataParallel[] = {
    {2, 0, 4},  // flatten: contiguous(), view(-1) per tensor, one cat
    {0, 0, 4},  // scale the flat buffer: one op
    {3, 0, 4},  // unflatten (narrow, view_as) and copy_ back, after the all-reduce's synchronize
};
// PyTorch's DDP (--overlap-grad-reduce here) makes the same copies from C++, into its buckets
// during the backward and back after it: their bytes remain, the host's issuing hides.
constexpr TensorLoop k2019TorchDataParallel[] = {{0, 0, 12}};

// A loop that waits per tensor runs host and device in turn; one that only queues kernels runs
// them side by side, as fast as the slower of the two.
template <size_t N>
double tensor_loops_seconds(const TensorLoop (&loops)[N], double tensors, double parameters,
                            const Machine& m) {
  double seconds = 0;
  for (const TensorLoop& loop : loops) {
    const double host = tensors * (loop.ops * m.host_op + loop.waits * m.host_sync);
    const double device = parameters * loop.bytes / (m.memory_bandwidth * m.memory_efficiency);
    seconds += loop.waits > 0 ? host + device : std::max(host, device);
  }
  return seconds;
}

// The optimizer step of the rank holding `local` parameters, `experts` of them the routed
// experts'; with the 2019 code also its DDP's gradient copies.
double optimizer_seconds(const ModelSpec& model, const Layout& l, const Machine& machine,
                         Implementation impl, double local, double experts) {
  if (impl == Implementation::kMegatronLm2019) {
    const double tensors = double(count_parameter_tensors(model, l).max_rank());
    double seconds = tensor_loops_seconds(k2019Optimizer, tensors, local, machine);
    if (l.data_parallel > 1)
      seconds += l.overlap_grad_reduce
                     ? tensor_loops_seconds(k2019TorchDataParallel, tensors, local, machine)
                     : tensor_loops_seconds(k2019LocalDataParallel, tensors, local, machine);
    return seconds;
  }
  return ((local - experts) * optimizer_bytes_per_parameter(l, impl, l.gradient_group()) +
          experts * optimizer_bytes_per_parameter(l, impl, l.expert_data_parallel())) /
             (machine.memory_bandwidth * machine.memory_efficiency) +
         4 * machine.kernel_overhead;  // zero, norm, update, cast: a few passes
}

// One bucket of the data-parallel gradient reduction: when its gradients are complete (seconds
// into the last micro-batch's backward) and how long its collective takes.
struct ReductionBucket {
  double ready = 0, seconds = 0;
};

// Seconds the reduction of `buckets` (in the order they are issued) adds after a backward of
// `window` seconds when each starts as soon as it is ready and the one before it is done (one
// collective at a time, as NCCL's stream and megatron-cpp's ring run them): the last buckets,
// which the backward completes only at its end, cannot hide; a reduction slower than the
// backward produces gradients falls behind and runs on past it. The overlapped part slows the
// compute by `slowdown` per second.
double exposed_reduction(const std::vector<ReductionBucket>& buckets, double window,
                         double slowdown) {
  double end = 0, hidden = 0;
  for (const ReductionBucket& b : buckets) {
    const double start = std::max(b.ready, end);
    end = start + b.seconds;
    hidden += std::max(0.0, std::min(end, window) - start);
  }
  return std::max(0.0, end - window) + slowdown * hidden;
}

}  // namespace

StepTime predict_step_time(const ModelSpec& model, const Layout& l, const Machine& machine,
                           Implementation impl) {
  StepTime r;
  r.microbatch = microbatch_costs(model, l, machine, impl);
  const MicrobatchCosts& c = r.microbatch;
  const int p = l.pipeline_parallel;
  const double v = l.virtual_stages;
  const double e = impl == Implementation::kMegatronCpp && l.precision == Precision::kFp16
                       ? 4.0
                       : double(activation_bytes(l.precision));

  // Pipeline send/recv: the stage boundary activation (split over TP: Megatron's
  // scatter-gather optimisation, or sequence parallelism; megatron-cpp sends the whole tensor
  // from every TP rank unless it is a sequence shard), forward and backward, per chunk.
  double p2p = 0;
  if (p > 1) {
    const GroupPlacement neighbours = place_group(
        2, l.tensor_parallel * l.context_parallel * l.data_parallel, machine.devices_per_node);
    const double split =
        impl == Implementation::kMegatronCpp && !l.sequence_parallel ? 1.0 : l.tensor_parallel;
    const double bytes =
        l.local_sequence(model.seq_length) * l.micro_batch * model.hidden_size * e / split;
    p2p = 2 * v * collective_seconds(machine, Collective::kSendRecv, bytes, neighbours);
  }

  // Per micro-batch time of the first, a middle and the last stage.
  auto comm_of = [](const std::vector<CommTerm>& terms, double& issued, double& exposed) {
    for (const CommTerm& t : terms) {
      issued += t.seconds;
      exposed += t.seconds - t.overlapped;
    }
  };
  struct Stage {
    ComputeTime fwd, bwd;
    double recompute = 0, comm = 0, exposed = 0, cp_comm = 0, cp_exposed = 0, ep_comm = 0;
    double total() const { return fwd.total() + bwd.total() + exposed + cp_exposed + ep_comm; }
  };
  // A stage of `n` layers (the pipeline split's: uneven splits weigh the stages differently).
  auto stage = [&](bool first, bool last, double n) {
    Stage s;
    const ComputeTime &f = c.layer_forward, &b = c.layer_backward, &rc = c.layer_recompute;
    s.fwd = {f.gemm * n, f.memory * n};
    s.bwd = {(b.gemm + rc.gemm) * n, (b.memory + rc.memory) * n};
    s.recompute = rc.total() * n;
    s.comm = c.layer_comm_seconds() * n;
    s.exposed = c.layer_comm_exposed() * n;
    s.cp_comm = c.layer_cp_seconds() * n;
    s.cp_exposed = c.layer_cp_exposed() * n;
    s.ep_comm = c.layer_ep_seconds() * n;
    if (first) {
      s.fwd += c.embedding_forward;
      s.bwd += c.embedding_backward;
      comm_of(c.embedding_comm, s.comm, s.exposed);
    }
    if (last) {
      s.fwd += c.output_forward;
      s.bwd += c.output_backward;
      comm_of(c.output_comm, s.comm, s.exposed);
    }
    s.exposed += p2p;
    return s;
  };
  std::vector<Stage> stages;
  const int L = model.num_layers;
  if (p == 1) {
    stages.push_back(stage(true, true, L));
  } else {
    stages.push_back(stage(true, false, l.rank_layers(L, 0)));
    int middle = 0;  // the most loaded rank between the first and the last
    for (int rank = 1; rank < p - 1; ++rank) middle = std::max(middle, l.rank_layers(L, rank));
    if (p > 2) stages.push_back(stage(false, false, middle));
    stages.push_back(stage(false, true, l.rank_layers(L, p - 1)));
  }
  const Stage* slowest = &stages[0];
  for (const Stage& s : stages)
    if (s.total() > slowest->total()) slowest = &s;
  // Mean over the p stages (the middle one stands for p − 2 of them).
  const double mean = p == 1 ? stages[0].total()
                             : (stages.front().total() + stages.back().total() +
                                (p > 2 ? double(p - 2) * stages[1].total() : 0.0)) /
                                   double(p);
  r.forward = slowest->fwd.total();
  r.backward = slowest->bwd.total();
  r.recompute = slowest->recompute;
  r.gemm = slowest->fwd.gemm + slowest->bwd.gemm;
  r.memory_bound = slowest->fwd.memory + slowest->bwd.memory;
  r.tp_comm = slowest->comm;
  r.tp_exposed = slowest->exposed - p2p;
  r.cp_comm = slowest->cp_comm;
  r.cp_exposed = slowest->cp_exposed;
  r.ep_comm = slowest->ep_comm;
  r.pp_p2p = p2p;
  r.stage = slowest->total();
  r.micro_batches = l.num_micro_batches();
  r.bubble = double(p - 1) / v * mean;
  r.pipeline = double(r.micro_batches) * r.stage + r.bubble;

  // Data-parallel gradient reduction of the most loaded rank.
  const ParameterCounts params = count_parameters(model, l);
  const double local = params.max_rank();
  // Gradients are reduced over the d·c ranks of the DP and CP groups (consecutive after TP).
  const GroupPlacement dp_group =
      place_group(l.gradient_group(), l.tensor_parallel, machine.devices_per_node);
  // The routed experts' gradients, on an expert grid of its own (EP > 1 or ETP ≠ TP), are
  // reduced over the ed ranks holding the same experts (stride et·e in the expert grid) instead:
  // their own buckets, ready at the layers' pace.
  const double experts = l.expert_grid_folded() ? 0.0 : params.stage_expert_rank;
  const GroupPlacement edp_group = place_group(
      l.expert_data_parallel(), l.expert_tp() * l.expert_parallel, machine.devices_per_node);
  // Gradients go in buckets, each its own collective (latency paid per bucket): megatron-cpp
  // 2^22 elements (--ddp-bucket-size's default, optim/grad_buckets.h), Megatron-LM
  // max(40M, 1M·d) elements, the 2019 code one flat buffer after the backward or PyTorch DDP's
  // 25 MB buckets when overlapped.
  double bucket_elements = std::max(40e6, 1e6 * l.gradient_group());
  if (impl == Implementation::kMegatronCpp) bucket_elements = double(int64_t(1) << 22);
  if (impl == Implementation::kMegatronLm2019)
    bucket_elements = l.overlap_grad_reduce ? 25e6 / grad_reduce_bytes(l, impl) : local;
  const double buckets = std::ceil(local / bucket_elements);
  auto bucketed = [&](Collective op, double bytes, double calls) {
    return calls * collective_seconds(machine, op, bytes / calls, dp_group);
  };
  // The buckets in the order the last micro-batch's backward completes them (Megatron-LM's and
  // PyTorch's DDP register the parameters in reverse, megatron-cpp announces each layer's):
  // the layers' gradients at an even pace over its backward, then, on a rank that holds the
  // embeddings (the first stage), theirs only at its very end — the embedding lookup's backward
  // is the last, and a tied word embedding also gathers the output layer's gradient. A
  // parameter larger than a bucket is a bucket of its own (megatron-cpp cuts it into bucket-
  // sized pieces).
  const Collective reduce_op =
      l.distributed_optimizer ? Collective::kReduceScatter : Collective::kAllReduce;
  // (The 2019 code's own DDP reduces one flat buffer after the backward.)
  const bool holds_embeddings = p == 1 || params.first_stage_rank >= params.last_stage_rank;
  const bool one_buffer = impl == Implementation::kMegatronLm2019 && !l.overlap_grad_reduce;
  const double late = holds_embeddings && !one_buffer
                          ? params.word_embedding / l.tensor_parallel + params.other_embedding
                          : 0.0;
  const double backward_window = slowest->bwd.total();
  std::vector<ReductionBucket> timeline;
  auto add_buckets = [&](double elements, double count, double first_ready, double last_ready,
                         const GroupPlacement& group) {
    for (double i = 1; i <= count; ++i)
      timeline.push_back(
          {first_ready + (last_ready - first_ready) * i / count,
           collective_seconds(machine, reduce_op, elements / count * grad_reduce_bytes(l, impl),
                              group)});
  };
  const double layers = local - late - experts;
  add_buckets(layers, std::ceil(layers / bucket_elements), 0.0, backward_window, dp_group);
  if (experts > 0)
    add_buckets(experts, std::ceil(experts / bucket_elements), 0.0, backward_window, edp_group);
  if (late > 0)
    add_buckets(late,
                impl == Implementation::kMegatronCpp ? std::ceil(late / bucket_elements) : 1.0,
                backward_window, backward_window, dp_group);
  // Issued in the order the backward completes them.
  std::stable_sort(
      timeline.begin(), timeline.end(),
      [](const ReductionBucket& a, const ReductionBucket& b) { return a.ready < b.ready; });
  double reduce = 0, gather = 0;
  for (const ReductionBucket& b : timeline) reduce += b.seconds;
  if (l.distributed_optimizer) {
    // Megatron-LM gathers the 16-bit parameters in buckets, megatron-cpp the f32 values in one
    // call.
    const double value_bytes =
        impl == Implementation::kMegatronCpp || l.precision == Precision::kFp32 ? 4.0 : 2.0;
    gather = bucketed(Collective::kAllGather, (local - experts) * value_bytes,
                      impl == Implementation::kMegatronCpp ? 1.0 : buckets);
    if (experts > 0)
      gather +=
          collective_seconds(machine, Collective::kAllGather, experts * value_bytes, edp_group);
  }
  r.dp_comm = reduce + gather;
  // The parameter all-gather overlapped with the first forward: all but its last bucket hidden.
  auto exposed_part = [&](double comm, double window, Collective op, double bucket_bytes) {
    const double tail = std::min(comm, collective_seconds(machine, op, bucket_bytes, dp_group));
    const double hidden = std::min(comm - tail, window);
    return comm - hidden + machine.overlap_slowdown * hidden;
  };
  // Without overlap the reduction runs after the backward.
  double dp_exposed = l.overlap_grad_reduce
                          ? exposed_reduction(timeline, backward_window, machine.overlap_slowdown)
                          : reduce;
  if (gather > 0) {
    dp_exposed += l.overlap_param_gather
                      ? exposed_part(gather, slowest->fwd.total(), Collective::kAllGather,
                                     local * 2.0 / buckets)
                      : gather;
  }
  r.dp_exposed = dp_exposed;

  // Tied word embeddings on the first and last stage: their gradients are summed.
  if (p > 1 && !model.arch.untie_embeddings_and_output_weights) {
    const GroupPlacement ends =
        place_group(2, (p - 1) * l.tensor_parallel * l.context_parallel * l.data_parallel,
                    machine.devices_per_node);
    r.embedding_sync = collective_seconds(machine, Collective::kAllReduce,
                                          params.word_embedding / l.tensor_parallel * 4.0, ends);
  }
  // Sequence parallelism: the norms and row-parallel biases every TP rank holds whole see only
  // its sequence shard, so their gradients are partial sums, all-reduced over TP once per step
  // after the backward, in one packed buffer (megatron-cpp's
  // reduce_sequence_parallel_gradients, Megatron-LM's _allreduce_layernorm_grads over the fp32
  // main grads), on the critical path: the rank that holds the most of them (plan/
  // parameter_count.h: its layers' and the last stage's head, or the first stage's embedding
  // LayerNorm in a post-LN BERT).
  if (l.sequence_parallel) {
    r.sequence_parallel_sync = collective_seconds(
        machine, Collective::kAllReduce,
        sequence_parallel_gradients(model, l, impl).max_rank() * grad_reduce_bytes(l, impl),
        place_group(l.tensor_parallel, 1, machine.devices_per_node));
  }
  r.optimizer = optimizer_seconds(model, l, machine, impl, local, experts);
  r.step = r.pipeline + r.dp_exposed + r.embedding_sync + r.sequence_parallel_sync + r.optimizer;

  r.flops = iteration_flops(model, l, impl);
  const double devices = l.world_size();
  r.tokens_per_second = double(l.effective_global_batch()) * model.seq_length / r.step;
  r.model_tflops_per_device = r.flops.model / r.step / devices / 1e12;
  r.hardware_tflops_per_device = r.flops.hardware / r.step / devices / 1e12;
  r.mfu = r.flops.model / (r.step * devices * machine.compute(gemm_precision(l, impl)).peak_flops);
  return r;
}

}  // namespace megatron::plan
