// TrainingLog: Megatron's iteration line and validation block on stdout (rank 0), the same
// numbers as one JSON object per line in --metrics-file, and TensorBoard scalars.
//
// FLOPs use Megatron's formula per iteration, 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) (96 instead
// of 72 with full recompute); TFLOP/s is per process (world-size share), as Megatron reports
// per GPU.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "train/log/tensorboard_writer.h"

namespace megatron {

// Megatron's transformer FLOPs of one iteration: 72·B·s·L·h²·(1 + s/6h + V/12Lh), the 72 being
// 96 where every layer is recomputed (Narayanan et al.'s count); `recomputed_fraction` of the
// layers (block recompute: some of them) adds its share of the 24.
double gpt_flops_per_iteration(int64_t global_batch, int64_t seq_length, int64_t num_layers,
                               int64_t hidden_size, int64_t padded_vocab,
                               double recomputed_fraction);

// Knowledge distillation's terms beside the LM loss (docs/distillation.md): Megatron's
// "total loss", "logits distillation loss" and "intermediate distillation loss".
struct DistillationLog {
  double total = 0, logits = 0, intermediate = 0;
};

struct IterationStats {
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  int64_t consumed_tokens = 0;  // consumed samples x sequence length (metrics file only)
  double elapsed_ms = 0;        // mean wall time per iteration over the interval
  double learning_rate = 0;
  int64_t global_batch = 0;
  std::optional<double> lm_loss;   // mean over the interval's non-skipped iterations
  std::optional<double> sop_loss;  // BERT's sentence-order loss (same mean), when it has one
  std::optional<DistillationLog> distillation;  // (same means) when distilling
  std::optional<double> indexer_loss;           // DSA's indexer loss (same mean), when it has one
  // The MoE router losses (same means, over the MoE layers too), then multi-token prediction's
  // depths' ("mtp_1 loss", ...), by Megatron's names, printed after the lm loss and written to
  // TensorBoard and the metrics file under those names.
  std::vector<std::pair<std::string, double>> named_losses;
  double loss_scale = 1;
  std::optional<double> grad_norm;    // none when the last iteration was skipped
  std::optional<int64_t> num_zeros;   // --log-num-zeros-in-grad (none when skipped)
  std::optional<double> params_norm;  // --log-params-norm
  int64_t skipped_iterations = 0;     // in the interval
  int64_t nan_iterations = 0;         // in the interval
  double tokens_per_second = 0;
  double tflops_per_process = 0;
  // --log-throughput: Megatron's "throughput per GPU (TFLOP/s/GPU)" field (tflops_per_process)
  // in the line.
  bool log_throughput = false;
  // --log-timers-to-tensorboard: at each log line, "iteration-time" (seconds; not for the first
  // iteration of a run, as Megatron) and, with log_throughput, "throughput" (TFLOP/s).
  bool timers_to_tensorboard = false;
  bool first_of_run = false;
  // The first iteration of a resumed run that ends no interval: printed (as Megatron) but not
  // written to the metrics file, whose rows then are those of an uninterrupted run.
  bool console_only = false;
  // --log-memory-to-tensorboard: this process's device memory, written as Megatron's
  // "mem-reserved-bytes", "mem-allocated-bytes", "mem-max-allocated-bytes" and
  // "mem-allocated-count" (at the iteration only, no "vs samples").
  std::optional<DeviceMemoryStats> memory;
};

std::string format_iteration_line(const IterationStats& s);
// `prefix` is e.g. "iteration 100" or "the end of training for val data".
// sop_loss: BERT's sentence-order loss, printed after the lm loss when given.
std::string format_validation_block(const std::string& prefix, double lm_loss,
                                    std::optional<double> sop_loss = std::nullopt);

// Where a run stands, for the progress line printed after each iteration line.
struct Progress {
  int64_t iteration = 0;          // iterations done
  int64_t start_iteration = 0;    // where this run started (0, or the loaded checkpoint's)
  int64_t train_iters = 0;        // --train-iters
  double elapsed_seconds = 0;     // since this run's first iteration (evaluations included)
  double time_limit_seconds = 0;  // --exit-duration-in-mins in seconds; 0: none
};

// " progress: iteration 30/400, 1m32s elapsed, about 18m55s left", or, when the time limit
// ends the run first, " progress: 1m32s of the 6m time limit, about 4m28s left (the run stops
// near iteration 88 of 400)". The estimate assumes the mean pace so far.
std::string format_progress_line(const Progress& p);
// "42s", "4m28s", "2h05m".
std::string format_duration(double seconds);

// Megatron's memory report after the first logged iteration, as every data-parallel rank 0
// prints it: "[Rank 3] (after 1 iterations) memory (MB) | allocated: 512.25 | max allocated:
// 768.5 | reserved: 1024.0 | max reserved: 1100.75" (MB = 2^20 bytes; the terms of
// DeviceMemoryStats).
std::string format_memory_report(int rank, int64_t iteration, const DeviceMemoryStats& m);

// " [2024-05-01 12:34:56.123456]": the local time as Megatron prefixes its iteration line.
std::string log_timestamp();

// Megatron's TensorBoard scalars of one iteration (training.py's training_log), each at the
// iteration and, as "<tag> vs samples", at the consumed samples: learning-rate, batch-size,
// lm loss (and sop loss), loss-scale, grad-norm (when the step was taken), num-zeros (with
// --log-num-zeros-in-grad), params-norm (with --log-params-norm).
struct TensorBoardScalar {
  std::string tag;
  float value;
  int64_t step;
};
std::vector<TensorBoardScalar> tensorboard_iteration_scalars(const IterationStats& s);

class TrainingLog {
 public:
  // Files are written only when `writer` is true (rank 0); empty paths disable them.
  // `validation_ppl`: also write "lm loss validation ppl" (--log-validation-ppl-to-tensorboard).
  // `loss_scale`: write "loss-scale" (off: --no-log-loss-scale-to-tensorboard).
  TrainingLog(bool writer, const std::string& metrics_file, const std::string& tensorboard_dir,
              bool validation_ppl = false, bool loss_scale = true);
  // A run (fresh or resumed) starts after `iteration`: rows of a previous run past it are
  // removed from the metrics file (atomically), so it holds one row per iteration.
  void start_at(int64_t iteration);
  // The iteration line (prefixed by log_timestamp()) and its metrics-file row; with
  // s.timers_to_tensorboard also "iteration-time" and "throughput" (IterationStats).
  void iteration(const IterationStats& s);
  // --log-timers-to-tensorboard: "<name>-time" of each timer that ran (NamedTimers::Report's
  // max over ranks, ms per iteration) at `iteration`.
  void timers(int64_t iteration, const std::vector<std::pair<std::string, double>>& max_ms);
  // The TensorBoard scalars of one iteration (its own loss and grad norm, not an interval's
  // mean), written every --tensorboard-log-interval iterations.
  void tensorboard_iteration(const IterationStats& s);
  void progress(const Progress& p);
  // `consumed_samples` / `consumed_tokens`: training consumed when the evaluation ran.
  void validation(const std::string& prefix, int64_t iteration, int64_t consumed_samples,
                  int64_t consumed_tokens, double lm_loss,
                  std::optional<double> sop_loss = std::nullopt);
  // The evaluation after the last iteration (Megatron's "iteration N on validation set"): a
  // validation row marked "final": true, so that a plot tells it from the interval evaluation
  // of the same iteration (which scored other batches).
  void final_validation(const std::string& prefix, int64_t iteration, int64_t consumed_samples,
                        int64_t consumed_tokens, double lm_loss,
                        std::optional<double> sop_loss = std::nullopt);
  // The final evaluation "on test set": the same block and TensorBoard tags as Megatron
  // writes them; metrics-file rows of type "test".
  void test(const std::string& prefix, int64_t iteration, int64_t consumed_samples,
            int64_t consumed_tokens, double lm_loss, std::optional<double> sop_loss);
  // --sample-interval: the text the model wrote at `iteration`, a JSON array of {"prompt",
  // "text"} (text: the prompt and its continuation). Printed under " samples at iteration N:"
  // one quoted line each; the metrics file gets {"type":"samples","iteration":N,"samples":[...]}.
  void samples(int64_t iteration, const nlohmann::json& samples);
  // --log-layer-grad-norms: the gradient norm of each transformer layer (layer_grad_norms.h),
  // written to the metrics file only.
  void layer_grad_norms(int64_t iteration, const std::vector<double>& norms);

 private:
  void evaluation(const char* type, bool final, const std::string& prefix, int64_t iteration,
                  int64_t consumed_samples, int64_t consumed_tokens, double lm_loss,
                  std::optional<double> sop_loss);
  void write_json(const std::string& line);
  bool writer_;
  std::string metrics_path_;
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  bool validation_ppl_ = false;
  bool loss_scale_ = true;
};

}  // namespace megatron
