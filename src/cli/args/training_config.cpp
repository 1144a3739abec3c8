#include "cli/args/training_config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "checkpoint/architecture_json.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "cli/args/megatron_flags.h"
#include "cli/launch/launch_attempt.h"
#include "cli/setup/device_setup.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/number_format.h"
#include "kernels/gemm_options.h"
#include "model/gpt_model.h"  // padded_vocab_size
#include "model/pipeline_layout.h"
#include "model/stage_range.h"
#include "optim/muon.h"
#include "parallel/context_parallel_attention.h"
#include "parallel/expert_token_exchange.h"
#include "pipeline/schedule.h"
#include "train/log/named_timers.h"
#include "train/rerun_state_machine.h"

namespace megatron::cli {

void check_megatron_flags(const MegatronFlags& flags, const Args& a) {
  // global_batch_size is 0 until validate_training_args when --global-batch-size is not given.
  MT_REQUIRE(a.step_batch_size_schedule.empty() || a.global_batch_size == 0,
             "Cannot specify both --step-batch-size-schedule and --global-batch-size (as in "
             "Megatron-LM): drop one of them");
  flags.check();
  // Megatron's fine-grained activation offloading copies the saved activations of the
  // --offload-modules to pinned host memory after their forward and back before their
  // backward. The CPU backend's activations are host memory already: there it is the identity.
  MT_REQUIRE(
      !(a.selective_recompute() && a.recomputes_module("shared_experts") &&
        a.arch.moe_shared_expert_intermediate_size && flags.given("--moe-shared-expert-overlap")),
      "--recompute-modules shared_experts cannot work with --moe-shared-expert-overlap "
      "(Megatron's rule): drop one of them");
  MT_REQUIRE(a.compute_device.is_cpu() || !flags.given("--fine-grained-activation-offloading"),
             "--fine-grained-activation-offloading: offloading saved activations from GPU memory "
             "to the host is not implemented on the CUDA backend; drop it (and --offload-modules), "
             "or save activation memory with --recompute-granularity selective "
             "--recompute-modules (docs/training.md)");
}

ArchitectureOptions architecture_options(const ArchitectureArgs& a) {
  ArchitectureOptions o;
  o.position_embedding = position_embedding_from_name(a.position_embedding_type);
  o.normalization = normalization_from_name(a.normalization);
  o.rotary_base = float(a.rotary_base);
  o.rotary_percent = float(a.rotary_percent);
  o.rotary_seq_len_interpolation_factor = float(a.rotary_seq_len_interpolation_factor.value_or(1));
  if (a.use_rope_scaling) {
    o.rope_scaling = a.rope_scaling_shape;
    o.rope_scaling.factor = float(a.rope_scaling_factor);
    MT_REQUIRE(o.rope_scaling.factor >= 1, "--rope-scaling-factor must be >= 1, got ",
               a.rope_scaling_factor);
  }
  o.swiglu = a.swiglu;
  MT_REQUIRE(!a.group_query_attention || a.num_query_groups > 0,
             "--num-query-groups must be positive, got ", a.num_query_groups);
  o.num_query_groups = a.group_query_attention ? a.num_query_groups : 0;
  MT_REQUIRE(a.kv_channels >= 0, "--kv-channels must be positive, got ", a.kv_channels);
  o.kv_channels = a.kv_channels;
  o.add_bias_linear = !a.disable_bias_linear;
  o.add_qkv_bias = a.add_qkv_bias;
  o.untie_embeddings_and_output_weights = a.untie_embeddings_and_output_weights;
  o.apply_layernorm_1p = a.apply_layernorm_1p;
  o.squared_relu = a.squared_relu;
  o.qk_layernorm = a.qk_layernorm;
  o.rotary_interleaved = a.rotary_interleaved;
  MT_REQUIRE(a.rope_type.empty() || a.rope_type == "rope" || a.rope_type == "yarn", "--rope-type '",
             a.rope_type, "' is not known: expected rope or yarn");
  MT_REQUIRE(a.multi_latent_attention || a.rope_type != "yarn",
             "--rope-type yarn applies to --multi-latent-attention only (as in Megatron-LM); "
             "other attention takes --position-embedding-type yarn");
  o.yarn = {.factor = float(a.rotary_scaling_factor),
            .original_max_position_embeddings =
                float(a.yarn_original_max_position_embeddings.value_or(4096)),
            .beta_fast = float(a.yarn_beta_fast.value_or(32.0)),
            .beta_slow = float(a.yarn_beta_slow.value_or(1.0)),
            .mscale = float(a.mscale),
            .mscale_all_dim = float(a.mscale_all_dim),
            .round_to_int = a.yarn_correction_range_round_to_int};
  o.mla.enabled = a.multi_latent_attention;
  if (o.mla.enabled) {
    o.mla.q_lora_rank = a.q_lora_rank;
    o.mla.kv_lora_rank = a.kv_lora_rank;
    o.mla.qk_head_dim = a.qk_head_dim;
    o.mla.qk_pos_emb_head_dim = a.qk_pos_emb_head_dim;
    o.mla.v_head_dim = a.v_head_dim;
    o.mla.yarn = a.rope_type != "rope";
  }
  o.dsa = dsa_options(a);
  o.mup = mup_options(a);
  o.moe = moe_options(a);
  MT_REQUIRE(a.mtp_num_layers.value_or(1) >= 1, "--mtp-num-layers must be at least 1, got ",
             a.mtp_num_layers.value_or(0), " (leave it out for no multi-token prediction)");
  o.mtp.num_layers = a.mtp_num_layers.value_or(0);
  o.mtp.loss_scaling_factor = float(a.mtp_loss_scaling_factor);
  return o;
}

DsaOptions dsa_options(const ArchitectureArgs& a) {
  DsaOptions d;
  MT_REQUIRE(a.experimental_attention_variant.empty() || a.experimental_attention_variant == "dsa",
             "--experimental-attention-variant '", a.experimental_attention_variant,
             "' is not implemented: dsa (DeepSeek sparse attention) is; Megatron's gated delta "
             "net variants (gdn, gdn2) are linear attention, not supported here");
  d.enabled = a.experimental_attention_variant == "dsa";
  if (!d.enabled) return d;
  MT_REQUIRE(a.dsa_indexer_n_heads && a.dsa_indexer_head_dim && a.dsa_indexer_topk,
             "--experimental-attention-variant dsa needs --dsa-indexer-n-heads, "
             "--dsa-indexer-head-dim and --dsa-indexer-topk");
  MT_REQUIRE(a.dsa_indexer_topk_freq == 1, "--dsa-indexer-topk-freq ", a.dsa_indexer_topk_freq,
             ": sharing one layer's top-k keys with the next layers is not implemented; use 1 "
             "(every layer selects its own keys)");
  MT_REQUIRE(a.dsa_indexer_skip_topk_offset >= 0,
             "--dsa-indexer-skip-topk-offset must be non-negative, got ",
             a.dsa_indexer_skip_topk_offset);
  MT_REQUIRE(a.dsa_kernel_backend == "none" || a.dsa_kernel_backend == "tilelang" ||
                 a.dsa_kernel_backend == "cudnn",
             "--dsa-kernel-backend '", a.dsa_kernel_backend,
             "' is not known: expected none, tilelang or cudnn");
  d.indexer_heads = *a.dsa_indexer_n_heads;
  d.indexer_head_dim = *a.dsa_indexer_head_dim;
  d.topk = *a.dsa_indexer_topk;
  d.loss_coeff = float(a.dsa_indexer_loss_coeff.value_or(0.0));
  d.sparse_loss = a.dsa_indexer_use_sparse_loss;
  d.scoring_relu = !a.no_dsa_indexer_scoring_relu;
  d.rope_interleaved = a.dsa_indexer_rope_interleaved;
  d.rotate_activation = !a.no_dsa_indexer_rotate_activation;
  d.k_norm_epsilon = float(a.dsa_indexer_k_norm_epsilon.value_or(0.0));
  MT_REQUIRE(!a.dsa_indexer_k_norm_epsilon || d.k_norm_epsilon > 0,
             "--dsa-indexer-k-norm-epsilon must be > 0, got ", *a.dsa_indexer_k_norm_epsilon);
  return d;
}

// --moe-token-dispatcher-type and flex's flags, with Megatron's rules (TransformerConfig).
// flex is Megatron's dispatcher over DeepEP / HybridEP / NCCL-EP, GPU communication libraries:
// it moves the same tokens to the same experts as alltoall, which runs in its place (the layer
// always exchanges by all-to-all: parallel/expert_token_exchange.h).
static void check_token_dispatcher(const ArchitectureArgs& a) {
  const std::string& backend = a.moe_flex_dispatcher_backend;
  const bool flex = a.moe_token_dispatcher_type == "flex";
  MT_REQUIRE(backend == "deepep" || backend == "hybridep" || backend == "ncclep",
             "--moe-flex-dispatcher-backend '", backend,
             "' is not known: expected deepep, hybridep or ncclep");
  MT_REQUIRE(!a.moe_enable_deepep || flex,
             "--moe-enable-deepep needs --moe-token-dispatcher-type flex (DeepEP is a backend of "
             "the flex dispatcher)");
  MT_REQUIRE(!a.moe_enable_deepep || backend != "hybridep",
             "--moe-enable-deepep and --moe-flex-dispatcher-backend hybridep name two backends: "
             "give one");
  MT_REQUIRE(backend != "ncclep" || flex,
             "--moe-flex-dispatcher-backend ncclep needs --moe-token-dispatcher-type flex");
  token_dispatcher_from_name(a.moe_token_dispatcher_type);  // an Error naming the flag
  if (!flex) return;
  MT_REQUIRE(!a.moe_pad_expert_input_to_capacity || backend != "deepep",
             "--moe-token-dispatcher-type flex with the deepep backend does not take "
             "--moe-pad-expert-input-to-capacity (Megatron's rule): choose --moe-flex-dispatcher-"
             "backend hybridep, or drop the padding");
  log_info(" > --moe-token-dispatcher-type flex (", a.moe_enable_deepep ? "deepep" : backend,
           ") has no effect here: DeepEP / HybridEP / NCCL-EP are GPU communication libraries; "
           "the tokens move by the alltoall dispatcher, which computes the same function");
}

MoeOptions moe_options(const ArchitectureArgs& a) {
  MoeOptions m;
  MT_REQUIRE(a.num_experts >= 0, "--num-experts must be positive, got ", a.num_experts);
  m.num_experts = a.num_experts;
  if (m.num_experts == 0) return m;
  MT_REQUIRE(a.moe_ffn_hidden_size.value_or(1) > 0, "--moe-ffn-hidden-size must be positive");
  m.ffn_hidden_size = a.moe_ffn_hidden_size.value_or(0);
  m.topk = a.moe_router_topk;
  set_moe_load_balancing(m, a.moe_router_load_balancing_type, a.moe_aux_loss_coeff);
  m.z_loss_coeff = a.moe_z_loss_coeff.value_or(0.0);
  m.score_function = moe_score_function_from_name(a.moe_router_score_function);
  m.pre_softmax = a.moe_router_pre_softmax;
  m.topk_scaling_factor = a.moe_router_topk_scaling_factor;
  m.expert_bias = a.moe_router_enable_expert_bias;
  m.bias_update_rate = a.moe_router_bias_update_rate;
  m.num_groups = a.moe_router_num_groups.value_or(0);
  m.group_topk = a.moe_router_group_topk.value_or(0);
  MT_REQUIRE(
      a.moe_router_dtype.empty() || a.moe_router_dtype == "fp32" || a.moe_router_dtype == "fp64",
      "--moe-router-dtype '", a.moe_router_dtype, "' is not known: expected fp32 or fp64");
  m.router_fp64 = a.moe_router_dtype == "fp64";
  m.layer_freq = a.moe_layer_freq;
  MT_REQUIRE(a.moe_shared_expert_intermediate_size.value_or(1) > 0,
             "--moe-shared-expert-intermediate-size must be positive");
  m.shared_expert_ffn = a.moe_shared_expert_intermediate_size.value_or(0);
  m.shared_expert_gate = a.moe_shared_expert_gate;
  m.capacity_factor = a.moe_expert_capacity_factor;
  m.pad_to_capacity = a.moe_pad_expert_input_to_capacity;
  m.drop_policy = moe_token_drop_policy_from_name(a.moe_token_drop_policy);
  check_token_dispatcher(a);
  return m;
}

MupOptions mup_options(const ArchitectureArgs& a) {
  MupOptions m;
  m.enabled = a.use_mup;
  if (!a.use_mup) return m;
  MT_REQUIRE(a.mup_base_hidden_size.value_or(1) > 0,
             "--mup-base-hidden-size must be positive, got ", a.mup_base_hidden_size.value_or(0));
  m.base_hidden_size = a.mup_base_hidden_size.value_or(0);
  m.embedding_mult = float(a.mup_embedding_mult);
  m.output_mult = float(a.mup_output_mult);
  m.base_head_dim = a.mup_base_head_dim;
  m.attn_scale_power = a.mup_attn_scale_power;
  return m;
}

float norm_epsilon(const ArchitectureArgs& a, double layernorm_epsilon) {
  const double eps = a.norm_epsilon.value_or(layernorm_epsilon);
  MT_REQUIRE(eps > 0, "--norm-epsilon must be > 0, got ", eps);
  return float(eps);
}

void apply_checkpoint_args(Args& a, CheckpointArgs which) {
  if (!a.arch.use_checkpoint_args) return;
  MT_REQUIRE(!a.load.empty(), "--use-checkpoint-args needs --load (the checkpoint to read)");
  // As Megatron's load_args_from_checkpoint: without a checkpoint the command line stands.
  if (!read_latest_iteration(a.load)) {
    log_info("WARNING: --use-checkpoint-args: --load ", a.load,
             " holds no checkpoint (no latest_checkpointed_iteration.txt); using the command "
             "line's model flags");
    return;
  }
  const nlohmann::json state =
      CheckpointShardReader(checkpoint_iteration_dir(a.load, -1)).state(0, 0);
  const nlohmann::json model = state.value("model", nlohmann::json::object());
  const nlohmann::json stored = state.value("args", nlohmann::json::object());
  for (auto [key, field] :
       {std::pair{"num_layers", &a.num_layers}, std::pair{"hidden_size", &a.hidden_size},
        std::pair{"num_attention_heads", &a.num_attention_heads},
        std::pair{"ffn_hidden_size", &a.ffn_hidden_size},
        std::pair{"max_position_embeddings", &a.max_position_embeddings}})
    if (model.contains(key) && model[key].is_number_integer()) *field = model[key].get<int>();
  if (which == CheckpointArgs::kShape) return;
  const ArchitectureOptions o = architecture_from_args_json(stored);
  ArchitectureArgs& arch = a.arch;
  arch.position_embedding_type = position_embedding_name(o.position_embedding);
  arch.rotary_base = o.rotary_base;
  arch.rotary_percent = o.rotary_percent;
  arch.rotary_seq_len_interpolation_factor = o.rotary_seq_len_interpolation_factor;
  arch.use_rope_scaling = o.rope_scaling.enabled();
  if (o.rope_scaling.enabled()) {
    arch.rope_scaling_factor = o.rope_scaling.factor;
    arch.rope_scaling_shape = o.rope_scaling;
  }
  arch.normalization = normalization_name(o.normalization);
  arch.norm_epsilon = norm_epsilon_from_args_json(stored);
  arch.swiglu = o.swiglu;
  arch.group_query_attention = o.num_query_groups > 0;
  arch.num_query_groups = int(std::max<int64_t>(1, o.num_query_groups));
  arch.kv_channels = int(o.kv_channels);
  arch.disable_bias_linear = !o.add_bias_linear;
  arch.add_qkv_bias = o.add_qkv_bias;
  arch.untie_embeddings_and_output_weights = o.untie_embeddings_and_output_weights;
  arch.apply_layernorm_1p = o.apply_layernorm_1p;
  arch.squared_relu = o.squared_relu;
  arch.qk_layernorm = o.qk_layernorm;
  arch.rotary_interleaved = o.rotary_interleaved;
  arch.multi_latent_attention = o.mla.enabled;
  if (o.mla.enabled) {
    arch.q_lora_rank = int(o.mla.q_lora_rank);
    arch.kv_lora_rank = int(o.mla.kv_lora_rank);
    arch.qk_head_dim = int(o.mla.qk_head_dim);
    arch.qk_pos_emb_head_dim = int(o.mla.qk_pos_emb_head_dim);
    arch.v_head_dim = int(o.mla.v_head_dim);
    arch.rope_type = o.mla.yarn ? "yarn" : "rope";
  }
  arch.rotary_scaling_factor = o.yarn.factor;
  arch.mscale = o.yarn.mscale;
  arch.mscale_all_dim = o.yarn.mscale_all_dim;
  arch.yarn_original_max_position_embeddings = int(o.yarn.original_max_position_embeddings);
  arch.yarn_beta_fast = o.yarn.beta_fast;
  arch.yarn_beta_slow = o.yarn.beta_slow;
  arch.yarn_correction_range_round_to_int = o.yarn.round_to_int;
  if (o.dsa.enabled) {
    arch.experimental_attention_variant = "dsa";
    arch.dsa_indexer_n_heads = int(o.dsa.indexer_heads);
    arch.dsa_indexer_head_dim = int(o.dsa.indexer_head_dim);
    arch.dsa_indexer_topk = int(o.dsa.topk);
    if (o.dsa.loss_coeff > 0) arch.dsa_indexer_loss_coeff = o.dsa.loss_coeff;
    arch.dsa_indexer_use_sparse_loss = o.dsa.sparse_loss;
    arch.no_dsa_indexer_scoring_relu = !o.dsa.scoring_relu;
    arch.dsa_indexer_rope_interleaved = o.dsa.rope_interleaved;
    arch.no_dsa_indexer_rotate_activation = !o.dsa.rotate_activation;
    if (o.dsa.k_norm_epsilon > 0) arch.dsa_indexer_k_norm_epsilon = o.dsa.k_norm_epsilon;
  }
  const MoeOptions& m = o.moe;
  arch.num_experts = int(m.num_experts);
  if (m.enabled()) {
    if (m.ffn_hidden_size > 0) arch.moe_ffn_hidden_size = int(m.ffn_hidden_size);
    arch.moe_router_topk = int(m.topk);
    arch.moe_router_load_balancing_type = moe_load_balancing_types(m);
    arch.moe_aux_loss_coeff = moe_load_balancing_coeffs(m);
    if (m.z_loss_coeff > 0) arch.moe_z_loss_coeff = m.z_loss_coeff;
    arch.moe_router_score_function = moe_score_function_name(m.score_function);
    arch.moe_router_pre_softmax = m.pre_softmax;
    arch.moe_router_topk_scaling_factor = m.topk_scaling_factor;
    arch.moe_router_enable_expert_bias = m.expert_bias;
    if (m.router_fp64) arch.moe_router_dtype = "fp64";
    arch.moe_router_bias_update_rate = m.bias_update_rate;
    if (m.num_groups > 0) arch.moe_router_num_groups = int(m.num_groups);
    if (m.group_topk > 0) arch.moe_router_group_topk = int(m.group_topk);
    arch.moe_layer_freq = m.layer_freq;
    if (m.shared_expert_ffn > 0)
      arch.moe_shared_expert_intermediate_size = int(m.shared_expert_ffn);
    arch.moe_shared_expert_gate = m.shared_expert_gate;
    arch.moe_expert_capacity_factor = m.capacity_factor;
    arch.moe_pad_expert_input_to_capacity = m.pad_to_capacity;
    arch.moe_token_drop_policy = moe_token_drop_policy_name(m.drop_policy);
  }
  if (o.mtp.enabled()) arch.mtp_num_layers = o.mtp.num_layers;
  arch.mtp_loss_scaling_factor = o.mtp.loss_scaling_factor;
  arch.use_mup = o.mup.enabled;
  if (o.mup.base_hidden_size > 0) arch.mup_base_hidden_size = int(o.mup.base_hidden_size);
  arch.mup_embedding_mult = o.mup.embedding_mult;
  arch.mup_output_mult = o.mup.output_mult;
  arch.mup_base_head_dim = o.mup.base_head_dim;
  arch.mup_attn_scale_power = o.mup.attn_scale_power;
  a.openai_gelu = gelu_form_from_args_json(stored) == kernels::GeluForm::kTanh;
}

namespace {

// --context-parallel-size and --cp-comm-type (parallel/ring_attention.h).
void validate_context_parallel_args(const Args& a) {
  const int cp = a.context_parallel_size;
  MT_REQUIRE(cp >= 1, "--context-parallel-size must be >= 1, got ", cp);
  bool hierarchical = false;
  for (const std::string& type : a.cp_comm_type)
    hierarchical |= cp_comm_type_from_name(type) == CpCommType::kA2AP2P;
  const std::vector<int>& levels = a.hierarchical_context_parallel_sizes;
  MT_REQUIRE(!hierarchical || !levels.empty(),
             "--hierarchical-context-parallel-sizes must be set when --cp-comm-type a2a+p2p is "
             "used: give A P, the all-to-all group size and the ring size (A x P = "
             "--context-parallel-size)");
  if (!levels.empty()) {
    MT_REQUIRE(
        levels.size() == 2 && levels[0] >= 1 && levels[1] >= 1 && levels[0] * levels[1] == cp,
        "--hierarchical-context-parallel-sizes takes two positive sizes A P with A x P = "
        "--context-parallel-size ",
        cp, " (the all-to-all group, then the ring across the groups)");
  }
  if (cp == 1) return;
  MT_REQUIRE(a.seq_length % (2 * cp) == 0, "--seq-length ", a.seq_length,
             " must be divisible by 2 x --context-parallel-size = ", 2 * cp,
             " (each sequence is cut into that many chunks)");
  MT_REQUIRE(!a.sequence_parallel || (a.seq_length / cp) % a.tensor_model_parallel_size == 0,
             "--sequence-parallel with --context-parallel-size ", cp, ": each rank's ",
             a.seq_length / cp,
             " positions (--seq-length / CP) must be divisible by "
             "--tensor-model-parallel-size ",
             a.tensor_model_parallel_size);
}

// --optimizer and the Muon flags (optim/muon.h). dist_muon is Megatron's deprecated spelling
// of muon with --use-distributed-optimizer.
void check_optimizer_args(Args& a) {
  if (a.optimizer == "dist_muon") {
    log_warning(
        "--optimizer dist_muon is deprecated in Megatron-LM: it runs as --optimizer muon "
        "--use-distributed-optimizer");
    a.optimizer = "muon";
    a.distributed_optimizer = true;
  }
  MT_REQUIRE(a.optimizer == "adam" || a.optimizer == "muon", "--optimizer ", a.optimizer,
             " is not implemented here: adam, muon and dist_muon are (sgd, lion, soap and "
             "adaptive_muon are not)");
  if (a.optimizer != "muon") return;
  MT_REQUIRE(!a.fp16,
             "--optimizer muon with --fp16 is refused (Megatron-LM refuses it too): use --bf16");
  MT_REQUIRE(a.muon_momentum >= 0 && a.muon_momentum < 1, "--muon-momentum must be in [0, 1), got ",
             a.muon_momentum);
  MT_REQUIRE(a.muon_scalar_optimizer == "adam", "--muon-scalar-optimizer ", a.muon_scalar_optimizer,
             " is not implemented here: the parameters Muon leaves are AdamW's (adam)");
  MT_REQUIRE(a.muon_tp_mode != "blockwise",
             "--muon-tp-mode blockwise is not implemented here: it orthogonalises each "
             "tensor-parallel shard alone, so the update depends on the layout; use duplicated "
             "(Megatron's default) or distributed, which give the same update");
  MT_REQUIRE(a.muon_tp_mode == "duplicated" || a.muon_tp_mode == "distributed", "--muon-tp-mode ",
             a.muon_tp_mode, " is not one of blockwise, duplicated, distributed");
  MT_REQUIRE(a.muon_fp32_matmul_prec == "low" || a.muon_fp32_matmul_prec == "medium" ||
                 a.muon_fp32_matmul_prec == "high",
             "--muon-fp32-matmul-prec ", a.muon_fp32_matmul_prec,
             " is not one of low, medium, high");
  muon_scale_mode_from_name(a.muon_scale_mode);
  newton_schulz_coefficients(a.muon_coefficient_type, a.muon_num_ns_steps);
}

}  // namespace

void validate_training_args_except_data(Args& a, int world_size) {
  check_optimizer_args(a);  // first: dist_muon sets --use-distributed-optimizer
  auto positive = [](int64_t v, const char* flag) {
    MT_REQUIRE(v > 0, flag, " must be given and positive, got ", v);
  };
  // Megatron asserts the same in OptimizerParamScheduler.
  MT_REQUIRE(!(a.override_opt_param_scheduler && a.use_checkpoint_opt_param_scheduler),
             "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler exclude "
             "each other: the schedule's settings come from the command line or from the "
             "checkpoint, drop one");
  MT_REQUIRE(a.check_weight_hash_across_dp_replicas_interval >= 0,
             "--check-weight-hash-across-dp-replicas-interval must be positive (or 0: never), got ",
             a.check_weight_hash_across_dp_replicas_interval);
  positive(a.num_layers, "--num-layers");
  positive(a.hidden_size, "--hidden-size");
  positive(a.num_attention_heads, "--num-attention-heads");
  positive(a.seq_length, "--seq-length");
  positive(a.micro_batch_size, "--micro-batch-size");
  positive(a.tensor_model_parallel_size, "--tensor-model-parallel-size");
  positive(a.log_interval, "--log-interval");
  positive(a.eval_interval, "--eval-interval");
  positive(a.tensorboard_log_interval, "--tensorboard-log-interval");
  MT_REQUIRE(a.eval_iters >= 0, "--eval-iters must be >= 0, got ", a.eval_iters);
  MT_REQUIRE(a.timing_log_level >= 0 && a.timing_log_level <= 2,
             "--timing-log-level must be 0, 1 or 2, got ", a.timing_log_level);
  timing_log_option_from_name(a.timing_log_option);    // an Error naming the flag
  rerun_mode_from_name(a.rerun_mode);                  // an Error naming the flag
  rerun_diagnostic_from_name(a.error_injection_type);  // an Error naming the flag
  MT_REQUIRE(a.error_injection_rate >= 0, "--error-injection-rate must be >= 0, got ",
             a.error_injection_rate);
  if (!a.result_rejected_tracker_filename.empty())
    check_tracker_appendable(a.result_rejected_tracker_filename);
  for (int64_t i : a.iterations_to_skip)
    MT_REQUIRE(i >= 1, "--iterations-to-skip names 1-based iterations, got ", i);
  MT_REQUIRE(!a.log_layer_grad_norms || !a.metrics_file.empty(),
             "--log-layer-grad-norms writes to the metrics file: give --metrics-file FILE too");
  MT_REQUIRE(a.ffn_hidden_size >= 0, "--ffn-hidden-size must be positive, got ", a.ffn_hidden_size);
  MT_REQUIRE(a.make_vocab_size_divisible_by > 0,
             "--make-vocab-size-divisible-by must be positive, got ",
             a.make_vocab_size_divisible_by);

  positive(a.pipeline_model_parallel_size, "--pipeline-model-parallel-size");
  const PipelineSplit split = pipeline_split(a);
  MT_REQUIRE(a.arch.kv_channels > 0 || a.hidden_size % a.num_attention_heads == 0, "--hidden-size ",
             a.hidden_size, " must be divisible by --num-attention-heads ", a.num_attention_heads,
             " (or set --kv-channels)");
  const int tp = a.tensor_model_parallel_size;
  MT_REQUIRE(a.num_attention_heads % tp == 0, "--num-attention-heads ", a.num_attention_heads,
             " must be divisible by --tensor-model-parallel-size ", tp);
  MT_REQUIRE(a.effective_ffn_hidden_size() % tp == 0, "--ffn-hidden-size ",
             a.effective_ffn_hidden_size(), " must be divisible by --tensor-model-parallel-size ",
             tp);
  MT_REQUIRE(a.distributed_backend.empty() || a.distributed_backend == "nccl" ||
                 a.distributed_backend == "mpi",
             "--distributed-backend must be nccl or mpi, got '", a.distributed_backend, "'");
  const int pp = a.pipeline_model_parallel_size;
  validate_context_parallel_args(a);
  const int cp = a.context_parallel_size;
  MT_REQUIRE(world_size % (tp * cp * pp) == 0, "the world size ", world_size,
             " (number of processes) must be divisible by --tensor-model-parallel-size ", tp,
             cp > 1 ? " x --context-parallel-size " + std::to_string(cp) : std::string(),
             " x --pipeline-model-parallel-size ", pp);
  // Expert parallelism (docs/moe.md): the experts split evenly, and the expert grid (etp × ep ×
  // pp, the experts' tensor split by default the dense TP's) fits the world.
  const int ep = a.expert_model_parallel_size;
  check_expert_count(int(a.arch.num_experts), ep);
  MT_REQUIRE(a.expert_tensor_parallel_size >= 0, "--expert-tensor-parallel-size must be >= 1, got ",
             a.expert_tensor_parallel_size);
  const int etp = a.effective_expert_tensor_parallel_size();
  check_expert_parallel_sizes(world_size, ep, etp, pp);
  if (etp != tp) {
    const int ffn = a.arch.moe_ffn_hidden_size.value_or(a.effective_ffn_hidden_size());
    MT_REQUIRE(ffn % etp == 0, "the experts' hidden width ", ffn,
               " (--moe-ffn-hidden-size, else --ffn-hidden-size) is not divisible by "
               "--expert-tensor-parallel-size ",
               etp, "; choose a width that is a multiple of it");
  }
  a.world_size = world_size;
  // Megatron's data-parallel size: the context-parallel ranks are carved out of it.
  a.data_parallel_size = world_size / (tp * cp * pp);

  if (a.max_position_embeddings == 0) a.max_position_embeddings = a.seq_length;
  MT_REQUIRE(a.max_position_embeddings >= a.seq_length, "--max-position-embeddings ",
             a.max_position_embeddings, " must be >= --seq-length ", a.seq_length);

  const int64_t per_step = a.micro_batch_size * a.data_parallel_size;
  // As Megatron: with a step schedule --global-batch-size is micro-batch x DP, which sizes the
  // evaluations and turns --lr-*-iters into samples.
  if (a.global_batch_size == 0) a.global_batch_size = per_step;
  MT_REQUIRE(a.global_batch_size > 0 && a.global_batch_size % per_step == 0, "--global-batch-size ",
             a.global_batch_size, " must be a positive multiple of --micro-batch-size ",
             a.micro_batch_size, " x data-parallel size ", a.data_parallel_size, " (= ", per_step,
             ")");
  MT_REQUIRE(a.eval_global_batch_size >= 0 && a.eval_global_batch_size % per_step == 0,
             "--eval-global-batch-size ", a.eval_global_batch_size,
             " must be a positive multiple of --micro-batch-size x data-parallel size (", per_step,
             ")");

  MT_REQUIRE(
      a.train_iters >= 0 && a.train_samples >= 0 && (a.train_iters > 0) != (a.train_samples > 0),
      "exactly one of --train-iters and --train-samples must be given (positive)");
  // Sample counts (train, and validation: eval_iters per evaluation) must fit in 64 bits.
  auto fits = [](std::initializer_list<int64_t> factors) {
    int64_t product = 1;
    for (int64_t f : factors)
      if (__builtin_mul_overflow(product, f, &product)) return false;
    return true;
  };
  const BatchSizeSchedule batches = batch_size_schedule(a);
  // Megatron checks the interleaved schedule's micro-batch count for each batch size it runs:
  // those of --step-batch-size-schedule, not the --global-batch-size it implies. (A batch size
  // that does not split into micro-batches is the trainer's error, check_divisible_from.)
  if (split.chunks > 1)
    for (const auto& [threshold, batch] : batches.steps())
      if (batch % per_step == 0)
        check_interleaved_micro_batches(
            pp, batch / per_step, a.microbatch_group_size_per_virtual_pipeline_stage.value_or(0),
            a.step_batch_size_schedule.empty() ? "--global-batch-size " + std::to_string(batch)
                                               : "the global batch size " + std::to_string(batch) +
                                                     " of --step-batch-size-schedule");
  if (split.chunks == 1 && a.microbatch_group_size_per_virtual_pipeline_stage)
    log_warning(
        "--microbatch-group-size-per-virtual-pipeline-stage has no effect without the "
        "interleaved schedule (--num-layers-per-virtual-pipeline-stage or "
        "--num-virtual-stages-per-pipeline-rank); ignored, as Megatron-LM ignores it");
  MT_REQUIRE(fits({a.train_iters, batches.max_global_batch(), a.seq_length}) &&
                 fits({a.train_iters / a.eval_interval + 1, a.eval_iters, a.eval_global_batch(),
                       a.seq_length}),
             "--train-iters ", a.train_iters, " is too large: its samples (x --global-batch-size ",
             a.global_batch_size, ") and tokens do not fit in 64 bits");
  if (a.train_samples > 0) {
    // Megatron's rules (update_train_iters): whole steps of --global-batch-size up to
    // train_samples, or with --step-batch-size-schedule (even of one step, whose batch is not
    // --global-batch-size) as many of its steps as reach it.
    a.train_iters = a.step_batch_size_schedule.empty()
                        ? a.train_samples / a.global_batch_size
                        : batches.iterations_for_samples(a.train_samples);
    MT_REQUIRE(a.train_iters > 0, "--train-samples ", a.train_samples,
               " is less than one --global-batch-size ", a.global_batch_size);
    MT_REQUIRE(a.lr_decay_iters == 0 && a.lr_warmup_iters == 0,
               "with --train-samples use --lr-decay-samples / --lr-warmup-samples, not the "
               "*-iters flags");
  } else {
    MT_REQUIRE(a.lr_decay_samples == 0 && a.lr_warmup_samples == 0,
               "with --train-iters use --lr-decay-iters / --lr-warmup-iters, not the *-samples "
               "flags");
  }
  MT_REQUIRE(a.lr.has_value(), "--lr must be given (the peak learning rate)");
  MT_REQUIRE(*a.lr >= 0, "--lr must be >= 0, got ", *a.lr);
  MT_REQUIRE(a.min_lr >= 0 && a.min_lr <= *a.lr, "--min-lr ", a.min_lr,
             " must be between 0 and --lr ", *a.lr);
  lr_decay_style_from_name(a.lr_decay_style);  // throws on an unknown style
  wsd_decay_style_from_name(a.lr_wsd_decay_style);
  const bool wd_constant = weight_decay_incr_style_from_name(a.weight_decay_incr_style) ==
                           WeightDecayIncrStyle::Constant;
  // Megatron's rule: constant takes --weight-decay; an increment needs both ends.
  MT_REQUIRE(!wd_constant || (!a.start_weight_decay && !a.end_weight_decay),
             "--start-weight-decay / --end-weight-decay need --weight-decay-incr-style linear or "
             "cosine (constant uses --weight-decay)");
  MT_REQUIRE(wd_constant || (a.start_weight_decay && a.end_weight_decay &&
                             *a.start_weight_decay >= 0 && *a.end_weight_decay >= 0),
             "--weight-decay-incr-style ", a.weight_decay_incr_style,
             " needs --start-weight-decay and --end-weight-decay (>= 0)");
  MT_REQUIRE(a.lr_warmup_init >= 0 && a.lr_warmup_init <= *a.lr, "--lr-warmup-init ",
             a.lr_warmup_init, " must be between 0 and --lr ", *a.lr);
  MT_REQUIRE(a.lr_decay_style != "WSD" || a.lr_wsd_decay_iters > 0 || a.lr_wsd_decay_samples > 0,
             "--lr-decay-style WSD needs --lr-wsd-decay-iters (or --lr-wsd-decay-samples with "
             "--train-samples)");
  MT_REQUIRE(!(a.lr_warmup_fraction && (a.lr_warmup_iters > 0 || a.lr_warmup_samples > 0)),
             "--lr-warmup-fraction cannot be combined with --lr-warmup-iters/--lr-warmup-samples");
  MT_REQUIRE(!a.lr_warmup_fraction || (*a.lr_warmup_fraction >= 0 && *a.lr_warmup_fraction <= 1),
             "--lr-warmup-fraction must be in [0, 1]");
  MT_REQUIRE(a.lr_warmup_iters >= 0 && a.lr_warmup_samples >= 0 && a.lr_decay_iters >= 0 &&
                 a.lr_decay_samples >= 0,
             "--lr-warmup-*/--lr-decay-* must be >= 0");
  MT_REQUIRE(a.clip_grad >= 0, "--clip-grad must be >= 0, got ", a.clip_grad);
  MT_REQUIRE(a.weight_decay >= 0, "--weight-decay must be >= 0, got ", a.weight_decay);
  MT_REQUIRE(a.adam_beta1 >= 0 && a.adam_beta1 < 1, "--adam-beta1 must be in [0, 1), got ",
             a.adam_beta1);
  MT_REQUIRE(a.adam_beta2 >= 0 && a.adam_beta2 < 1, "--adam-beta2 must be in [0, 1), got ",
             a.adam_beta2);
  MT_REQUIRE(a.adam_eps > 0, "--adam-eps must be > 0, got ", a.adam_eps,
             " (Adam divides by sqrt(v) + eps)");
  MT_REQUIRE(a.layernorm_epsilon > 0, "--layernorm-epsilon must be > 0, got ", a.layernorm_epsilon,
             " (LayerNorm divides by sqrt(variance + eps))");
  MT_REQUIRE(a.init_method_std >= 0, "--init-method-std must be >= 0, got ", a.init_method_std);

  MT_REQUIRE(!(a.bf16 && a.fp16), "--bf16 and --fp16 cannot both be given");
  MT_REQUIRE(!a.loss_scale || *a.loss_scale > 0, "--loss-scale must be positive");
  MT_REQUIRE(
      a.initial_loss_scale > 0 && a.min_loss_scale > 0 && a.min_loss_scale <= a.initial_loss_scale,
      "--min-loss-scale must be positive and <= --initial-loss-scale");
  MT_REQUIRE(a.loss_scale_window > 0, "--loss-scale-window must be positive");
  MT_REQUIRE(a.hysteresis > 0, "--hysteresis must be positive");

  MT_REQUIRE(a.recompute_granularity.empty() || a.recompute_granularity == "full" ||
                 a.recompute_granularity == "selective",
             "--recompute-granularity '", a.recompute_granularity,
             "' is not known: expected full or selective");
  MT_REQUIRE(!(a.recompute_activations && a.recompute_granularity == "full"),
             "--recompute-activations means --recompute-granularity selective (as in "
             "Megatron-LM), which contradicts --recompute-granularity full: give one of them");
  a.check_recompute_method();
  if (!a.full_recompute() && (!a.recompute_method.empty() || a.recompute_num_layers != -1))
    log_warning(
        "--recompute-method and --recompute-num-layers have no effect without "
        "--recompute-granularity full (Megatron-LM ignores them too)");
  // Megatron-LM's rule, for the same numerics at TP 1: warn and train without it.
  if (a.sequence_parallel && a.tensor_model_parallel_size == 1) {
    log_warning("Disabling sequence parallelism because tensor model parallelism is disabled");
    a.sequence_parallel = false;
  }
  MT_REQUIRE(a.attention_backend == "auto" || a.attention_backend == "flash" ||
                 a.attention_backend == "fused" || a.attention_backend == "unfused" ||
                 a.attention_backend == "local",
             "--attention-backend '", a.attention_backend,
             "' is not known: expected auto, flash, fused, unfused or local");
  MT_REQUIRE(!a.use_flash_attn || a.attention_backend == "auto" || a.attention_backend == "flash",
             "--use-flash-attn asks for the fused attention, --attention-backend ",
             a.attention_backend, " for the unfused one: give one of them");
  MT_REQUIRE(a.hidden_dropout >= 0 && a.hidden_dropout < 1, "--hidden-dropout must be in [0, 1)");
  MT_REQUIRE(a.attention_dropout >= 0 && a.attention_dropout < 1,
             "--attention-dropout must be in [0, 1)");

  MT_REQUIRE(a.save_interval >= 0, "--save-interval must be >= 0");
  MT_REQUIRE(a.save_interval == 0 || !a.save.empty(), "--save-interval needs --save DIR");
  MT_REQUIRE(a.ckpt_format.empty() || a.ckpt_format == "safetensors" || a.ckpt_format == "torch" ||
                 a.ckpt_format == "torch_dist",
             "--ckpt-format ", a.ckpt_format,
             " is not a format megatron-cpp writes: give safetensors (megatron-cpp's, the "
             "default), torch (Megatron-LM's legacy mp_rank_*/model_optim_rng.pt) or torch_dist "
             "(Megatron-LM's .metadata + __R_0.distcp files)");
  MT_REQUIRE(a.ckpt_format != "torch" || !a.async_save,
             "--async-save with --ckpt-format torch is not supported (the torch files are "
             "written from a finished save); leave out one of them");
  // As Megatron asserts: the retained checkpoints must be ones that are saved.
  MT_REQUIRE(a.save_retain_interval == 0 || (a.save_retain_interval > 0 && a.save_interval > 0 &&
                                             a.save_retain_interval % a.save_interval == 0),
             "--save-retain-interval ", a.save_retain_interval,
             " must be a positive multiple of --save-interval (", a.save_interval, ")");
  MT_REQUIRE(a.exit_interval >= 0, "--exit-interval must be >= 0");
  MT_REQUIRE(a.exit_duration_in_mins >= 0, "--exit-duration-in-mins must be >= 0");
  MT_REQUIRE(!a.finetune || !a.load.empty(), "--finetune needs --load DIR");
}

void validate_training_args(Args& a, int world_size) {
  validate_training_args_except_data(a, world_size);
  const bool per_split =
      !a.train_data_path.empty() || !a.valid_data_path.empty() || !a.test_data_path.empty();
  MT_REQUIRE(!(per_split && !a.data_path.empty()),
             "--data-path cannot be combined with --train-data-path / --valid-data-path / "
             "--test-data-path (as in Megatron): give one or the other");
  MT_REQUIRE(!per_split || !a.train_data_path.empty() || a.skip_train,
             "--valid-data-path / --test-data-path need --train-data-path too");
  MT_REQUIRE(a.mock_data || !a.data_path.empty() || per_split,
             "no training data: give --data-path PREFIX (or W1 PREFIX1 W2 PREFIX2 ...), "
             "--train-data-path, or --mock-data");
  MT_REQUIRE(!(a.mock_data && (!a.data_path.empty() || per_split)),
             "--mock-data and --data-path cannot both be given");
  if (a.mock_data) {
    MT_REQUIRE(a.vocab_size > 0 || !a.tokenizer_type.empty(),
               "--mock-data needs --vocab-size (or a --tokenizer-type to take it from)");
    MT_REQUIRE(a.vocab_size != 1 || !a.tokenizer_type.empty(),
               "--mock-data --vocab-size 1 leaves nothing to learn: with one token every "
               "prediction is right and the loss is 0; give --vocab-size 2 or more");
  } else {
    MT_REQUIRE(!a.tokenizer_type.empty(), "--data-path needs --tokenizer-type");
  }
}

LanguageModelConfig language_model_config(const Args& a, int64_t vocab_size) {
  LanguageModelConfig c;
  c.num_layers = a.num_layers;
  c.hidden_size = a.hidden_size;
  c.num_attention_heads = a.num_attention_heads;
  c.ffn_hidden_size = a.effective_ffn_hidden_size();
  c.vocab_size = vocab_size;
  c.padded_vocab_size =
      padded_vocab_size(vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
  c.max_position_embeddings = a.max_position_embeddings;
  c.seq_length = a.seq_length;
  c.hidden_dropout = float(a.hidden_dropout);
  c.attention_dropout = float(a.attention_dropout);
  c.init_method_std = float(a.init_method_std);
  c.layernorm_epsilon = float(a.layernorm_epsilon);
  c.recompute_activations = a.full_recompute();
  c.recompute_method = a.recompute_method_or_default();
  c.recompute_num_layers = a.recompute_num_layers_or_default();
  const auto recomputes = [&](const char* module) {
    return a.selective_recompute() && a.recomputes_module(module);
  };
  c.selective_recompute = recomputes("core_attn");
  c.recompute_moe_act = recomputes("moe_act");
  c.recompute_layernorm = recomputes("layernorm");
  c.recompute_mlp = recomputes("mlp");
  c.recompute_moe = recomputes("moe");
  c.recompute_shared_experts = recomputes("shared_experts");
  c.recompute_mla_up_proj = recomputes("mla_up_proj");
  c.flash_attention = a.flash_attention();
  if (a.context_parallel_size > 1) {
    c.cp_comm_type.clear();
    for (const std::string& type : a.cp_comm_type)
      c.cp_comm_type.push_back(cp_comm_type_from_name(type));
  }
  c.sequence_parallel = a.sequence_parallel;
  c.gelu = a.gelu_form();
  c.compute_dtype = a.bf16 ? DType::BF16 : DType::F32;  // --fp16: f32 math, f16 weights
  return c;
}

LrScheduleConfig lr_schedule_config(const Args& a) {
  LrScheduleConfig c;
  c.max_lr = *a.lr;
  c.min_lr = a.min_lr;
  c.mup_width_mult = mup_width_mult(mup_options(a.arch), a.hidden_size);
  c.decoupled_max_lr = a.decoupled_lr;
  c.decoupled_min_lr = a.decoupled_min_lr;
  MT_REQUIRE(!a.decoupled_min_lr || a.decoupled_lr,
             "--decoupled-min-lr needs --decoupled-lr (the embedding and output layer's peak)");
  MT_REQUIRE(!a.decoupled_lr || (*a.decoupled_lr >= a.decoupled_min_lr.value_or(a.min_lr) &&
                                 a.decoupled_min_lr.value_or(a.min_lr) >= 0),
             "--decoupled-lr ", a.decoupled_lr.value_or(0), " must be >= --decoupled-min-lr ",
             a.decoupled_min_lr.value_or(a.min_lr), " >= 0");
  c.style = lr_decay_style_from_name(a.lr_decay_style);
  c.init_lr = a.lr_warmup_init;
  c.wsd_style = wsd_decay_style_from_name(a.lr_wsd_decay_style);
  c.wd_style = weight_decay_incr_style_from_name(a.weight_decay_incr_style);
  c.start_wd = a.start_weight_decay.value_or(a.weight_decay);
  c.end_wd = a.end_weight_decay.value_or(a.weight_decay);
  if (a.train_samples > 0) {
    c.decay_steps = a.lr_decay_samples > 0 ? a.lr_decay_samples : a.train_samples;
    c.warmup_steps = double(a.lr_warmup_samples);
    c.wsd_decay_steps = a.lr_wsd_decay_samples;
    c.wd_incr_steps = a.train_samples;
  } else {
    c.decay_steps = (a.lr_decay_iters > 0 ? a.lr_decay_iters : a.train_iters) * a.global_batch_size;
    c.warmup_steps = double(a.lr_warmup_iters * a.global_batch_size);
    c.wsd_decay_steps = a.lr_wsd_decay_iters * a.global_batch_size;
    c.wd_incr_steps = a.train_iters * a.global_batch_size;
  }
  // Megatron keeps the fractional number of warmup samples (get_lr divides by it).
  if (a.lr_warmup_fraction) c.warmup_steps = *a.lr_warmup_fraction * double(c.decay_steps);
  MT_REQUIRE(c.style == LrDecayStyle::Constant || double(c.decay_steps) > c.warmup_steps,
             "the learning-rate warmup (", c.warmup_steps,
             " samples) must be shorter than the decay (", c.decay_steps,
             " samples): check --lr-warmup-* against --lr-decay-* / --train-*");
  return c;
}

PipelineSplit pipeline_split(const Args& a) {
  PipelineSplit s{.num_layers = a.num_layers,
                  .pipeline_size = a.pipeline_model_parallel_size,
                  .first_stage_layers = a.decoder_first_pipeline_num_layers.value_or(0),
                  .last_stage_layers = a.decoder_last_pipeline_num_layers.value_or(0),
                  .account_for_embedding = a.account_for_embedding_in_pipeline_split,
                  .account_for_loss = a.account_for_loss_in_pipeline_split};
  for (const auto& [count, flag] :
       {std::pair{a.decoder_first_pipeline_num_layers, "--decoder-first-pipeline-num-layers"},
        std::pair{a.decoder_last_pipeline_num_layers, "--decoder-last-pipeline-num-layers"},
        std::pair{a.num_layers_per_virtual_pipeline_stage,
                  "--num-layers-per-virtual-pipeline-stage"},
        std::pair{a.num_virtual_stages_per_pipeline_rank, "--num-virtual-stages-per-pipeline-rank"},
        std::pair{a.microbatch_group_size_per_virtual_pipeline_stage,
                  "--microbatch-group-size-per-virtual-pipeline-stage"}})
    MT_REQUIRE(!count || *count > 0, flag, " must be positive, got ", *count);
  MT_REQUIRE(!(a.num_layers_per_virtual_pipeline_stage && a.num_virtual_stages_per_pipeline_rank),
             "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank "
             "both set the virtual stages: give one of them");
  if (!a.pipeline_model_parallel_layout.empty()) {
    // As Megatron: the layout sets the virtual stages, so neither flag that also sets them.
    MT_REQUIRE(!a.num_layers_per_virtual_pipeline_stage && !a.num_virtual_stages_per_pipeline_rank,
               "--pipeline-model-parallel-layout sets the virtual stages (its stages over "
               "--pipeline-model-parallel-size): give neither "
               "--num-layers-per-virtual-pipeline-stage nor --num-virtual-stages-per-pipeline-rank "
               "with it");
    s.layout = pipeline_layout_stage_layers(a.pipeline_model_parallel_layout, s.num_layers,
                                            s.pipeline_size, a.arch.mtp_num_layers.value_or(0));
    s.chunks = int(s.layout.size()) / s.pipeline_size;
  }
  if (a.num_virtual_stages_per_pipeline_rank) s.chunks = *a.num_virtual_stages_per_pipeline_rank;
  if (const std::optional<int> per_chunk = a.num_layers_per_virtual_pipeline_stage) {
    MT_REQUIRE(s.first_stage_layers == 0 && s.last_stage_layers == 0,
               "--num-layers-per-virtual-pipeline-stage assumes equal stages: with "
               "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers give "
               "--num-virtual-stages-per-pipeline-rank instead (as Megatron-LM asks)");
    // As Megatron: the layers of a pipeline rank (the embedding and loss counted as layers
    // when accounted for) over the layers of a virtual stage.
    const int slots = s.num_layers + int(s.account_for_embedding) + int(s.account_for_loss);
    MT_REQUIRE(
        slots % s.pipeline_size == 0 && slots / s.pipeline_size % *per_chunk == 0,
        "--num-layers-per-virtual-pipeline-stage ", *per_chunk, " must divide --num-layers ",
        s.num_layers,
        slots > s.num_layers ? " (+ the embedding / loss the --account-for-* flags count)" : "",
        " / --pipeline-model-parallel-size ", s.pipeline_size, " (the layers of a pipeline stage)");
    s.chunks = slots / s.pipeline_size / *per_chunk;
  }
  check_pipeline_split(s);
  return s;
}

BatchSizeSchedule batch_size_schedule(const Args& a) {
  if (a.step_batch_size_schedule.empty()) return BatchSizeSchedule::constant(a.global_batch_size);
  return BatchSizeSchedule::parse(a.step_batch_size_schedule, a.seq_length);
}

GradScalerConfig grad_scaler_config(const Args& a) {
  GradScalerConfig c;
  c.dynamic = a.fp16 && !a.loss_scale;
  c.initial_scale = !a.fp16 ? 1.0 : a.loss_scale ? *a.loss_scale : a.initial_loss_scale;
  c.min_scale = a.min_loss_scale;
  c.growth_interval = a.loss_scale_window;
  c.hysteresis = a.hysteresis;
  return c;
}

AdamWConfig adamw_config(const Args& a) {
  AdamWConfig c;
  c.beta1 = a.adam_beta1;
  c.beta2 = a.adam_beta2;
  c.eps = a.adam_eps;
  c.weight_decay = a.weight_decay;
  c.f16_model_weights = a.fp16;
  c.mup_width_mult = mup_width_mult(mup_options(a.arch), a.hidden_size);
  if (a.optimizer != "adam") {
    MuonConfig& m = c.muon.emplace();
    m.momentum = a.muon_momentum;
    m.nesterov = a.muon_nesterov;
    m.split_qkv = !a.muon_no_split_qkv;
    m.scale_mode = muon_scale_mode_from_name(a.muon_scale_mode);
    m.coefficient_type = a.muon_coefficient_type;
    m.num_ns_steps = a.muon_num_ns_steps;
    m.extra_scale_factor = a.muon_extra_scale_factor;
  }
  return c;
}

void set_muon_qkv_layout(TrainerConfig& config, const TransformerConfig& model) {
  if (!config.adam.muon || model.arch.mla.enabled) return;  // MLA has no fused QKV
  const int64_t groups = model.query_groups();
  config.adam.muon->qkv = {groups, model.num_attention_heads / groups, model.head_dim()};
}

void select_training_device(Args& a) {
  a.compute_device = select_device(a.device);
  a.device = a.compute_device.str();
  kernels::set_allow_tf32(a.tf32);
}

TrainerConfig trainer_config(const Args& a, const ArgTable& table) {
  TrainerConfig cfg;
  cfg.device = a.compute_device;
  cfg.tensor_parallel = a.tensor_model_parallel_size;
  cfg.context_parallel = a.context_parallel_size;
  if (!a.hierarchical_context_parallel_sizes.empty())
    cfg.cp_a2a_size = a.hierarchical_context_parallel_sizes[0];
  cfg.pipeline_parallel = a.pipeline_model_parallel_size;
  cfg.rank_order = a.use_tp_pp_dp_mapping ? RankOrder::kTpPpDp : RankOrder::kTpDpPp;
  cfg.expert_model_parallel = a.expert_model_parallel_size;
  cfg.expert_tensor_parallel = a.effective_expert_tensor_parallel_size();
  cfg.check_weight_hash_interval = a.check_weight_hash_across_dp_replicas_interval;
  cfg.test_mode = a.test_mode;
  cfg.micro_batch = a.micro_batch_size;
  cfg.global_batch = a.global_batch_size;
  if (!a.step_batch_size_schedule.empty()) cfg.batch_sizes = batch_size_schedule(a);
  cfg.train_iters = a.train_iters;
  cfg.exit_interval = a.exit_interval;
  cfg.exit_duration_seconds = double(a.exit_duration_in_mins) * 60.0;
  cfg.seed = a.seed;
  cfg.fp16 = a.fp16;
  cfg.bf16 = a.bf16;
  cfg.lr = lr_schedule_config(a);
  cfg.adam = adamw_config(a);
  cfg.clip_grad = a.clip_grad;
  cfg.scaler = grad_scaler_config(a);
  cfg.log_interval = a.log_interval;
  cfg.eval_interval = a.eval_interval;
  cfg.eval_iters = a.eval_iters;
  cfg.eval_global_batch = a.eval_global_batch();
  cfg.metrics_file = a.metrics_file;
  cfg.log_layer_grad_norms = a.log_layer_grad_norms;
  cfg.tensorboard_dir = a.tensorboard_dir;
  cfg.tensorboard_log_interval = a.tensorboard_log_interval;
  cfg.log_params_norm = a.log_params_norm;
  cfg.log_num_zeros_in_grad = a.log_num_zeros_in_grad;
  cfg.log_throughput = a.log_throughput;
  cfg.timing_log_level = a.timing_log_level;
  cfg.timing_log_option = a.timing_log_option;
  cfg.log_timers_to_tensorboard = a.log_timers_to_tensorboard;
  cfg.log_memory_to_tensorboard = a.log_memory_to_tensorboard;
  cfg.log_loss_scale_to_tensorboard = a.log_loss_scale_to_tensorboard;
  cfg.distributed_optimizer = a.distributed_optimizer;
  cfg.overlap_grad_reduce = a.overlap_grad_reduce;
  cfg.ddp_bucket_size = a.ddp_bucket_size;
  cfg.log_validation_ppl_to_tensorboard = a.log_validation_ppl_to_tensorboard;
  cfg.save = a.save;
  cfg.load = a.load;
  cfg.save_interval = a.save_interval;
  cfg.save_retain_interval = a.save_retain_interval;
  cfg.no_load_optim = a.no_load_optim;
  cfg.no_load_rng = a.no_load_rng;
  cfg.no_save_optim = a.no_save_optim;
  cfg.no_save_rng = a.no_save_rng;
  cfg.torch_dist_save = a.ckpt_format == "torch_dist";
  cfg.skip_train = a.skip_train;
  cfg.exit_on_missing_checkpoint = a.exit_on_missing_checkpoint;
  cfg.finetune = a.finetune;
  cfg.schedule_restore = a.override_opt_param_scheduler         ? ScheduleRestore::kOverride
                         : a.use_checkpoint_opt_param_scheduler ? ScheduleRestore::kFromCheckpoint
                                                                : ScheduleRestore::kCheck;
  cfg.check_for_nan_in_loss_and_grad = a.check_for_nan_in_loss_and_grad;
  cfg.exit_signal_handler = a.exit_signal_handler;
  if (a.distributed_timeout_seconds_after_init > 0) {
    cfg.distributed_timeout_seconds = double(a.distributed_timeout_seconds_after_init);
    cfg.distributed_timeout_flag = "--distributed-timeout-seconds-after-init " +
                                   std::to_string(a.distributed_timeout_seconds_after_init);
  } else {
    cfg.distributed_timeout_seconds = double(a.distributed_timeout_minutes) * 60.0;
    cfg.distributed_timeout_flag =
        "--distributed-timeout-minutes " + std::to_string(a.distributed_timeout_minutes);
  }
  cfg.heartbeat_dir = a.heartbeat_dir;
  cfg.log_straggler = a.log_straggler;
  cfg.straggler_minmax_count = a.straggler_minmax_count;
  cfg.async_save = a.async_save;
  cfg.rerun.mode = rerun_mode_from_name(a.rerun_mode);
  cfg.rerun.error_injection_rate = a.error_injection_rate;
  cfg.rerun.error_injection_type = rerun_diagnostic_from_name(a.error_injection_type);
  cfg.rerun.tracker_file = a.result_rejected_tracker_filename;
  cfg.rerun.launch_attempt = launch_attempt_from_environment();
  cfg.check_for_spiky_loss = a.check_for_spiky_loss;
  cfg.check_for_large_grads = a.check_for_large_grads;
  cfg.iterations_to_skip = a.iterations_to_skip;
  cfg.args = table.to_json();
  return cfg;
}

bool Args::recomputes_module(const std::string& module) const {
  if (module == "moe" && moe_layer_recompute) return true;
  if (recompute_modules.empty()) return module == "core_attn";
  return std::find(recompute_modules.begin(), recompute_modules.end(), module) !=
         recompute_modules.end();
}

void Args::check_recompute_method() const {
  // Megatron's modules (TransformerConfig.recompute_modules). The last four belong to layers
  // megatron-cpp does not have: Megatron refuses gdn_norm_out and mhc without their features,
  // and gdp_in_proj / gdp_qkv recompute nothing in a model without gated delta product
  // (Mamba-hybrid) layers, which every model here is.
  static const std::vector<std::string> kMegatronModules = {
      "core_attn",      "moe_act",      "layernorm",   "mla_up_proj", "mlp", "moe",
      "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv",     "mhc"};
  for (const std::string& m : recompute_modules) {
    MT_REQUIRE(
        std::find(kMegatronModules.begin(), kMegatronModules.end(), m) != kMegatronModules.end(),
        "--recompute-modules ", m,
        " is not one of Megatron's modules (core_attn, moe_act, layernorm, mla_up_proj, "
        "mlp, moe, shared_experts, gdn_norm_out, gdp_in_proj, gdp_qkv, mhc)");
    MT_REQUIRE(m != "gdn_norm_out",
               "--recompute-modules gdn_norm_out needs --experimental-attention-variant gdn "
               "(Megatron's rule), a gated delta net that megatron-cpp does not implement: "
               "drop it");
    MT_REQUIRE(m != "mhc",
               "--recompute-modules mhc recomputes hyper-connections "
               "(--enable-mhc-connections), which megatron-cpp does not implement: "
               "drop it");
  }
  MT_REQUIRE(!moe_layer_recompute || !full_recompute(),
             "--moe-layer-recompute is selective recompute of the MoE layers; with "
             "--recompute-granularity full it is refused (as in Megatron-LM): drop one of them");
  MT_REQUIRE(
      !selective_recompute() || !recomputes_module("mla_up_proj") || arch.multi_latent_attention,
      "--recompute-modules mla_up_proj needs --multi-latent-attention (Megatron's rule)");
  MT_REQUIRE(!selective_recompute() || !recomputes_module("moe_act") || arch.moe_grouped_gemm,
             "--recompute-modules moe_act needs --moe-grouped-gemm (Megatron's rule)");
  // Megatron-LM refuses a method with selective recompute, and ignores the two flags without
  // full recompute (validate_training_args warns).
  MT_REQUIRE(recompute_method.empty() || !selective_recompute(),
             "--recompute-method chooses which layers full recompute re-runs; with "
             "--recompute-granularity selective it is refused (as in Megatron-LM): drop it");
  if (full_recompute())
    validate_recompute_method(recompute_method_or_default(), recompute_num_layers_or_default());
}

}  // namespace megatron::cli
