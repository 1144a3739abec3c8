#include "cli/machine_bench.h"

#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "distributed/comm_check.h"
#include "distributed/runtime.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "plan/calibration.h"
#include "plan/machine.h"

namespace megatron::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call: the best of `repeats` means over at least `min_time` seconds each, all
// ranks starting together. The best, because on a shared machine the load only ever slows a
// measurement down.
double timed(Communicator& world, const std::function<void()>& fn, double min_time,
             int repeats = 3) {
  fn();  // warm-up (page faults, oneDNN primitive creation)
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    world.barrier();
    int calls = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (calls < 2 || elapsed < min_time);
    best = std::min(best, elapsed / calls);
  }
  return world.all_reduce_scalar(best, ReduceOp::MAX);
}

struct Shape {
  int64_t m, n, k, batch;
};

plan::GemmSample measure_gemm(Communicator& world, const Shape& s, DType dtype, double min_time) {
  plan::GemmSample g{double(s.m), double(s.n), double(s.k), double(s.batch), 0};
  if (s.batch == 1) {
    Tensor a = Tensor::empty({s.m, s.k}, dtype), b = Tensor::empty({s.n, s.k}, dtype);
    Tensor c = Tensor::zeros({s.m, s.n}, DType::F32);
    kernels::fill(a, 0.5f);
    kernels::fill(b, 0.25f);
    g.seconds = timed(
        world, [&] { kernels::gemm(a, false, b, true, c); }, min_time);
  } else {
    Tensor a = Tensor::empty({s.batch, s.m, s.k}, dtype),
           b = Tensor::empty({s.batch, s.n, s.k}, dtype);
    Tensor c = Tensor::zeros({s.batch, s.m, s.n}, dtype);
    kernels::fill(a, 0.5f);
    kernels::fill(b, 0.25f);
    g.seconds = timed(
        world, [&] { kernels::batched_gemm(a, false, b, true, c); }, min_time);
  }
  return g;
}

// The linear and attention GEMMs of a GPT layer of width h (FFN 4h, head dim 64) over
// `tokens` rows, forward and both gradients, at TP 1 and TP 2.
std::vector<Shape> layer_shapes(int64_t tokens, int64_t h, int64_t seq) {
  std::vector<Shape> shapes;
  for (int64_t t : {1, 2}) {
    const int64_t f = 4 * h;
    const int64_t lin[4][2] = {{3 * h / t, h}, {h, h / t}, {f / t, h}, {h, f / t}};  // N, K
    for (const auto& nk : lin) {
      shapes.push_back({tokens, nk[0], nk[1], 1});  // forward
      shapes.push_back({tokens, nk[1], nk[0], 1});  // input gradient
      shapes.push_back({nk[0], nk[1], tokens, 1});  // weight gradient
    }
    const int64_t heads = h / 64 / t * (tokens / seq);
    shapes.push_back({seq, seq, 64, heads});  // scores
    shapes.push_back({seq, 64, seq, heads});  // context
  }
  return shapes;
}

double rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      double kb = 0;
      status >> kb;
      return kb * 1024.0;
    }
    std::getline(status, key);
  }
  return 0;
}

double mem_total_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024.0;
    std::getline(meminfo, key);
  }
  return 0;
}

// Samples "_gemm_samples": {dtype: [[m, n, k, batch, seconds], ...]} → the fitted ComputeSpec
// per dtype, the peak being the best rate among them (as the measurement does).
int refit_machine_file(const std::string& in_path, const std::string& out_path) {
  plan::load_machine(in_path);  // the file must be a valid machine description
  std::ifstream in(in_path);
  nlohmann::json file = nlohmann::json::parse(in);
  MT_REQUIRE(file.contains("_gemm_samples") && file["_gemm_samples"].is_object(), "--refit ",
             in_path, ": no _gemm_samples in it (written by `bench --mode machine`)");
  for (const auto& [dtype, rows] : file["_gemm_samples"].items()) {
    std::vector<plan::GemmSample> samples;
    double peak = 0;
    for (const auto& r : rows) {
      MT_REQUIRE(r.is_array() && r.size() == 5, "--refit ", in_path, ": a _gemm_samples entry of ",
                 dtype, " is not [m, n, k, batch, seconds]");
      plan::GemmSample g{r[0].get<double>(), r[1].get<double>(), r[2].get<double>(),
                         r[3].get<double>(), r[4].get<double>()};
      peak = std::max(peak, g.batch * 2.0 * g.m * g.n * g.k / g.seconds);
      samples.push_back(g);
    }
    const std::string key = dtype == "f32" ? "fp32" : dtype;
    const plan::ComputeSpec fit = plan::fit_gemm_model(peak, samples);
    file["device"]["compute"][key] = {{"peak_tflops", fit.peak_flops / 1e12},
                                      {"gemm_efficiency", fit.gemm_efficiency},
                                      {"gemm_half_dim", fit.gemm_half_dim}};
    log_info("machine bench --refit: ", key, ": efficiency ", fit.gemm_efficiency,
             ", half dimension ", fit.gemm_half_dim, " over ", samples.size(), " shapes");
  }
  plan::machine_from_json_text(file.dump(), out_path);  // still a valid machine description
  std::ofstream out(out_path);
  MT_REQUIRE(out.good(), "cannot write the machine file '", out_path, "'");
  out << file.dump(2) << "\n";
  return 0;
}

}  // namespace

