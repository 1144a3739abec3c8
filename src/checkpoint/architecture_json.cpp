#include "checkpoint/architecture_json.h"

#include <optional>
#include <string>

namespace megatron {

namespace {

// A stored number that Megatron writes as null when unset.
float number_or(const nlohmann::json& args, const char* key, float fallback) {
  return args.contains(key) && args[key].is_number() ? args[key].get<float>() : fallback;
}

int64_t integer_or(const nlohmann::json& args, const char* key, int64_t fallback) {
  return args.contains(key) && args[key].is_number_integer() ? args[key].get<int64_t>() : fallback;
}

std::optional<double> optional_number(const nlohmann::json& args, const char* key) {
  if (args.contains(key) && args[key].is_number()) return args[key].get<double>();
  return std::nullopt;
}

// Megatron-LM's attribute names of --num-experts and the --moe-* flags; null is its None.
MoeOptions moe_from_args_json(const nlohmann::json& args) {
  MoeOptions m;
  m.num_experts = integer_or(args, "num_experts", 0);
  if (!m.enabled()) return m;
  m.ffn_hidden_size = integer_or(args, "moe_ffn_hidden_size", 0);
  m.topk = integer_or(args, "moe_router_topk", m.topk);
  // Megatron stores a type and a coefficient, or lists of them.
  const auto list = [&](const char* key, auto fallback) {
    using T = typename decltype(fallback)::value_type;
    if (!args.contains(key) || args[key].is_null()) return fallback;
    if (args[key].is_array()) return args[key].get<decltype(fallback)>();
    return decltype(fallback){args[key].get<T>()};
  };
  set_moe_load_balancing(
      m, list("moe_router_load_balancing_type", std::vector<std::string>{"aux_loss"}),
      list("moe_aux_loss_coeff", std::vector<double>{0.0}));
  m.z_loss_coeff = optional_number(args, "moe_z_loss_coeff").value_or(0.0);
  m.score_function =
      moe_score_function_from_name(args.value("moe_router_score_function", std::string("softmax")));
  m.pre_softmax = args.value("moe_router_pre_softmax", false);
  m.topk_scaling_factor = optional_number(args, "moe_router_topk_scaling_factor");
  m.expert_bias = args.value("moe_router_enable_expert_bias", false);
  m.router_fp64 = args.contains("moe_router_dtype") && args["moe_router_dtype"].is_string() &&
                  args["moe_router_dtype"].get<std::string>() == "fp64";
  m.bias_update_rate = optional_number(args, "moe_router_bias_update_rate").value_or(1e-3);
  m.num_groups = integer_or(args, "moe_router_num_groups", 0);
  m.group_topk = integer_or(args, "moe_router_group_topk", 0);
  if (args.contains("moe_layer_freq")) {
    const nlohmann::json& f = args["moe_layer_freq"];
    if (f.is_number_integer()) {
      m.layer_freq = std::to_string(f.get<int64_t>());
    } else if (f.is_array()) {  // Megatron stores the evaluated list
      m.layer_freq = "[";
      for (size_t i = 0; i < f.size(); ++i)
        m.layer_freq += (i ? "," : "") + std::to_string(f[i].get<int64_t>());
      m.layer_freq += "]";
    } else if (f.is_string()) {
      m.layer_freq = f.get<std::string>();
    }
  }
  m.shared_expert_ffn = integer_or(args, "moe_shared_expert_intermediate_size", 0);
  m.shared_expert_gate = args.value("moe_shared_expert_gate", false);
  m.capacity_factor = optional_number(args, "moe_expert_capacity_factor");
  m.pad_to_capacity = args.value("moe_pad_expert_input_to_capacity", false);
  m.drop_policy =
      moe_token_drop_policy_from_name(args.value("moe_token_drop_policy", std::string("probs")));
  return m;
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json positive_or_null(int64_t v) {
  return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

ArchitectureOptions architecture_from_args_json(const nlohmann::json& args) {
  ArchitectureOptions o;
  o.position_embedding = position_embedding_from_name(
      args.value("position_embedding_type", std::string("learned_absolute")));
  o.normalization = normalization_from_name(args.value("normalization", std::string("LayerNorm")));
  o.rotary_base = number_or(args, "rotary_base", o.rotary_base);
  o.rotary_percent = number_or(args, "rotary_percent", o.rotary_percent);
  o.rotary_seq_len_interpolation_factor =
      number_or(args, "rotary_seq_len_interpolation_factor", 1.0f);
  if (args.value("use_rope_scaling", false)) {
    o.rope_scaling.factor = number_or(args, "rope_scaling_factor", 8.0f);
    o.rope_scaling.low_freq_factor =
        number_or(args, "rope_scaling_low_freq_factor", o.rope_scaling.low_freq_factor);
    o.rope_scaling.high_freq_factor =
        number_or(args, "rope_scaling_high_freq_factor", o.rope_scaling.high_freq_factor);
    o.rope_scaling.original_max_position_embeddings =
        number_or(args, "rope_scaling_original_max_position_embeddings",
                  o.rope_scaling.original_max_position_embeddings);
  }
  o.swiglu = args.value("swiglu", false);
  o.num_query_groups =
      args.value("group_query_attention", false) ? args.value("num_query_groups", 1) : 0;
  o.kv_channels = args.value("kv_channels", 0);
  o.add_bias_linear = !args.value("disable_bias_linear", false);
  o.add_qkv_bias = args.value("add_qkv_bias", false);
  o.untie_embeddings_and_output_weights = args.value("untie_embeddings_and_output_weights", false);
  o.apply_layernorm_1p = args.value("apply_layernorm_1p", false);
  o.squared_relu = args.value("squared_relu", false);
  o.qk_layernorm = args.value("qk_layernorm", false);
  o.rotary_interleaved = args.value("rotary_interleaved", false);
  // Megatron-LM's names; q_lora_rank null (its None) is a direct query projection.
  o.mla.enabled = args.value("multi_latent_attention", false);
  if (o.mla.enabled) {
    o.mla.q_lora_rank = args.contains("q_lora_rank") && args["q_lora_rank"].is_number_integer()
                            ? args["q_lora_rank"].get<int64_t>()
                            : 0;
    o.mla.kv_lora_rank = args.value("kv_lora_rank", o.mla.kv_lora_rank);
    o.mla.qk_head_dim = args.value("qk_head_dim", o.mla.qk_head_dim);
    o.mla.qk_pos_emb_head_dim = args.value("qk_pos_emb_head_dim", o.mla.qk_pos_emb_head_dim);
    o.mla.v_head_dim = args.value("v_head_dim", o.mla.v_head_dim);
    // Unset (Megatron's None, our "") is YaRN, MLA's default.
    const nlohmann::json rope_type = args.value("rope_type", nlohmann::json());
    o.mla.yarn = !(rope_type.is_string() && rope_type.get<std::string>() == "rope");
  }
  // YaRN's (Megatron-LM's names; null, its None, or absent: YarnRotaryEmbedding's defaults).
  kernels::YarnRopeScaling& y = o.yarn;
  y.factor = number_or(args, "rotary_scaling_factor", y.factor);
  y.mscale = number_or(args, "mscale", y.mscale);
  y.mscale_all_dim = number_or(args, "mscale_all_dim", y.mscale_all_dim);
  y.original_max_position_embeddings =
      number_or(args, "yarn_original_max_position_embeddings", y.original_max_position_embeddings);
  y.beta_fast = number_or(args, "yarn_beta_fast", y.beta_fast);
  y.beta_slow = number_or(args, "yarn_beta_slow", y.beta_slow);
  const nlohmann::json round = args.value("yarn_correction_range_round_to_int", nlohmann::json());
  y.round_to_int = round.is_boolean() ? round.get<bool>() : y.round_to_int;
  // Megatron-LM's names; a checkpoint without the variant records none.
  const nlohmann::json variant = args.value("experimental_attention_variant", nlohmann::json());
  o.dsa.enabled = variant.is_string() && variant.get<std::string>() == "dsa";
  if (o.dsa.enabled) {
    o.dsa.indexer_heads = args.value("dsa_indexer_n_heads", int64_t(0));
    o.dsa.indexer_head_dim = args.value("dsa_indexer_head_dim", int64_t(0));
    o.dsa.topk = args.value("dsa_indexer_topk", int64_t(0));
    o.dsa.loss_coeff = number_or(args, "dsa_indexer_loss_coeff", 0.0f);
    o.dsa.sparse_loss = args.value("dsa_indexer_use_sparse_loss", false);
    // Megatron's attribute names, or the flags' as our argument table stores them.
    o.dsa.scoring_relu =
        args.value("dsa_indexer_scoring_relu", !args.value("no_dsa_indexer_scoring_relu", false));
    o.dsa.rope_interleaved = args.value("dsa_indexer_rope_interleaved", false);
    o.dsa.rotate_activation = args.value("dsa_indexer_rotate_activation",
                                         !args.value("no_dsa_indexer_rotate_activation", false));
    o.dsa.k_norm_epsilon = number_or(args, "dsa_indexer_k_norm_epsilon", 0.0f);
  }
  MupOptions& m = o.mup;
  m.enabled = args.value("use_mup", false);
  if (m.enabled) {
    m.base_hidden_size =
        args.contains("mup_base_hidden_size") && args["mup_base_hidden_size"].is_number_integer()
            ? args["mup_base_hidden_size"].get<int64_t>()
            : 0;
    m.embedding_mult = number_or(args, "mup_embedding_mult", 1.0f);
    m.output_mult = number_or(args, "mup_output_mult", 1.0f);
    if (args.contains("mup_base_head_dim") && args["mup_base_head_dim"].is_number())
      m.base_head_dim = args["mup_base_head_dim"].get<double>();
    m.attn_scale_power = number_or(args, "mup_attn_scale_power", 1.0f);
  }
  o.moe = moe_from_args_json(args);
  // Megatron-LM's names; null (its None) or absent: no multi-token prediction.
  if (args.contains("mtp_num_layers") && args["mtp_num_layers"].is_number_integer())
    o.mtp.num_layers = args["mtp_num_layers"].get<int>();
  o.mtp.loss_scaling_factor = number_or(args, "mtp_loss_scaling_factor", o.mtp.loss_scaling_factor);
  return o;
}

nlohmann::json architecture_args_json(const ArchitectureOptions& o) {
  nlohmann::json j = {
      {"position_embedding_type", position_embedding_name(o.position_embedding)},
      {"rotary_base", o.rotary_base},
      {"rotary_percent", o.rotary_percent},
      {"rotary_seq_len_interpolation_factor", o.rotary_seq_len_interpolation_factor},
      {"normalization", normalization_name(o.normalization)},
      {"swiglu", o.swiglu},
      {"group_query_attention", o.num_query_groups > 0},
      {"num_query_groups", o.num_query_groups > 0 ? o.num_query_groups : 1},
      {"kv_channels", o.kv_channels},
      {"disable_bias_linear", !o.add_bias_linear},
      {"add_qkv_bias", o.add_qkv_bias},
      {"untie_embeddings_and_output_weights", o.untie_embeddings_and_output_weights},
      {"use_rope_scaling", o.rope_scaling.enabled()},
      {"apply_layernorm_1p", o.apply_layernorm_1p},
      {"squared_relu", o.squared_relu},
      {"qk_layernorm", o.qk_layernorm},
      {"rotary_interleaved", o.rotary_interleaved}};
  if (o.mla.enabled) {
    j["multi_latent_attention"] = true;
    j["q_lora_rank"] =
        o.mla.q_lora_rank > 0 ? nlohmann::json(o.mla.q_lora_rank) : nlohmann::json(nullptr);
    j["kv_lora_rank"] = o.mla.kv_lora_rank;
    j["qk_head_dim"] = o.mla.qk_head_dim;
    j["qk_pos_emb_head_dim"] = o.mla.qk_pos_emb_head_dim;
    j["v_head_dim"] = o.mla.v_head_dim;
    j["rope_type"] = o.mla.yarn ? "yarn" : "rope";
  }
  j["rotary_scaling_factor"] = o.yarn.factor;
  j["mscale"] = o.yarn.mscale;
  j["mscale_all_dim"] = o.yarn.mscale_all_dim;
  j["yarn_original_max_position_embeddings"] = o.yarn.original_max_position_embeddings;
  j["yarn_beta_fast"] = o.yarn.beta_fast;
  j["yarn_beta_slow"] = o.yarn.beta_slow;
  j["yarn_correction_range_round_to_int"] = o.yarn.round_to_int;
  // Megatron's None when off, so that a DSA checkpoint and a model without it (or the reverse)
  // differ in the shape check; the indexer's options only when on.
  j["experimental_attention_variant"] = o.dsa.enabled ? nlohmann::json("dsa") : nlohmann::json();
  if (o.dsa.enabled) {
    j["dsa_indexer_n_heads"] = o.dsa.indexer_heads;
    j["dsa_indexer_head_dim"] = o.dsa.indexer_head_dim;
    j["dsa_indexer_topk"] = o.dsa.topk;
    j["dsa_indexer_loss_coeff"] = o.dsa.loss_coeff;
    j["dsa_indexer_use_sparse_loss"] = o.dsa.sparse_loss;
    j["dsa_indexer_scoring_relu"] = o.dsa.scoring_relu;
    j["dsa_indexer_rope_interleaved"] = o.dsa.rope_interleaved;
    j["dsa_indexer_rotate_activation"] = o.dsa.rotate_activation;
    if (o.dsa.k_norm_epsilon > 0) j["dsa_indexer_k_norm_epsilon"] = o.dsa.k_norm_epsilon;
  }
  // Written only when on, so that a checkpoint without muP records what older ones did.
  if (o.mup.enabled) {
    j["use_mup"] = true;
    if (o.mup.base_hidden_size > 0) j["mup_base_hidden_size"] = o.mup.base_hidden_size;
    j["mup_embedding_mult"] = o.mup.embedding_mult;
    j["mup_output_mult"] = o.mup.output_mult;
    if (o.mup.base_head_dim) j["mup_base_head_dim"] = *o.mup.base_head_dim;
    j["mup_attn_scale_power"] = o.mup.attn_scale_power;
  }
  // Written only with experts, so that a dense checkpoint records what older ones did. The
  // function the model computes only: the losses' coefficients are training settings (a resume may
  // change them), read back from a run's stored arguments.
  if (o.moe.enabled()) {
    const MoeOptions& m = o.moe;
    j["num_experts"] = m.num_experts;
    j["moe_ffn_hidden_size"] = positive_or_null(m.ffn_hidden_size);
    j["moe_router_topk"] = m.topk;
    // Sinkhorn changes the evaluation routing too (model/moe_options.h).
    if (m.sinkhorn) j["moe_router_load_balancing_type"] = "sinkhorn";
    j["moe_router_score_function"] = moe_score_function_name(m.score_function);
    j["moe_router_pre_softmax"] = m.pre_softmax;
    j["moe_router_topk_scaling_factor"] = optional_json(m.topk_scaling_factor);
    // The bias changes the routing (and the checkpoint holds it); its rate is a training
    // setting, read back from the run's stored arguments.
    if (m.expert_bias) j["moe_router_enable_expert_bias"] = true;
    // f64 logits can route ties differently; written only when on.
    if (m.router_fp64) j["moe_router_dtype"] = "fp64";
    j["moe_router_num_groups"] = positive_or_null(m.num_groups);
    j["moe_router_group_topk"] = positive_or_null(m.group_topk);
    j["moe_layer_freq"] = m.layer_freq;
    j["moe_shared_expert_intermediate_size"] = positive_or_null(m.shared_expert_ffn);
    if (m.shared_expert_gate) j["moe_shared_expert_gate"] = true;
    j["moe_expert_capacity_factor"] = optional_json(m.capacity_factor);
    j["moe_pad_expert_input_to_capacity"] = m.pad_to_capacity;
    j["moe_token_drop_policy"] = moe_token_drop_policy_name(m.drop_policy);
  }
  // Written only when on, so that a checkpoint without MTP records what older ones did. The
  // depths only: the loss factor is a training setting (a resume may change it), read back from
  // a run's stored arguments.
  if (o.mtp.enabled()) j["mtp_num_layers"] = o.mtp.num_layers;
  // Written only when on, so that a checkpoint without scaling records what older ones did.
  if (o.rope_scaling.enabled()) {
    j["rope_scaling_factor"] = o.rope_scaling.factor;
    j["rope_scaling_low_freq_factor"] = o.rope_scaling.low_freq_factor;
    j["rope_scaling_high_freq_factor"] = o.rope_scaling.high_freq_factor;
    j["rope_scaling_original_max_position_embeddings"] =
        o.rope_scaling.original_max_position_embeddings;
  }
  return j;
}

kernels::GeluForm gelu_form_from_args_json(const nlohmann::json& record) {
  return record.value("openai_gelu", true) ? kernels::GeluForm::kTanh : kernels::GeluForm::kErf;
}

nlohmann::json gelu_args_json(kernels::GeluForm form) {
  return {{"openai_gelu", form == kernels::GeluForm::kTanh}};
}

float norm_epsilon_from_args_json(const nlohmann::json& args) {
  return number_or(args, "norm_epsilon", number_or(args, "layernorm_epsilon", 1e-5f));
}

}  // namespace megatron
