#include "optim/optimizer.h"

#include <algorithm>

#include "kernels/adamw.h"
#include "kernels/elementwise.h"

namespace megatron {

AdamW::AdamW(ParameterStore& store, const AdamWConfig& config, FlatRange range,
             MuonGroups muon_groups)
    : store_(store),
      config_(config),
      separate_master_(config.f16_model_weights || store.flat_values().dtype() != DType::F32),
      range_(range) {
  MT_CHECK(store.flat_values().defined(), "AdamW needs an allocated ParameterStore");
  MT_CHECK(!(config.f16_model_weights && store.flat_values().dtype() != DType::F32),
           "f16 model weights need f32 parameter values, not ",
           dtype_name(store.flat_values().dtype()));
  const int64_t total = store.flat_values().numel();
  if (range_.end < 0) range_.end = total;
  MT_CHECK(0 <= range_.begin && range_.begin <= range_.end && range_.end <= total, "AdamW range [",
           range_.begin, ", ", range_.end, ") is outside the ", total, " parameter elements");
  const int64_t n = range_.end - range_.begin;
  const Device device = store.device();
  exp_avg_ = Tensor::zeros({n}, DType::F32, device);
  exp_avg_sq_ = Tensor::zeros({n}, DType::F32, device);
  Tensor values = store.flat_values().slice(0, range_.begin, range_.end);
  if (config.f16_model_weights) {
    master_ = values.clone();
    f16_scratch_ = Tensor::empty({n}, DType::F16, device);
    write_model_weights();
  } else if (separate_master_) {  // bf16 values: their fp32 master starts as their value
    master_ = Tensor::empty({n}, DType::F32, device);
    kernels::cast(values, master_);
  } else {
    master_ = values;
  }
  // Runs of consecutive parameters that share a weight decay and a learning-rate group (the
  // update is elementwise, so runs give the same result as one update per parameter), clipped
  // to the range; the kernel updates all of a group's runs in one pass. The store's layout is
  // fixed once allocated; it puts the expert parameters after the dense ones
  // (ParameterStore::allocate), so a run holds one kind and the runs are sorted by offset.
  const std::vector<Parameter>& params = store.params();
  for (size_t i = 0; i < params.size();) {
    const bool decay = params[i].spec.weight_decay, expert = params[i].spec.expert;
    const LrGroup group = lr_group(params[i].spec);
    int64_t begin = params[i].flat_offset;
    int64_t end = begin;
    for (; i < params.size() && params[i].spec.weight_decay == decay &&
           params[i].spec.expert == expert && lr_group(params[i].spec) == group;
         ++i)
      end = params[i].flat_offset + params[i].value.numel();
    begin = std::max(begin, range_.begin) - range_.begin;
    end = std::min(end, range_.end) - range_.begin;
    if (end > begin && group != kMuon) runs_[group].push_back({begin, end, decay});
  }
  for (std::vector<kernels::AdamWRun>& runs : runs_)
    std::sort(runs.begin(), runs.end(), [](const kernels::AdamWRun& a, const kernels::AdamWRun& b) {
      return a.begin < b.begin;
    });
  if (config.muon)
    muon_ = std::make_unique<Muon>(store, *config.muon, range_, std::move(muon_groups));
}

AdamW::LrGroup AdamW::lr_group(const ParamSpec& spec) const {
  if (config_.muon && is_muon_matrix(spec)) return kMuon;
  if (spec.embedding_or_output) return kDecoupled;
  if (config_.mup_width_mult != 1.0 && spec.mup_hidden()) return kMupHidden;
  return kBase;
}

void AdamW::step(double lr) {
  step(lr, store_.flat_grads().slice(0, range_.begin, range_.end));
}

void AdamW::step(double lr, const Tensor& grads) {
  MT_CHECK(grads.numel() == range_.end - range_.begin && grads.dtype() == DType::F32,
           "AdamW::step: gradients ", grads.describe(), " for a range of ",
           range_.end - range_.begin, " f32 elements");
  ++steps_;
  kernels::AdamWHyper h{float(lr),          float(config_.beta1),        float(config_.beta2),
                        float(config_.eps), float(config_.weight_decay), steps_};
  const std::optional<double> group_lr[kNumGroups] = {lr, decoupled_lr_, mup_hidden_lr_};
  for (int g = 0; g < kNumGroups; ++g) {
    if (runs_[g].empty()) continue;
    h.lr = float(group_lr[g].value_or(lr));
    h.eps = float(g == kMupHidden ? config_.eps / config_.mup_width_mult : config_.eps);
    kernels::adamw_update(master_, grads, exp_avg_, exp_avg_sq_, h, runs_[g]);
  }
  if (muon_) muon_->step(master_, grads, lr, config_.weight_decay);
  write_model_weights();
}

void AdamW::write_model_weights() {
  if (!separate_master_) return;
  Tensor values = store_.flat_values().slice(0, range_.begin, range_.end);
  if (config_.f16_model_weights) {  // rounded to f16, stored in f32
    kernels::cast(master_, f16_scratch_);
    kernels::cast(f16_scratch_, values);
  } else {
    kernels::cast(master_, values);
  }
}

void AdamW::reset_master_from_store() {
  if (separate_master_)
    kernels::cast(store_.flat_values().slice(0, range_.begin, range_.end), master_);
}

std::map<std::string, Tensor> AdamW::flat_buffers() const {
  std::map<std::string, Tensor> buffers{{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
  if (separate_master_) buffers.emplace(kMasterWeightsBuffer, master_);
  if (muon_) buffers.emplace(kMuonMomentumBuffer, muon_->momentum());
  return buffers;
}

nlohmann::json AdamW::state() const {
  nlohmann::json state = {{"steps", steps_}};
  if (muon_) state["optimizer"] = "muon";
  return state;
}

void AdamW::load_state(const nlohmann::json& state) {
  MT_REQUIRE(state.contains("steps"), "checkpoint optimizer state has no 'steps'");
  const std::string saved_by = state.value("optimizer", std::string("adam"));
  const std::string running = muon_ ? "muon" : "adam";
  MT_REQUIRE(saved_by == running, "the checkpoint's optimizer state was saved by --optimizer ",
             saved_by, ", this run uses --optimizer ", running,
             ": give the same --optimizer, or --no-load-optim to start the optimizer afresh");
  steps_ = state.at("steps").get<int64_t>();
}

}  // namespace megatron
