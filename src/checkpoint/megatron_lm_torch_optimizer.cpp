#include "checkpoint/megatron_lm_torch_optimizer.h"

#include "core/error.h"

namespace megatron {

namespace {

// Megatron's default no_weight_decay_cond: biases and 1-D parameters.
bool decayed(const std::string& name, const Tensor& t) {
  return t.dim() > 1 && !name.ends_with(".bias");
}

// Whether a param group applies weight decay: its wd_mult (Megatron since 2023), else its
// weight_decay.
bool group_decays(const PyDict& group, const std::string& where) {
  if (const PyValue* m = group.find("wd_mult")) return m->as_float(where + " wd_mult") > 0;
  const PyValue* wd = group.find("weight_decay");
  MT_REQUIRE(wd, where, " has neither wd_mult nor weight_decay");
  return wd->as_float(where + " weight_decay") > 0;
}

// The state of parameter id `id` (the state dict's int keys).
const PyValue* find_id(const PyDict& state, int64_t id) {
  for (const auto& [k, v] : state.items)
    if (k.kind() == PyValue::Kind::kInt && k.as_int("a parameter id") == id) return &v;
  return nullptr;
}

const Tensor& state_tensor(const PyDict& state, const char* key, const std::string& where) {
  const PyValue* v = state.find(key);
  MT_REQUIRE(v && v->kind() == PyValue::Kind::kTensor, where, " has no tensor '", key, "'");
  return v->as_tensor(where).data;
}

// The rank's "optimizer" entry (null: none) and Adam's state dict in it (null: no state).
struct OptimizerEntry {
  const PyDict* outer = nullptr;
  const PyDict* adam = nullptr;
};
OptimizerEntry optimizer_entry(const MegatronLmRank& rank, const std::string& where) {
  OptimizerEntry e;
  const PyValue* entry = rank.root.as_dict(where).find("optimizer");
  if (!entry || entry->is_none()) return e;
  e.outer = &entry->as_dict(where);
  const PyValue* inner = e.outer->find("optimizer");
  const PyDict& adam = inner ? inner->as_dict(where) : *e.outer;
  const PyValue* state = adam.find("state");
  if (state && !state->as_dict(where + " state").items.empty()) e.adam = &adam;
  return e;
}

}  // namespace

bool megatron_lm_rank_has_optimizer_state(const MegatronLmRank& rank) {
  return optimizer_entry(rank, "the optimizer of Megatron-LM checkpoint '" + rank.path + "'").adam;
}

std::map<std::string, std::map<std::string, Tensor>> megatron_lm_rank_optimizer(
    const MegatronLmRank& rank, const std::vector<std::pair<std::string, Tensor>>& parameters) {
  const std::string where = "the optimizer of Megatron-LM checkpoint '" + rank.path + "'";
  std::map<std::string, std::map<std::string, Tensor>> out;
  const OptimizerEntry entry = optimizer_entry(rank, where);
  if (!entry.adam) return out;
  const PyDict& outer = *entry.outer;
  const PyDict& inner = *entry.adam;
  const PyDict& state = inner.find("state")->as_dict(where + " state");
  const PyValue* groups_value = inner.find("param_groups");
  MT_REQUIRE(groups_value, where, " has a state but no param_groups");
  const std::vector<PyValue>& groups = groups_value->as_sequence(where + " param_groups");
  const PyValue* masters_value = outer.find("fp32_from_fp16_params");
  const std::vector<PyValue>* masters =
      masters_value && !masters_value->is_none()
          ? &masters_value->as_sequence(where + " fp32_from_fp16_params")
          : nullptr;
  MT_REQUIRE(!masters || masters->size() == groups.size(), where, " has ",
             masters ? masters->size() : 0, " groups of fp32_from_fp16_params for ", groups.size(),
             " param groups");
  bool seen[2] = {false, false};
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string group_where = where + " param group " + std::to_string(g);
    const PyDict& group = groups[g].as_dict(group_where);
    const std::vector<PyValue>& ids = group.find("params")
                                          ? group.find("params")->as_sequence(group_where)
                                          : std::vector<PyValue>{};
    if (ids.empty()) continue;  // Megatron aligns the groups over ranks: some are empty
    const bool decays = group_decays(group, group_where);
    MT_REQUIRE(!seen[decays], where, " has more than one non-empty param group ",
               decays ? "with" : "without",
               " weight decay (learning-rate or weight-decay overrides: --decoupled-lr, "
               "--no-weight-decay-cond-type, muP, ...), whose parameters cannot be told apart; "
               "start from the weights with --finetune");
    seen[decays] = true;
    std::vector<size_t> members;
    for (size_t i = 0; i < parameters.size(); ++i)
      if (decayed(parameters[i].first.empty() ? "weight" : parameters[i].first,
                  parameters[i].second) == decays)
        members.push_back(i);
    MT_REQUIRE(members.size() == ids.size(), group_where, " holds ", ids.size(),
               " parameters, the model's rank has ", members.size(), " parameters ",
               decays ? "with" : "without", " weight decay");
    const std::vector<PyValue>* group_masters =
        masters ? &(*masters)[g].as_sequence(group_where + " fp32_from_fp16_params") : nullptr;
    MT_REQUIRE(!group_masters || group_masters->size() == ids.size(), group_where, " has ",
               group_masters ? group_masters->size() : 0, " fp32_from_fp16_params for ", ids.size(),
               " parameters");
    for (size_t j = 0; j < ids.size(); ++j) {
      const auto& [name, param] = parameters[members[j]];
      const int64_t id = ids[j].as_int(group_where + " params");
      const std::string param_where = where + " state " + std::to_string(id) + " (" +
                                      (name.empty() ? "the tied output layer" : name) + ")";
      const PyValue* s = find_id(state, id);
      MT_REQUIRE(s, where, " has no state for parameter id ", id, " (",
                 name.empty() ? "the tied output layer" : name, ")");
      std::vector<std::pair<std::string, Tensor>> tensors = {
          {"exp_avg", state_tensor(s->as_dict(param_where), "exp_avg", param_where)},
          {"exp_avg_sq", state_tensor(s->as_dict(param_where), "exp_avg_sq", param_where)}};
      if (group_masters)
        tensors.emplace_back("fp32_master",
                             (*group_masters)[j].as_tensor(param_where + " fp32 main param").data);
      for (const auto& [buffer, t] : tensors) {
        MT_REQUIRE(t.shape() == param.shape(), param_where, ": ", buffer, " is ",
                   shape_str(t.shape()), ", its parameter ", shape_str(param.shape()),
                   " (the param groups do not list the parameters in the model's order)");
        if (!name.empty()) out[buffer][name] = t;
      }
    }
  }
  return out;
}

}  // namespace megatron
