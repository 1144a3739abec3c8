// Parameters that know how they are split across the tensor-parallel group.
//
// Every parameter is registered once with its logical name, its *full* (unsplit) shape, the
// dimension it is partitioned along (or replicated) and whether it gets weight decay. That
// record is the single source of truth for init, gradient norms (replicated parameters are
// counted once), checkpoint save/load, resharding and HF import/export.
//
// Values and gradients live in two flat buffers (one data-parallel all-reduce, one fused
// optimizer pass, one write per checkpoint shard); each Parameter's `value` and `grad` are
// views into them, valid after ParameterStore::allocate(). Gradients are f32. Values are f32,
// or bf16 when the trainer keeps the fp32 master weights in the optimizer instead (--bf16, as
// Megatron's bf16 parameters: optim/optimizer.h), so that the distributed optimizer can shard
// them. Both buffers live on the store's device (the CPU, or the GPU this rank drives); the
// layers that compute with the store take their device from it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "parallel/flat_range.h"
#include "parallel/grad_ready_listener.h"

namespace megatron {

// A parameter that two pipeline stages hold (Megatron's tied input/output word embedding: the
// embedding on the first stage, the LM head on the last). Both copies start equal (the init is
// keyed by the name) and stay equal: their gradients are all-reduced over the embedding group
// before the optimizer step. The copy is not counted again in the gradient norm, nor saved.
enum class StageTie : uint8_t {
  kNone,
  kOriginal,  // the first stage's parameter, tied to a copy on the last stage
  kCopy,      // the last stage's copy
};

struct ParamSpec {
  std::string name;        // e.g. "layers.3.self_attention.query_key_value.weight"
  Shape full_shape;        // as if unsplit
  int partition_dim = -1;  // -1: replicated on every TP rank
  bool weight_decay = true;
  // > 0: dim 0 is the vocabulary, padded past this many real rows (Megatron pads it to a
  // multiple of make-vocab-size-divisible-by x TP). Padding rows carry nothing (padded ids
  // are excluded from the softmax), so a checkpoint padded for another TP size loads with its
  // padding cut or extended (zeros).
  int64_t vocab_rows = 0;
  StageTie stage_tie = StageTie::kNone;
  // A replicated parameter whose gradient each TP rank computes only in part: one applied to
  // sequence-parallel activations (a LayerNorm's γ and β, a row-parallel bias under
  // --sequence-parallel), each rank's gradient covering its own sequence shard, or a QK
  // LayerNorm's (model/qk_layernorm.h), each rank's covering its own heads. The whole gradient
  // is their sum over the TP group, taken once per step (optim/grad_reduction.h,
  // reduce_sequence_parallel_gradients).
  bool sequence_parallel = false;
  // Megatron's is_embedding_or_output_parameter (the word embedding, the untied output layer):
  // --decoupled-lr gives these their own learning rate (optim/optimizer.h).
  bool embedding_or_output = false;
  // Megatron's is_embedding_parameter (every table of the input embedding and the output
  // layer): with --use-mup these keep the base learning rate and Adam eps, like the vectors,
  // while the other matrices take them / the width multiplier (optim/optimizer.h).
  bool embedding = false;
  // A mixture-of-experts expert weight (model/moe_layer.h): dim 0 counts the experts
  // ([experts, ...] as if unsplit). With expert parallelism that dimension is split over the
  // expert-parallel group and the gradient is reduced over the expert-data-parallel group
  // instead of the data-parallel one; at expert-parallel size 1 it is an ordinary parameter.
  // Its partition_dim (never 0) is split over the expert tensor-parallel group (ParameterStore::
  // set_expert_grid), which is the TP group unless --expert-tensor-parallel-size says otherwise.
  bool expert = false;
  // A hidden matrix in muP's sense: neither an embedding nor a vector (bias, norm gain).
  bool mup_hidden() const { return !embedding && full_shape.size() >= 2; }
};

// A model buffer (Megatron's register_buffer): an f32 tensor the model keeps beside its
// parameters, whole on every rank, that no gradient reaches and no optimizer changes — the MoE
// routers' expert bias and token counts (model/moe_router.h). A persistent buffer is saved and
// loaded with the parameters, under its name, as a replicated tensor (checkpoint/shards.h), so
// it survives resharding to any TP × PP × EP × DP layout; the others live within a step.
struct BufferSpec {
  std::string name;  // e.g. "layers.3.mlp.router.expert_bias"
  Shape shape;
  bool persistent = true;
};

struct Buffer {
  BufferSpec spec;
  Tensor value;  // f32 [spec.shape] on the store's device, zeros until set
};

struct Parameter {
  ParamSpec spec;
  Shape local_shape;         // this rank's slice
  int64_t local_start = 0;   // first index of the slice along partition_dim (0 if replicated)
  int64_t expert_start = 0;  // an expert parameter's first expert (dim 0) on this rank
  int64_t flat_offset = 0;   // element offset in the flat buffers
  Tensor value;              // f32 or bf16 [local_shape], view into the flat value buffer
  Tensor grad;               // f32 [local_shape], view into the flat gradient buffer

