#include "train/optimizer.h"

#include "kernels/adamw.h"
#include "kernels/elementwise.h"

namespace megatron {

AdamW::AdamW(ParameterStore& store, const AdamWConfig& config) : store_(store), config_(config) {
  MT_CHECK(store.flat_values().defined(), "AdamW needs an allocated ParameterStore");
  const int64_t n = store.flat_values().numel();
  const Device device = store.device();
  exp_avg_ = Tensor::zeros({n}, DType::F32, device);
  exp_avg_sq_ = Tensor::zeros({n}, DType::F32, device);
  if (config.f16_model_weights) {
    master_ = store.flat_values().clone();
    f16_scratch_ = Tensor::empty({n}, DType::F16, device);
    write_model_weights();
  } else {
    master_ = store.flat_values();
  }
}

void AdamW::step(double lr) {
  ++steps_;
  // One fused pass per run of consecutive parameters that share a weight decay (the update
  // is elementwise, so runs give the same result as one call per parameter).
  const std::vector<Parameter>& params = store_.params();
  Tensor& grads = store_.flat_grads();
  for (size_t i = 0; i < params.size();) {
    const bool decay = params[i].spec.weight_decay;
    const int64_t begin = params[i].flat_offset;
    int64_t end = begin;
    for (; i < params.size() && params[i].spec.weight_decay == decay; ++i)
      end = params[i].flat_offset + params[i].value.numel();
    if (end == begin) continue;
    Tensor value = master_.slice(0, begin, end);
    Tensor m = exp_avg_.slice(0, begin, end);
    Tensor v = exp_avg_sq_.slice(0, begin, end);
    kernels::AdamWHyper h{float(lr),
                          float(config_.beta1),
                          float(config_.beta2),
                          float(config_.eps),
                          decay ? float(config_.weight_decay) : 0.0f,
                          steps_};
    kernels::adamw_update(value, grads.slice(0, begin, end), m, v, h);
  }
  if (config_.f16_model_weights) write_model_weights();
}

void AdamW::write_model_weights() {
  if (!config_.f16_model_weights) return;
  kernels::cast(master_, f16_scratch_);
  kernels::cast(f16_scratch_, store_.flat_values());
}

void AdamW::reset_master_from_store() {
  if (config_.f16_model_weights) master_.copy_from(store_.flat_values());
}

std::map<std::string, Tensor> AdamW::flat_buffers() const {
  std::map<std::string, Tensor> buffers{{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
  if (config_.f16_model_weights) buffers.emplace("fp32_master", master_);
  return buffers;
}

void AdamW::load_state(const nlohmann::json& state) {
  MT_REQUIRE(state.contains("steps"), "checkpoint optimizer state has no 'steps'");
  steps_ = state.at("steps").get<int64_t>();
}

}  // namespace megatron
