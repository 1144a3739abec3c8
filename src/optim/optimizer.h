// AdamW over the ParameterStore's flat buffers. The fp32 master weights are the store's flat
// values — or a separate flat f32 buffer when the model computes with 16-bit weights: for
// --fp16 the store holds their f16-rounded copy (in f32), for --bf16 the store's values are
// bf16 (ParameterStore::allocate) — Megatron's 16-bit params + fp32 main params. The two Adam
// moments live in flat f32 buffers of the same layout (one element per local parameter
// element), exposed by name for checkpointing.
//
// Weight decay is decoupled (AdamW) and applied only to parameters whose ParamSpec asks for
// it (not biases, not LayerNorm). Every buffer lives on the store's device. Gradients must already
// be reduced over data parallelism, unscaled and clipped when step() is called.
//
// An AdamW may own only a range of the flat parameter space (the distributed optimizer's
// data-parallel shard, optim/distributed_optimizer.h): its moments (and master copy) then hold
// that range only, step() updates only that range of the store's values, and flat_buffers()
// are range-sized. The update being elementwise, the shards together compute exactly what one
// AdamW over the whole space computes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/adamw.h"
#include "optim/muon.h"
#include "parallel/flat_range.h"
#include "parallel/parameter.h"

namespace megatron {

// The name of the separate fp32 master weights among AdamW::flat_buffers() and in checkpoints.
inline constexpr char kMasterWeightsBuffer[] = "fp32_master";
// Muon's momentum among AdamW::flat_buffers() and in checkpoints (Megatron's state name).
inline constexpr char kMuonMomentumBuffer[] = "momentum_buffer";

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool f16_model_weights = false;  // keep a separate fp32 master; store gets f16-rounded values
  // --use-mup's width multiplier m: Megatron's Adam overrides for the hidden matrices
  // (ParamSpec::mup_hidden()) — eps / m here, and the learning rate set_mup_hidden_lr() gives
  // (the schedule's max and min / m). 1: no muP group (Megatron adds none at m = 1).
  double mup_width_mult = 1.0;
  // --optimizer muon: the 2-D weight matrices (is_muon_matrix) are Muon's (optim/muon.h),
  // with this optimizer's learning rate and weight decay; AdamW updates the rest.
  std::optional<MuonConfig> muon{};
};

class AdamW {
 public:
  // Takes the store's current values (in `range`) as the master weights (a copy when they are
  // bf16 or f16_model_weights is set). `muon_groups`: the groups config.muon gathers over.
  AdamW(ParameterStore& store, const AdamWConfig& config, FlatRange range = {},
        MuonGroups muon_groups = {});

  // One update of every parameter (in the range) with learning rate `lr`; bias correction uses
  // the number of steps taken so far (skipped steps do not count). The gradients are the
  // store's, or `range_grads` (f32 [range length], element 0 = flat element range.begin).
  void step(double lr);
  void step(double lr, const Tensor& range_grads);
  const FlatRange& range() const { return range_; }
  // The weight decay of the next steps (Megatron's weight-decay increments, lr_schedule.h).
  void set_weight_decay(double weight_decay) { config_.weight_decay = weight_decay; }
  // --decoupled-lr: the learning rate of the next steps for the embedding and output layer
  // (ParamSpec::embedding_or_output; nullopt: step()'s lr, as for every other parameter).
  void set_decoupled_lr(std::optional<double> lr) { decoupled_lr_ = lr; }
  // --use-mup: the learning rate of the next steps for the hidden matrices (nullopt: step()'s).
  void set_mup_hidden_lr(std::optional<double> lr) { mup_hidden_lr_ = lr; }
  int64_t steps() const { return steps_; }

  // "exp_avg", "exp_avg_sq" (and "fp32_master" with a separate master, "momentum_buffer" with
  // Muon): f32 [range length], laid out as the range of store.flat_values(). Muon's matrices
  // keep zero Adam moments, AdamW's parameters a zero momentum.
  std::map<std::string, Tensor> flat_buffers() const;
  // The steps taken, and "optimizer": "muon" with Muon (a load refuses a checkpoint of the
  // other kind: its state would be missing or ignored).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);
  // After the store's values were replaced without optimizer state (e.g. --no-load-optim):
  // take them as the master weights again.
  void reset_master_from_store();
  // Whether the fp32 master weights are a buffer of their own ("fp32_master"), not the
  // store's values.
  bool separate_master() const { return separate_master_; }
  // After "fp32_master" was loaded: derive the store's 16-bit values from it.
  void write_model_weights();
  // f16 [total local elements] with f16 model weights (undefined otherwise): scratch that is
  // only used inside step(), so the trainer's f16 overflow check may borrow it between steps.
  Tensor& f16_scratch() { return f16_scratch_; }

 private:
  ParameterStore& store_;
  AdamWConfig config_;
  bool separate_master_;  // f16_model_weights, or bf16 values in the store
  FlatRange range_;       // resolved: 0 <= begin <= end <= total local elements
  Tensor master_;         // f32 [range]: the store's values, or a separate copy
  Tensor exp_avg_;        // f32 [range]
  Tensor exp_avg_sq_;     // f32 [range]
  Tensor f16_scratch_;    // f16 [range], only with f16 model weights
  // The range's runs of parameters with and without weight decay (offsets within the range),
  // per learning-rate group: the embedding and output layer's (--decoupled-lr) and muP's hidden
  // matrices apart from the others'. Megatron's groups are disjoint: the embedding and output
  // layer are not hidden matrices.
  // kMuon: not AdamW's (no runs).
  enum LrGroup { kBase, kDecoupled, kMupHidden, kNumGroups, kMuon = kNumGroups };
  LrGroup lr_group(const ParamSpec& spec) const;
  std::vector<kernels::AdamWRun> runs_[kNumGroups];
  std::optional<double> decoupled_lr_, mup_hidden_lr_;
  std::unique_ptr<Muon> muon_;  // with config.muon
  int64_t steps_ = 0;
};

}  // namespace megatron
