#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "optim/distributed_optimizer.h"

namespace megatron {

namespace {

using Coefficients = std::vector<std::array<double, 3>>;

// How a coefficient list continues past its end.
enum class PastEnd { kCycle, kRepeatLast };

struct CoefficientSet {
  Coefficients steps;
  PastEnd past_end;
};

// The published Newton–Schulz coefficient sets Megatron's emerging_optimizers offers.
const std::map<std::string, CoefficientSet>& coefficient_sets() {
  static const std::map<std::string, CoefficientSet> sets = {
      {"simple", {{{3.4445, -4.7750, 2.0315}}, PastEnd::kCycle}},
      {"quintic",
       {{{4.0848, -6.8946, 2.9270},
         {3.9505, -6.3029, 2.6377},
         {3.7418, -5.5913, 2.3037},
         {2.8769, -3.1427, 1.2046},
         {2.8366, -3.0525, 1.2012}},
        PastEnd::kCycle}},
      {"polar_express",
       {{{8.2051, -22.9019, 16.4607},
         {4.0664, -2.8612, 0.5184},
         {3.9096, -2.8234, 0.5250},
         {3.2856, -2.4153, 0.4853},
         {2.2779, -1.6198, 0.3985},
         {1.8726, -1.2307, 0.3585},
         {1.8564, -1.2132, 0.3568},
         {1.8750, -1.2500, 0.3750}},
        PastEnd::kRepeatLast}},
      {"cans",
       {{{8.4703, -25.1081, 18.6293},
         {4.1828, -3.1087, 0.5806},
         {3.9619, -2.9541, 0.5630},
         {3.2866, -2.4647, 0.5074},
         {2.2737, -1.6447, 0.4162}},
        PastEnd::kRepeatLast}},
      {"aol",
       {{{4.0098, -7.0585, 2.4635},
         {3.4585, -5.5479, 2.5959},
         {2.7573, -3.2939, 1.4254},
         {2.7215, -3.0494, 1.3169}},
        PastEnd::kCycle}},
      {"deepseekv4",
       {{{3.4445, -4.7750, 2.0315},
         {3.4445, -4.7750, 2.0315},
         {3.4445, -4.7750, 2.0315},
         {3.4445, -4.7750, 2.0315},
         {3.4445, -4.7750, 2.0315},
         {3.4445, -4.7750, 2.0315},
         {3.4445, -4.7750, 2.0315},
         {3.4445, -4.7750, 2.0315},
         {2.0, -1.5, 0.5},
         {2.0, -1.5, 0.5}},
        PastEnd::kRepeatLast}},
      {"cubic5",
       {{{3.3656576, -3.3420992, 0.0},
         {2.5744352, -1.4957376, 0.0},
         {2.5368962, -1.4312570, 0.0},
         {2.4418906, -1.2764040, 0.0},
         {2.2230472, -0.9630650, 0.0}},
        PastEnd::kCycle}},
  };
  return sets;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole tensor of a parameter split along `dim` over `group`, from this rank's slice
// (f32 [local_shape], contiguous): the slices in rank order along `dim`.
Tensor gather_partitioned(const Tensor& local, int dim, Communicator& group) {
  const int t = group.size();
  const int64_t n = local.numel(), width = local.size(dim);
  Tensor all = Tensor::empty({n * t}, DType::F32, local.device());
  group.all_gather(local.flatten(), all);
  Shape full_shape = local.shape();
  full_shape[size_t(dim)] *= t;
  Tensor full = Tensor::empty(full_shape, DType::F32, local.device());
  for (int r = 0; r < t; ++r) {
    Tensor slot = full.slice(dim, r * width, (r + 1) * width);
    kernels::copy(all.slice(0, r * n, (r + 1) * n).view(local.shape()), slot);
  }
  return full;
}

}  // namespace

MuonScaleMode muon_scale_mode_from_name(const std::string& name) {
  if (name == "spectral") return MuonScaleMode::kSpectral;
  if (name == "unit_rms_norm") return MuonScaleMode::kUnitRmsNorm;
  if (name == "shape_scaling") return MuonScaleMode::kShapeScaling;
  MT_THROW("--muon-scale-mode '", name,
           "' is not one of Megatron's scale modes: spectral, unit_rms_norm, shape_scaling");
}

Coefficients newton_schulz_coefficients(const std::string& type, int steps) {
  MT_REQUIRE(steps >= 1, "--muon-num-ns-steps must be at least 1, got ", steps);
  const auto& sets = coefficient_sets();
  const auto it = sets.find(type);
  if (it == sets.end()) {
    std::string known;
    for (const auto& [name, set] : sets) known += (known.empty() ? "" : ", ") + name;
    MT_THROW("--muon-coefficient-type '", type, "' is not a Newton-Schulz coefficient set here (",
             known, "; 'custom' sets cannot be given on Megatron's command line either)");
  }
  const Coefficients& list = it->second.steps;
  MT_REQUIRE(type != "cubic5" || steps == int(list.size()), "--muon-coefficient-type cubic5 is a ",
             list.size(), "-step schedule; --muon-num-ns-steps ", steps, " must be ", list.size());
  Coefficients out;
  for (int i = 0; i < steps; ++i)
    out.push_back(size_t(i) < list.size()                  ? list[size_t(i)]
                  : it->second.past_end == PastEnd::kCycle ? list[size_t(i) % list.size()]
                                                           : list.back());
  return out;
}

double muon_scale(int64_t rows, int64_t cols, MuonScaleMode mode) {
  const double r = double(rows), c = double(cols);
  switch (mode) {
    case MuonScaleMode::kSpectral:
      return std::sqrt(std::max(r, c));
    case MuonScaleMode::kUnitRmsNorm:
      return std::sqrt(r / c);
    case MuonScaleMode::kShapeScaling:
      return std::sqrt(std::max(1.0, r / c));
  }
  MT_CHECK(false, "unknown Muon scale mode");
  return 1.0;
}

void newton_schulz_in_place(Tensor& x, const Coefficients& coefficients) {
  MT_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous(),
           "newton_schulz_in_place: x must be contiguous f32 [rows, cols], got ", x.describe());
  // Iterate on the wide orientation: the Gram matrix X·Xᵀ is then the small one.
  const bool transpose = x.size(0) > x.size(1);
  Tensor X =
      Tensor::empty(transpose ? Shape{x.size(1), x.size(0)} : x.shape(), DType::F32, x.device());
  kernels::copy(transpose ? x.transpose(0, 1) : x, X);
  const double norm = std::sqrt(kernels::sum_squares(X));
  kernels::scale(X, float(1.0 / std::max(norm, 1e-15)));
  const int64_t r = X.size(0);
  Tensor A = Tensor::empty({r, r}, DType::F32, x.device());
  Tensor B = Tensor::empty({r, r}, DType::F32, x.device());
  Tensor Y = Tensor::empty(X.shape(), DType::F32, x.device());
  for (const auto& [a, b, c] : coefficients) {
    kernels::gemm(X, false, X, true, A);  // A = X·Xᵀ
    Y.copy_from(X);
    if (c != 0.0) {
      B.copy_from(A);
      kernels::gemm(A, false, A, false, B, float(c), float(b));  // B = b·A + c·A·A
      kernels::gemm(B, false, X, false, Y, 1.0f, float(a));      // Y = a·X + B·X
    } else {
      kernels::gemm(A, false, X, false, Y, float(b), float(a));  // Y = a·X + b·A·X
    }
    std::swap(X, Y);
  }
  if (transpose) {
    kernels::copy(X.transpose(0, 1), x);
  } else {
    x.copy_from(X);
  }
}

bool is_muon_matrix(const ParamSpec& spec) {
  if (spec.embedding_or_output || ends_with(spec.name, ".bias")) return false;
  // An expert weight [experts, ...] is one matrix per expert.
  const size_t dims = spec.full_shape.size() - (spec.expert ? 1 : 0);
  return dims >= 2;
}

Muon::Muon(const ParameterStore& store, const MuonConfig& config, FlatRange range,
           MuonGroups groups)
    : store_(store),
      config_(config),
      coefficients_(newton_schulz_coefficients(config.coefficient_type, config.num_ns_steps)),
      range_(range),
      groups_(std::move(groups)) {
  const int64_t total = store.flat_values().numel();
  if (range_.end < 0) range_.end = total;
  if (groups_.part.end < 0) groups_.part.end = total;
  if (sharded()) {
    const DpShard shard = DpShard::of(groups_.part, groups_.dp->size(), groups_.dp->rank());
    MT_CHECK(shard.range.begin == range_.begin && shard.range.end == range_.end,
             "Muon: the range [", range_.begin, ", ", range_.end,
             ") is not this DP rank's shard of the flat elements [", groups_.part.begin, ", ",
             groups_.part.end, ")");
  } else {
    MT_CHECK(range_.begin == groups_.part.begin && range_.end == groups_.part.end,
             "Muon: a range of the flat space other than its part needs its data-parallel group");
  }
  const std::vector<Parameter>& params = store.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    if (!is_muon_matrix(p.spec)) continue;
    const int64_t begin = std::max(p.flat_offset, range_.begin);
    const int64_t end = std::min(p.flat_offset + p.value.numel(), range_.end);
    if (end <= begin) continue;
    matrices_.push_back(i);
    runs_.emplace_back(begin - range_.begin, end - range_.begin);
  }
  momentum_ = Tensor::zeros({range_.end - range_.begin}, DType::F32, store.device());
}

