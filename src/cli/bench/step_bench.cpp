#include "cli/bench/step_bench.h"

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "cli/bench/seconds_per_call.h"
#include "cli/setup/gpt_setup.h"
#include "core/device_runtime.h"
#include "core/logging.h"
#include "distributed/backend.h"
#include "distributed/communication_timer.h"
#include "distributed/observed_communicator.h"
#include "distributed/runtime.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/profile.h"
#include "parallel/ring_attention.h"
#include "pipeline/pipeline_executor.h"
#include "train/log/training_log.h"
#include "train/model_step_common.h"

namespace megatron::cli {

namespace {

// The ceiling: FLOP/s of one process on a large square GEMM in the compute dtype (f32 output,
// as the model's GEMMs) on the training device, measured while every rank runs it at once —
// the same sharing of cores (or GPU) the training step sees. Best of `reps`.
double gemm_ceiling_flops(DType dtype, Device device, Communicator& world, int64_t n = 2048,
                          int reps = 3) {
  Tensor a = Tensor::empty({n, n}, dtype, device);       // [n, n]
  Tensor b = Tensor::empty({n, n}, dtype, device);       // [n, n]
  Tensor c = Tensor::empty({n, n}, DType::F32, device);  // [n, n]
  kernels::fill(a, 0.01f);
  kernels::fill(b, 0.02f);
  kernels::gemm(a, false, b, true, c);  // warm the primitive cache
  synchronize(device);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    world.barrier();
    const double t0 = now_seconds();
    kernels::gemm(a, false, b, true, c);
    synchronize(device);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

// The bandwidth floor: bytes/s of one process copying a buffer far larger than the caches
// (read + write counted), while every rank runs it at once. Best of `reps`.
double copy_bandwidth(Device device, Communicator& world, int64_t n = int64_t(1) << 26,
                      int reps = 3) {
  Tensor src = Tensor::empty({n}, DType::F32, device);  // [n]
  Tensor dst = Tensor::empty({n}, DType::F32, device);  // [n]
  kernels::fill(src, 1.f);
  kernels::fill(dst, 0.f);
  synchronize(device);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    world.barrier();
    const double t0 = now_seconds();
    kernels::copy(src, dst);
    synchronize(device);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * double(src.nbytes()) / best;
}

// The kernels of one step, slowest first, each against its floors: its FLOPs at the GEMM
// ceiling and its operand bytes at the copy bandwidth; what no kernel ran is "outside kernels".
void log_breakdown(double step, int64_t iters, double ceiling, double bandwidth) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "  breakdown per step (ms), floors at the GEMM ceiling %.1f GFLOP/s and the copy "
                "bandwidth %.1f GB/s:",
                ceiling / 1e9, bandwidth / 1e9);
  log_line(line);
  std::snprintf(line, sizeof(line), "  %-44s %6s %9s %6s %9s %9s %8s %8s", "kernel", "calls", "ms",
                "share", "flop-ms", "byte-ms", "x-floor", "faults");
  log_line(line);
  const double n = double(iters);
  double in_kernels = 0, flop_total = 0, byte_total = 0;
  for (const kernels::KernelProfileRow& r : kernels::kernel_profile()) {
    const double ms = r.seconds / n * 1e3, flop_ms = r.flops / n / ceiling * 1e3,
                 byte_ms = r.bytes / n / bandwidth * 1e3;
    in_kernels += ms;
    flop_total += flop_ms;
    byte_total += byte_ms;
    std::snprintf(line, sizeof(line), "  %-44s %6.0f %9.2f %5.1f%% %9.2f %9.2f %8.1f %8.0f",
                  r.name.c_str(), double(r.calls) / n, ms, 100.0 * ms / (step * 1e3), flop_ms,
                  byte_ms, ms / std::max(flop_ms, byte_ms), r.page_faults / n);
    log_line(line);
  }
  std::snprintf(line, sizeof(line), "  %-44s %6s %9.2f %5.1f%%", "outside kernels", "",
                step * 1e3 - in_kernels, 100.0 * (1.0 - in_kernels / (step * 1e3)));
  log_line(line);
  std::snprintf(line, sizeof(line), "  %-44s %6s %9.2f %6s %9.2f %9.2f", "step", "", step * 1e3, "",
                flop_total, byte_total);
  log_line(line);
}

// Page faults (minor + major) and system CPU seconds of this process so far: a step that
// allocates fresh pages shows both.
struct ProcessUsage {
  double faults = 0, system_seconds = 0;
};
ProcessUsage process_usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {double(u.ru_minflt + u.ru_majflt),
          double(u.ru_stime.tv_sec) + 1e-6 * double(u.ru_stime.tv_usec)};
}

}  // namespace

