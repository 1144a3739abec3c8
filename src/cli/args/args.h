// Args: the training arguments shared by every `pretrain-*` subcommand, with Megatron-LM's
// flag names and defaults. Where the rest of the command line lives:
//   cli/args/arg_table.h        the flag-table machinery (CLI11): parsing, printing, json
//   cli/args/training_flags.h   registering these fields as flags
//   cli/args/training_config.h  validating them and mapping them to the components' configs
//   cli/args/megatron_flags.h   Megatron-LM's other flags: accepted, refused or ignored
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "model/transformer_config.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/trainer.h"

namespace megatron::cli {

// ---- Llama-family architecture flags (Megatron-Core names; GPT only) ----
// Registered by pretrain-gpt (add_architecture_args), stored with the other arguments in
// checkpoints under their attribute names and read back from them by generate and convert
// (checkpoint/architecture_json.h).
struct ArchitectureArgs {
  std::string position_embedding_type = "learned_absolute";  // learned_absolute|rope|yarn|none
  double rotary_base = 10000.0;
  double rotary_percent = 1.0;
  std::optional<double> rotary_seq_len_interpolation_factor;
  bool use_rope_scaling = false;                  // Llama 3.1's RoPE scaling
  double rope_scaling_factor = 8.0;               // Megatron's default
  kernels::Llama3RopeScaling rope_scaling_shape;  // low/high/original: HF imports only
  std::string normalization = "LayerNorm";        // LayerNorm | RMSNorm
  std::optional<double> norm_epsilon;             // overrides --layernorm-epsilon when given
  bool swiglu = false;
  bool group_query_attention = false;
  int num_query_groups = 1;
  int kv_channels = 0;  // 0: hidden / heads
  bool disable_bias_linear = false;
  bool add_qkv_bias = false;
  bool untie_embeddings_and_output_weights = false;
  bool apply_layernorm_1p = false;
  bool squared_relu = false;
  bool qk_layernorm = false;
  bool rotary_interleaved = false;
  // --multi-latent-attention and its shape (Megatron-LM's defaults; model/mla_projection.h).
  bool multi_latent_attention = false;
  int q_lora_rank = 0;  // 0: Megatron's None (a direct query projection)
  int kv_lora_rank = 32;
  int qk_head_dim = 128;
  int qk_pos_emb_head_dim = 64;
  int v_head_dim = 128;
  std::string rope_type;  // rope | yarn; "" (unset): yarn with MLA, rope without
  // YaRN (kernels/yarn_rope.h): MLA's with --rope-type yarn, or --position-embedding-type yarn
  // (which alone takes the --yarn-* flags, Megatron's None giving YarnRotaryEmbedding's defaults).
  double rotary_scaling_factor = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  std::optional<int> yarn_original_max_position_embeddings;
  std::optional<double> yarn_beta_fast, yarn_beta_slow;
  bool yarn_correction_range_round_to_int = true;
  // --experimental-attention-variant dsa and its --dsa-* options (model/transformer_config.h,
  // DsaOptions; Megatron-LM's defaults). Unset optional values are Megatron's None.
  std::string experimental_attention_variant;  // "" (None) or dsa
  std::optional<int> dsa_indexer_n_heads, dsa_indexer_head_dim, dsa_indexer_topk;
  int dsa_indexer_topk_freq = 1;
  int dsa_indexer_skip_topk_offset = 0;
  std::optional<double> dsa_indexer_loss_coeff;
  bool dsa_indexer_use_sparse_loss = false;
  std::string dsa_kernel_backend = "none";
  bool dsa_indexer_rope_interleaved = false;
  bool no_dsa_indexer_rotate_activation = false;
  bool no_dsa_indexer_scoring_relu = false;
  std::optional<double> dsa_indexer_k_norm_epsilon;
  bool dsa_indexer_k_norm_fp32 = false;
  // --use-mup and its options (model/transformer_config.h, MupOptions).
  bool use_mup = false;
  std::optional<int> mup_base_hidden_size;  // unset: --hidden-size (width multiplier 1)
  double mup_embedding_mult = 1.0;
  double mup_output_mult = 1.0;
  std::optional<double> mup_base_head_dim;
  double mup_attn_scale_power = 1.0;
  // --mtp-num-layers and --mtp-loss-scaling-factor: multi-token prediction (model/
  // transformer_config.h, MtpOptions); unset is Megatron's None.
  std::optional<int> mtp_num_layers;
  double mtp_loss_scaling_factor = 0.1;
  // --num-experts and --moe-*: the mixture-of-experts layers (model/moe_options.h), with
  // Megatron-LM's defaults; unset optionals are its None.
  int num_experts = 0;
  std::optional<int> moe_ffn_hidden_size;
  int moe_router_topk = 2;
  std::vector<std::string> moe_router_load_balancing_type = {"aux_loss"};
  std::vector<double> moe_aux_loss_coeff = {0.0};
  std::optional<double> moe_z_loss_coeff;
  std::string moe_router_score_function = "softmax";
  bool moe_router_pre_softmax = false;
  std::optional<double> moe_router_topk_scaling_factor;
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  std::optional<int> moe_router_num_groups;
  std::optional<int> moe_router_group_topk;
  std::string moe_router_dtype;  // "" (None), fp32 or fp64 (MoeOptions::router_fp64)
  std::string moe_layer_freq = "1";
  std::optional<int> moe_shared_expert_intermediate_size;
  bool moe_shared_expert_gate = false;
  std::optional<double> moe_expert_capacity_factor;
  bool moe_pad_expert_input_to_capacity = false;
  std::string moe_token_drop_policy = "probs";
  // Implementations of the same function (accepted, docs/moe.md): the experts always run as one
  // grouped GEMM, tokens are always permuted by the fused gather kernels, and at
  // expert-parallel size 1 every dispatcher moves nothing.
  bool moe_grouped_gemm = false;
  bool moe_permute_fusion = false;
  bool moe_router_fusion = false;
  std::string moe_token_dispatcher_type = "allgather";
  // flex's communication backends (GPU libraries; flex runs the alltoall dispatcher here).
  bool moe_enable_deepep = false;
  std::string moe_flex_dispatcher_backend = "deepep";
  // --use-checkpoint-args: the model shape (--num-layers, --hidden-size, --num-attention-heads,
  // --ffn-hidden-size, --max-position-embeddings), the flags above and --openai-gelu come from the
  // checkpoint in --load, as Megatron's flag does (e.g. after `convert --from hf`).
  bool use_checkpoint_args = false;
};

// ---- Fill-in-the-middle data (--fim-data; GPT only, data/fim_dataset.h) ----
// Registered by pretrain-gpt (add_fim_args). Empty strings are Megatron's None.
struct FimArgs {
  bool data = false;  // --fim-data
  double rate = 0.5;
  double spm_rate = 0.5;
  std::string split_sample;  // a vocabulary token: fragments are cut at it
  std::optional<double> fragment_rate;
  std::string no_prefix;
  std::string prefix_token = "<fim_prefix>", middle_token = "<fim_middle>",
              suffix_token = "<fim_suffix>", pad_token = "<fim_pad>", eod_token = "<|endoftext|>";
};

struct Args {
  // The samples of one evaluation iteration: --eval-global-batch-size, else
  // --global-batch-size (after validation).
  int64_t eval_global_batch() const {
    return eval_global_batch_size > 0 ? eval_global_batch_size : global_batch_size;
  }

