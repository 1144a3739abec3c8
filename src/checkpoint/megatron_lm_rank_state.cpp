#include "checkpoint/megatron_lm_rank_state.h"

#include "core/error.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace megatron {

namespace {

// A 0-dimensional f32 tensor, as torch keeps Adam's step and the loss scale.
PyValue scalar_tensor(double v) {
  Tensor t = Tensor::empty({}, DType::F32);
  t.data<float>()[0] = float(v);
  return PyValue::tensor(t);
}

// Megatron's default no_weight_decay_cond (as megatron_lm_torch_optimizer.cpp reads it): biases
// and 1-D parameters.
bool decayed_parameter(const Parameter& p) {
  return p.spec.full_shape.size() > 1 && !p.spec.name.ends_with(".bias");
}

double number_arg(const nlohmann::json& args, const char* key, double fallback) {
  const auto it = args.find(key);
  return it != args.end() && it->is_number() ? it->get<double>() : fallback;
}

PyValue host_copy(const Tensor& t) {
  return PyValue::tensor(t.to(Device::CPU).clone());
}

// A param group of Megatron's default grouping (with or without weight decay), as torch.optim.Adam
// and Megatron's _get_param_groups fill it in, without its "params".
PyValue param_group(bool decays, const nlohmann::json& args) {
  PyValue g = PyValue::dict();
  PyDict& d = g.as_dict("");
  d.set(PyValue::str("lr"), PyValue::real(number_arg(args, "lr", 0.0)));
  d.set(PyValue::str("betas"),
        PyValue::tuple({PyValue::real(number_arg(args, "adam_beta1", 0.9)),
                        PyValue::real(number_arg(args, "adam_beta2", 0.999))}));
  d.set(PyValue::str("eps"), PyValue::real(number_arg(args, "adam_eps", 1e-8)));
  d.set(PyValue::str("weight_decay"),
        PyValue::real(decays ? number_arg(args, "weight_decay", 0.01) : 0.0));
  for (const char* flag : {"amsgrad", "maximize"})
    d.set(PyValue::str(flag), PyValue::boolean(false));
  d.set(PyValue::str("foreach"), PyValue());
  for (const char* flag : {"capturable", "differentiable"})
    d.set(PyValue::str(flag), PyValue::boolean(false));
  d.set(PyValue::str("fused"), PyValue());
  d.set(PyValue::str("wd_mult"), PyValue::real(decays ? 1.0 : 0.0));
  d.set(PyValue::str("lr_mult"), PyValue::real(1.0));
  d.set(PyValue::str("is_expert_parallel"), PyValue::boolean(false));
  d.set(PyValue::str("is_decoupled_lr"), PyValue::boolean(false));
  return g;
}

// Megatron's loss scaler state (an fp16 run's) from state.json's grad_scaler.
PyValue grad_scaler_entry(const nlohmann::json& state) {
  const nlohmann::json scaler = state.value("grad_scaler", nlohmann::json::object());
  PyValue g = PyValue::dict();
  g.as_dict("").set(PyValue::str("scale"), scalar_tensor(scaler.value("scale", 1.0)));
  g.as_dict("").set(PyValue::str("growth_tracker"),
                    PyValue::integer(scaler.value("growth_tracker", int64_t(0))));
  g.as_dict("").set(PyValue::str("hysteresis_tracker"),
                    PyValue::integer(scaler.value("hysteresis_tracker", int64_t(0))));
  return g;
}

// state.json's optimizer step, checked to be Adam's.
int64_t adam_steps(const nlohmann::json& state) {
  MT_REQUIRE(state.contains("optimizer") && state["optimizer"].contains("steps"),
             "the checkpoint's state.json has no optimizer.steps");
  MT_REQUIRE(state["optimizer"].value("optimizer", std::string("adam")) == "adam",
             "the checkpoint's optimizer state was saved by --optimizer ",
             state["optimizer"]["optimizer"].get<std::string>(),
             "; Megatron-LM's torch format holds Adam's state only");
  return state["optimizer"]["steps"].get<int64_t>();
}

}  // namespace

