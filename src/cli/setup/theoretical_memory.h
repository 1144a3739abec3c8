// Megatron-LM's theoretical memory report (megatron/training/theoretical_memory_usage.py,
// printed by rank 0 before its first memory report), computed by megatron-cpp's planner
// (src/plan, docs/plan.md) for the model and layout a training command is about to run:
//
//   Number of parameters in transformer layers in billions:  0.08
//   Number of parameters in embedding layers in billions: 0.04
//   Total number of parameters in billions: 0.12
//   Number of parameters in most loaded shard in billions: 0.1244
//   Theoretical memory footprints: weight and optimizer=1990.40 MB, activation=1202.38 MB,
//   total=3192.78 MB
//
// The figures are megatron-cpp's own (its bytes per parameter, its activation arenas, the
// first pipeline stage, which holds the embeddings; a context-parallel rank's, with its s/CP
// positions and its attention exchange's buffers), so they can be read beside the memory
// report of the same run: "weight and optimizer" is the parameters, gradients and optimizer
// state; "activation" what the model keeps for backward at the first stage's peak plus the
// transient workspace; "total" also counts the step's communication buffers. Megatron prints
// the activation part only with sequence parallelism and selective recompute, the cases its
// formula covers; the planner covers every layout, so it is always printed.
#pragma once

#include <string>

#include "cli/args/args.h"
#include "cli/args/training_config.h"
#include "model/bert_config.h"
#include "model/gpt_model.h"
#include "plan/layout.h"

namespace megatron::cli {

// The planner's description of a model the trainer builds (vocabulary padded as Megatron pads
// it: --make-vocab-size-divisible-by x TP, which a.make_vocab_size_divisible_by gives).
plan::ModelSpec plan_model_of(const GptConfig& model, const Args& a);
// BERT scores `mask_prob` of the tokens (--mask-prob).
plan::ModelSpec plan_model_of(const BertConfig& model, const Args& a, double mask_prob);
// The layout of a training command's validated flags (validate_training_args: the
// data-parallel size is known) with its pipeline split (pipeline_split(a)); with
// --step-batch-size-schedule, at its largest global batch size (the most micro-batches).
plan::Layout plan_layout_of(const Args& a, const PipelineSplit& split);
// The pipeline split (pipeline_split(a)) and the interleaved schedule's micro-batch group of
// `a` as the planner's layout takes them.
void set_plan_pipeline(const Args& a, const PipelineSplit& split, plan::Layout& layout);
// The context parallelism of `a` (--context-parallel-size, --cp-comm-type: a per-layer list is
// planned as its first type; --hierarchical-context-parallel-sizes) as the planner's layout
// takes it.
void set_plan_context_parallel(const Args& a, plan::Layout& layout);
// The expert grid: --expert-model-parallel-size, --expert-tensor-parallel-size,
// --moe-token-dispatcher-type (flex runs alltoall's exchange).
void set_plan_experts(const Args& a, plan::Layout& layout);
// The recompute of `a` (--recompute-granularity, --recompute-activations, --recompute-method,
// --recompute-num-layers) as the planner's layout takes it; throws Error naming the flags when
// a method is given without full recompute, or uniform with more than one layer per chunk.
void set_plan_recompute(const Args& a, plan::Layout& layout);

// The lines above, each ending in a newline.
std::string theoretical_memory_report(const plan::ModelSpec& model, const plan::Layout& layout);

}  // namespace megatron::cli