  // Model shape.
  int num_layers = 0;
  int hidden_size = 0;
  int num_attention_heads = 0;
  int ffn_hidden_size = 0;  // 0 → 4 · hidden_size
  int seq_length = 0;
  int max_position_embeddings = 0;  // 0 → seq_length
  int make_vocab_size_divisible_by = 128;
  double layernorm_epsilon = 1e-5;
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  double init_method_std = 0.02;
  bool openai_gelu = false;            // GeLU's tanh form; the default is the exact (erf) form
  bool recompute_activations = false;  // Megatron's shorthand for granularity selective
  std::string recompute_granularity;   // "", "full" or "selective"
  std::string recompute_method;        // "" (uniform), "uniform" or "block": with full
  int recompute_num_layers = -1;       // -1: not given (1)
  std::vector<std::string> recompute_modules;  // --recompute-modules; empty: not given
  bool moe_layer_recompute = false;            // Megatron's deprecated spelling of selective "moe"
  bool use_flash_attn = false;                 // the fused attention core (model/attention.h)
  std::string attention_backend = "auto";      // Megatron's names; "flash" = --use-flash-attn

  // Batches and length of training.
  int64_t micro_batch_size = 0;
  int64_t global_batch_size = 0;       // 0 → micro_batch_size · data_parallel_size
  int64_t eval_global_batch_size = 0;  // --eval-global-batch-size; 0 → global_batch_size
  // --step-batch-size-schedule "THRESHOLD:BS ..." (train/batch_size_schedule.h); empty: none.
  std::string step_batch_size_schedule;
  int64_t train_iters = 0;  // exactly one of train_iters / train_samples
  int64_t train_samples = 0;
  int64_t exit_interval = 0;
  int64_t exit_duration_in_mins = 0;
  uint64_t seed = 1234;

