// Muon (Megatron-LM's --optimizer muon, the emerging_optimizers package's TensorParallelMuon):
// the 2-D weight matrices of the linear layers are updated with the orthogonalised momentum of
// their gradients; every other parameter stays with AdamW (optim/optimizer.h, which owns a
// Muon for the matrices). Per matrix W with gradient G, learning rate lr, weight decay wd:
//
//   W ← W · (1 − lr·wd)                                  decoupled weight decay
//   M ← μ·M + (1 − μ)·G                                  momentum, EMA-style (--muon-momentum μ)
//   U = (1 − μ)·G + μ·M  (--muon-nesterov)  or  U = M
//   O = NS(U) · scale(rows, cols) · extra                Newton–Schulz orthogonalisation
//   W ← W − lr·O
//
// NS: X = U / max(‖U‖_F, 1e-15) (transposed first when it has more rows than columns, so the
// Gram matrix is the small one), then per step with coefficients (a, b, c):
//   A = X·Xᵀ;  B = b·A + c·A·A;  X = a·X + B·X
// scale (--muon-scale-mode): spectral √max(rows, cols), unit_rms_norm √(rows/cols),
// shape_scaling √max(1, rows/cols); extra = --muon-extra-scale-factor.
//
// Which parameters (Megatron's rule): 2-D, not the word embedding or the output layer
// (ParamSpec::embedding_or_output) — so also the learned position embedding and the router.
// A matrix is what Megatron holds as one 2-D tensor: a stacked column-parallel weight
// [k, block, in] is the matrix [k·block, in] (SwiGLU's fc1 [gate; up], orthogonalised whole as
// Megatron does), an expert weight [experts, ...] is one matrix per expert (Transformer
// Engine's grouped GEMM keeps one weight per expert). A fused QKV weight (MuonQkvLayout) is
// split, unless --muon-no-split-qkv, into its query, key and value rows over all groups (as
// Megatron's default), each orthogonalised and scaled alone.
//
// Layouts: the orthogonalisation needs the whole matrix (Megatron's --muon-tp-mode duplicated):
// a tensor-parallel weight's momentum is all-gathered over the TP group (the expert TP group
// for experts), orthogonalised on every TP rank and each rank keeps its slice, so the update is
// the same at any TP size (NS commutes with the row permutation a TP gather of [gate; up]
// makes). With the distributed optimizer (a FlatRange of the flat space per DP rank) the
// momentum is kept for the range only, the Newton–Schulz input U is all-gathered over the DP
// group, and each rank updates its range of every matrix it overlaps: the numbers are those of
// the unsharded optimizer.
//
// Newton–Schulz runs in f32 GEMMs (kernels/gemm.h; TF32 on GPUs only with --tf32). Megatron's
// default --muon-fp32-matmul-prec medium rounds X to bf16 between its GEMMs on GPUs; f32 is at
// least as exact.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "distributed/communicator.h"
#include "parallel/flat_range.h"
#include "parallel/parameter.h"

namespace megatron {

enum class MuonScaleMode { kSpectral, kUnitRmsNorm, kShapeScaling };

// The fused QKV weights' rows (Megatron's qkv_split_shapes): a parameter named
// "*.query_key_value.weight" holds `groups` query groups of [queries·head_dim query rows;
// head_dim key rows; head_dim value rows] (model/qkv_projection.h). Required with split_qkv
// when the model has one.
struct MuonQkvLayout {
  int64_t groups = 0, queries = 0, head_dim = 0;
};

struct MuonConfig {
  double momentum = 0.9;  // Megatron's --muon-momentum default
  bool nesterov = false;
  bool split_qkv = true;
  MuonScaleMode scale_mode = MuonScaleMode::kSpectral;
  std::string coefficient_type = "quintic";
  int num_ns_steps = 5;
  double extra_scale_factor = 1.0;
  MuonQkvLayout qkv{};  // the model's (with split_qkv)
};

// "spectral" | "unit_rms_norm" | "shape_scaling"; anything else is refused by name.
MuonScaleMode muon_scale_mode_from_name(const std::string& name);
// The (a, b, c) of each of `steps` Newton–Schulz steps for a coefficient type of Megatron's
// emerging_optimizers (simple, quintic, polar_express, cans, aol, deepseekv4, cubic5): a
// type's list cycles, except polar_express, cans and deepseekv4, which repeat their last entry.
// An unknown type (or cubic5 at other than 5 steps) is refused by name.
std::vector<std::array<double, 3>> newton_schulz_coefficients(const std::string& type, int steps);
// The scale of an orthogonalised [rows, cols] update.
double muon_scale(int64_t rows, int64_t cols, MuonScaleMode mode);

// x: f32 [rows, cols] contiguous, replaced by its Newton–Schulz orthogonalisation (unscaled).
void newton_schulz_in_place(Tensor& x, const std::vector<std::array<double, 3>>& coefficients);

// Whether Muon updates this parameter (the rule above).
bool is_muon_matrix(const ParamSpec& spec);

// The process groups Muon gathers over; a null group is a group of one.
struct MuonGroups {
  std::shared_ptr<Communicator> tp;   // a partitioned dense parameter's
  std::shared_ptr<Communicator> etp;  // a partitioned expert parameter's
  std::shared_ptr<Communicator> dp;   // the group a sharded range shards the flat space over
  // The part of the flat space dp shards (end -1: all of it): the dense or the expert part when
  // the experts have a grid of their own (optim/distributed_optimizer.h).
  FlatRange part{};
};

class Muon {
 public:
  // The matrices of `store` whose elements overlap `range`, whose values the caller keeps in
  // `master` (f32 [range length], laid out as the range). A range other than the whole flat
  // space must be this rank's DpShard of groups.part over groups.dp. Every rank of a TP group must
  // hold the same range (the gathers are collective per matrix): they share their DP rank.
  Muon(const ParameterStore& store, const MuonConfig& config, FlatRange range, MuonGroups groups);

  // One update of the matrices in the range with learning rate `lr`, weight decay `wd`;
  // grads: f32 [range length], reduced over DP and clipped.
  void step(Tensor& master, const Tensor& grads, double lr, double weight_decay);
  // "momentum_buffer": f32 [range length] (zero outside the matrices).
  Tensor& momentum() { return momentum_; }

 private:
  // W −= lr·O for the range's elements of parameter `p`, whose Newton–Schulz input is u_local
  // (f32 [p.local_shape]).
  void update_parameter(const Parameter& p, const Tensor& u_local, Tensor& master, double lr);
  void orthogonalize_matrix(const ParamSpec& spec, Tensor& matrix) const;
  void orthogonalize_and_scale(Tensor& matrix) const;
  bool sharded() const { return groups_.dp && groups_.dp->size() > 1; }

  const ParameterStore& store_;
  MuonConfig config_;
  std::vector<std::array<double, 3>> coefficients_;
  FlatRange range_;  // resolved
  MuonGroups groups_;
  std::vector<size_t> matrices_;  // indices of the store's Muon parameters overlapping range
  // The (sub)runs of the range that are matrix elements: [begin, end) range offsets.
  std::vector<std::pair<int64_t, int64_t>> runs_;
  Tensor momentum_;  // f32 [range]
};

}  // namespace megatron