PyValue megatron_lm_optimizer_entry(
    const std::vector<const Parameter*>& order,
    const std::map<std::string, std::map<std::string, Tensor>>& buffers,
    const nlohmann::json& state, const nlohmann::json& args) {
  const bool mixed_precision = args.value("bf16", false) || args.value("fp16", false);
  auto buffer = [&](const std::string& name) -> const std::map<std::string, Tensor>& {
    auto it = buffers.find(name);
    MT_REQUIRE(it != buffers.end(), "the checkpoint has no optimizer buffer '", name,
               "', which Megatron-LM's optimizer state needs");
    return it->second;
  };
  const auto& exp_avg = buffer("exp_avg");
  const auto& exp_avg_sq = buffer("exp_avg_sq");
  const auto* masters = mixed_precision ? &buffer(kMasterWeightsBuffer) : nullptr;
  const int64_t steps = adam_steps(state);

  PyValue adam_state = PyValue::dict();
  std::vector<PyValue> groups, group_masters;
  int64_t id = 0;
  for (const bool decays : {false, true}) {
    std::vector<PyValue> ids, masters_of_group;
    for (const Parameter* p : order) {
      if (decayed_parameter(*p) != decays) continue;
      const std::string& name = p->spec.name;
      auto slice = [&](const std::map<std::string, Tensor>& b, const char* what) {
        auto it = b.find(name);
        MT_REQUIRE(it != b.end(), "the checkpoint's optimizer buffer ", what, " has no ", name);
        return host_copy(it->second);
      };
      PyValue s = PyValue::dict();
      s.as_dict("").set(PyValue::str("step"), scalar_tensor(double(steps)));
      s.as_dict("").set(PyValue::str("exp_avg"), slice(exp_avg, "exp_avg"));
      s.as_dict("").set(PyValue::str("exp_avg_sq"), slice(exp_avg_sq, "exp_avg_sq"));
      adam_state.as_dict("").set(PyValue::integer(id), std::move(s));
      ids.push_back(PyValue::integer(id++));
      if (masters) masters_of_group.push_back(slice(*masters, kMasterWeightsBuffer));
    }
    PyValue g = param_group(decays, args);
    PyDict& d = g.as_dict("");
    d.set(PyValue::str("params"), PyValue::list(std::move(ids)));
    groups.push_back(std::move(g));
    group_masters.push_back(PyValue::list(std::move(masters_of_group)));
  }
  PyValue torch_optim = PyValue::dict();
  torch_optim.as_dict("").set(PyValue::str("state"), std::move(adam_state));
  torch_optim.as_dict("").set(PyValue::str("param_groups"), PyValue::list(std::move(groups)));
  if (!mixed_precision) return torch_optim;
  PyValue outer = PyValue::dict();
  PyDict& o = outer.as_dict("");
  o.set(PyValue::str("optimizer"), std::move(torch_optim));
  if (args.value("fp16", false)) o.set(PyValue::str("grad_scaler"), grad_scaler_entry(state));
  o.set(PyValue::str("fp32_from_fp16_params"), PyValue::list(std::move(group_masters)));
  return outer;
}

PyValue megatron_lm_distributed_optimizer_entry(const nlohmann::json& state,
                                                const nlohmann::json& args) {
  const int64_t steps = adam_steps(state);
  std::vector<PyValue> groups;
  for (const bool decays : {false, true}) {
    PyValue g = param_group(decays, args);
    g.as_dict("").set(PyValue::str("step"), PyValue::integer(steps));
    groups.push_back(std::move(g));
  }
  PyValue torch_optim = PyValue::dict();
  torch_optim.as_dict("").set(PyValue::str("param_groups"), PyValue::list(std::move(groups)));
  PyValue outer = PyValue::dict();
  outer.as_dict("").set(PyValue::str("optimizer"), std::move(torch_optim));
  if (args.value("fp16", false))
    outer.as_dict("").set(PyValue::str("grad_scaler"), grad_scaler_entry(state));
  return outer;
}

PyValue megatron_lm_scheduler_entry(const nlohmann::json& state, const std::string& dir) {
  MT_REQUIRE(state.contains("scheduler"), "checkpoint '", dir,
             "': state.json has no scheduler (saved with --no-save-optim?)");
  const nlohmann::json& s = state["scheduler"];
  auto field = [&](const char* key) -> const nlohmann::json& {
    MT_REQUIRE(s.contains(key), "checkpoint '", dir, "': state.json's scheduler has no ", key);
    return s[key];
  };
  // Megatron keeps its step counts as ints; megatron-cpp's warmup may be fractional.
  auto count = [&](const char* key) {
    const double v = field(key).get<double>();
    return v == double(int64_t(v)) ? PyValue::integer(int64_t(v)) : PyValue::real(v);
  };
  PyValue out = PyValue::dict();
  PyDict& d = out.as_dict("");
  d.set(PyValue::str("max_lr"), PyValue::real(field("max_lr").get<double>()));
  d.set(PyValue::str("lr_warmup_steps"), count("warmup_steps"));
  d.set(PyValue::str("num_steps"), count("num_steps"));
  d.set(PyValue::str("lr_decay_style"),
        PyValue::str(lr_decay_style_name(LrDecayStyle(field("decay_style").get<int>()))));
  d.set(PyValue::str("lr_decay_steps"), count("decay_steps"));
  d.set(PyValue::str("min_lr"), PyValue::real(field("min_lr").get<double>()));
  d.set(PyValue::str("start_wd"), PyValue::real(field("start_wd").get<double>()));
  d.set(PyValue::str("end_wd"), PyValue::real(field("end_wd").get<double>()));
  d.set(PyValue::str("wd_incr_style"),
        PyValue::str(
            weight_decay_incr_style_name(WeightDecayIncrStyle(field("wd_incr_style").get<int>()))));
  d.set(PyValue::str("wd_incr_steps"), count("wd_incr_steps"));
  return out;
}

}  // namespace megatron
