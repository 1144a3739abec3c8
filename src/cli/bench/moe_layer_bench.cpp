#include "cli/bench/moe_layer_bench.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>

#include "cli/args/arg_table.h"
#include "cli/bench/seconds_per_call.h"
#include "cli/setup/device_setup.h"
#include "core/device_runtime.h"
#include "core/logging.h"
#include "distributed/backend.h"
#include "distributed/communication_timer.h"
#include "distributed/observed_communicator.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "model/moe_layer.h"

namespace megatron::cli {

namespace {

// Values from N(0, 1): the layer's input (routing then spreads the tokens as a trained router
// would not, but evenly enough that every expert gets work).
Tensor normal_tensor(const Shape& shape, DType dtype, Device device, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  if (dtype == DType::F32) return t.to(device);
  Tensor out = Tensor::empty(shape, dtype);
  kernels::cast(t, out);
  return out.to(device);
}

struct MoeBenchResult {
  std::string dtype;
  double step_ms = 0, exchange_ms = 0;          // the layer's step; its time inside communication
  double grouped_gflops = 0, dense_gflops = 0;  // fc1 forward on the step's routed groups
  std::vector<int64_t> local_tokens_per_expert;
};

}  // namespace

int run_moe_layer_bench(int argc, char** argv) {
  CLI::App app{"one mixture-of-experts layer's training step and its grouped GEMM",
               "megatron bench --mode moe"};
  std::string mode = "moe", device_flag = "cpu";
  int64_t tokens = 4096, hidden = 1024, ffn = 3584, experts = 8, topk = 2;
  int repeats = 3;
  double min_time = 0.5;
  std::vector<std::string> dtypes = {"f32", "bf16"};
  app.add_option("--mode", mode, "benchmark mode (this one: moe)");
  app.add_option("--tokens", tokens, "tokens per rank (s·b)")->capture_default_str();
  app.add_option("--hidden-size", hidden, "h")->capture_default_str();
  app.add_option("--moe-ffn-hidden-size", ffn, "each expert's SwiGLU width")->capture_default_str();
  app.add_option("--num-experts", experts, "experts (divisible by the number of ranks)")
      ->capture_default_str();
  app.add_option("--moe-router-topk", topk, "experts per token")->capture_default_str();
  app.add_option("--dtypes", dtypes, "compute dtypes (f32, bf16)")->capture_default_str();
  app.add_option("--repeats", repeats, "timed steps per dtype (the best is kept)")
      ->capture_default_str();
  app.add_option("--min-time", min_time, "seconds each GEMM measurement runs for")
      ->capture_default_str();
  app.add_option("--device", device_flag, "cpu, cuda, cuda:N")->capture_default_str();
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  MT_REQUIRE(tokens >= 1 && hidden >= 1 && ffn >= 1 && repeats >= 1 && topk >= 1 && topk <= experts,
             "--tokens, --hidden-size, --moe-ffn-hidden-size and --repeats must be >= 1 and "
             "--moe-router-topk between 1 and --num-experts");

  const Device device = select_device(device_flag);
  auto communication_time = std::make_shared<CommunicationTimer>();
  auto world = std::make_shared<ObservedCommunicator>(make_world_communicator("", device),
                                                      communication_time);
  const int ep = world->size();
  check_expert_count(int(experts), ep);
  // TP 1, data parallel over the world, all of it one expert-parallel group.
  ParallelState ps = ParallelState::create(world, 1, 1, RankOrder::kTpDpPp, 1, 0, ep);

  TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = hidden;
  c.num_attention_heads = 1;  // unused by the layer
  c.ffn_hidden_size = ffn;
  c.hidden_dropout = c.attention_dropout = 0.0f;
  c.arch.swiglu = true;
  c.arch.add_bias_linear = false;
  c.arch.moe.num_experts = experts;
  c.arch.moe.ffn_hidden_size = ffn;
  c.arch.moe.topk = topk;

  std::vector<MoeBenchResult> results;
  for (const std::string& dtype_name : dtypes) {
    MT_REQUIRE(dtype_name == "f32" || dtype_name == "bf16", "--dtypes: ", dtype_name,
               " is not f32 or bf16");
    const DType dtype = dtype_name == "bf16" ? DType::BF16 : DType::F32;
    ParameterStore store(ps.tp_rank, ps.tp_size, device);
    store.set_expert_grid(ps.ep_rank, ps.ep_size, ps.etp_rank, ps.etp_size);
    ComputeWeights weights(store, dtype);
    MoeLayer layer("mlp", c, ps, store, weights);
    store.allocate();
    layer.init_weights(store, 1234);
    weights.refresh();
    // [s, b, h] with b = 1; each rank its own tokens, as data-parallel ranks have.
    const Tensor x = normal_tensor({tokens, 1, hidden}, dtype, device, 17 + uint64_t(ps.rank));
    const Tensor dout = normal_tensor({tokens, 1, hidden}, dtype, device, 71 + uint64_t(ps.rank));

    MoeBenchResult r;
    r.dtype = dtype_name;
    Arena arena(device);
    double best = 1e30, best_exchange = 0;
    for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up (arena growth, primitives)
      arena.reset();
      store.zero_grads();
      MoeLayer::Ctx ctx;
      world->barrier();
      const double comm0 = communication_time->seconds();
      const double t0 = now_seconds();
      layer.forward(ctx, x, /*train=*/true, arena);
      layer.backward(ctx, dout, 1.0f, arena);
      synchronize(device);
      const double mine = now_seconds() - t0;
      const double exchange = communication_time->seconds() - comm0;
      const double step = world->all_reduce_scalar(mine, ReduceOp::MAX);
      if (rep > 0 && step < best) best = step, best_exchange = exchange;
      r.local_tokens_per_expert = ctx.local_tokens_per_expert;
    }
    r.step_ms = best * 1e3;
    r.exchange_ms = world->all_reduce_scalar(best_exchange, ReduceOp::MAX) * 1e3;

    // fc1 alone: the rows this rank's experts received, grouped as the step grouped them.
    int64_t rows = 0;
    for (int64_t n : r.local_tokens_per_expert) rows += n;
    const int64_t local = experts / ep;
    const Tensor xs = normal_tensor({rows, hidden}, dtype, device, 5);
    const Tensor w = normal_tensor({local, 2 * ffn, hidden}, dtype, device, 6);
    Tensor y = Tensor::empty({rows, 2 * ffn}, dtype, device);
    const double flops = 2.0 * double(rows) * double(2 * ffn) * double(hidden);
    r.grouped_gflops =
        flops / 1e9 /
        seconds_per_call(
            [&] { kernels::grouped_gemm(xs, w, /*trans_w=*/true, r.local_tokens_per_expert, y); },
            min_time, device);
    const Tensor w0 = w.select(0, 0);  // [2·ffn, h]: one expert's weight for all the rows
    r.dense_gflops =
        flops / 1e9 /
        seconds_per_call([&] { kernels::gemm(xs, false, w0, true, y); }, min_time, device);
    results.push_back(r);
  }

  log_info("MoE layer benchmark: ", experts, " SwiGLU experts of width ", ffn, ", top-", topk,
           " softmax routing, h=", hidden, ", ", tokens, " tokens per rank, EP=", ep, ", device ",
           device.str(), ", OMP threads ",
           std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "default");
  for (const MoeBenchResult& r : results) {
    std::string counts;
    for (int64_t n : r.local_tokens_per_expert)
      counts += (counts.empty() ? "" : " ") + std::to_string(n);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "  %s: step time (ms): %.1f | exposed all-to-all (ms): %.1f (%.1f%%) | grouped "
                  "GEMM fc1 GFLOP/s: %.1f | dense GEMM same FLOPs GFLOP/s: %.1f | grouped/dense: "
                  "%.2f | rank 0 rows per local expert: %s",
                  r.dtype.c_str(), r.step_ms, r.exchange_ms, 100.0 * r.exchange_ms / r.step_ms,
                  r.grouped_gflops, r.dense_gflops, r.grouped_gflops / r.dense_gflops,
                  counts.c_str());
    log_line(line);
  }
  return 0;
}

}  // namespace megatron::cli