  bool replicated() const { return spec.partition_dim < 0; }
};

class ParameterStore {
 public:
  ParameterStore(int tp_rank, int tp_size, Device device = Device::CPU)
      : tp_rank_(tp_rank), tp_size_(tp_size), device_(device) {}

  // The expert grid (ParallelState's ep and etp groups): an expert parameter's dim 0 is split
  // over the ep_size ranks (rank r holds experts [r·E/ep, (r+1)·E/ep)) and its partition_dim over
  // the etp_size ranks instead of the TP group. Until called: ep 1 and etp = the TP group. Not
  // allowed after add().
  void set_expert_grid(int ep_rank, int ep_size, int etp_rank, int etp_size);

  // Registers a parameter; a partitioned dimension must be divisible by the TP size (the etp
  // size for an expert parameter, whose experts must also divide over ep). Returns its index.
  // Names must be unique. Not allowed after allocate().
  size_t add(const ParamSpec& spec);
  // Carves the flat buffers (values and gradients zeroed, on device()) and binds every view.
  // Layout: the dense parameters in registration order, then the expert parameters in
  // registration order (the expert part: expert_part()), so that each part is one range that
  // the distributed optimizer can shard over its own group. The value buffer's allocation is
  // padded with zeros to a multiple of `pad_values_to` elements: the distributed optimizer
  // passes its DP size, so every DP rank's shard of the values is an equal block of one buffer
  // and the all-gather of the updated shards writes in place (optim/distributed_optimizer.h).
  // flat_values() never includes that padding. `pad_expert_values_to` > 0 (the distributed
  // optimizer with the experts on a grid of their own, sharded over the expert data-parallel
  // size): the dense part alone is padded to a multiple of `pad_values_to` — a gap of fewer than
  // pad_values_to zero elements that belong to no parameter, inside the flat buffers — and the
  // expert part, which starts after it, to a multiple of `pad_expert_values_to`.
  // `value_dtype`: F32, or BF16 for a trainer whose optimizer holds the fp32 master weights.
  void allocate(int64_t pad_values_to = 1, DType value_dtype = DType::F32,
                int64_t pad_expert_values_to = 0);