void Muon::step(Tensor& master, const Tensor& grads, double lr, double weight_decay) {
  const float mu = float(config_.momentum);
  // U, the Newton–Schulz input, on the range: the momentum itself, or Nesterov's look-ahead.
  Tensor u_range = config_.nesterov
                       ? Tensor::zeros(momentum_.shape(), DType::F32, momentum_.device())
                       : momentum_;
  for (const auto& [begin, end] : runs_) {
    Tensor w = master.slice(0, begin, end), m = momentum_.slice(0, begin, end);
    const Tensor g = grads.slice(0, begin, end);
    if (weight_decay != 0.0) kernels::scale(w, float(1.0 - lr * weight_decay));
    kernels::scale(m, mu);  // M = μ·M + (1 − μ)·G
    kernels::axpy(1.0f - mu, g, m);
    if (config_.nesterov) {  // U = (1 − μ)·G + μ·M
      Tensor u = u_range.slice(0, begin, end);
      kernels::axpy(1.0f - mu, g, u);
      kernels::axpy(mu, m, u);
    }
  }
  // Every matrix this rank updates, whole: with a sharded range, U from every DP rank — the
  // part of the flat space they shard, from its first element (unsharded the range is the part).
  Tensor u_full = u_range;
  const int64_t first = groups_.part.begin;
  if (sharded()) {
    Communicator& dp = *groups_.dp;
    const DpShard shard = DpShard::of(groups_.part, dp.size(), dp.rank());
    Tensor mine = Tensor::zeros({shard.size}, DType::F32, u_range.device());
    Tensor head = mine.slice(0, 0, u_range.numel());
    head.copy_from(u_range);
    Tensor gathered = Tensor::empty({shard.size * dp.size()}, DType::F32, u_range.device());
    dp.all_gather(mine, gathered);
    u_full = gathered.slice(0, 0, shard.total);
  }
  for (size_t i : matrices_) {
    const Parameter& p = store_.params()[i];
    const Tensor u_local =
        u_full.slice(0, p.flat_offset - first, p.flat_offset - first + p.value.numel())
            .view(p.local_shape);
    update_parameter(p, u_local, master, lr);
  }
}