  // Learning rate schedule (Megatron's OptimizerParamScheduler).
  std::optional<double> lr;
  double min_lr = 0.0;
  // --decoupled-lr / --decoupled-min-lr: the word embedding's and output layer's own.
  std::optional<double> decoupled_lr, decoupled_min_lr;
  std::string lr_decay_style = "linear";
  int64_t lr_decay_iters = 0;
  int64_t lr_decay_samples = 0;
  int64_t lr_warmup_iters = 0;
  std::optional<double> lr_warmup_fraction;
  int64_t lr_warmup_samples = 0;
  double lr_warmup_init = 0.0;
  std::string lr_wsd_decay_style = "exponential";
  int64_t lr_wsd_decay_iters = 0;
  int64_t lr_wsd_decay_samples = 0;
  std::optional<double> start_weight_decay;  // unset: --weight-decay
  std::optional<double> end_weight_decay;    // unset: --weight-decay
  std::string weight_decay_incr_style = "constant";

  // Optimizer.
  double weight_decay = 0.01;
  double clip_grad = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  // --optimizer adam | muon | dist_muon (Megatron's deprecated muon + distributed optimizer);
  // Muon's settings, with Megatron's defaults (optim/muon.h).
  std::string optimizer = "adam";
  double muon_momentum = 0.9;
  bool muon_no_split_qkv = false;
  bool muon_nesterov = false;
  std::string muon_scale_mode = "spectral";
  std::string muon_fp32_matmul_prec = "medium";
  std::string muon_coefficient_type = "quintic";
  int muon_num_ns_steps = 5;
  std::string muon_tp_mode = "duplicated";
  bool muon_use_syrk = false;
  double muon_extra_scale_factor = 1.0;
  std::string muon_scalar_optimizer = "adam";

  // Mixed precision.
  bool bf16 = false;
  bool fp16 = false;
  bool tf32 = false;                 // f32 GEMMs may use TF32 on GPUs (kernels/gemm_options.h)
  std::optional<double> loss_scale;  // set: constant scale; unset: dynamic (fp16)
  double initial_loss_scale = 4294967296.0;
  double min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;

