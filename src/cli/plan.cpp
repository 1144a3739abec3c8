// `megatron plan`: predicted memory per rank and time per iteration of a model on a machine
// under a parallel layout, or (--search) the fastest layouts that fit. The model and layout
// flags are pretrain-gpt's / pretrain-bert's (cli/args/args.h) plus Megatron-LM's names for the
// layout options this project does not train with yet; see docs/plan.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "cli/setup/bert_setup.h"
#include "cli/setup/theoretical_memory.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "plan/calibration.h"
#include "plan/plan_report.h"

namespace megatron::cli {

namespace {

// Megatron-LM flags the shared Args may not register (yet): added here only when absent, and
// always read back through the App, so the plan works before and after Args learns them.
CLI::Option* flag(CLI::App& app, const std::string& name, const std::string& help) {
  if (CLI::Option* o = app.get_option_no_throw(name)) return o;
  return app.add_flag(name, help);
}
CLI::Option* option(CLI::App& app, const std::string& name, const std::string& help) {
  if (CLI::Option* o = app.get_option_no_throw(name)) return o;
  return app.add_option(name, help);
}
bool given(const CLI::Option* o) {
  return o->count() > 0;
}
template <typename T>
T value_or(const CLI::Option* o, T fallback) {
  return o->count() > 0 ? o->as<T>() : fallback;
}

// The vocabulary of the tokenizers whose size is known without their files.
int64_t known_vocab_size(const std::string& tokenizer) {
  if (tokenizer == "GPT2BPETokenizer") return 50257;
  if (tokenizer == "BertWordPieceLowerCase") return 30522;
  if (tokenizer == "BertWordPieceCase") return 28996;
  return 0;
}

}  // namespace

int run_plan(int argc, char** argv) {
  CLI::App app{
      "Predict memory per rank and time per iteration of a model x machine x parallel layout; "
      "--search ranks the layouts that fit. Model and layout flags as pretrain-gpt.",
      "megatron plan"};
  Args args;
  args.vocab_size = 0;
  ArgTable table(app);
  add_training_args(table, args);
  add_pipeline_args(table, args);
  add_context_parallel_args(table, args);
  add_moe_args(table, args.arch);
  add_expert_parallel_args(table, args);

  std::string machine_path, implementation = "megatron-cpp", family = "gpt";
  int world_size = 0, data_parallel = 0, search_top = 10;
  bool search = false, as_json = false;
  double calibrate_tflops = 0, headroom = 0.05;
  app.add_option("--machine", machine_path,
                 "machine description JSON (examples/machines/*.json, docs/plan.md)")
      ->required();
  app.add_option("--model", family, "model family: gpt | bert")->capture_default_str();
  app.add_option("--implementation", implementation,
                 "software to plan for: megatron-cpp (this project) | megatron-lm | "
                 "megatron-lm-2019")
      ->capture_default_str();
  app.add_option("--world-size", world_size, "number of devices (default TP x PP x DP)");
  app.add_option("--data-parallel-size", data_parallel,
                 "data-parallel size (default world size / (TP x PP), else 1)");
  app.add_flag("--search", search, "rank every layout over --world-size devices that fits");
  app.add_option("--search-top", search_top, "layouts to list with --search")
      ->capture_default_str();
  app.add_flag("--json", as_json, "print JSON instead of text");
  app.add_option("--memory-headroom", headroom,
                 "fraction of device memory a layout must leave free to fit (allocator "
                 "fragmentation, buffers no model counts)")
      ->capture_default_str();
  app.add_option("--calibrate-tflops", calibrate_tflops,
                 "measured TFLOP/s per device of this layout (recomputed FLOPs counted, as the "
                 "iteration log): set the machine's GEMM efficiency from it first");

  CLI::Option* sequence_parallel = flag(app, "--sequence-parallel", "Megatron-LM layout option");
  CLI::Option* distributed = flag(app, "--use-distributed-optimizer", "Megatron-LM layout option");
  CLI::Option* overlap_grad = flag(app, "--overlap-grad-reduce", "Megatron-LM layout option");
  CLI::Option* overlap_param = flag(app, "--overlap-param-gather", "Megatron-LM layout option");
  CLI::Option* tp_overlap = flag(app, "--tp-comm-overlap", "Megatron-LM layout option");
  CLI::Option* virtual_size = option(app, "--virtual-pipeline-model-parallel-size",
                                     "interleaved schedule: chunks per rank (Megatron-LM's "
                                     "internal name of --num-virtual-stages-per-pipeline-rank)");
  CLI::Option* swiglu = flag(app, "--swiglu", "Llama: gated MLP");
  CLI::Option* gqa = flag(app, "--group-query-attention", "Llama: grouped-query attention");
  CLI::Option* query_groups = option(app, "--num-query-groups", "Llama: key/value head groups");
  CLI::Option* kv_channels = option(app, "--kv-channels", "head dimension (default h / heads)");
  CLI::Option* untie = flag(app, "--untie-embeddings-and-output-weights", "separate output layer");
  CLI::Option* normalization = option(app, "--normalization", "LayerNorm | RMSNorm");
  CLI::Option* position = option(app, "--position-embedding-type", "learned_absolute | rope");
  CLI::Option* no_bias = flag(app, "--disable-bias-linear", "Llama: no linear biases");
  CLI::Option* qkv_bias = flag(app, "--add-qkv-bias", "QKV biases with --disable-bias-linear");
  CLI::Option* mask_prob = option(app, "--mask-prob", "BERT: fraction of tokens masked");
  CLI::Option* no_binary_head =
      flag(app, "--bert-no-binary-head", "BERT: no pooler and no sentence-order head");
  // pretrain-bert's LayerNorm order, registered by the same helper.
  BertLayerNormFlags layernorm;
  add_bert_layernorm_flags(table, layernorm);
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  plan::ModelSpec model;
  model.family = plan::family_from_name(family);
  model.num_layers = args.num_layers;
  model.hidden_size = args.hidden_size;
  model.num_attention_heads = args.num_attention_heads;
  model.ffn_hidden_size = args.ffn_hidden_size;
  model.seq_length = args.seq_length;
  model.max_position_embeddings = args.max_position_embeddings;
  model.make_vocab_size_divisible_by = args.make_vocab_size_divisible_by;
  model.vocab_size = args.vocab_size > 0 ? args.vocab_size : known_vocab_size(args.tokenizer_type);
  MT_REQUIRE(model.vocab_size > 0,
             "the vocabulary size is unknown: give --vocab-size (or a "
             "--tokenizer-type of known size: GPT2BPETokenizer, BertWordPieceLowerCase, "
             "BertWordPieceCase)");
  model.hidden_dropout = float(args.hidden_dropout);
  model.attention_dropout = float(args.attention_dropout);
  model.arch.swiglu = given(swiglu);
  if (given(gqa) || given(query_groups)) {
    MT_REQUIRE(given(query_groups), "--group-query-attention needs --num-query-groups");
    model.arch.num_query_groups = query_groups->as<int64_t>();
  }
  model.arch.kv_channels = value_or<int64_t>(kv_channels, 0);
  model.arch.untie_embeddings_and_output_weights = given(untie);
  const std::string norm = value_or<std::string>(normalization, "LayerNorm");
  MT_REQUIRE(norm == "LayerNorm" || norm == "RMSNorm", "--normalization '", norm,
             "' is not known: expected LayerNorm or RMSNorm");
  model.arch.normalization =
      norm == "RMSNorm" ? Normalization::kRMSNorm : Normalization::kLayerNorm;
  const std::string pos = value_or<std::string>(position, "learned_absolute");
  MT_REQUIRE(pos == "learned_absolute" || pos == "rope", "--position-embedding-type '", pos,
             "' is not known: expected learned_absolute or rope");
  model.arch.position_embedding =
      pos == "rope" ? PositionEmbedding::kRope : PositionEmbedding::kLearnedAbsolute;
  model.arch.add_bias_linear = !given(no_bias);
  model.arch.add_qkv_bias = given(qkv_bias);
  model.arch.moe = moe_options(args.arch);
  model.mask_prob = value_or<double>(mask_prob, 0.15);
  if (given(no_binary_head)) {
    MT_REQUIRE(model.family == plan::ModelFamily::kBert,
               "--bert-no-binary-head is a BERT option: give --model bert");
    model.binary_head = false;
  }
  check_bert_layernorm_flags(layernorm);
  model.set_norm_order(layernorm.post_layernorm            ? plan::NormOrder::kPost
                       : layernorm.residual_post_layernorm ? plan::NormOrder::kPreResidualFromNorm
                                                           : plan::NormOrder::kPre);
  plan::validate_model(model);

  plan::Layout layout;
  layout.tensor_parallel = args.tensor_model_parallel_size;
  layout.pipeline_parallel = args.pipeline_model_parallel_size;
  set_plan_context_parallel(args, layout);
  set_plan_experts(args, layout);
  layout.micro_batch = args.micro_batch_size;
  layout.global_batch = args.global_batch_size;
  layout.sequence_parallel = given(sequence_parallel);
  layout.distributed_optimizer = given(distributed);
  layout.overlap_grad_reduce = given(overlap_grad);
  layout.overlap_param_gather = given(overlap_param);
  layout.tp_comm_overlap = given(tp_overlap);
  layout.flash_attention = args.flash_attention();
  MT_REQUIRE(!(args.bf16 && args.fp16), "--bf16 and --fp16 cannot both be given");
  layout.precision = args.bf16   ? plan::Precision::kBf16
                     : args.fp16 ? plan::Precision::kFp16
                                 : plan::Precision::kFp32;
  const std::string& granularity = args.recompute_granularity;
  MT_REQUIRE(granularity.empty() || granularity == "full" || granularity == "selective",
             "--recompute-granularity '", granularity,
             "' is not known: expected full or selective");
  set_plan_recompute(args, layout);
  MT_REQUIRE(layout.tensor_parallel > 0 && layout.pipeline_parallel > 0,
             "--tensor-model-parallel-size and --pipeline-model-parallel-size must be positive");
  if (given(virtual_size)) {
    MT_REQUIRE(!args.num_virtual_stages_per_pipeline_rank,
               "--virtual-pipeline-model-parallel-size and --num-virtual-stages-per-pipeline-rank "
               "are the same option: give one");
    args.num_virtual_stages_per_pipeline_rank = virtual_size->as<int>();
  }
  set_plan_pipeline(args, pipeline_split(args), layout);
  const int model_parallel =
      layout.tensor_parallel * layout.context_parallel * layout.pipeline_parallel;
  if (world_size > 0) {
    MT_REQUIRE(search || world_size % model_parallel == 0, "--world-size ", world_size,
               " must be divisible by --tensor-model-parallel-size x --context-parallel-size x "
               "--pipeline-model-parallel-size = ",
               model_parallel);
    layout.data_parallel = search ? 1 : world_size / model_parallel;
    MT_REQUIRE(data_parallel == 0 || search || data_parallel == layout.data_parallel,
               "--data-parallel-size ", data_parallel, " contradicts --world-size ", world_size,
               " / (TP x CP x PP = ", model_parallel, ") = ", layout.data_parallel);
  } else if (data_parallel > 0) {
    layout.data_parallel = data_parallel;
  }
  MT_REQUIRE(layout.data_parallel > 0, "--data-parallel-size must be positive, got ",
             layout.data_parallel);

  plan::Machine machine = plan::load_machine(machine_path);
  const plan::Implementation impl = plan::implementation_from_name(implementation);

  if (search) {
    MT_REQUIRE(world_size > 0, "--search needs --world-size (the number of devices to fill)");
    MT_REQUIRE(calibrate_tflops == 0,
               "--calibrate-tflops calibrates one layout: run it without "
               "--search first");
    const plan::SearchResult result =
        plan::search_layouts(model, layout, machine, impl, world_size, search_top, headroom);
    if (as_json)
      std::cout << plan::search_to_json(model, machine, impl, world_size, result).dump(2) << "\n";
    else
      std::cout << plan::format_search(model, machine, impl, world_size, result, headroom);
    return 0;
  }
  plan::validate_layout(model, layout, impl);
  if (calibrate_tflops > 0) {
    const double efficiency = plan::calibrate_gemm_efficiency(
        machine, model, layout, impl, calibrate_tflops, plan::FlopCounting::kHardware);
    if (!as_json)
      std::printf("calibrated: GEMM efficiency %.4f of peak reproduces %.4g TFLOP/s per device\n",
                  efficiency, calibrate_tflops);
  }
  const plan::Plan plan = plan::make_plan(model, layout, machine, impl, headroom);
  if (as_json)
    std::cout << plan::plan_to_json(plan).dump(2) << "\n";
  else
    std::cout << plan::format_plan(plan);
  return 0;
}

}  // namespace megatron::cli