void Muon::update_parameter(const Parameter& p, const Tensor& u_local, Tensor& master, double lr) {
  Communicator* group = (p.spec.expert ? groups_.etp : groups_.tp).get();
  const bool split = !p.replicated() && group != nullptr && group->size() > 1;
  Tensor full = split ? gather_partitioned(u_local, p.spec.partition_dim, *group) : u_local.clone();
  // One matrix per expert; each is [rows, cols] with cols the last dimension (a stacked
  // column-parallel weight's blocks are rows).
  const int64_t experts = p.spec.expert ? full.size(0) : 1;
  for (int64_t e = 0; e < experts; ++e) {
    Tensor tensor = p.spec.expert ? full.select(0, e) : full;
    Tensor matrix = tensor.view({-1, tensor.size(-1)});
    orthogonalize_matrix(p.spec, matrix);
  }
  // This rank's slice of O, and of it the elements in the range.
  Tensor mine = full;
  if (split) {
    const int64_t width = p.local_shape[size_t(p.spec.partition_dim)];
    Tensor slice =
        full.slice(p.spec.partition_dim, group->rank() * width, (group->rank() + 1) * width);
    mine = Tensor::empty(p.local_shape, DType::F32, full.device());
    kernels::copy(slice, mine);
  }
  const int64_t begin = std::max(p.flat_offset, range_.begin);
  const int64_t end = std::min(p.flat_offset + p.value.numel(), range_.end);
  Tensor w = master.slice(0, begin - range_.begin, end - range_.begin);
  kernels::axpy(float(-lr), mine.flatten().slice(0, begin - p.flat_offset, end - p.flat_offset), w);
}

void Muon::orthogonalize_matrix(const ParamSpec& spec, Tensor& matrix) const {
  const MuonQkvLayout& qkv = config_.qkv;
  if (!config_.split_qkv || !ends_with(spec.name, ".query_key_value.weight"))
    return orthogonalize_and_scale(matrix);
  MT_CHECK(qkv.groups > 0, spec.name,
           ": Muon splits the fused QKV weight, but its MuonConfig has no QKV layout");
  // Query, key and value rows of every group, each part orthogonalised on its own.
  const int64_t g = qkv.groups, d = qkv.head_dim, q = qkv.queries;
  const int64_t cols = matrix.size(1);
  MT_CHECK(matrix.size(0) == g * (q + 2) * d, spec.name, ": ", matrix.describe(), " is not ", g,
           " query groups of ", q + 2, " x ", d, " rows");
  const Tensor grouped = matrix.view({g, (q + 2) * d, cols});
  const std::pair<int64_t, int64_t> parts[] = {
      {0, q * d}, {q * d, (q + 1) * d}, {(q + 1) * d, (q + 2) * d}};
  for (const auto& [begin, end] : parts) {
    Tensor rows = grouped.slice(1, begin, end);  // [g, part, cols], strided
    Tensor part = Tensor::empty({g * (end - begin), cols}, DType::F32, matrix.device());
    Tensor part_grouped = part.view({g, end - begin, cols});
    kernels::copy(rows, part_grouped);
    orthogonalize_and_scale(part);
    kernels::copy(part_grouped, rows);
  }
}

void Muon::orthogonalize_and_scale(Tensor& matrix) const {
  newton_schulz_in_place(matrix, coefficients_);
  kernels::scale(matrix, float(muon_scale(matrix.size(0), matrix.size(1), config_.scale_mode) *
                               config_.extra_scale_factor));
}

}  // namespace megatron
