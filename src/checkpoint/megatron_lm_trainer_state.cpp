#include "checkpoint/megatron_lm_trainer_state.h"

#include <optional>

#include "core/error.h"
#include "optim/lr_schedule.h"

namespace megatron {

namespace {

// A Python number or a one-element tensor (torch.optim keeps its step as a float tensor, the
// loss scaler its scale).
double number(const PyValue& v, const std::string& what) {
  if (v.kind() != PyValue::Kind::kTensor) return v.as_float(what);
  const Tensor& t = v.as_tensor(what).data;
  MT_REQUIRE(t.numel() == 1, what, " is a tensor of ", t.numel(), " elements, not a number");
  const Tensor c = t.clone();
  switch (c.dtype()) {
    case DType::F32:
      return c.data<float>()[0];
    case DType::I64:
      return double(c.data<int64_t>()[0]);
    case DType::I32:
      return c.data<int32_t>()[0];
    default:
      MT_THROW(what, " is a tensor of an unexpected dtype (f32, i64 or i32 expected)");
  }
}

// The Adam step count: the torch.optim state's "common_step" (Megatron-Core's sharded state
// dicts), else every param group's "step" (Apex and Transformer Engine FusedAdam, the
// distributed optimizer), else every parameter state's "step" (torch.optim.Adam in the legacy
// torch format); they must agree.
std::optional<int64_t> optimizer_step(const PyDict& torch_optim, const std::string& where) {
  const PyValue* state = torch_optim.find("state");
  if (state && state->kind() == PyValue::Kind::kDict)
    if (const PyValue* step = state->as_dict(where).find("common_step"))
      return int64_t(number(*step, where + " state.common_step"));
  std::optional<int64_t> step;
  auto take = [&](const PyValue* s, const std::string& what) {
    if (!s || s->is_none()) return;
    const int64_t v = int64_t(number(*s, what));
    MT_REQUIRE(!step || *step == v, where, ": the ", what, "s differ (", *step, " and ", v,
               "); megatron-cpp keeps one step for all parameters, as Megatron does");
    step = v;
  };
  if (const PyValue* groups = torch_optim.find("param_groups"))
    for (const PyValue& g : groups->as_sequence(where + " param_groups"))
      take(g.as_dict(where + " param group").find("step"), "param group step");
  if (!step && state && state->kind() == PyValue::Kind::kDict)
    for (const auto& [id, s] : state->as_dict(where).items) {
      (void)id;
      if (s.kind() == PyValue::Kind::kDict) take(s.as_dict(where).find("step"), "parameter step");
    }
  return step;
}

// args[key] when it is a number, else `fallback` (absent, or None as Megatron leaves unset ones).
double arg_or(const nlohmann::json& args, const char* key, double fallback) {
  const auto it = args.find(key);
  return it != args.end() && it->is_number() ? it->get<double>() : fallback;
}

nlohmann::json scheduler(const PyDict& s, const std::string& where) {
  auto get = [&](const char* key) -> const PyValue& {
    const PyValue* v = s.find(key);
    MT_REQUIRE(v, where, " has no '", key,
               "' (a Megatron-LM older than its OptimizerParamScheduler is not read)");
    return *v;
  };
  const std::string what = where + " ";
  return {{"num_steps", get("num_steps").as_int(what + "num_steps")},
          {"max_lr", get("max_lr").as_float(what + "max_lr")},
          {"min_lr", get("min_lr").as_float(what + "min_lr")},
          {"warmup_steps", get("lr_warmup_steps").as_float(what + "lr_warmup_steps")},
          {"decay_steps", get("lr_decay_steps").as_int(what + "lr_decay_steps")},
          {"decay_style",
           int(lr_decay_style_from_name(get("lr_decay_style").as_str(what + "lr_decay_style")))},
          {"start_wd", get("start_wd").as_float(what + "start_wd")},
          {"end_wd", get("end_wd").as_float(what + "end_wd")},
          {"wd_incr_steps", get("wd_incr_steps").as_int(what + "wd_incr_steps")},
          {"wd_incr_style", int(weight_decay_incr_style_from_name(
                                get("wd_incr_style").as_str(what + "wd_incr_style")))}};
}

}  // namespace

nlohmann::json megatron_lm_trainer_state(const PyValue& root, const nlohmann::json& args,
                                         const std::string& dir) {
  const std::string where = "Megatron-LM checkpoint '" + dir + "'";
  const PyDict& d = root.as_dict(where);
  nlohmann::json state = {
      {"iteration", d.find("iteration") ? d.find("iteration")->as_int(where + " iteration") : 0},
      {"consumed_train_samples", int64_t(arg_or(args, "consumed_train_samples", 0))},
      {"consumed_valid_samples", int64_t(arg_or(args, "consumed_valid_samples", 0))}};
  if (const PyValue* s = d.find("opt_param_scheduler"); s && !s->is_none())
    state["scheduler"] = scheduler(s->as_dict(where), where + " opt_param_scheduler");
  if (const PyValue* o = d.find("optimizer"); o && !o->is_none()) {
    const PyDict& outer = o->as_dict(where + " optimizer");
    // MixedPrecisionOptimizer / DistributedOptimizer: {"optimizer": torch's, "grad_scaler"};
    // FP32Optimizer: torch's state dict itself.
    const PyValue* inner = outer.find("optimizer");
    const PyDict& torch_optim = inner ? inner->as_dict(where + " optimizer.optimizer") : outer;
    if (const std::optional<int64_t> step = optimizer_step(torch_optim, where + " optimizer"))
      state["optimizer"] = {{"steps", *step}};
    // bf16 and fp32 runs have no scaler (megatron-cpp's is then constant and reads nothing).
    state["grad_scaler"] = {{"scale", arg_or(args, "loss_scale", 1.0)},
                            {"growth_tracker", 0},
                            {"hysteresis_tracker", int64_t(arg_or(args, "hysteresis", 2))}};
    if (const PyValue* g = outer.find("grad_scaler"); g && !g->is_none()) {
      const PyDict& scaler = g->as_dict(where + " grad_scaler");
      if (const PyValue* scale = scaler.find("scale")) {
        auto integer = [&](const char* key) {
          const PyValue* v = scaler.find(key);
          return v ? int64_t(number(*v, where + " grad_scaler." + key)) : int64_t(0);
        };
        state["grad_scaler"] = {{"scale", number(*scale, where + " grad_scaler.scale")},
                                {"growth_tracker", integer("growth_tracker")},
                                {"hysteresis_tracker", integer("hysteresis_tracker")}};
      }
    }
  }
  return state;
}

nlohmann::json megatron_lm_saved_args(const nlohmann::json& state, int tp, int pp,
                                      const std::string& ckpt_format) {
  nlohmann::json args = state.value("args", nlohmann::json::object());
  args.update(state.value("model", nlohmann::json::object()));
  args["tensor_model_parallel_size"] = tp;
  args["pipeline_model_parallel_size"] = pp;
  args["iteration"] = state.value("iteration", int64_t(0));
  args["consumed_train_samples"] = state.value("consumed_train_samples", int64_t(0));
  args["consumed_valid_samples"] = state.value("consumed_valid_samples", int64_t(0));
  args["make_vocab_size_divisible_by"] = args.value("make_vocab_size_divisible_by", 128);
  args["ckpt_format"] = ckpt_format;
  // Megatron-LM compares these with its flags when it resumes (check_checkpoint_args).
  args["add_position_embedding"] =
      args.value("position_embedding_type", std::string("learned_absolute")) == "learned_absolute";
  const nlohmann::json tokenizer = state.value("tokenizer", nlohmann::json::object());
  if (tokenizer.is_object() && tokenizer.contains("type"))
    args["tokenizer_type"] = tokenizer["type"];
  return args;
}

namespace {

PyValue py_number(const nlohmann::json& v) {
  return v.is_number_integer() ? PyValue::integer(v.get<int64_t>())
                               : PyValue::real(v.get<double>());
}

PyValue py_dict(std::vector<std::pair<std::string, PyValue>> items) {
  PyValue d = PyValue::dict();
  for (auto& [k, v] : items) d.as_dict("").set(PyValue::str(k), std::move(v));
  return d;
}

// torch.optim's param group of an AdamW with `args`' settings holding parameter ids
// [first, first + count).
PyValue adam_param_group(const nlohmann::json& args, bool decayed, int64_t first, int64_t count) {
  auto number = [&](const char* key, double fallback) {
    const auto it = args.find(key);
    return it != args.end() && it->is_number() ? it->get<double>() : fallback;
  };
  const double wd = decayed ? number("weight_decay", 0.01) : 0.0;
  std::vector<PyValue> ids;
  for (int64_t i = first; i < first + count; ++i) ids.push_back(PyValue::integer(i));
  return py_dict({{"lr", PyValue::real(number("lr", 0))},
                  {"betas", PyValue::tuple({PyValue::real(number("adam_beta1", 0.9)),
                                            PyValue::real(number("adam_beta2", 0.999))})},
                  {"eps", PyValue::real(number("adam_eps", 1e-8))},
                  {"weight_decay", PyValue::real(wd)},
                  {"amsgrad", PyValue::boolean(false)},
                  {"wd_mult", PyValue::real(decayed ? 1.0 : 0.0)},
                  {"lr_mult", PyValue::real(1.0)},
                  {"is_expert_parallel", PyValue::boolean(false)},
                  {"is_decoupled_lr", PyValue::boolean(false)},
                  {"params", PyValue::list(std::move(ids))}});
}

}  // namespace

void add_megatron_lm_trainer_state(PyDict& root, const nlohmann::json& state,
                                   const nlohmann::json& args, bool mixed_precision,
                                   const std::pair<int64_t, int64_t>& group_sizes) {
  root.set(PyValue::str("iteration"), PyValue::integer(state.value("iteration", int64_t(0))));
  if (state.contains("scheduler")) {
    const nlohmann::json& s = state["scheduler"];
    root.set(
        PyValue::str("opt_param_scheduler"),
        py_dict({{"max_lr", py_number(s.at("max_lr"))},
                 {"lr_warmup_steps", py_number(s.at("warmup_steps"))},
                 {"num_steps", py_number(s.at("num_steps"))},
                 {"lr_decay_style",
                  PyValue::str(lr_decay_style_name(LrDecayStyle(s.at("decay_style").get<int>())))},
                 {"lr_decay_steps", py_number(s.at("decay_steps"))},
                 {"min_lr", py_number(s.at("min_lr"))},
                 {"start_wd", py_number(s.at("start_wd"))},
                 {"end_wd", py_number(s.at("end_wd"))},
                 {"wd_incr_style", PyValue::str(weight_decay_incr_style_name(
                                       WeightDecayIncrStyle(s.at("wd_incr_style").get<int>())))},
                 {"wd_incr_steps", py_number(s.at("wd_incr_steps"))}}));
  }
  if (!state.contains("optimizer")) return;
  // torch.optim keeps the step as a float32 0-d tensor; Megatron-Core's sharded state dict
  // moves it to "common_step".
  Tensor step = Tensor::empty({}, DType::F32);
  step.data<float>()[0] = float(state["optimizer"].value("steps", int64_t(0)));
  PyValue torch_optim = py_dict(
      {{"state", py_dict({{"common_step", PyValue::tensor(step)}})},
       {"param_groups",
        PyValue::list({adam_param_group(args, true, 0, group_sizes.first),
                       adam_param_group(args, false, group_sizes.first, group_sizes.second)})}});
  if (!mixed_precision) {
    root.set(PyValue::str("optimizer"), torch_optim);
    return;
  }
  PyValue outer = py_dict({{"optimizer", torch_optim}});
  if (args.value("fp16", false) && state.contains("grad_scaler")) {
    const nlohmann::json& g = state["grad_scaler"];
    auto scalar = [](double v) {
      Tensor t = Tensor::empty({}, DType::F32);
      t.data<float>()[0] = float(v);
      return PyValue::tensor(t);
    };
    outer.as_dict("").set(
        PyValue::str("grad_scaler"),
        py_dict(
            {{"scale", scalar(g.value("scale", 1.0))},
             {"growth_tracker", PyValue::integer(g.value("growth_tracker", int64_t(0)))},
             {"hysteresis_tracker", PyValue::integer(g.value("hysteresis_tracker", int64_t(0)))}}));
  }
  outer.as_dict("").set(PyValue::str("fp32_from_fp16_params"),
                        PyValue::list({PyValue::list(), PyValue::list()}));
  root.set(PyValue::str("optimizer"), outer);
}

}  // namespace megatron