  // Registers a buffer (allocated at once, zeros); its name must differ from every parameter's
  // and buffer's. Returns its index in buffers().
  size_t add_buffer(const BufferSpec& spec);
  std::vector<Buffer>& buffers() { return buffers_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  // Registers every buffer of `other` here and copies its values (snapshots and re-laid-out
  // copies of a store: checkpoint/async_save.h, checkpoint/checkpoint.cpp).
  void copy_buffers_from(const ParameterStore& other);

  Parameter& get(const std::string& name);
  const Parameter& get(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  // Whether a persistent buffer of that name is registered.
  bool contains_persistent_buffer(const std::string& name) const;
  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }

  Tensor& flat_values() { return flat_values_; }  // f32 or bf16 [total local elements]
  // [total rounded up to a multiple of allocate's pad_values_to], the values' dtype:
  // flat_values() and then zeros that belong to no parameter.
  Tensor& padded_flat_values() { return padded_values_; }
  Tensor& flat_grads() { return flat_grads_; }
  const Tensor& flat_values() const { return flat_values_; }
  const Tensor& flat_grads() const { return flat_grads_; }
  void zero_grads();
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  int ep_rank() const { return ep_rank_; }
  int ep_size() const { return ep_size_; }
  int etp_rank() const { return etp_rank_; }  // -1 until set_expert_grid, as etp_size()
  int etp_size() const { return etp_size_; }
  // Whether any expert parameter is registered.
  bool has_experts() const { return has_experts_; }
  // After allocate(): the flat elements of the dense parameters ([0, their count)) and of the
  // expert parameters (empty, at the end, without experts).
  FlatRange dense_part() const { return dense_part_; }
  FlatRange expert_part() const { return expert_part_; }
  Device device() const { return device_; }

  // Marks a registered parameter as held by two pipeline stages (StageTie). Not allowed after
  // allocate().
  void set_stage_tie(const std::string& name, StageTie tie);

  // A backward announces, after accumulating one micro-batch's last contribution into the
  // gradients of parameters [first, end), that they are complete for it; the announcement goes to
  // the listener, when one is set (optim/grad_buckets.h: --overlap-grad-reduce), else nowhere.
  // Announcing is optional (what is never announced is reduced after the backward) but never
  // early.
  void set_grad_ready_listener(GradReadyListener* listener) { listener_ = listener; }
  void grads_accumulated(size_t first, size_t end) const {
    if (listener_ != nullptr) listener_->grads_accumulated(first, end);
  }

  // Runs of consecutive parameters, as [begin, end) element ranges of the flat buffers, that
  // the global gradient norm counts on this TP rank: every parameter on TP rank 0, only the
  // partitioned ones on the others (replicated parameters are counted once); never a
  // StageTie::kCopy (its original is counted on the first stage). Adjacent counted parameters
  // merge into one range. `experts` false: the dense parameters; true: the expert parameters,
  // where "TP" reads "etp" (their norm is summed over another group: optim/grad_reduction.h).
  std::vector<std::pair<int64_t, int64_t>> norm_ranges(bool experts = false) const;

 private:
  int tp_rank_, tp_size_;
  int ep_rank_ = 0, ep_size_ = 1;
  int etp_rank_ = -1, etp_size_ = -1;  // -1: the TP group's (set_expert_grid)
  bool has_experts_ = false;
  Device device_;
  std::vector<Parameter> params_;
  std::map<std::string, size_t> index_;
  std::vector<Buffer> buffers_;
  FlatRange dense_part_, expert_part_;  // allocate()'s layout
  Tensor padded_values_;                // the allocation; flat_values_ is its head
  Tensor flat_values_, flat_grads_;
  GradReadyListener* listener_ = nullptr;
};

// Index of a local element in the full tensor: the local multi-index shifted by local_start
// along the partition dimension (and by expert_start along dim 0 for an expert parameter),
// linearised row-major in the full shape. Initialisation keyed by it is TP- and EP-invariant.
int64_t full_element_index(const Parameter& p, int64_t local_linear_index);

// The values `values` (f32 or bf16, any device) as a host f32 tensor: the tensor itself when it
// is one already, else a converted copy. Checkpoints read and write parameters through it.
Tensor values_on_host_f32(const Tensor& values);
// values = host (f32, on the host, same shape), converted to the values' dtype and moved to
// their device; a no-op when host is the values' own buffer (values_on_host_f32 returned it).
void assign_values_from_host_f32(Tensor& values, const Tensor& host);

// TP-invariant initialisation: element i of the full weight is
// std · normal(PhiloxStream(seed, parameter_stream_key(name)), i); each rank draws its slice.
// The values are drawn on the host in f32 and copied to the store's device (and dtype) once
// per parameter.
void init_normal(Parameter& p, uint64_t seed, float std);
void init_constant(Parameter& p, float value);
uint64_t parameter_stream_key(const std::string& name);

}  // namespace megatron