int run_step_bench(int argc, char** argv) {
  CLI::App app{"Whole GPT training steps on mock data: tokens/s, TFLOP/s, MFU, comm share",
               "megatron bench --mode step"};
  Args args;
  // A small GPT by default, so the benchmark finishes in a minute on 2 cores.
  args.num_layers = 4;
  args.hidden_size = 256;
  args.num_attention_heads = 8;
  args.seq_length = 256;
  args.micro_batch_size = 4;
  args.lr = 1e-4;
  args.mock_data = true;
  args.vocab_size = 50257;
  args.eval_iters = 0;
  std::string mode = "step";
  int64_t warmup_iters = 2, timed_iters = 5;
  bool breakdown = false;
  ArgTable table(app);
  add_training_args(table, args);
  app.add_option("--mode", mode, "benchmark mode (this one: step)");
  app.add_option("--warmup-iters", warmup_iters,
                 "untimed iterations first (2: the first grows the activation arenas, which merge "
                 "after it; the second still touches the merged blocks for the first time)");
  app.add_option("--timed-iters", timed_iters, "timed iterations");
  app.add_flag("--breakdown", breakdown,
               "time every kernel of the timed steps, on the CPU or the GPU (kernels/profile.h), "
               "against its FLOP and byte floors");
  add_pipeline_args(table, args);
  add_context_parallel_args(table, args);
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  select_training_device(args);
  MT_CHECK(mode == "step", "--mode ", mode, " is not the step benchmark");
  MT_REQUIRE(warmup_iters >= 1 && timed_iters >= 1,
             "--warmup-iters and --timed-iters must be >= 1");
  MT_REQUIRE(args.mock_data, "the step benchmark runs on --mock-data");
  args.train_iters = warmup_iters + timed_iters;
  args.log_interval = args.train_iters;

  auto communication_time = std::make_shared<CommunicationTimer>();
  auto timing = std::make_shared<ObservedCommunicator>(
      make_world_communicator(args.distributed_backend, args.compute_device), communication_time);
  validate_training_args(args, timing->size());
  const DType dtype = args.bf16 ? DType::BF16 : DType::F32;
  const Device device = args.compute_device;
  const double ceiling = gemm_ceiling_flops(dtype, device, *timing);
  const double bandwidth = breakdown ? copy_bandwidth(device, *timing) : 0.0;

  const Vocabulary vocab = build_vocabulary(args);
  GptStepConfig gpt = gpt_step_config(args, vocab, false);
  gpt.split = pipeline_split(args);
  gpt.microbatch_group = args.microbatch_group_size_per_virtual_pipeline_stage.value_or(0);
  TrainerConfig cfg = trainer_config(args, table);
  set_muon_qkv_layout(cfg, gpt.model);
  double t0 = 0, t1 = 0, comm0 = 0, comm1 = 0, wait0 = 0, wait1 = 0;
  ProcessUsage usage0, usage1;
  double ring0 = 0, ring1 = 0;  // the context-parallel ring's waits (parallel/ring_attention.h)
  cfg.on_iteration_end = [&](int64_t it) {
    if (it != warmup_iters && it != args.train_iters) return;
    synchronize(device);  // the GPU may still be working on the step's last kernels
    if (it == warmup_iters) {
      timing->barrier();  // start the clock together
      t0 = now_seconds();
      comm0 = communication_time->seconds();
      wait0 = pipeline_receive_wait_seconds();
      ring0 = ring_attention_wait_seconds();
      usage0 = process_usage();
      if (breakdown) kernels::set_kernel_profiling(true);
    } else if (it == args.train_iters) {
      t1 = now_seconds();
      comm1 = communication_time->seconds();
      wait1 = pipeline_receive_wait_seconds();
      ring1 = ring_attention_wait_seconds();
      usage1 = process_usage();
      kernels::set_kernel_profiling(false);
    }
  };
  const GptConfig& model = gpt.model;
  GptDatasets data = build_gpt_data(args, vocab);
  Trainer(std::move(cfg), timing, gpt_step_factory(gpt, data.train, nullptr)).run();

  const double step = (t1 - t0) / double(timed_iters);
  const double world = double(timing->size());
  // The pipeline's receive waits run inside the timed communicator too: they are reported
  // apart (bubble + transfers), and the communication share is the rest.
  const double wait_share = (wait1 - wait0) / (t1 - t0);
  const double comm_share = (comm1 - comm0) / (t1 - t0) - wait_share;
  const double mean_comm_share = timing->all_reduce_scalar(comm_share) / world;
  const double mean_wait_share = timing->all_reduce_scalar(wait_share) / world;
  const int p = args.pipeline_model_parallel_size;
  const double m = double(args.num_micro_batches()), v = double(gpt.split.chunks);
  const double max_step = timing->all_reduce_scalar(step, ReduceOp::MAX);
  const double flops = config_flops_per_iteration(model, args.global_batch_size, gpt.split);
  const double tflops = flops / max_step / world / 1e12;
  const double ceiling_tflops = timing->all_reduce_scalar(ceiling) / world / 1e12;
  log_info("step benchmark: GPT L=", args.num_layers, " h=", args.hidden_size,
           " heads=", args.num_attention_heads, " s=", args.seq_length,
           " global batch=", args.global_batch_size, " TP=", args.tensor_model_parallel_size,
           " PP=", p, gpt.split.chunks > 1 ? " (interleaved, " : "",
           gpt.split.chunks > 1 ? std::to_string(gpt.split.chunks) + " chunks)" : "",
           " DP=", args.data_parallel_size, " micro-batches=", args.num_micro_batches(),
           " dtype=", dtype_name(dtype), " device=", device.str(),
           args.full_recompute() ? " recompute=full" : "");
  char line[512];
  std::snprintf(line, sizeof(line),
                "  step time (ms): %.1f | tokens/s: %.1f | TFLOP/s per process: %.4f | "
                "GEMM ceiling per process (TFLOP/s, %s): %.4f | MFU: %.1f%% | "
                "communication share: %.1f%%",
                max_step * 1e3, double(args.global_batch_size * args.seq_length) / max_step, tflops,
                std::string(dtype_name(dtype)).c_str(), ceiling_tflops,
                100.0 * tflops / ceiling_tflops, 100.0 * mean_comm_share);
  log_line(line);
  if (args.context_parallel_size > 1) {
    // The ring's waits are inside the communication share too: the part its blocks' compute
    // did not hide (parallel/ring_attention.h).
    const double ring_share = timing->all_reduce_scalar((ring1 - ring0) / (t1 - t0)) / world;
    std::snprintf(line, sizeof(line),
                  "  context-parallel ring wait share (exposed K/V and dK/dV transfers, mean over "
                  "ranks): %.1f%%",
                  100.0 * ring_share);
    log_line(line);
  }
  if (p > 1) {
    // The ideal bubble with backward = 2 x forward and equal stages: (p-1)/(v·m + p-1).
    std::snprintf(line, sizeof(line),
                  "  pipeline wait share (bubble + transfers, mean over ranks): %.1f%% | "
                  "ideal bubble (p-1)/(v*m+p-1): %.1f%%",
                  100.0 * mean_wait_share, 100.0 * (p - 1) / (v * m + p - 1));
    log_line(line);
  }
  std::snprintf(line, sizeof(line),
                "  page faults per step (rank 0): %.0f | system time per step (ms): %.1f",
                (usage1.faults - usage0.faults) / double(timed_iters),
                1e3 * (usage1.system_seconds - usage0.system_seconds) / double(timed_iters));
  log_line(line);
  if (breakdown) log_breakdown(step, timed_iters, ceiling, bandwidth);
  return 0;
}

}  // namespace megatron::cli