int run_machine_bench(int argc, char** argv) {
  CLI::App app{"Measure this machine for `megatron plan` and write its machine JSON",
               "megatron bench --mode machine"};
  std::string mode, output, name;
  double min_time = 0.3;
  int64_t hidden = 768, seq = 128;
  std::vector<int64_t> token_counts = {512, 1024};
  std::vector<std::string> dtypes = {"f32", "bf16"};
  app.add_option("--mode", mode, "benchmark mode (this one: machine)");
  app.add_option("--output", output, "write the machine JSON here (rank 0)");
  app.add_option("--name", name, "machine name in the file (default: describes the launch)");
  app.add_option("--min-time", min_time, "seconds per measurement")->capture_default_str();
  app.add_option("--hidden-size", hidden, "layer width of the GEMM shapes")->capture_default_str();
  app.add_option("--seq-length", seq, "sequence length of the attention GEMMs")
      ->capture_default_str();
  app.add_option("--tokens", token_counts, "GEMM row counts (b·s) to measure")
      ->capture_default_str();
  app.add_option("--dtype", dtypes, "GEMM dtypes (f32, bf16)")->capture_default_str();
  std::string refit;
  app.add_option("--refit", refit,
                 "instead of measuring: refit a machine file's GEMM model from its "
                 "_gemm_samples and write it back (to --output, else in place)");
  CLI11_PARSE(app, argc, argv);
  MT_REQUIRE(mode == "machine", "--mode ", mode, " is not the machine benchmark");
  if (!refit.empty()) return refit_machine_file(refit, output.empty() ? refit : output);
  MT_REQUIRE(min_time > 0 && hidden % 128 == 0 && seq > 0,
             "--min-time must be positive and --hidden-size a multiple of 128");
  for (int64_t t : token_counts)
    MT_REQUIRE(t > 0 && t % seq == 0, "--tokens ", t,
               " must be a positive multiple of --seq-length ", seq);

  auto world = world_communicator();
  const int n = world->size(), threads = omp_get_max_threads();
  // The process before any model memory: runtime, libraries, MPI (the plan's "reserved").
  const double baseline_rss = world->all_reduce_scalar(rss_bytes(), ReduceOp::MAX);
  plan::Machine m;
  m.name = !name.empty() ? name
                         : "this machine: " + std::to_string(n) + " process(es) x " +
                               std::to_string(threads) + " thread(s)";
  m.source = "megatron bench --mode machine (" + std::to_string(n) + " process(es), " +
             std::to_string(threads) + " OpenMP thread(s) each, all measuring at once)";
  m.devices_per_node = n;
  m.memory_bytes = mem_total_bytes() / n;

  // GEMMs: a large square product and the layer's shapes, fitted to the planner's model. The
  // samples go into the file too ("_gemm_samples": m, n, k, batch, seconds), to refit or check.
  nlohmann::json gemm_samples = nlohmann::json::object();
  for (const std::string& dt_name : dtypes) {
    const DType dt = dtype_from_name(dt_name);
    MT_REQUIRE(dt == DType::F32 || dt == DType::BF16, "--dtype ", dt_name,
               ": expected f32 or bf16");
    std::vector<plan::GemmSample> samples = {
        measure_gemm(*world, {2048, 2048, 2048, 1}, dt, min_time)};
    for (int64_t tokens : token_counts)
      for (const Shape& s : layer_shapes(tokens, hidden, seq))
        samples.push_back(measure_gemm(*world, s, dt, min_time));
    // The peak is the best rate measured (a CPU has no useful datasheet figure per process);
    // the fit then gives the large-GEMM efficiency against it and the shape penalty.
    double peak = 0;
    for (const plan::GemmSample& g : samples)
      peak = std::max(peak, g.batch * 2.0 * g.m * g.n * g.k / g.seconds);
    const plan::ComputeSpec fit = plan::fit_gemm_model(peak, samples);
    (dt == DType::F32 ? m.fp32 : m.bf16) = fit;
    for (const plan::GemmSample& g : samples)
      gemm_samples[dt_name].push_back({g.m, g.n, g.k, g.batch, g.seconds});
    log_info("machine bench: ", dt_name, " GEMM best ", peak / 1e9, " GFLOP/s per process; ",
             "fit over ", samples.size(), " shapes: efficiency ", fit.gemm_efficiency,
             ", half dimension ", fit.gemm_half_dim);
  }

  // Memory-bound kernels: copy bandwidth; LayerNorm forward + bias-dropout-add forward over
  // a large activation (their rate against the copy rate is the kernels' efficiency) and over
  // the layer's own [tokens, h] (what that takes beyond the bytes is the per-call overhead:
  // OpenMP fork/join, threads descheduled on a busy machine); GeLU and Philox rates over a
  // large tensor.
  {
    const int64_t h = hidden, small_rows = token_counts.back(), large_rows = 16384;
    const int64_t copy_bytes = int64_t(256) << 20;
    Tensor src = Tensor::zeros({copy_bytes}, DType::U8),
           dst = Tensor::zeros({copy_bytes}, DType::U8);
    const double copy_s = timed(
        *world, [&] { std::memcpy(dst.raw_data(), src.raw_data(), size_t(copy_bytes)); }, min_time);
    m.memory_bandwidth = 2.0 * double(copy_bytes) / copy_s;
    // Seconds of one LayerNorm + one bias-dropout-add over [rows, h] f32.
    auto pair_seconds = [&](int64_t rows) {
      Tensor x = Tensor::empty({rows, h}, DType::F32), y = Tensor::empty({rows, h}, DType::F32);
      Tensor r = Tensor::empty({rows, h}, DType::F32), bias = Tensor::zeros({h}, DType::F32);
      Tensor gamma = Tensor::empty({h}, DType::F32), beta = Tensor::zeros({h}, DType::F32);
      Tensor mean = Tensor::empty({rows}, DType::F32), rstd = Tensor::empty({rows}, DType::F32);
      Tensor mask = Tensor::zeros({rows, h}, DType::U8);
      kernels::fill(x, 0.5f);
      kernels::fill(r, 0.25f);
      kernels::fill(gamma, 1.0f);
      return timed(
          *world,
          [&] {
            kernels::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
            kernels::bias_dropout_add_forward(x, bias, r, mask, 0.1f, y);
          },
          min_time);
    };
    const double pair_bytes_per_row = double(h) * (2 * 4 + 3 * 4 + 1);
    const double large_s = pair_seconds(large_rows), small_s = pair_seconds(small_rows);
    m.memory_efficiency =
        std::min(1.0, pair_bytes_per_row * double(large_rows) / large_s / m.memory_bandwidth);
    const double small_bytes_s =
        pair_bytes_per_row * double(small_rows) / (m.memory_bandwidth * m.memory_efficiency);
    m.kernel_overhead = std::max(0.0, (small_s - small_bytes_s) / 2.0);

    const int64_t rows = large_rows / 4;
    Tensor u = Tensor::empty({rows, 4 * h}, DType::F32),
           g = Tensor::empty({rows, 4 * h}, DType::F32);
    Tensor b4 = Tensor::zeros({4 * h}, DType::F32);
    kernels::fill(u, 0.3f);
    // The tanh form: one exp per element, which is what exp_rate counts.
    const double gelu_s = timed(
        *world, [&] { kernels::bias_gelu_forward(u, b4, g, kernels::GeluForm::kTanh); }, min_time);
    m.exp_rate = double(rows * 4 * h) / std::max(1e-9, gelu_s - m.kernel_overhead);
    Tensor big_mask = Tensor::zeros({rows * 4, h}, DType::U8);
    std::vector<kernels::MaskRow> mask_rows;
    for (int64_t i = 0; i < rows * 4; ++i) mask_rows.push_back({uint64_t(i), uint64_t(i) * 1000});
    const double rnd_s = timed(
        *world, [&] { kernels::dropout_mask(1234, mask_rows, 0.1f, big_mask); }, min_time);
    m.random_rate = double(rows * 4 * h) / std::max(1e-9, rnd_s - m.kernel_overhead);
    log_info("machine bench: copy ", m.memory_bandwidth / 1e9, " GB/s per process; element-wise ",
             "kernels at ", m.memory_efficiency, " of it plus ", m.kernel_overhead * 1e6,
             " us per call; GeLU ", m.exp_rate / 1e9, " G elements/s; Philox ", m.random_rate / 1e9,
             " G draws/s");
  }

  // Collectives between the processes (one node).
  if (n > 1) {
    const AllReduceBandwidth large = measure_all_reduce_bandwidth(*world, int64_t(64) << 20, 5);
    const AllReduceBandwidth small = measure_all_reduce_bandwidth(*world, 4096, 200);
    m.intra_node.bandwidth = large.busbw_gbps * 1e9;
    m.intra_node.efficiency = 1.0;  // measured bus bandwidth
    const double steps = 2.0 * (n - 1);
    m.intra_node.latency =
        std::max(0.0, small.seconds - 2.0 * (n - 1) / n * 4096.0 / m.intra_node.bandwidth) / steps;
    log_info("machine bench: all-reduce bus bandwidth ", large.busbw_gbps, " GB/s (64 MB), ",
             "latency ", m.intra_node.latency * 1e6, " us per step");
  }
  m.reserved_bytes = baseline_rss;

  nlohmann::json file = nlohmann::json::parse(plan::machine_to_json_text(m));
  file["_gemm_samples"] = gemm_samples;
  const std::string text = file.dump(2) + "\n";
  if (world->rank() == 0) {
    if (!output.empty()) {
      std::ofstream out(output);
      MT_REQUIRE(out.good(), "cannot write the machine file '", output, "' (--output)");
      out << text;
      log_info("machine bench: wrote ", output);
    } else {
      std::fputs(text.c_str(), stdout);
    }
  }
  return 0;
}

}  // namespace megatron::cli