  // Device and parallelism.
  std::string device;  // --device: "" (automatic), cpu, cuda, cuda:N (cli/setup/device_setup.h)
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  // How the layers split over the pipeline stages and the interleaved schedule's groups
  // (model/stage_range.h, pipeline/schedule.h; pipeline_split() in training_config.h), as
  // Megatron-LM's flags of these names; registered by add_pipeline_args. Unset: not given.
  std::optional<int> num_layers_per_virtual_pipeline_stage;
  std::optional<int> num_virtual_stages_per_pipeline_rank;
  std::optional<int> decoder_first_pipeline_num_layers;
  std::optional<int> decoder_last_pipeline_num_layers;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  std::optional<int> microbatch_group_size_per_virtual_pipeline_stage;
  std::string pipeline_model_parallel_layout;  // "": not given (model/pipeline_layout.h)
  // --context-parallel-size, --cp-comm-type (one for all layers or one per layer) and
  // --hierarchical-context-parallel-sizes (pretrain-gpt; docs/parallelism.md).
  int context_parallel_size = 1;
  std::vector<std::string> cp_comm_type = {"p2p"};
  std::vector<int> hierarchical_context_parallel_sizes;
  // --expert-model-parallel-size (pretrain-gpt): the MoE layers' experts split over this many
  // ranks, carved out of the data-parallel ones (docs/moe.md).
  int expert_model_parallel_size = 1;
  // --expert-tensor-parallel-size (pretrain-gpt): the experts' own tensor-parallel size; 0 (the
  // default, Megatron's None) is the TP size.
  int expert_tensor_parallel_size = 0;
  std::string distributed_backend;  // "nccl", "mpi"; "" → nccl on a GPU, mpi on the CPU

  // Data and tokenizer.
  std::vector<std::string> data_path;
  // Megatron's per-split data: each blend is used whole for its split (no --split).
  std::vector<std::string> train_data_path;
  std::vector<std::string> valid_data_path;
  std::vector<std::string> test_data_path;
  std::string split = "969, 30, 1";
  std::string vocab_file;
  std::string merge_file;
  std::string tokenizer_type;
  std::string tokenizer_model;
  int64_t vocab_size = 0;
  std::string tiktoken_pattern;
  int64_t tiktoken_num_special_tokens = 1000;
  bool mock_data = false;
  std::string data_cache_path;  // --data-cache-path (pretrain-gpt): the sample-index cache's dir
  FimArgs fim;                  // pretrain-gpt

  // Checkpoints.
  std::string save;
  std::string load;
  int64_t save_interval = 0;
  int64_t save_retain_interval = 0;  // 0: keep every checkpoint
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool no_save_optim = false;
  bool no_save_rng = false;
  // --ckpt-format of the saves: "" or "safetensors" megatron-cpp's format, "torch" Megatron-LM's
  // legacy format (cli/setup/megatron_lm_save.h), "torch_dist" Megatron-LM's distributed format
  // (checkpoint/megatron_lm_torch_dist_writer.h). --load detects the format itself.
  std::string ckpt_format;
  bool finetune = false;
  bool use_tp_pp_dp_mapping = false;  // --use-tp-pp-dp-mapping (distributed/parallel_state.h)
  int64_t check_weight_hash_across_dp_replicas_interval = 0;  // 0: never (optim/replica_check.h)
  bool test_mode = false;                                     // --test-mode
  // How a resumed run's LR-schedule settings meet the checkpoint's (optim/lr_schedule.h).
  bool override_opt_param_scheduler = false;        // --override-opt_param-scheduler
  bool use_checkpoint_opt_param_scheduler = false;  // --use-checkpoint-opt_param-scheduler
  bool skip_train = false;
  bool exit_on_missing_checkpoint = false;

  // Reliability (docs/reliability.md).
  bool check_for_nan_in_loss_and_grad = true;  // off: --no-check-for-nan-in-loss-and-grad
  bool async_save = false;
  bool exit_signal_handler = false;
  // Hang detection (distributed/watchdog.h): an operation waiting longer ends the job.
  int64_t distributed_timeout_minutes = 10;            // Megatron's default
  int64_t distributed_timeout_seconds_after_init = 0;  // 0: not given; else replaces the above
  std::string heartbeat_dir;                           // base of the heartbeat files' directory
  bool log_straggler = false;                          // train/log/straggler_report.h
  int straggler_minmax_count = 1;
  // Megatron's rerun state machine (train/rerun_state_machine.h).
  std::string rerun_mode = "disabled";
  int64_t error_injection_rate = 0;
  std::string error_injection_type = "transient_error";
  std::string result_rejected_tracker_filename;
  bool check_for_spiky_loss = false;
  bool check_for_large_grads = false;
  std::vector<int64_t> iterations_to_skip;  // 1-based

