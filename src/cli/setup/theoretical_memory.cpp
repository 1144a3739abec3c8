#include "cli/setup/theoretical_memory.h"

#include <cstdio>

#include "plan/memory_estimate.h"

namespace megatron::cli {

namespace {

std::string format(const char* pattern, double value) {
  char text[160];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// The model's LanguageModelConfig, with its transformer as the model runs it
// (transformer_config(): a GPT is pre-LN whatever its fields say), and the vocabulary padding
// the planner applies for the layout's TP size.
template <class Config>
plan::ModelSpec language_model_spec(const Config& model, const Args& a) {
  plan::ModelSpec m;
  static_cast<LanguageModelConfig&>(m) = model;
  static_cast<TransformerConfig&>(m) = model.transformer_config();
  m.make_vocab_size_divisible_by = a.make_vocab_size_divisible_by;
  return m;
}

}  // namespace

plan::ModelSpec plan_model_of(const GptConfig& model, const Args& a) {
  return language_model_spec(model, a);
}

plan::ModelSpec plan_model_of(const BertConfig& model, const Args& a, double mask_prob) {
  plan::ModelSpec m = language_model_spec(model, a);
  m.family = plan::ModelFamily::kBert;
  m.mask_prob = mask_prob;
  m.num_tokentypes = model.num_tokentypes;
  m.binary_head = model.binary_head;
  return m;
}

plan::Layout plan_layout_of(const Args& a, const PipelineSplit& split) {
  plan::Layout l;
  l.tensor_parallel = a.tensor_model_parallel_size;
  l.pipeline_parallel = a.pipeline_model_parallel_size;
  l.data_parallel = a.data_parallel_size;
  set_plan_context_parallel(a, l);
  set_plan_experts(a, l);
  set_plan_pipeline(a, split, l);
  l.micro_batch = a.micro_batch_size;
  // The global batch size a schedule implies sizes the evaluations only; the training steps
  // run the schedule's sizes, the largest of which holds the most micro-batches.
  l.global_batch = batch_size_schedule(a).max_global_batch();
  l.sequence_parallel = a.sequence_parallel;
  set_plan_recompute(a, l);
  l.distributed_optimizer = a.distributed_optimizer;
  l.flash_attention = a.flash_attention();
  l.precision = a.bf16   ? plan::Precision::kBf16
                : a.fp16 ? plan::Precision::kFp16
                         : plan::Precision::kFp32;
  l.overlap_grad_reduce = a.overlap_grad_reduce;
  return l;
}

void set_plan_pipeline(const Args& a, const PipelineSplit& split, plan::Layout& l) {
  l.virtual_stages = split.chunks;
  l.first_stage_layers = split.first_stage_layers;
  l.last_stage_layers = split.last_stage_layers;
  l.account_for_embedding = split.account_for_embedding;
  l.account_for_loss = split.account_for_loss;
  l.pipeline_layout = split.layout;
  l.microbatch_group = a.microbatch_group_size_per_virtual_pipeline_stage.value_or(0);
}

void set_plan_context_parallel(const Args& a, plan::Layout& l) {
  l.context_parallel = a.context_parallel_size;
  l.cp_comm = a.cp_comm_type.empty() ? CpCommType::kP2P : cp_comm_type_from_name(a.cp_comm_type[0]);
  l.cp_a2a_size =
      a.hierarchical_context_parallel_sizes.empty() ? 0 : a.hierarchical_context_parallel_sizes[0];
}

void set_plan_experts(const Args& a, plan::Layout& l) {
  l.expert_parallel = a.expert_model_parallel_size;
  l.expert_tensor_parallel = a.expert_tensor_parallel_size;
  l.dispatcher = a.arch.moe_token_dispatcher_type == "allgather" ? TokenDispatcher::kAllGather
                                                                 : TokenDispatcher::kAllToAll;
}

void set_plan_recompute(const Args& a, plan::Layout& l) {
  // Selective recompute: core_attn is `recompute`, layernorm and mlp have flags of their own;
  // the MoE and MLA regions have no model (their activations are planned as kept).
  const bool selective = !a.full_recompute() && a.selective_recompute();
  l.recompute = a.full_recompute()                              ? plan::Recompute::kFull
                : selective && a.recomputes_module("core_attn") ? plan::Recompute::kSelective
                                                                : plan::Recompute::kNone;
  l.recompute_layernorm = selective && a.recomputes_module("layernorm");
  l.recompute_mlp = selective && a.recomputes_module("mlp");
  a.check_recompute_method();
  l.recompute_block_layers = a.recompute_method_or_default() == RecomputeMethod::kBlock
                                 ? a.recompute_num_layers_or_default()
                                 : 0;
}

std::string theoretical_memory_report(const plan::ModelSpec& model, const plan::Layout& layout) {
  plan::Machine unbounded;  // the figures, not whether they fit
  unbounded.memory_bytes = 1e18;
  const plan::MemoryEstimate est =
      plan::estimate_memory(model, layout, unbounded, plan::Implementation::kMegatronCpp);
  const plan::ParameterCounts& n = est.parameters;
  const double layers = n.layer_sharded + n.layer_replicated + n.layer_expert + n.layer_expert_bias;
  const double embeddings = n.word_embedding + n.other_embedding + n.output_layer;
  const plan::RankMemory& rank = est.first_stage;
  constexpr double kMB = 1024.0 * 1024.0;
  const double weights = (rank.weights + rank.gradients + rank.optimizer) / kMB;
  const double activation = (rank.activations + rank.workspace) / kMB;
  const double total = weights + activation + rank.step_buffers / kMB;
  std::string text;
  text += format("Number of parameters in transformer layers in billions: %5.2f\n",
                 double(model.num_layers) * layers / 1e9);
  text += format("Number of parameters in embedding layers in billions: %.2f\n", embeddings / 1e9);
  text += format("Total number of parameters in billions: %.2f\n", n.total / 1e9);
  text +=
      format("Number of parameters in most loaded shard in billions: %.4f\n", n.max_rank() / 1e9);
  char line[256];
  std::snprintf(line, sizeof line,
                "Theoretical memory footprints: weight and optimizer=%.2f MB, activation=%.2f MB, "
                "total=%.2f MB\n",
                weights, activation, total);
  return text + line;
}

}  // namespace megatron::cli
