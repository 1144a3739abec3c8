// From parsed training arguments to a run: the rules across flags (Megatron's and ours), the
// device, and the training components' configs (LR schedule, loss scaler, AdamW, batch-size
// schedule, the Trainer's loop options).
#pragma once

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "model/language_model_config.h"
#include "model/stage_range.h"

namespace megatron::cli {

// The model options the flags ask for; throws megatron::Error naming a flag with an unknown
// value.
ArchitectureOptions architecture_options(const ArchitectureArgs& arch);
// --experimental-attention-variant dsa and its --dsa-* options (throws Error naming a flag
// with a bad or unimplemented value).
DsaOptions dsa_options(const ArchitectureArgs& arch);
// --use-mup and its options (throws Error naming a bad value).
MupOptions mup_options(const ArchitectureArgs& arch);
// The MoE options of the --num-experts and --moe-* flags; throws Error naming a flag whose
// value is not known or not implemented (the options' own checks: validate_moe_options).
MoeOptions moe_options(const ArchitectureArgs& arch);
// The norms' epsilon: --norm-epsilon, else --layernorm-epsilon.
float norm_epsilon(const ArchitectureArgs& arch, double layernorm_epsilon);
// What --use-checkpoint-args takes from the checkpoint: the model shape (--num-layers,
// --hidden-size, --num-attention-heads, --ffn-hidden-size, --max-position-embeddings; BERT), or
// also the architecture flags and --openai-gelu (GPT: the Llama-family options).
enum class CheckpointArgs { kShape, kShapeAndArchitecture };
// With --use-checkpoint-args, overwrites those flags of `args` with the ones stored in the
// latest checkpoint of --load; an Error without --load. When --load holds no checkpoint yet,
// a warning and the command line's flags stand (as Megatron's).
void apply_checkpoint_args(Args& args, CheckpointArgs which);
class MegatronFlags;
// Megatron's own rules across flags (--step-batch-size-schedule with --global-batch-size is an
// error, as in Megatron), then flags.check() (cli/args/megatron_flags.h).
void check_megatron_flags(const MegatronFlags& flags, const Args& args);
// The global batch size of each step: --step-batch-size-schedule (thresholds in tokens, as
// Megatron's training passes --seq-length), else the constant --global-batch-size.
BatchSizeSchedule batch_size_schedule(const Args& args);
// How the layers split over the pipeline stages (model/stage_range.h): the chunks per rank
// from --num-virtual-stages-per-pipeline-rank or --num-layers-per-virtual-pipeline-stage (as
// Megatron-LM derives them, the accounted-for embedding and loss counting as layers), the
// first/last counts and the account-for flags. Throws Error naming the flags for values
// Megatron-LM refuses.
PipelineSplit pipeline_split(const Args& args);

// Fills the derived fields and checks every rule that involves several flags or the world
// size; throws megatron::Error naming the flag(s) and the rule. Called before any work.
void validate_training_args(Args& args, int world_size);
// The same without the rules on the pretraining data flags (--data-path, --*-data-path,
// --mock-data): for `finetune`, which reads its own data files.
void validate_training_args_except_data(Args& args, int world_size);

// Resolves --device (cli/setup/device_setup.h: default, cpu, cuda, cuda:N), binds this process to
// the device and records it: args.compute_device, and args.device as its name ("cuda:0") so
// that the printed arguments and the checkpoints' state.json say where the run computed. Also
// sets the process's GEMM options (--tf32). Call right after parsing, before any communicator
// or tensor is created.
void select_training_device(Args& args);

// The training components' configs from validated arguments, by Megatron's rules: the LR
// schedule counts samples (iterations × global batch when --train-iters is used); the loss
// scale is dynamic only for --fp16 without --loss-scale, and 1 without --fp16.
LrScheduleConfig lr_schedule_config(const Args& args);
// The model options every language model takes from the shared flags (shape, vocabulary
// padded by Megatron's rule for `vocab_size` real entries, dropouts, init, epsilon, recompute,
// attention, sequence parallelism, GeLU, compute dtype); a model family's setup adds its own
// (cli/setup/gpt_setup.cpp, cli/setup/bert_setup.cpp).
LanguageModelConfig language_model_config(const Args& args, int64_t vocab_size);
GradScalerConfig grad_scaler_config(const Args& args);
AdamWConfig adamw_config(const Args& args);
// Every loop option (parallel sizes, batches, intervals, checkpoints, logging); `table`'s
// values are stored in each checkpoint.
TrainerConfig trainer_config(const Args& args, const ArgTable& table);
// --optimizer muon: the model's fused QKV rows, which Muon splits (optim/muon.h).
void set_muon_qkv_layout(TrainerConfig& config, const TransformerConfig& model);

}  // namespace megatron::cli
