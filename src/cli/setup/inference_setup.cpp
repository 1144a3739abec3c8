#include "cli/setup/inference_setup.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "checkpoint/architecture_json.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/shards.h"
#include "cli/setup/device_setup.h"
#include "core/logging.h"
#include "data/tokenizers/make_tokenizer.h"
#include "distributed/agreement.h"
#include "distributed/backend.h"
#include "distributed/runtime.h"
#include "optim/divergence_guard.h"

namespace megatron::cli {

void add_inference_args(CLI::App& app, InferenceArgs& a) {
  app.add_option("--load", a.load,
                 "checkpoint directory, required (megatron convert imports HF checkpoints)");
  app.add_option("--load-iteration", a.load_iteration,
                 "checkpoint iteration to load (default: the latest)");
  app.add_option("--tensor-model-parallel-size", a.tensor_model_parallel_size,
                 "tensor-parallel size (default and only choice: the number of processes)");
  app.add_option("--device", a.device,
                 "cpu, cuda or cuda:N (default: cuda when built with CUDA and a GPU is visible, "
                 "one rank per GPU by local rank; else cpu)");
  app.add_option("--distributed-backend", a.distributed_backend,
                 "nccl or mpi (default: nccl on a GPU, mpi on the CPU)");
  app.add_flag("--bf16", a.bf16, "compute in bf16 (weights cast from the fp32 checkpoint)");
  app.add_option("--tokenizer-type", a.tokenizer_type,
                 "tokenizer (default: the checkpoint's): GPT2BPETokenizer | "
                 "SentencePieceTokenizer | NullTokenizer | ...");
  app.add_option("--vocab-file", a.vocab_file, "tokenizer vocabulary (default: the checkpoint's)");
  app.add_option("--merge-file", a.merge_file, "BPE merges (default: the checkpoint's)");
  app.add_option("--tokenizer-model", a.tokenizer_model,
                 "SentencePiece model, tokenizer.json or tiktoken ranks (default: the "
                 "checkpoint's)");
  app.add_option("--tiktoken-pattern", a.tiktoken_pattern,
                 "TikTokenizer split regex v1 or v2 (default: the checkpoint's)");
  app.add_option("--tiktoken-num-special-tokens", a.tiktoken_num_special_tokens,
                 "TikTokenizer special-token count (default: the checkpoint's, else 1000)");
  app.add_option("--vocab-size", a.vocab_size, "vocabulary size for NullTokenizer");
  app.add_option("--max-tokens-to-oom", a.max_tokens_to_oom,
                 "largest batch x (prompt + generated) length accepted (Megatron's default 12000)");
  app.add_option("--seed", a.seed, "seed of the sampling draws");
}

namespace {

std::string arg_or(const nlohmann::json& args, const char* key, const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (args.contains(key) && args[key].is_string()) return args[key].get<std::string>();
  return "";
}

template <typename T>
T model_field(const nlohmann::json& state, const char* key, const std::string& dir) {
  MT_CHECK(state.contains("model") && state["model"].contains(key), "checkpoint '", dir,
           "': state.json has no model.", key, " (needed to build the model)");
  return state["model"][key].get<T>();
}

}  // namespace

InferenceModel load_inference_model(InferenceArgs& a, bool data_parallel) {
  MT_REQUIRE(!a.load.empty(), "--load is required: the checkpoint directory to load");
  const Device device = select_device(a.device);
  std::shared_ptr<Communicator> world = make_world_communicator(a.distributed_backend, device);
  const int tp = a.tensor_model_parallel_size > 0 ? a.tensor_model_parallel_size : world->size();
  MT_CHECK(!data_parallel || (tp >= 1 && world->size() % tp == 0), "--tensor-model-parallel-size ",
           tp, " must divide the number of processes (", world->size(),
           "): the other factor is the data-parallel size");
  MT_CHECK(data_parallel || tp == world->size(), "--tensor-model-parallel-size ", tp,
           " must equal the number of processes (", world->size(),
           "): inference runs one model replica (mpirun -np ", tp, ")");

  const int64_t iteration = resolve_checkpoint_iteration(a.load, a.load_iteration);
  CheckpointShardReader reader(checkpoint_iteration_dir(a.load, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const std::string& dir = reader.iteration_dir();
  const nlohmann::json args = state.value("args", nlohmann::json::object());

  TokenizerOptions tok{arg_or(args, "tokenizer_type", a.tokenizer_type),
                       arg_or(args, "vocab_file", a.vocab_file),
                       arg_or(args, "merge_file", a.merge_file),
                       arg_or(args, "tokenizer_model", a.tokenizer_model),
                       a.vocab_size,
                       arg_or(args, "tiktoken_pattern", a.tiktoken_pattern),
                       a.tiktoken_num_special_tokens};
  if (a.tiktoken_num_special_tokens == 0)
    tok.tiktoken_num_special_tokens = args.value("tiktoken_num_special_tokens", int64_t{1000});
  if (tok.vocab_size == 0 && args.contains("vocab_size") && args["vocab_size"].is_number_integer())
    tok.vocab_size = args["vocab_size"].get<int64_t>();
  MT_REQUIRE(!tok.type.empty(), "checkpoint '", dir,
             "' does not record its tokenizer: give --tokenizer-type (and its files)");
  InferenceModel m;
  m.tokenizer = make_tokenizer(tok);

  GptConfig c;
  c.num_layers = model_field<int>(state, "num_layers", dir);
  c.hidden_size = model_field<int>(state, "hidden_size", dir);
  c.num_attention_heads = model_field<int>(state, "num_attention_heads", dir);
  c.ffn_hidden_size = model_field<int>(state, "ffn_hidden_size", dir);
  // Padded as training pads for this TP size; a checkpoint padded otherwise is re-padded on load.
  const int divisible_by = args.value("make_vocab_size_divisible_by", 128);
  c.max_position_embeddings = model_field<int>(state, "max_position_embeddings", dir);
  c.seq_length = args.value("seq_length", c.max_position_embeddings);
  c.layernorm_epsilon = norm_epsilon_from_args_json(args);
  c.arch = architecture_from_args_json(args);
  MT_REQUIRE(!c.arch.dsa.enabled, "the checkpoint in ", a.load,
             " is a DeepSeek sparse attention model (--experimental-attention-variant dsa): "
             "generation with DeepSeek sparse attention is not implemented (its KV cache would "
             "keep the indexer's keys too); `megatron eval` and training take it");
  c.gelu = gelu_form_from_args_json(args);
  c.hidden_dropout = c.attention_dropout = 0.0f;
  c.compute_dtype = a.bf16 ? DType::BF16 : DType::F32;
  c.vocab_size = m.tokenizer->vocab_size();
  const int64_t stored_rows = model_field<int64_t>(state, "padded_vocab_size", dir);
  MT_CHECK(c.vocab_size <= stored_rows, "the tokenizer has ", c.vocab_size,
           " entries, more than the checkpoint's ", stored_rows,
           " embedding rows: it is not this model's tokenizer");
  c.padded_vocab_size = padded_vocab_size(c.vocab_size, divisible_by, tp);

  m.ps = ParallelState::create(world, tp, 1);
  m.store = std::make_unique<ParameterStore>(m.ps.tp_rank, m.ps.tp_size, device);
  m.model = std::make_unique<GptModel>(c, m.ps, *m.store);
  m.store->allocate();
  load_checkpoint(a.load, iteration, *m.store, nullptr, m.ps);
  // Weights that are not finite (a diverged run saved with the guard off, or another tool's
  // file) would only generate blanks.
  run_on_all_ranks(*world, "", [&] {
    const std::vector<std::string> bad = non_finite_parameters(*m.store, Tensor{});
    MT_REQUIRE(bad.empty(), "the checkpoint of iteration ", iteration, " in ", a.load,
               " holds inf or nan weights (", bad.front(),
               bad.size() > 1 ? " and " + std::to_string(bad.size() - 1) + " more" : "",
               "): it cannot generate text; load an earlier checkpoint");
  });
  m.model->refresh_compute_weights();
  m.iteration = iteration;
  m.description = "GPT " + std::to_string(c.num_layers) + " layers, hidden " +
                  std::to_string(c.hidden_size) + ", " + std::to_string(c.num_attention_heads) +
                  " heads, vocabulary " + std::to_string(c.vocab_size) + " (" +
                  std::to_string(c.padded_vocab_size) + " rows), " +
                  std::to_string(c.max_position_embeddings) + " positions; iteration " +
                  std::to_string(iteration) + " of " + a.load + "; tensor-parallel " +
                  std::to_string(tp) + " on " + device.str() + (a.bf16 ? ", bf16" : ", fp32");
  return m;
}

}  // namespace megatron::cli
