#include "model/moe_options.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace megatron {

void set_moe_load_balancing(MoeOptions& m, const std::vector<std::string>& types,
                            const std::vector<double>& coeffs) {
  MT_REQUIRE(types.size() == coeffs.size() || (types.size() == 1 && coeffs.empty()),
             "--moe-router-load-balancing-type gives ", types.size(),
             " types and --moe-aux-loss-coeff ", coeffs.size(),
             " coefficients: give one coefficient per type");
  m.aux_loss_coeff = m.seq_aux_loss_coeff = m.global_aux_loss_coeff = 0.0;
  m.sinkhorn = false;
  for (size_t i = 0; i < types.size(); ++i) {
    const double c = i < coeffs.size() ? coeffs[i] : 0.0;
    MT_REQUIRE(c >= 0, "--moe-aux-loss-coeff must be >= 0, got ", c);
    if (types[i] == "sinkhorn") {
      // Megatron's router asserts a zero coefficient and routes by sinkhorn only when it is
      // the one type.
      MT_REQUIRE(types.size() == 1 && c == 0,
                 "--moe-router-load-balancing-type sinkhorn balances by its routing alone: give "
                 "it as the only type, with --moe-aux-loss-coeff 0 (or none)");
      m.sinkhorn = true;
    } else if (types[i] == "aux_loss")
      m.aux_loss_coeff = c;
    else if (types[i] == "seq_aux_loss")
      m.seq_aux_loss_coeff = c;
    else if (types[i] == "global_aux_loss")
      m.global_aux_loss_coeff = c;
    else if (types[i] == "quantile_balancing")
      MT_THROW("--moe-router-load-balancing-type ", types[i],
               " is not implemented (docs/moe.md): aux_loss, seq_aux_loss, global_aux_loss, "
               "sinkhorn, none and --moe-router-enable-expert-bias (aux-loss-free balancing) "
               "are");
    else
      MT_REQUIRE(types[i] == "none", "--moe-router-load-balancing-type '", types[i],
                 "' is not known: expected aux_loss, seq_aux_loss, global_aux_loss, sinkhorn, "
                 "quantile_balancing or none");
  }
}

std::vector<std::string> moe_load_balancing_types(const MoeOptions& m) {
  if (m.sinkhorn) return {"sinkhorn"};
  std::vector<std::string> out;
  if (m.aux_loss_coeff > 0) out.push_back("aux_loss");
  if (m.seq_aux_loss_coeff > 0) out.push_back("seq_aux_loss");
  if (m.global_aux_loss_coeff > 0) out.push_back("global_aux_loss");
  if (out.empty()) out.push_back("none");
  return out;
}

std::vector<double> moe_load_balancing_coeffs(const MoeOptions& m) {
  if (m.sinkhorn) return {0.0};
  std::vector<double> out;
  if (m.aux_loss_coeff > 0) out.push_back(m.aux_loss_coeff);
  if (m.seq_aux_loss_coeff > 0) out.push_back(m.seq_aux_loss_coeff);
  if (m.global_aux_loss_coeff > 0) out.push_back(m.global_aux_loss_coeff);
  if (out.empty()) out.push_back(0.0);
  return out;
}

MoeScoreFunction moe_score_function_from_name(const std::string& name) {
  if (name == "softmax") return MoeScoreFunction::kSoftmax;
  if (name == "sigmoid") return MoeScoreFunction::kSigmoid;
  MT_THROW("--moe-router-score-function '", name,
           "' is not implemented: expected softmax or sigmoid");
}

const char* moe_score_function_name(MoeScoreFunction f) {
  return f == MoeScoreFunction::kSigmoid ? "sigmoid" : "softmax";
}

MoeTokenDropPolicy moe_token_drop_policy_from_name(const std::string& name) {
  if (name == "probs") return MoeTokenDropPolicy::kProbs;
  if (name == "position") return MoeTokenDropPolicy::kPosition;
  MT_THROW("--moe-token-drop-policy '", name, "' is not known: expected probs or position");
}

const char* moe_token_drop_policy_name(MoeTokenDropPolicy p) {
  return p == MoeTokenDropPolicy::kPosition ? "position" : "probs";
}

namespace {

// A small parser of Megatron's list expressions: term ('+' term)*, term = '[' ints ']' ('*' int)?,
// the whole optionally in parentheses. Spaces are ignored.
class PatternParser {
 public:
  explicit PatternParser(const std::string& text) {
    for (char c : text)
      if (!std::isspace(static_cast<unsigned char>(c))) s_ += c;
  }

  std::vector<bool> parse() {
    const bool paren = eat('(');
    std::vector<bool> out = term();
    while (eat('+')) {
      const std::vector<bool> more = term();
      out.insert(out.end(), more.begin(), more.end());
    }
    if (paren) expect(')');
    if (pos_ != s_.size()) fail();
    return out;
  }

 private:
  std::vector<bool> term() {
    expect('[');
    std::vector<bool> items;
    if (!eat(']')) {
      do items.push_back(integer() != 0);
      while (eat(','));
      expect(']');
    }
    if (!eat('*')) return items;
    const long repeat = integer();
    std::vector<bool> out;
    for (long i = 0; i < repeat; ++i) out.insert(out.end(), items.begin(), items.end());
    return out;
  }
  long integer() {
    size_t end = pos_;
    while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
    if (end == pos_) fail();
    const long v = std::strtol(s_.substr(pos_, end - pos_).c_str(), nullptr, 10);
    pos_ = end;
    return v;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail();
  }
  [[noreturn]] void fail() const {
    MT_THROW("--moe-layer-freq '", s_,
             "' is neither an integer nor a list of 0/1 per layer such as '([0]+[1]*23)' or "
             "'[1,0,1,0]'");
  }

