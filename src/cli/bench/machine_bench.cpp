#include "cli/bench/machine_bench.h"

#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args/arg_table.h"
#include "cli/setup/device_setup.h"
#include "core/device_runtime.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "distributed/backend.h"
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
// measurement down. On a GPU the clock reads after the device finished the calls; the calls go
// in batches that double, so that waiting for the device adds little per call.
double timed(Communicator& world, Device device, const std::function<void()>& fn, double min_time,
             int repeats = 3) {
  fn();  // warm-up (page faults, oneDNN primitive creation, cuBLASLt's algorithm choice)
  synchronize(device);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    world.barrier();
    int64_t calls = 0, batch = 1;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      for (int64_t i = 0; i < batch; ++i) fn();
      calls += batch;
      synchronize(device);
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (device.is_cuda()) batch = std::min<int64_t>(2 * batch, 1024);
    } while (calls < 2 || elapsed < min_time);
    best = std::min(best, elapsed / double(calls));
  }
  return world.all_reduce_scalar(best, ReduceOp::MAX);
}

struct BatchedGemmShape {
  int64_t m, n, k, batch;
};

plan::GemmSample measure_gemm(Communicator& world, Device device, const BatchedGemmShape& s,
                              DType dtype, double min_time) {
  plan::GemmSample g{double(s.m), double(s.n), double(s.k), double(s.batch), 0};
  if (s.batch == 1) {
    Tensor a = Tensor::empty({s.m, s.k}, dtype, device),
           b = Tensor::empty({s.n, s.k}, dtype, device);
    Tensor c = Tensor::zeros({s.m, s.n}, DType::F32, device);
    kernels::fill(a, 0.5f);
    kernels::fill(b, 0.25f);
    g.seconds = timed(
        world, device, [&] { kernels::gemm(a, false, b, true, c); }, min_time);
  } else {
    Tensor a = Tensor::empty({s.batch, s.m, s.k}, dtype, device),
           b = Tensor::empty({s.batch, s.n, s.k}, dtype, device);
    Tensor c = Tensor::zeros({s.batch, s.m, s.n}, dtype, device);
    kernels::fill(a, 0.5f);
    kernels::fill(b, 0.25f);
    g.seconds = timed(
        world, device, [&] { kernels::batched_gemm(a, false, b, true, c); }, min_time);
  }
  return g;
}

// The best rate among GEMM samples, FLOP/s.
double best_rate(const std::vector<plan::GemmSample>& samples) {
  double best = 0;
  for (const plan::GemmSample& g : samples)
    best = std::max(best, g.batch * 2.0 * g.m * g.n * g.k / g.seconds);
  return best;
}

// The machine file's key under device.compute for a GEMM dtype name (f32, bf16, f16).
std::string compute_key(const std::string& dtype) {
  return dtype == "f32" ? "fp32" : dtype == "f16" ? "fp16" : dtype;
}

