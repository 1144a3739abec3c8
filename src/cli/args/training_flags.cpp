#include "cli/args/training_flags.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "model/stage_range.h"

namespace megatron::cli {

void add_tokenizer_args(ArgTable& t, std::string& type, std::string& vocab_file,
                        std::string& merge_file, std::string& model_file, int64_t& vocab_size,
                        std::string& tiktoken_pattern, int64_t& tiktoken_num_special_tokens) {
  t.add("--vocab-file", vocab_file, "tokenizer vocabulary file");
  t.add("--merge-file", merge_file, "BPE merges file");
  t.add("--tokenizer-type", type,
        "GPT2BPETokenizer | BertWordPieceLowerCase | BertWordPieceCase | "
        "SentencePieceTokenizer | GPTSentencePieceTokenizer | Llama2Tokenizer | "
        "HuggingFaceTokenizer | TikTokenizer | NullTokenizer");
  t.add("--tokenizer-model", model_file,
        "SentencePiece .model; tokenizer.json (or its directory) for HuggingFaceTokenizer; "
        "ranks .json for TikTokenizer");
  t.add("--vocab-size", vocab_size,
        "vocabulary size for NullTokenizer and TikTokenizer (training: also --mock-data)");
  t.add("--tiktoken-pattern", tiktoken_pattern,
        "TikTokenizer split regex: v1 or v2 (default v2, as Megatron)");
  t.add("--tiktoken-num-special-tokens", tiktoken_num_special_tokens,
        "TikTokenizer: ids reserved for special tokens before the ranks");
}

void add_training_args(ArgTable& t, Args& a) {
  t.add("--num-layers", a.num_layers, "number of transformer layers");
  t.add("--hidden-size", a.hidden_size, "transformer hidden size");
  t.add("--num-attention-heads", a.num_attention_heads, "number of attention heads");
  t.add("--ffn-hidden-size", a.ffn_hidden_size, "MLP hidden size (default 4 x hidden size)");
  t.require_positive("--ffn-hidden-size", "4 x --hidden-size");
  t.add("--seq-length", a.seq_length, "sequence length");
  t.add("--max-position-embeddings", a.max_position_embeddings,
        "position embedding table size (default: --seq-length)");
  t.add("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by,
        "pad the vocabulary to a multiple of this times the TP size");
  t.add("--layernorm-epsilon", a.layernorm_epsilon, "LayerNorm epsilon");
  t.add("--hidden-dropout", a.hidden_dropout, "dropout on hidden states");
  t.add("--attention-dropout", a.attention_dropout, "dropout on attention probabilities");
  t.add("--init-method-std", a.init_method_std, "std of the normal weight init");
  t.add_flag("--openai-gelu", a.openai_gelu,
             "GeLU's tanh approximation (GPT-2's) instead of the exact erf form");
  t.add_flag("--recompute-activations", a.recompute_activations,
             "selective recompute (as in Megatron-LM: --recompute-granularity selective)");
  t.add("--recompute-granularity", a.recompute_granularity,
        "full: recompute each layer in backward from its input; selective: recompute only the "
        "regions --recompute-modules names (default: the attention core)");
  t.add("--recompute-modules", a.recompute_modules,
        "with selective recompute, the regions whose activations are dropped after forward and "
        "recomputed in backward (Megatron's names, any of): core_attn (the attention core; the "
        "default), layernorm (the input and pre-MLP norms), mlp (a dense layer's MLP), moe (a "
        "MoE layer's whole mixture of experts), shared_experts (the MoE shared expert), moe_act "
        "(the experts' activation), mla_up_proj (MLA's up projections and RoPE); "
        "docs/model.md");
  t.add_flag("--moe-layer-recompute", a.moe_layer_recompute,
             "Megatron's deprecated spelling of --recompute-granularity selective "
             "--recompute-modules moe (added to the modules given)");
  t.add("--recompute-method", a.recompute_method,
        "with --recompute-granularity full: uniform (every layer, one at a time; the default) or "
        "block (only the first --recompute-num-layers layers of each pipeline stage's model "
        "chunk; the others keep their activations)");
  t.add("--recompute-num-layers", a.recompute_num_layers,
        "with --recompute-method block: how many layers of each model chunk recompute (uniform: "
        "1, one layer per recomputed chunk)");
  t.add_flag("--use-flash-attn", a.use_flash_attn,
             "the fused attention core (flash attention: no [b, heads, s, s] buffers)");
  t.add("--attention-backend", a.attention_backend,
        "flash: the fused attention core (as --use-flash-attn); auto, fused, unfused or local: "
        "batched GEMMs around a fused scaled-masked softmax");

  t.add("--micro-batch-size", a.micro_batch_size, "samples per micro-batch per DP rank");
  t.add("--global-batch-size", a.global_batch_size,
        "samples per iteration (default micro-batch size x DP size)");
  t.require_positive("--global-batch-size", "--micro-batch-size x the data-parallel size");
  t.add("--step-batch-size-schedule", a.step_batch_size_schedule,
        "global batch size by consumed tokens, \"THRESHOLD:BS ...\" (K/M/B/T suffixes), "
        "instead of --global-batch-size");
  t.add("--train-iters", a.train_iters, "iterations to train");
  t.add("--train-samples", a.train_samples, "samples to train (alternative to --train-iters)");
  t.add("--exit-interval", a.exit_interval, "exit after the iteration divisible by this");
  t.add("--exit-duration-in-mins", a.exit_duration_in_mins,
        "stop (save, evaluate) after this many minutes of training");
  t.add("--seed", a.seed, "random seed (init, dropout)");

  t.add("--lr", a.lr, "peak learning rate");
  t.add("--min-lr", a.min_lr, "final learning rate of the decay");
  t.add("--decoupled-lr", a.decoupled_lr,
        "peak learning rate of the word embedding and output layer (default --lr)");
  t.add("--decoupled-min-lr", a.decoupled_min_lr,
        "final learning rate of the word embedding and output layer (default --min-lr)");
  t.add("--lr-decay-style", a.lr_decay_style,
        "constant | linear | cosine | inverse-square-root | WSD");
  t.add("--lr-decay-iters", a.lr_decay_iters, "iterations to decay over (default train iters)");
  t.add("--lr-decay-samples", a.lr_decay_samples, "samples to decay over (default train samples)");
  t.add("--lr-warmup-iters", a.lr_warmup_iters, "linear warmup iterations");
  t.add("--lr-warmup-fraction", a.lr_warmup_fraction, "warmup as a fraction of the decay");
  t.add("--lr-warmup-samples", a.lr_warmup_samples, "linear warmup samples");
  t.add("--lr-warmup-init", a.lr_warmup_init, "learning rate at the start of the warmup");
  t.add("--lr-wsd-decay-style", a.lr_wsd_decay_style,
        "WSD's final anneal: exponential | linear | cosine | minus_sqrt");
  t.add("--lr-wsd-decay-iters", a.lr_wsd_decay_iters, "iterations of WSD's final anneal");
  t.add("--lr-wsd-decay-samples", a.lr_wsd_decay_samples, "samples of WSD's final anneal");
  t.add("--start-weight-decay", a.start_weight_decay,
        "weight decay at the start (with --weight-decay-incr-style linear | cosine)");
  t.add("--end-weight-decay", a.end_weight_decay, "weight decay at the end of training");
  t.add("--weight-decay-incr-style", a.weight_decay_incr_style,
        "constant | linear | cosine: weight decay from start to end over the run");

  t.add("--weight-decay", a.weight_decay, "decoupled weight decay (not on biases/LayerNorm)");
  t.add("--clip-grad", a.clip_grad, "global gradient-norm clip (0: no clipping)");
  t.add("--adam-beta1", a.adam_beta1, "Adam beta1");
  t.add("--adam-beta2", a.adam_beta2, "Adam beta2");
  t.add("--adam-eps", a.adam_eps, "Adam epsilon");
  t.add("--optimizer", a.optimizer,
        "adam | muon (Muon on the weight matrices, AdamW on the rest; docs/training.md) | "
        "dist_muon (= muon --use-distributed-optimizer)");
  t.add("--muon-momentum", a.muon_momentum, "Muon's momentum (EMA of the gradients)");
  t.add_flag("--muon-no-split-qkv", a.muon_no_split_qkv,
             "orthogonalise the fused QKV weight whole, not its Q, K and V rows apart");
  t.add_flag("--muon-nesterov", a.muon_nesterov, "Nesterov-style momentum in Muon");
  t.add("--muon-scale-mode", a.muon_scale_mode,
        "spectral | unit_rms_norm | shape_scaling: the scale of Muon's orthogonalised update");
  t.add("--muon-fp32-matmul-prec", a.muon_fp32_matmul_prec,
        "low | medium | high; Newton-Schulz always multiplies in f32 here (TF32 on GPUs only "
        "with --tf32)");
  t.add("--muon-coefficient-type", a.muon_coefficient_type,
        "Newton-Schulz coefficients: simple | quintic | polar_express | cans | aol | deepseekv4 "
        "| cubic5");
  t.add("--muon-num-ns-steps", a.muon_num_ns_steps, "Newton-Schulz steps");
  t.add("--muon-tp-mode", a.muon_tp_mode,
        "duplicated | distributed: both orthogonalise the whole matrix (gathered over TP) and "
        "give the same update here; blockwise is refused (layout-dependent)");
  t.add_flag("--muon-use-syrk", a.muon_use_syrk,
             "Megatron's Triton SYRK kernel for the Gram matrix: the same product, a GEMM here");
  t.add("--muon-extra-scale-factor", a.muon_extra_scale_factor,
        "extra factor on Muon's scaled update");
  t.add("--muon-scalar-optimizer", a.muon_scalar_optimizer,
        "the optimizer of the parameters Muon leaves (embeddings, output layer, norms, biases): "
        "adam (lion is refused)");

  t.add_flag("--bf16", a.bf16, "bf16 parameters and GEMMs, fp32 master weights");
  t.add_flag("--fp16", a.fp16, "fp16 weights with dynamic loss scaling");
  t.add_flag("--tf32", a.tf32,
             "let f32 GEMMs multiply in TF32 on GPUs that have it (faster, ~1e-3 relative "
             "error per product; default: full f32). No effect on the CPU or in bf16");
  t.add("--loss-scale", a.loss_scale, "constant loss scale (fp16; default dynamic)");
  t.add("--initial-loss-scale", a.initial_loss_scale, "initial dynamic loss scale");
  t.add("--min-loss-scale", a.min_loss_scale, "floor of the dynamic loss scale");
  t.add("--loss-scale-window", a.loss_scale_window, "clean steps before doubling the scale");
  t.add("--hysteresis", a.hysteresis, "overflows tolerated before halving the scale");

  t.add("--device", a.device,
        "cpu | cuda | cuda:N (default: cuda when built with CUDA and a GPU is visible, one rank "
        "per GPU by local rank; else cpu)");
  t.add("--tensor-model-parallel-size", a.tensor_model_parallel_size, "TP size");
  t.add("--pipeline-model-parallel-size", a.pipeline_model_parallel_size,
        "PP size: pipeline stages (docs/parallelism.md)");
  t.add("--distributed-backend", a.distributed_backend,
        "nccl or mpi (default: nccl when the run's device is a GPU, mpi on the CPU)");

  t.add("--data-path", a.data_path, "PREFIX or W1 PREFIX1 W2 PREFIX2 ...");
  t.add("--split", a.split, "train,valid,test document split weights");
  t.add("--train-data-path", a.train_data_path,
        "training data used whole (PREFIX or W1 PREFIX1 ...), instead of --data-path");
  t.add("--valid-data-path", a.valid_data_path, "validation data used whole");
  t.add("--test-data-path", a.test_data_path, "test data used whole");
  add_tokenizer_args(t, a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model,
                     a.vocab_size, a.tiktoken_pattern, a.tiktoken_num_special_tokens);
  t.add_flag("--mock-data", a.mock_data, "train on deterministic random tokens");

  t.add("--save", a.save, "checkpoint directory to save to");
  t.add("--load", a.load, "checkpoint directory to load from");
  t.add("--save-interval,--persistent-save-interval", a.save_interval,
        "save every this many iterations");
  t.add("--save-retain-interval", a.save_retain_interval,
        "after each save, remove the previous checkpoint unless its iteration is a multiple of "
        "this (keeps every N-th and the newest; a multiple of --save-interval)");
  t.add_flag("--no-load-optim", a.no_load_optim, "do not load optimizer state");
  t.add_flag("--no-load-rng", a.no_load_rng, "do not load the RNG state");
  t.add_flag("--no-save-optim", a.no_save_optim,
             "save weights only: no optimizer or schedule state (load with --no-load-optim)");
  t.add_flag("--no-save-rng", a.no_save_rng, "do not save the RNG state");
  t.add("--ckpt-format", a.ckpt_format,
        "format of the --save checkpoints: safetensors (megatron-cpp's, the default), torch "
        "(Megatron-LM's mp_rank_*/model_optim_rng.pt) or torch_dist (Megatron-LM's .distcp "
        "files, GPT-family models); --load detects the format");
  t.add_flag("--exit-on-missing-checkpoint", a.exit_on_missing_checkpoint,
             "stop when --load holds no checkpoint instead of starting from random weights");
  t.add_flag("--skip-train", a.skip_train,
             "no training: load, evaluate on the validation set, and exit");
  t.add_flag("--finetune", a.finetune, "load weights only and start at iteration 0");
  t.add("--check-weight-hash-across-dp-replicas-interval",
        a.check_weight_hash_across_dp_replicas_interval,
        "every N iterations, check that the data-parallel replicas hold the same parameters "
        "(a CRC-32C of each; the run stops naming a replica that differs)");
  t.add_flag("--test-mode", a.test_mode,
             "after every iteration, check that the data-parallel replicas hold the same "
             "parameters and the tensor-parallel ranks the same replicated ones (LayerNorms, QK "
             "norms); the run stops naming a rank that differs");
  t.add_flag("--use-tp-pp-dp-mapping", a.use_tp_pp_dp_mapping,
             "order the ranks tensor, then pipeline, then data parallel (default: tensor, data, "
             "pipeline); the same results either way");
  t.add_flag("--override-opt_param-scheduler,--override-opt-param-scheduler",
             a.override_opt_param_scheduler,
             "on resume, take the LR schedule's settings from the command line, not the "
             "checkpoint (default: the two must agree)");
  t.add_flag("--use-checkpoint-opt_param-scheduler,--use-checkpoint-opt-param-scheduler",
             a.use_checkpoint_opt_param_scheduler,
             "on resume, take the LR schedule's settings (--lr, --min-lr, warmup, decay length "
             "and style, weight-decay increments) from the checkpoint");
  t.add_negatable_flag("--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad",
                       a.check_for_nan_in_loss_and_grad,
                       "stop when the loss, the gradient norm or the weights become inf/NaN "
                       "(default on)");
  t.add_flag("--async-save", a.async_save,
             "write the --save checkpoints in the background while training goes on; each is "
             "committed at a later iteration once every rank's files are written");
  t.add_flag("--exit-signal-handler", a.exit_signal_handler,
             "on SIGTERM/SIGINT: finish the iteration, save a checkpoint and exit 0");
  t.add("--distributed-timeout-minutes", a.distributed_timeout_minutes,
        "a rank that waits longer than this in one collective or point-to-point operation ends "
        "the job, with a report of where every rank is (hang detection)");
  t.require_positive("--distributed-timeout-minutes", "10 minutes");
  t.add("--distributed-timeout-seconds-after-init", a.distributed_timeout_seconds_after_init,
        "the same timeout in seconds, for training (replaces --distributed-timeout-minutes once "
        "the run is set up)");
  t.require_positive("--distributed-timeout-seconds-after-init", "--distributed-timeout-minutes");
  t.add("--heartbeat-dir", a.heartbeat_dir,
        "where the ranks' heartbeat files go (a directory per job is made inside; default $TMPDIR "
        "or /tmp; give a shared directory for multi-node hang reports)");
  t.add_flag("--log-straggler", a.log_straggler,
             "after each log interval, rank 0 prints every rank's time per iteration split into "
             "computing and communicating, and names the ranks computing slower than the others");
  t.add("--straggler-minmax-count", a.straggler_minmax_count,
        "how many of the fastest and slowest ranks the straggler report names");
  t.require_positive("--straggler-minmax-count", "1");
  t.add("--rerun-mode", a.rerun_mode,
        "disabled, validate_results (re-run an iteration whose loss or gradient norm is "
        "rejected, to tell a transient fault, a persistent one and a correct result apart; exit "
        "codes 16 and 17, docs/reliability.md) or report_determinism_stats (run every iteration "
        "twice, report the differences)");
  t.add("--error-injection-rate", a.error_injection_rate,
        "inject a fault into 1 in N result validations on each rank (0: none; tests the rerun "
        "state machine)");
  t.add("--error-injection-type", a.error_injection_type,
        "the injected fault: correct_result, transient_error or persistent_error");
  t.add("--result-rejected-tracker-filename", a.result_rejected_tracker_filename,
        "append rejected results and their verdicts here; iterations it shows to be the data's "
        "fault are skipped by the next run");
  t.add_flag("--check-for-spiky-loss", a.check_for_spiky_loss,
             "validate the loss against 10x the largest of its first 100 values (non-fatal)");
  t.add_flag("--check-for-large-grads", a.check_for_large_grads,
             "validate the gradient norm against 10x the largest of its first 100 values "
             "(non-fatal)");
  t.add("--iterations-to-skip", a.iterations_to_skip,
        "1-based iterations whose global batch is consumed without training");

  t.add("--log-interval", a.log_interval, "iterations between log lines");
  t.add_flag("--log-args", a.log_args,
             "print every argument at the start, as Megatron-LM's \"arguments\" block (Megatron "
             "always prints it; here it is asked for)");
  t.add("--eval-interval", a.eval_interval, "iterations between validations");
  t.add("--eval-iters", a.eval_iters, "validation batches per evaluation");
  t.add("--eval-global-batch-size", a.eval_global_batch_size,
        "samples of one validation batch (default --global-batch-size)");
  t.add("--metrics-file", a.metrics_file, "append one JSON object per logged event");
  t.add("--tensorboard-dir", a.tensorboard_dir, "write TensorBoard scalars here");
  t.add("--tensorboard-log-interval", a.tensorboard_log_interval,
        "write TensorBoard scalars every this many iterations");
  t.add_flag("--log-params-norm", a.log_params_norm,
             "log the parameters' L2 norm (iteration line, metrics file, TensorBoard)");
  t.add_flag(
      "--log-num-zeros-in-grad", a.log_num_zeros_in_grad,
      "log the number of zero gradient elements (iteration line, metrics file, TensorBoard)");
  t.add_flag("--log-throughput", a.log_throughput,
             "log TFLOP/s per process as Megatron's throughput (iteration line, TensorBoard)");
  t.add("--timing-log-level", a.timing_log_level,
        "per-operation timers after each iteration line: 0 none, 1 step phases, 2 also finer");
  t.add("--timing-log-option", a.timing_log_option,
        "timer values across ranks: minmax, max or all");
  t.add_flag("--log-timers-to-tensorboard", a.log_timers_to_tensorboard,
             "write the timers, iteration-time and throughput to TensorBoard");
  t.add_flag("--log-memory-to-tensorboard", a.log_memory_to_tensorboard,
             "write rank 0's device memory (mem-allocated-bytes, mem-reserved-bytes, ...; on the "
             "CPU: live tensors and resident set) to TensorBoard");
  t.add_negatable_flag(
      "--log-loss-scale-to-tensorboard",
      "--no-log-loss-scale-to-tensorboard,!--disable-log-loss-scale-to-tensorboard",
      a.log_loss_scale_to_tensorboard, "write the loss scale to TensorBoard (default on)");
  t.add_flag("--log-validation-ppl-to-tensorboard", a.log_validation_ppl_to_tensorboard,
             "also write the validation perplexity to TensorBoard");
  t.add_flag("--log-layer-grad-norms", a.log_layer_grad_norms,
             "write each transformer layer's gradient norm to --metrics-file at iteration 1 "
             "and every --log-interval");
}

void add_sharding_args(ArgTable& table, Args& args) {
  table.add_flag("--use-distributed-optimizer", args.distributed_optimizer,
                 "shard the Adam state over data-parallel ranks (ZeRO-1; docs/parallelism.md)");
  table.add_flag("--sequence-parallel", args.sequence_parallel,
                 "split LayerNorms, dropouts and residuals along the sequence over the TP ranks "
                 "(needs TP > 1; docs/parallelism.md)");
  table.add_flag("--overlap-grad-reduce", args.overlap_grad_reduce,
                 "start each gradient bucket's data-parallel reduction during the backward, once "
                 "the last micro-batch completed it (same result; docs/parallelism.md)");
  table.add("--ddp-bucket-size", args.ddp_bucket_size,
            "gradient elements per data-parallel reduction bucket (default 4194304)");
}

void add_pipeline_args(ArgTable& t, Args& a) {
  t.add("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
        "layers per model chunk: the interleaved 1F1B schedule (docs/parallelism.md)");
  t.add("--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank,
        "model chunks per pipeline rank: the interleaved 1F1B schedule (the way to ask for it "
        "with --decoder-first/last-pipeline-num-layers)");
  t.add("--decoder-first-pipeline-num-layers", a.decoder_first_pipeline_num_layers,
        "layers of the first pipeline stage; the stages in between split the rest evenly");
  t.add("--decoder-last-pipeline-num-layers", a.decoder_last_pipeline_num_layers,
        "layers of the last pipeline stage; the stages in between split the rest evenly");
  t.add_flag("--account-for-embedding-in-pipeline-split", a.account_for_embedding_in_pipeline_split,
             "count the embedding as a layer when splitting the layers evenly: the first stage "
             "holds one layer fewer");
  t.add_flag("--account-for-loss-in-pipeline-split", a.account_for_loss_in_pipeline_split,
             "count the head and loss as a layer when splitting the layers evenly: the last "
             "stage holds one layer fewer");
  t.add("--microbatch-group-size-per-virtual-pipeline-stage",
        a.microbatch_group_size_per_virtual_pipeline_stage,
        "interleaved schedule: micro-batches that go through a model chunk together "
        "(default: --pipeline-model-parallel-size; same results)");
  t.add("--pipeline-model-parallel-layout", a.pipeline_model_parallel_layout,
        "what each virtual stage holds, as Megatron-LM writes it: E embedding, t transformer "
        "layer, L loss, '|' between stages, c*N and (X)*N repeat, commas cosmetic; e.g. "
        "\"Et*3|(tt|)*2,t|tL\" (more stages than pipeline ranks: the interleaved schedule)");
}

void add_context_parallel_args(ArgTable& table, Args& args) {
  table.add("--context-parallel-size", args.context_parallel_size,
            "CP size: split every sequence over this many ranks (2 x CP chunks, ring attention; "
            "docs/parallelism.md)");
  table.add("--cp-comm-type", args.cp_comm_type,
            "how attention meets the other CP ranks' positions: p2p (the K/V ring, default), "
            "all_gather (K/V gathered), a2a (Ulysses: all-to-all to a head split) or a2a+p2p "
            "(a2a inside groups, the ring across them); one for all layers, or one per layer");
  table.add("--hierarchical-context-parallel-sizes", args.hierarchical_context_parallel_sizes,
            "A P: for --cp-comm-type a2a+p2p, the all-to-all runs in groups of A consecutive CP "
            "ranks and the ring across the P groups (A x P = --context-parallel-size)");
}

// ---- Mixture of experts (docs/moe.md) ----

void add_moe_args(ArgTable& t, ArchitectureArgs& a) {
  t.add("--num-experts", a.num_experts,
        "mixture of experts: routed experts per MoE layer (default none: dense MLPs)");
  t.add("--moe-ffn-hidden-size", a.moe_ffn_hidden_size,
        "hidden width of each routed expert (default --ffn-hidden-size)");
  t.add("--moe-router-topk", a.moe_router_topk, "experts each token is routed to (default 2)");
  t.add("--moe-router-load-balancing-type", a.moe_router_load_balancing_type,
        "aux_loss | seq_aux_loss | global_aux_loss | none, or several: the load-balancing "
        "losses (default aux_loss); or sinkhorn: Sinkhorn-balanced routing in training "
        "(quantile_balancing is refused)");
  t.add("--moe-aux-loss-coeff", a.moe_aux_loss_coeff,
        "weight of each load-balancing loss in the training loss (default 0)");
  t.add("--moe-z-loss-coeff", a.moe_z_loss_coeff,
        "weight of the router z-loss, mean logsumexp(logits)^2 (default none)");
  t.add("--moe-router-score-function", a.moe_router_score_function,
        "softmax | sigmoid: the router's scores (default softmax)");
  t.add_flag("--moe-router-pre-softmax", a.moe_router_pre_softmax,
             "softmax over all experts before the top-k (default: over the chosen k)");
  t.add("--moe-router-topk-scaling-factor", a.moe_router_topk_scaling_factor,
        "multiply the chosen experts' probabilities by this");
  t.add_flag("--moe-router-enable-expert-bias", a.moe_router_enable_expert_bias,
             "aux-loss-free balancing (DeepSeek-V3): a per-expert bias added to the sigmoid "
             "scores for the choice, moved each step towards the mean load; saved in checkpoints");
  t.add("--moe-router-bias-update-rate", a.moe_router_bias_update_rate,
        "the expert bias's step: bias += rate x sign(mean load - load) (default 1e-3)");
  t.add("--moe-router-num-groups", a.moe_router_num_groups,
        "group-limited routing: experts in this many groups");
  t.add("--moe-router-group-topk", a.moe_router_group_topk,
        "group-limited routing: groups each token may use");
  t.add("--moe-router-dtype", a.moe_router_dtype,
        "fp32 or fp64: the router's logits, routing, losses and weight gradient in that dtype");
  t.add("--moe-layer-freq", a.moe_layer_freq,
        "MoE layers: every N-th layer, or a 0/1 list per layer such as '([0]+[1]*23)'");
  t.add("--moe-shared-expert-intermediate-size", a.moe_shared_expert_intermediate_size,
        "hidden width of the shared expert every token also goes through (default none)");
  t.add_flag("--moe-shared-expert-gate", a.moe_shared_expert_gate,
             "scale the shared expert's output by sigmoid(x . w_gate) per token");
  t.add("--moe-expert-capacity-factor", a.moe_expert_capacity_factor,
        "expert capacity = factor x tokens x topk / experts; tokens past it are dropped "
        "(default none: dropless)");
  t.add_flag("--moe-pad-expert-input-to-capacity", a.moe_pad_expert_input_to_capacity,
             "pad every expert's input to its capacity");
  t.add("--moe-token-drop-policy", a.moe_token_drop_policy,
        "probs | position: which tokens past the capacity are dropped (default probs)");
  t.add_flag("--moe-grouped-gemm", a.moe_grouped_gemm,
             "accepted: the experts always run as one grouped GEMM here");
  t.add_flag("--moe-permute-fusion", a.moe_permute_fusion,
             "accepted: tokens are always permuted by fused gather kernels here");
  t.add_flag("--moe-router-fusion", a.moe_router_fusion,
             "accepted: the router's top-k and losses are fused kernels here");
  t.add("--moe-token-dispatcher-type", a.moe_token_dispatcher_type,
        "allgather | alltoall | flex: how tokens reach the experts' ranks (the same function; "
        "flex's DeepEP / HybridEP are GPU libraries: it runs the alltoall dispatcher here)");
  t.add_flag("--moe-enable-deepep", a.moe_enable_deepep,
             "Megatron's deprecated --moe-flex-dispatcher-backend deepep (with flex)");
  t.add("--moe-flex-dispatcher-backend", a.moe_flex_dispatcher_backend,
        "deepep | hybridep | ncclep: flex's communication library (no effect here)");
}

void add_expert_parallel_args(ArgTable& table, Args& args) {
  table.add("--expert-model-parallel-size", args.expert_model_parallel_size,
            "EP size: split each MoE layer's experts over this many ranks, taken from the "
            "data-parallel ones; tokens travel to their experts by all-to-all (docs/moe.md)");
  table.add("--expert-tensor-parallel-size", args.expert_tensor_parallel_size,
            "ETP size: split each expert's weights over this many ranks instead of the "
            "tensor-parallel group (default: the TP size; docs/moe.md)");
}

// ---- Llama-family architecture flags ----

void add_architecture_args(ArgTable& t, ArchitectureArgs& a) {
  t.add("--position-embedding-type", a.position_embedding_type,
        "learned_absolute | rope | yarn (RoPE with YaRN's context extension: "
        "--rotary-scaling-factor, --mscale, --mscale-all-dim, --yarn-*) | none");
  t.add("--yarn-original-max-position-embeddings", a.yarn_original_max_position_embeddings,
        "YaRN's original context for its frequency correction (default 4096; "
        "--position-embedding-type yarn)");
  t.add("--yarn-beta-fast", a.yarn_beta_fast,
        "YaRN's rotations where frequencies stop being kept (default 32; "
        "--position-embedding-type yarn)");
  t.add("--yarn-beta-slow", a.yarn_beta_slow,
        "YaRN's rotations where frequencies are fully interpolated (default 1; "
        "--position-embedding-type yarn)");
  t.add_negatable_flag("--yarn-correction-range-round-to-int",
                       "--no-yarn-correction-range-round-to-int",
                       a.yarn_correction_range_round_to_int,
                       "round YaRN's correction range outwards to whole pairs (default on; "
                       "--position-embedding-type yarn)");
  t.add("--rotary-base", a.rotary_base, "RoPE base (HF rope_theta)");
  t.add("--rotary-percent", a.rotary_percent, "share of each head's channels RoPE rotates");
  t.add("--rotary-seq-len-interpolation-factor", a.rotary_seq_len_interpolation_factor,
        "divide RoPE positions by this (linear position interpolation)");
  t.add_flag("--use-rope-scaling", a.use_rope_scaling,
             "Llama 3.1's RoPE frequency scaling (low 1, high 4, original context 8192; HF "
             "imports keep their own)");
  t.add("--rope-scaling-factor", a.rope_scaling_factor,
        "RoPE scaling factor with --use-rope-scaling (default 8)");
  t.add("--normalization", a.normalization, "LayerNorm | RMSNorm");
  t.add("--norm-epsilon", a.norm_epsilon, "epsilon of the norms (default --layernorm-epsilon)");
  t.add_flag("--swiglu", a.swiglu, "gated MLP with SiLU (--ffn-hidden-size is the gate width)");
  t.add_flag("--group-query-attention", a.group_query_attention,
             "grouped-query attention with --num-query-groups KV heads");
  t.add("--num-query-groups", a.num_query_groups, "KV heads with --group-query-attention");
  t.add("--kv-channels", a.kv_channels, "head dimension (default hidden size / heads)");
  t.require_positive("--kv-channels", "--hidden-size / --num-attention-heads");
  t.add_flag("--disable-bias-linear", a.disable_bias_linear, "no biases in the linear layers");
  t.add_flag("--add-qkv-bias", a.add_qkv_bias, "QKV biases even with --disable-bias-linear");
  t.add_flag("--untie-embeddings-and-output-weights", a.untie_embeddings_and_output_weights,
             "a separate output layer instead of the word embedding");
  t.add_flag("--apply-layernorm-1p", a.apply_layernorm_1p,
             "zero-centred LayerNorm gains: the weight stores gain - 1 (Nemotron's LayerNorm1P)");
  t.add_flag("--squared-relu", a.squared_relu, "relu(x)^2 MLP activation instead of GeLU");
  t.add_flag("--qk-layernorm", a.qk_layernorm,
             "normalise each head's query and key (--normalization) before RoPE");
  t.add_flag("--rotary-interleaved", a.rotary_interleaved,
             "RoPE rotates neighbouring channel pairs (2j, 2j+1) instead of (j, j + d/2)");
  t.add_flag("--multi-latent-attention", a.multi_latent_attention,
             "DeepSeek-V2's multi-latent attention (docs/model.md)");
  t.add("--q-lora-rank", a.q_lora_rank,
        "MLA: rank of the query latent (default none: a direct query projection)");
  t.add("--kv-lora-rank", a.kv_lora_rank, "MLA: rank of the key/value latent (default 32)");
  t.add("--qk-head-dim", a.qk_head_dim, "MLA: a query/key head's content channels (default 128)");
  t.add("--qk-pos-emb-head-dim", a.qk_pos_emb_head_dim,
        "MLA: a query/key head's RoPE channels, one rotated key per position (default 64)");
  t.add("--v-head-dim", a.v_head_dim, "MLA: a value head's channels (default 128)");
  t.add("--rope-type", a.rope_type,
        "rope | yarn: MLA's RoPE (default yarn, equal to rope at --rotary-scaling-factor 1); "
        "rope without MLA (--position-embedding-type yarn there)");
  t.add("--rotary-scaling-factor", a.rotary_scaling_factor,
        "YaRN's context extension factor F (MLA's, or --position-embedding-type yarn; default 1)");
  t.add("--mscale", a.mscale,
        "YaRN: cos/sin times mscale(F, mscale) / mscale(F, mscale-all-dim), mscale(F, m) = "
        "0.1 m ln F + 1 (default 1)");
  t.add("--mscale-all-dim", a.mscale_all_dim,
        "YaRN's mscale_all_dim (default 0); MLA also scales its softmax by "
        "mscale(F, mscale-all-dim)^2");
  t.add("--experimental-attention-variant", a.experimental_attention_variant,
        "dsa: DeepSeek sparse attention on top of --multi-latent-attention (docs/model.md)");
  t.add("--dsa-indexer-n-heads", a.dsa_indexer_n_heads, "DSA: the lightning indexer's heads");
  t.add("--dsa-indexer-head-dim", a.dsa_indexer_head_dim,
        "DSA: an indexer head's channels (its first --qk-pos-emb-head-dim rotated)");
  t.add("--dsa-indexer-topk", a.dsa_indexer_topk,
        "DSA: the keys each query attends to (all its causal keys when fewer)");
  t.add("--dsa-indexer-topk-freq", a.dsa_indexer_topk_freq,
        "DSA: layers between top-k computations (only 1, every layer its own, is implemented)");
  t.add("--dsa-indexer-skip-topk-offset", a.dsa_indexer_skip_topk_offset,
        "DSA: first layer of top-k sharing (no effect at --dsa-indexer-topk-freq 1)");
  t.add("--dsa-indexer-loss-coeff", a.dsa_indexer_loss_coeff,
        "DSA: weight of the indexer's KL loss (default none: no indexer loss)");
  t.add_flag("--dsa-indexer-use-sparse-loss", a.dsa_indexer_use_sparse_loss,
             "DSA: the indexer's KL loss over each query's top-k keys only");
  t.add("--dsa-kernel-backend", a.dsa_kernel_backend,
        "none | tilelang | cudnn: Megatron's fused DSA kernels; the same function here");
  t.add_flag("--dsa-indexer-rope-interleaved", a.dsa_indexer_rope_interleaved,
             "DSA: the indexer's RoPE rotates channel pairs (2j, 2j+1)");
  t.add_flag("--no-dsa-indexer-rotate-activation,--disable-dsa-indexer-rotate-activation",
             a.no_dsa_indexer_rotate_activation,
             "DSA: no Hadamard rotation of the indexer's queries and keys (the same scores: it "
             "is orthogonal)");
  t.add_flag("--no-dsa-indexer-scoring-relu,--disable-dsa-indexer-scoring-relu",
             a.no_dsa_indexer_scoring_relu, "DSA: no ReLU on the indexer's per-head scores");
  t.add("--dsa-indexer-k-norm-epsilon", a.dsa_indexer_k_norm_epsilon,
        "DSA: epsilon of the indexer's key LayerNorm (default --layernorm-epsilon)");
  t.add_flag("--dsa-indexer-k-norm-fp32", a.dsa_indexer_k_norm_fp32,
             "DSA: the key LayerNorm in fp32 (its statistics always are here)");
  t.add_flag("--use-mup", a.use_mup,
             "maximal update parameterisation: init, attention scale, embedding and logit "
             "multipliers, hidden learning rates and Adam eps scaled by the width multiplier");
  t.add("--mup-base-hidden-size", a.mup_base_hidden_size,
        "muP's base width (default --hidden-size): width multiplier = hidden / base");
  t.add("--mup-embedding-mult", a.mup_embedding_mult, "muP: the embedding output x this");
  t.add("--mup-output-mult", a.mup_output_mult,
        "muP: the logits x this (default 1 means 1 / width multiplier)");
  t.add("--mup-base-head-dim", a.mup_base_head_dim,
        "muP: attention scale sqrt(this) / head_dim^power (default: 1 / head_dim^power)");
  t.add("--mup-attn-scale-power", a.mup_attn_scale_power,
        "muP: the power of head_dim in the attention scale (1; 0.5 is the standard scale)");
  add_moe_args(t, a);
  t.add("--mtp-num-layers", a.mtp_num_layers,
        "multi-token prediction: this many depths after the decoder, each predicting one token "
        "further ahead (DeepSeek-V3); training only");
  t.add("--mtp-loss-scaling-factor", a.mtp_loss_scaling_factor,
        "multi-token prediction: the depths' mean loss x this joins the gradient");
  t.add_flag("--use-checkpoint-args", a.use_checkpoint_args,
             "take the model shape and these flags from the checkpoint in --load");
}

// ---- Fill-in-the-middle data ----

void add_fim_args(ArgTable& t, FimArgs& a) {
  t.add_flag("--fim-data", a.data,
             "fill-in-the-middle samples: segments cut into prefix, middle and suffix and "
             "rearranged with sentinel tokens (docs/data.md)");
  t.add("--fim-rate", a.rate, "probability that a segment is rearranged");
  t.add("--fim-spm-rate", a.spm_rate,
        "probability that a rearranged segment is suffix-prefix-middle, not prefix-suffix-middle");
  t.add("--fim-split-sample", a.split_sample,
        "a vocabulary token: segments holding it are cut at it into fragments rearranged apart");
  t.add("--fim-fragment-rate", a.fragment_rate,
        "probability that a fragment is rearranged (with --fim-split-sample)");
  t.add("--fim-no-prefix", a.no_prefix, "text that, starting a fragment, keeps it as it is");
  t.add("--fim-prefix-token", a.prefix_token, "the prefix sentinel (a vocabulary token)");
  t.add("--fim-middle-token", a.middle_token, "the middle sentinel (a vocabulary token)");
  t.add("--fim-suffix-token", a.suffix_token, "the suffix sentinel (a vocabulary token)");
  t.add("--fim-pad-token", a.pad_token, "the padding token (a vocabulary token)");
  t.add("--fim-eod-token", a.eod_token, "the end-of-document token segments are cut at");
}

}  // namespace megatron::cli
