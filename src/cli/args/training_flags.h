// Registering the shared training arguments (cli/args/args.h) as flags on a subcommand's
// ArgTable, with Megatron-LM's names, help texts and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"

namespace megatron::cli {

// Registers the tokenizer flags (--tokenizer-type, --vocab-file, --merge-file,
// --tokenizer-model, --vocab-size, --tiktoken-pattern, --tiktoken-num-special-tokens), shared
// by training and `preprocess`.
void add_tokenizer_args(ArgTable& table, std::string& type, std::string& vocab_file,
                        std::string& merge_file, std::string& model_file, int64_t& vocab_size,
                        std::string& tiktoken_pattern, int64_t& tiktoken_num_special_tokens);

// Registers every shared flag on `app`, writing into `args`.
void add_training_args(ArgTable& table, Args& args);

// Registers the flags that shard state beyond TP x PP x DP, for the commands that train on the
// Trainer (pretrain-gpt, pretrain-bert, finetune): --use-distributed-optimizer (the Adam state
// over DP) and --sequence-parallel (activations along the sequence over TP); and how the DP
// gradient reduction runs: --overlap-grad-reduce, --ddp-bucket-size.
void add_sharding_args(ArgTable& table, Args& args);

// Registers the flags of the pipeline split and the interleaved schedule (pretrain-gpt,
// pretrain-bert, bench --mode step): --num-layers-per-virtual-pipeline-stage,
// --num-virtual-stages-per-pipeline-rank, --decoder-first/last-pipeline-num-layers,
// --account-for-embedding/loss-in-pipeline-split and
// --microbatch-group-size-per-virtual-pipeline-stage.
void add_pipeline_args(ArgTable& table, Args& args);
// Registers --context-parallel-size and --cp-comm-type (pretrain-gpt only: context
// parallelism splits causal attention; elsewhere Megatron's flag table refuses them).
void add_context_parallel_args(ArgTable& table, Args& args);
// Registers --expert-model-parallel-size (pretrain-gpt: the MoE layers' expert parallelism).
void add_expert_parallel_args(ArgTable& table, Args& args);

// Registers the architecture flags (ArchitectureArgs) on `table`, the MoE ones among them.
void add_architecture_args(ArgTable& table, ArchitectureArgs& arch);
// Registers --num-experts and the --moe-* flags (ArchitectureArgs' moe_* fields).
void add_moe_args(ArgTable& table, ArchitectureArgs& arch);
// --fim-data and its options (pretrain-gpt).
void add_fim_args(ArgTable& table, FimArgs& fim);
}  // namespace megatron::cli