// The linear and attention GEMMs of a GPT layer of width h (FFN 4h, head dim 64) over
// `tokens` rows, forward and both gradients, at TP 1 and TP 2.
std::vector<BatchedGemmShape> layer_shapes(int64_t tokens, int64_t h, int64_t seq) {
  std::vector<BatchedGemmShape> shapes;
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

// Samples "_gemm_samples": {dtype: [[m, n, k, batch, seconds], ...]} → the fitted ComputeSpec
// per dtype, against the file's peak (the best rate among them, or a datasheet figure given
// to the measurement), as the measurement fitted it.
int refit_machine_file(const std::string& in_path, const std::string& out_path) {
  plan::load_machine(in_path);  // the file must be a valid machine description
  std::ifstream in(in_path);
  nlohmann::json file = nlohmann::json::parse(in);
  MT_REQUIRE(file.contains("_gemm_samples") && file["_gemm_samples"].is_object(), "--refit ",
             in_path, ": no _gemm_samples in it (written by `bench --mode machine`)");
  for (const auto& [dtype, rows] : file["_gemm_samples"].items()) {
    std::vector<plan::GemmSample> samples;
    for (const auto& r : rows) {
      MT_REQUIRE(r.is_array() && r.size() == 5, "--refit ", in_path, ": a _gemm_samples entry of ",
                 dtype, " is not [m, n, k, batch, seconds]");
      samples.push_back({r[0].get<double>(), r[1].get<double>(), r[2].get<double>(),
                         r[3].get<double>(), r[4].get<double>()});
    }
    // The file's peak stays when it is above the samples' best: a datasheet figure given to
    // the measurement (--peak-tflops).
    const std::string key = compute_key(dtype);
    const nlohmann::json& had = file["device"]["compute"][key];
    const double peak =
        std::max(best_rate(samples), had.is_object() ? had.value("peak_tflops", 0.0) * 1e12 : 0.0);
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
  std::string mode, output, name, device_flag, backend_flag;
  double min_time = 0.3;
  int64_t hidden = 768, seq = 128, ceiling = 2048, copy_mb = 256;
  std::vector<int64_t> token_counts = {512, 1024};
  std::vector<std::string> dtypes = {"f32", "bf16"}, peaks;
  app.add_option("--mode", mode, "benchmark mode (this one: machine)");
  app.add_option("--output", output, "write the machine JSON here (rank 0)");
  app.add_option("--name", name, "machine name in the file (default: describes the launch)");
  app.add_option("--device", device_flag,
                 "cpu, cuda (one process per GPU) or cuda:N; default: a GPU when there is one");
  app.add_option("--distributed-backend", backend_flag,
                 "nccl or mpi for the all-reduce measurement (default: nccl on a GPU)");
  app.add_option("--min-time", min_time, "seconds per measurement")->capture_default_str();
  app.add_option("--hidden-size", hidden,
                 "layer width of the GEMM shapes (default 768; on a GPU 2048)");
  app.add_option("--seq-length", seq,
                 "sequence length of the attention GEMMs (default 128; on a GPU 2048)");
  app.add_option("--tokens", token_counts,
                 "GEMM row counts (b·s) to measure (default 512 1024; on a GPU 4096 8192)");
  app.add_option("--ceiling-size", ceiling,
                 "edge of the large square GEMM (default 2048; on a GPU 8192)");
  app.add_option("--copy-mb", copy_mb,
                 "MiB copied to measure the memory bandwidth (default 256; "
                 "on a GPU 1024)");
  app.add_option("--dtype", dtypes, "GEMM dtypes (f32, bf16; on a GPU also f16)")
      ->capture_default_str();
  app.add_option("--peak-tflops", peaks,
                 "a dtype's peak per device from its datasheet, as DTYPE=TFLOPS (bf16=989): the "
                 "GEMM efficiency is then measured against it, not against the best rate seen");
  std::string refit;
  app.add_option("--refit", refit,
                 "instead of measuring: refit a machine file's GEMM model from its "
                 "_gemm_samples and write it back (to --output, else in place)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  MT_REQUIRE(mode == "machine", "--mode ", mode, " is not the machine benchmark");
  if (!refit.empty()) return refit_machine_file(refit, output.empty() ? refit : output);

  const Device device = select_device(device_flag);
  if (device.is_cuda()) {  // a GPU's defaults: the shapes of a 1.3B GPT layer
    if (app.count("--hidden-size") == 0) hidden = 2048;
    if (app.count("--seq-length") == 0) seq = 2048;
    if (app.count("--tokens") == 0) token_counts = {4096, 8192};
    if (app.count("--ceiling-size") == 0) ceiling = 8192;
    if (app.count("--copy-mb") == 0) copy_mb = 1024;
  }
  MT_REQUIRE(min_time > 0 && hidden % 128 == 0 && seq > 0 && ceiling > 0 && copy_mb > 0,
             "--min-time, --seq-length, --ceiling-size and --copy-mb must be positive and "
             "--hidden-size a multiple of 128");
  for (int64_t t : token_counts)
    MT_REQUIRE(t > 0 && t % seq == 0, "--tokens ", t,
               " must be a positive multiple of --seq-length ", seq);
  std::map<std::string, double> peak_flops;  // by dtype name, FLOP/s
  for (const std::string& p : peaks) {
    const size_t eq = p.find('=');
    char* end = nullptr;
    const double tflops = eq == std::string::npos ? 0 : std::strtod(p.c_str() + eq + 1, &end);
    MT_REQUIRE(eq != std::string::npos && end != nullptr && *end == '\0' && tflops > 0,
               "--peak-tflops ", p, ": expected DTYPE=TFLOPS, e.g. bf16=989");
    const std::string dtype = p.substr(0, eq);
    MT_REQUIRE(std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end(), "--peak-tflops ", p,
               ": ", dtype, " is not among the measured --dtype values");
    peak_flops[dtype] = tflops * 1e12;
  }

  auto world = make_world_communicator(backend_flag, device);
  const int n = world->size(), threads = omp_get_max_threads();
  // What the process holds before any model memory (the plan's "reserved"): on the CPU the
  // runtime, libraries and MPI in its resident set; on a GPU what is not free on the device
  // (CUDA context, libraries, anything else running there).
  const DeviceCapacity capacity = device_capacity(device);
  const double baseline =
      world->all_reduce_scalar(device.is_cpu() ? double(device_memory_stats(Device::CPU).reserved)
                                               : double(capacity.total - capacity.free),
                               ReduceOp::MAX);
  plan::Machine m;
  const std::string what = device.is_cpu() ? std::to_string(threads) + " thread(s)" : device.str();
  m.name = !name.empty() ? name : "this machine: " + std::to_string(n) + " process(es) x " + what;
  m.source = "megatron bench --mode machine (" + std::to_string(n) + " process(es), each on " +
             what + ", all measuring at once)";
  m.devices_per_node = n;
  // A CPU's memory is shared by its processes; a GPU's is its own.
  m.memory_bytes = double(capacity.total) / (device.is_cpu() ? n : 1);
  m.reserved_bytes = baseline;

  // GEMMs: a large square product and the layer's shapes, fitted to the planner's model. The
  // samples go into the file too ("_gemm_samples": m, n, k, batch, seconds), to refit or check.
  nlohmann::json gemm_samples = nlohmann::json::object();
  for (const std::string& dt_name : dtypes) {
    const DType dt = dtype_from_name(dt_name);
    MT_REQUIRE(dt == DType::F32 || dt == DType::BF16 || (dt == DType::F16 && device.is_cuda()),
               "--dtype ", dt_name, ": expected f32 or bf16 (f16 on a GPU)");
    std::vector<plan::GemmSample> samples = {
        measure_gemm(*world, device, {ceiling, ceiling, ceiling, 1}, dt, min_time)};
    for (int64_t tokens : token_counts)
      for (const BatchedGemmShape& s : layer_shapes(tokens, hidden, seq))
        samples.push_back(measure_gemm(*world, device, s, dt, min_time));
    // Without a datasheet figure the peak is the best rate measured (a CPU has no useful one
    // per process); the fit then gives the large-GEMM efficiency against it and the shape
    // penalty.
    const double best = best_rate(samples);
    const auto given = peak_flops.find(dt_name);
    const double peak = given != peak_flops.end() ? given->second : best;
    const plan::ComputeSpec fit = plan::fit_gemm_model(peak, samples);
    (dt == DType::F32 ? m.fp32 : dt == DType::BF16 ? m.bf16 : m.fp16) = fit;
    for (const plan::GemmSample& g : samples)
      gemm_samples[dt_name].push_back({g.m, g.n, g.k, g.batch, g.seconds});
    log_info("machine bench: ", dt_name, " GEMM best ", best / 1e9,
             " GFLOP/s per process; fit over ", samples.size(), " shapes against a peak of ",
             peak / 1e12, " TFLOP/s (", given != peak_flops.end() ? "given" : "the best",
             "): efficiency ", fit.gemm_efficiency, ", half dimension ", fit.gemm_half_dim);
  }

  // Memory-bound kernels: copy bandwidth; LayerNorm forward + bias-dropout-add forward over
  // a large activation (their rate against the copy rate is the kernels' efficiency) and over
  // the layer's own [tokens, h] (what that takes beyond the bytes is the per-call overhead:
  // OpenMP fork/join and threads descheduled on a busy CPU, kernel launches on a GPU); GeLU and
  // Philox rates over a large tensor.
  {
    const int64_t h = hidden, small_rows = token_counts.back(), large_rows = 16 * small_rows;
    const int64_t copy_bytes_n = copy_mb << 20;
    Tensor src = Tensor::zeros({copy_bytes_n}, DType::U8, device),
           dst = Tensor::zeros({copy_bytes_n}, DType::U8, device);
    const double copy_s = timed(
        *world, device,
        [&] { copy_bytes(dst.raw_data(), device, src.raw_data(), device, size_t(copy_bytes_n)); },
        min_time);
    m.memory_bandwidth = 2.0 * double(copy_bytes_n) / copy_s;
    // Seconds of one LayerNorm + one bias-dropout-add over [rows, h] f32.
    auto pair_seconds = [&](int64_t rows) {
      Tensor x = Tensor::empty({rows, h}, DType::F32, device),
             y = Tensor::empty({rows, h}, DType::F32, device);
      Tensor r = Tensor::empty({rows, h}, DType::F32, device),
             bias = Tensor::zeros({h}, DType::F32, device);
      Tensor gamma = Tensor::empty({h}, DType::F32, device),
             beta = Tensor::zeros({h}, DType::F32, device);
      Tensor mean = Tensor::empty({rows}, DType::F32, device),
             rstd = Tensor::empty({rows}, DType::F32, device);
      Tensor mask = Tensor::zeros({rows, h}, DType::U8, device);
      kernels::fill(x, 0.5f);
      kernels::fill(r, 0.25f);
      kernels::fill(gamma, 1.0f);
      return timed(
          *world, device,
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
    Tensor u = Tensor::empty({rows, 4 * h}, DType::F32, device),
           g = Tensor::empty({rows, 4 * h}, DType::F32, device);
    Tensor b4 = Tensor::zeros({4 * h}, DType::F32, device);
    kernels::fill(u, 0.3f);
    // The tanh form: one exp per element, which is what exp_rate counts.
    const double gelu_s = timed(
        *world, device, [&] { kernels::bias_gelu_forward(u, b4, g, kernels::GeluForm::kTanh); },
        min_time);
    m.exp_rate = double(rows * 4 * h) / std::max(1e-9, gelu_s - m.kernel_overhead);
    Tensor big_mask = Tensor::zeros({rows * 4, h}, DType::U8, device);
    std::vector<kernels::MaskRow> mask_rows;
    for (int64_t i = 0; i < rows * 4; ++i) mask_rows.push_back({uint64_t(i), uint64_t(i) * 1000});
    const double rnd_s = timed(
        *world, device, [&] { kernels::dropout_mask(1234, mask_rows, 0.1f, big_mask); }, min_time);
    m.random_rate = double(rows * 4 * h) / std::max(1e-9, rnd_s - m.kernel_overhead);
    log_info("machine bench: copy ", m.memory_bandwidth / 1e9, " GB/s per process; element-wise ",
             "kernels at ", m.memory_efficiency, " of it plus ", m.kernel_overhead * 1e6,
             " us per call; GeLU ", m.exp_rate / 1e9, " G elements/s; Philox ", m.random_rate / 1e9,
             " G draws/s");
  }

  // Collectives between the processes (one node).
  if (n > 1) {
    const AllReduceBandwidth large =
        measure_all_reduce_bandwidth(*world, int64_t(64) << 20, 5, device);
    const AllReduceBandwidth small = measure_all_reduce_bandwidth(*world, 4096, 200, device);
    m.intra_node.bandwidth = large.busbw_gbps * 1e9;
    m.intra_node.efficiency = 1.0;  // measured bus bandwidth
    const double steps = 2.0 * (n - 1);
    m.intra_node.latency =
        std::max(0.0, small.seconds - 2.0 * (n - 1) / n * 4096.0 / m.intra_node.bandwidth) / steps;
    log_info("machine bench: all-reduce bus bandwidth ", large.busbw_gbps, " GB/s (64 MB), ",
             "latency ", m.intra_node.latency * 1e6, " us per step");
  }

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
