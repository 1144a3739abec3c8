#include "train/optimizer.h"

#include "kernels/adamw.h"

namespace megatron {

AdamW::AdamW(ParameterStore& store, const AdamWConfig& config) : store_(store), config_(config) {
  MT_CHECK(store.flat_values().defined(), "AdamW needs an allocated ParameterStore");
  const int64_t n = store.flat_values().numel();
  exp_avg_ = Tensor::zeros({n}, DType::F32);
  exp_avg_sq_ = Tensor::zeros({n}, DType::F32);
}

void AdamW::step(double lr) {
  ++steps_;
  for (Parameter& p : store_.params()) {
    const int64_t n = p.value.numel();
    Tensor value = p.value.flatten();
    Tensor m = exp_avg_.slice(0, p.flat_offset, p.flat_offset + n);
    Tensor v = exp_avg_sq_.slice(0, p.flat_offset, p.flat_offset + n);
    kernels::AdamWHyper h{float(lr),          float(config_.beta1), float(config_.beta2),
                          float(config_.eps),
                          p.spec.weight_decay ? float(config_.weight_decay) : 0.0f, steps_};
    kernels::adamw_update(value, p.grad.flatten(), m, v, h);
  }
}

std::map<std::string, Tensor> AdamW::flat_buffers() const {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

void AdamW::load_state(const nlohmann::json& state) {
  MT_CHECK(state.contains("steps"), "checkpoint optimizer state has no 'steps'");
  steps_ = state.at("steps").get<int64_t>();
}

}  // namespace megatron