  // Logging and evaluation.
  int64_t log_interval = 100;
  int64_t eval_interval = 1000;
  int64_t eval_iters = 100;
  std::string metrics_file;
  std::string tensorboard_dir;
  bool log_layer_grad_norms = false;
  int64_t tensorboard_log_interval = 1;
  bool log_validation_ppl_to_tensorboard = false;
  bool log_loss_scale_to_tensorboard = true;  // off: --no-log-loss-scale-to-tensorboard
  bool log_params_norm = false;
  bool log_num_zeros_in_grad = false;
  bool log_throughput = false;
  int timing_log_level = 0;                  // --timing-log-level 0|1|2
  std::string timing_log_option = "minmax";  // --timing-log-option minmax|max|all
  bool log_timers_to_tensorboard = false;
  bool log_memory_to_tensorboard = false;
  bool log_args = false;  // print Megatron's argument block at the start

  // Derived by validate_args (printed, not flags).
  int world_size = 1;
  int data_parallel_size = 1;
  // Set by select_training_device (not a flag).
  Device compute_device = Device::CPU;

  // The experts' tensor-parallel size: --expert-tensor-parallel-size, else (and in a model
  // without experts, where the flag has nothing to split) the TP size.
  int effective_expert_tensor_parallel_size() const {
    return expert_tensor_parallel_size > 0 && arch.num_experts > 0 ? expert_tensor_parallel_size
                                                                   : tensor_model_parallel_size;
  }
  int effective_ffn_hidden_size() const {
    return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size;
  }
  int64_t num_micro_batches() const {
    return global_batch_size / (micro_batch_size * data_parallel_size);
  }
  kernels::GeluForm gelu_form() const {
    return openai_gelu ? kernels::GeluForm::kTanh : kernels::GeluForm::kErf;
  }
  bool full_recompute() const { return recompute_granularity == "full"; }
  // Throws Error naming the flags when --recompute-method or --recompute-num-layers is given
  // without --recompute-granularity full, the method is unknown, the count below 1, or above
  // 1 with the uniform method.
  void check_recompute_method() const;
  // --recompute-method and --recompute-num-layers as the model configs take them (the defaults
  // without full recompute, which ignores them).
  RecomputeMethod recompute_method_or_default() const {
    return recompute_method.empty() || !full_recompute()
               ? RecomputeMethod::kUniform
               : recompute_method_from_name(recompute_method);
  }
  int recompute_num_layers_or_default() const {
    return recompute_num_layers == -1 || !full_recompute() ? 1 : recompute_num_layers;
  }
  bool selective_recompute() const {
    return recompute_activations || recompute_granularity == "selective" || moe_layer_recompute;
  }
  // --recompute-modules (with selective recompute): whether `module` is in the list, which is
  // Megatron's default {core_attn} when the flag is not given; --moe-layer-recompute adds moe.
  bool recomputes_module(const std::string& module) const;
  bool flash_attention() const { return use_flash_attn || attention_backend == "flash"; }
  // Registered by add_sharding_args (pretrain-gpt, pretrain-bert, finetune).
  bool sequence_parallel = false;                        // --sequence-parallel
  bool distributed_optimizer = false;                    // --use-distributed-optimizer
  bool overlap_grad_reduce = false;                      // --overlap-grad-reduce
  int64_t ddp_bucket_size = kDefaultGradBucketElements;  // --ddp-bucket-size

  ArchitectureArgs arch;  // pretrain-gpt's architecture flags
};

}  // namespace megatron::cli