  std::string s_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<bool> moe_layer_pattern(const std::string& freq, int num_layers) {
  char* end = nullptr;
  const long every = std::strtol(freq.c_str(), &end, 10);
  if (!freq.empty() && *end == '\0') {
    MT_REQUIRE(every >= 1, "--moe-layer-freq must be a positive integer or a list, got ", freq);
    std::vector<bool> out(static_cast<size_t>(num_layers));
    for (int i = 0; i < num_layers; ++i) out[size_t(i)] = i % every == 0;
    return out;
  }
  std::vector<bool> out = PatternParser(freq).parse();
  MT_REQUIRE(out.size() == size_t(num_layers), "--moe-layer-freq '", freq, "' lists ", out.size(),
             " layers, the model has --num-layers ", num_layers, ": give one 0/1 per layer");
  return out;
}

bool MoeOptions::is_moe_layer(int layer, int num_layers) const {
  return enabled() && moe_layer_pattern(layer_freq, num_layers).at(size_t(layer));
}

int MoeOptions::count_moe_layers(int num_layers) const {
  if (!enabled()) return 0;
  int n = 0;
  for (bool moe : moe_layer_pattern(layer_freq, num_layers)) n += moe ? 1 : 0;
  return n;
}

void validate_moe_options(const MoeOptions& m, int num_layers, int64_t dense_ffn, int tp_size) {
  if (!m.enabled()) return;
  const int64_t e = m.num_experts;
  MT_REQUIRE(m.topk >= 1 && m.topk <= e, "--moe-router-topk ", m.topk,
             " must be between 1 and --num-experts ", e);
  const int64_t ffn = m.ffn_hidden_size > 0 ? m.ffn_hidden_size : dense_ffn;
  MT_REQUIRE(ffn % tp_size == 0, "--moe-ffn-hidden-size ", ffn,
             " is not divisible by --tensor-model-parallel-size ", tp_size,
             " (each rank holds a slice of every expert)");
  MT_REQUIRE(m.shared_expert_ffn % tp_size == 0, "--moe-shared-expert-intermediate-size ",
             m.shared_expert_ffn, " is not divisible by --tensor-model-parallel-size ", tp_size);
  MT_REQUIRE(!m.shared_expert_gate || m.shared_expert_ffn > 0,
             "--moe-shared-expert-gate gates the shared expert: give "
             "--moe-shared-expert-intermediate-size too, or drop the gate");
  MT_REQUIRE(m.z_loss_coeff >= 0, "--moe-z-loss-coeff must be >= 0, got ", m.z_loss_coeff);
  MT_REQUIRE((m.num_groups > 0) == (m.group_topk > 0),
             "--moe-router-num-groups and --moe-router-group-topk go together: give both "
             "(group-limited routing) or neither");
  if (m.num_groups > 0) {
    MT_REQUIRE(e % m.num_groups == 0, "--num-experts ", e,
               " is not divisible by --moe-router-num-groups ", m.num_groups);
    MT_REQUIRE(m.group_topk <= m.num_groups, "--moe-router-group-topk ", m.group_topk,
               " must be at most --moe-router-num-groups ", m.num_groups);
    MT_REQUIRE(m.topk % m.group_topk == 0 && m.topk / m.group_topk <= e / m.num_groups,
               "--moe-router-topk ", m.topk, " must be a multiple of --moe-router-group-topk ",
               m.group_topk, " and at most ", m.group_topk, " x the ", e / m.num_groups,
               " experts of a group (each group is scored by its top topk/group_topk experts)");
  }
  // Megatron's rule: the bias is added to sigmoid scores (softmax routing ignores it).
  MT_REQUIRE(!m.expert_bias || m.score_function == MoeScoreFunction::kSigmoid,
             "--moe-router-enable-expert-bias adds its bias to sigmoid scores: give "
             "--moe-router-score-function sigmoid, or drop the flag");
  MT_REQUIRE(!m.router_fp64 || !m.sinkhorn,
             "--moe-router-dtype fp64 with --moe-router-load-balancing-type sinkhorn is not "
             "implemented (the Sinkhorn kernel takes f32 logits): give --moe-router-dtype fp32");
  MT_REQUIRE(m.bias_update_rate >= 0, "--moe-router-bias-update-rate must be >= 0, got ",
             m.bias_update_rate);
  MT_REQUIRE(!m.topk_scaling_factor || *m.topk_scaling_factor > 0,
             "--moe-router-topk-scaling-factor must be positive");
  MT_REQUIRE(!m.capacity_factor || *m.capacity_factor > 0,
             "--moe-expert-capacity-factor must be positive");
  MT_REQUIRE(!m.pad_to_capacity || m.capacity_factor,
             "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (the "
             "capacity to pad to)");
  int moe_layers = 0;
  for (bool moe : moe_layer_pattern(m.layer_freq, num_layers)) moe_layers += moe ? 1 : 0;
  MT_REQUIRE(moe_layers > 0, "--moe-layer-freq ", m.layer_freq,
             " selects no layer of the model: with --num-experts at least one layer is MoE");
}

}  // namespace megatron
