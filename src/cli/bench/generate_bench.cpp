#include "cli/bench/generate_bench.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/args/arg_table.h"
#include "cli/bench/seconds_per_call.h"
#include "cli/setup/device_setup.h"
#include "core/device_runtime.h"
#include "core/logging.h"
#include "distributed/backend.h"
#include "model/gpt_model.h"
#include "parallel/vocab_parallel_sampling.h"

namespace megatron::cli {

namespace {

// memcpy bandwidth (bytes read + written per second) on a buffer far larger than the caches,
// best of 3: the ceiling a memory-bound decode step is compared with.
double copy_bandwidth(size_t bytes = size_t(256) << 20) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_seconds();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, now_seconds() - t0);
    a[size_t(r)] = b[size_t(r) + 1];  // keep the copies observable
  }
  return 2.0 * double(bytes) / best;
}

struct Result {
  std::string dtype;
  int64_t batch = 0;
  double prefill_tokens_per_s = 0, decode_ms_per_token = 0, decode_tokens_per_s = 0,
         weight_gb_per_s = 0;
};

}  // namespace

int run_generate_bench(int argc, char** argv) {
  CLI::App app{"KV-cache generation speed: prefill tokens/s, decode ms/token, weight GB/s",
               "megatron bench --mode generate"};
  std::string mode = "generate", device_flag = "cpu", json_file;
  GptConfig c;
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.vocab_size = 50257;
  c.max_position_embeddings = 1024;
  int divisible_by = 128;
  int64_t prompt = 128, tokens = 32;
  int repeats = 3;
  std::vector<int64_t> batches = {1, 8};
  std::vector<std::string> dtypes = {"f32", "bf16"};
  app.add_option("--mode", mode, "benchmark mode (this one: generate)");
  app.add_option("--num-layers", c.num_layers, "layers (GPT-2 124M: 12)")->capture_default_str();
  app.add_option("--hidden-size", c.hidden_size, "hidden size")->capture_default_str();
  app.add_option("--num-attention-heads", c.num_attention_heads, "heads")->capture_default_str();
  app.add_option("--vocab-size", c.vocab_size, "vocabulary")->capture_default_str();
  app.add_option("--max-position-embeddings", c.max_position_embeddings, "positions")
      ->capture_default_str();
  app.add_option("--make-vocab-size-divisible-by", divisible_by, "vocabulary padding")
      ->capture_default_str();
  app.add_option("--prompt-length", prompt, "prompt tokens per sequence (prefill)")
      ->capture_default_str();
  app.add_option("--tokens-to-generate", tokens, "decode steps timed")->capture_default_str();
  app.add_option("--batch-sizes", batches, "batch sizes")->capture_default_str();
  app.add_option("--dtypes", dtypes, "compute dtypes (f32, bf16)")->capture_default_str();
  app.add_option("--repeats", repeats, "measurements per entry (the best is kept)")
      ->capture_default_str();
  app.add_option("--device", device_flag, "cpu, cuda, cuda:N")->capture_default_str();
  app.add_option("--json-file", json_file, "also write the results as JSON lines");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  MT_CHECK(prompt >= 1 && tokens >= 1 && repeats >= 1 &&
               prompt + tokens + 1 <= c.max_position_embeddings,
           "--prompt-length + --tokens-to-generate must fit --max-position-embeddings");

  const Device device = select_device(device_flag);
  std::shared_ptr<Communicator> world = make_world_communicator("", device);
  ParallelState ps = ParallelState::create(world, world->size(), 1);
  c.padded_vocab_size = padded_vocab_size(c.vocab_size, divisible_by, ps.tp_size);
  c.ffn_hidden_size = 4 * c.hidden_size;
  c.seq_length = c.max_position_embeddings;
  c.hidden_dropout = c.attention_dropout = 0.0f;
  const double bandwidth = world->all_reduce_scalar(copy_bandwidth()) / world->size();
  int64_t params = 0;

  std::vector<Result> results;
  for (const std::string& dtype : dtypes) {
    MT_CHECK(dtype == "f32" || dtype == "bf16", "--dtypes: ", dtype, " is not f32 or bf16");
    GptConfig cd = c;
    cd.compute_dtype = dtype == "bf16" ? DType::BF16 : DType::F32;
    ParameterStore store(ps.tp_rank, ps.tp_size, device);
    GptModel model(cd, ps, store);
    store.allocate();
    model.init_weights(1234);
    params = 0;
    for (const Parameter& p : store.params()) params += p.value.numel();
    // Weights a decode step reads on this rank: every compute-dtype weight once (the position
    // table: one row, negligible, counted in full anyway).
    const double weight_bytes = double(params) * double(dtype_size(cd.compute_dtype));
    VocabParallelSampler sampler(*ps.tp, cd.vocab_size, cd.padded_vocab_size);
    for (int64_t b : batches) {
      std::vector<int32_t> ids(size_t(b * prompt));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % cd.vocab_size);
      const Tensor prompt_tokens = Tensor::from_vector(ids, {b, prompt});
      std::vector<uint64_t> keys(static_cast<size_t>(b), 0);
      Result r{dtype, b};
      double best_prefill = 1e30, best_decode = 1e30;
      for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
        InferenceCtx ctx = model.make_inference_ctx(b, prompt + tokens + 1);
        world->barrier();
        double t0 = now_seconds();
        Tensor logits = model.forward_step(ctx, prompt_tokens);
        Tensor next = sampler.sample(logits, {1.0f, 1, 0.0f, 0}, keys, ctx.arena).view({b, 1});
        Tensor next_host = next.to(Device::CPU);  // the loop needs the tokens back: a sync
        const double prefill = now_seconds() - t0;
        world->barrier();
        t0 = now_seconds();
        for (int64_t step = 0; step < tokens; ++step) {
          logits = model.forward_step(ctx, next_host);
          next_host = sampler.sample(logits, {1.0f, 1, 0.0f, 0}, keys, ctx.arena)
                          .view({b, 1})
                          .to(Device::CPU);
        }
        const double decode = (now_seconds() - t0) / double(tokens);
        if (rep > 0) {
          best_prefill = std::min(best_prefill, world->all_reduce_scalar(prefill, ReduceOp::MAX));
          best_decode = std::min(best_decode, world->all_reduce_scalar(decode, ReduceOp::MAX));
        }
      }
      r.prefill_tokens_per_s = double(b * prompt) / best_prefill;
      r.decode_ms_per_token = best_decode * 1e3;
      r.decode_tokens_per_s = double(b) / best_decode;
      r.weight_gb_per_s = weight_bytes / best_decode / 1e9;
      results.push_back(r);
    }
  }

  log_info("generate benchmark: GPT L=", c.num_layers, " h=", c.hidden_size,
           " heads=", c.num_attention_heads, " vocab=", c.vocab_size, " (", c.padded_vocab_size,
           " rows), ", params * ps.tp_size, " parameters, prompt ", prompt, ", ", tokens,
           " decode steps, TP=", ps.tp_size, ", device ", device.str(), ", OMP threads ",
           std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "default");
  log_line("  copy bandwidth (memcpy 256 MiB, read + write): " +
           std::to_string(bandwidth / 1e9).substr(0, 5) + " GB/s per process");
  log_line(
      "  dtype | batch | prefill tokens/s | decode ms/token | decode tokens/s | "
      "weights read GB/s (% of copy bandwidth)");
  std::unique_ptr<std::ofstream> json_out;
  if (!json_file.empty() && world->rank() == 0)
    json_out = std::make_unique<std::ofstream>(json_file);
  for (const Result& r : results) {
    char line[256];
    std::snprintf(line, sizeof(line), "  %5s | %5lld | %16.1f | %15.2f | %15.1f | %.2f (%.0f%%)",
                  r.dtype.c_str(), (long long)r.batch, r.prefill_tokens_per_s,
                  r.decode_ms_per_token, r.decode_tokens_per_s, r.weight_gb_per_s,
                  100.0 * r.weight_gb_per_s * 1e9 / bandwidth);
    log_line(line);
    if (json_out)
      *json_out << nlohmann::json{{"impl", "megatron-cpp"},
                                  {"dtype", r.dtype},
                                  {"batch", r.batch},
                                  {"prompt", prompt},
                                  {"tokens", tokens},
                                  {"prefill_tokens_per_s", r.prefill_tokens_per_s},
                                  {"decode_ms_per_token", r.decode_ms_per_token},
                                  {"decode_tokens_per_s", r.decode_tokens_per_s},
                                  {"weight_gb_per_s", r.weight_gb_per_s},
                                  {"copy_gb_per_s", bandwidth / 1e9}}
                       .dump()
                << "\n";
  }
  return 0;
}

}  // namespace megatron::cli
