#include "train/log/training_log.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/local_time.h"
#include "core/logging.h"
#include "core/number_format.h"
#include "train/log/metrics_file.h"

namespace megatron {

namespace {

std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

// Megatron caps the exponent at 20 so that a large loss prints a finite perplexity; a
// non-finite loss has a non-finite perplexity (min(20, NaN) would be 20).
double perplexity(double loss) {
  if (!std::isfinite(loss)) return std::isnan(loss) ? loss : HUGE_VAL;
  return std::exp(std::min(20.0, loss));
}

}  // namespace

double gpt_flops_per_iteration(int64_t B, int64_t s, int64_t L, int64_t h, int64_t V,
                               double recomputed_fraction) {
  const double factor = 72.0 + 24.0 * recomputed_fraction;
  const double dh = double(h), ds = double(s), dL = double(L);
  return factor * double(B) * ds * dL * dh * dh *
         (1.0 + ds / (6.0 * dh) + double(V) / (12.0 * dL * dh));
}

std::string format_iteration_line(const IterationStats& s) {
  std::string line =
      format(" iteration %8lld/%8lld |", (long long)s.iteration, (long long)s.train_iters);
  line += format(" consumed samples: %12lld |", (long long)s.consumed_samples);
  line += format(" elapsed time per iteration (ms): %.1f |", s.elapsed_ms);
  if (s.log_throughput)
    line += format(" throughput per GPU (TFLOP/s/GPU): %.1f |", s.tflops_per_process);
  line += format(" learning rate: %.6E |", s.learning_rate);
  line += format(" global batch size: %5lld |", (long long)s.global_batch);
  if (s.lm_loss) line += " lm loss: " + format_number(*s.lm_loss, "%.6E") + " |";
  if (s.sop_loss) line += " sop loss: " + format_number(*s.sop_loss, "%.6E") + " |";
  for (const auto& [name, value] : s.named_losses)
    line += " " + name + ": " + format_number(value, "%.6E") + " |";
  if (s.distillation) {
    line += " total loss: " + format_number(s.distillation->total, "%.6E") + " |";
    line += " logits distillation loss: " + format_number(s.distillation->logits, "%.6E") + " |";
    line +=
        " intermediate distillation loss: " + format_number(s.distillation->intermediate, "%.6E") +
        " |";
  }
  if (s.indexer_loss) {
    line += " indexer loss: " + format_number(*s.indexer_loss, "%.6E") + " |";
  }
  line += format(" loss scale: %.1f |", s.loss_scale);
  if (s.grad_norm) line += " grad norm: " + format_number(*s.grad_norm, "%.3f") + " |";
  if (s.num_zeros) line += format(" num zeros: %lld |", (long long)*s.num_zeros);
  if (s.params_norm) line += " params norm: " + format_number(*s.params_norm, "%.3f") + " |";
  line += format(" number of skipped iterations: %3lld |", (long long)s.skipped_iterations);
  line += format(" number of nan iterations: %3lld |", (long long)s.nan_iterations);
  line += format(" tokens/s: %.1f |", s.tokens_per_second);
  line += format(" TFLOP/s: %.3f |", s.tflops_per_process);
  return line;
}

std::string format_duration(double seconds) {
  const int64_t t = std::llround(std::max(0.0, seconds));
  if (t < 60) return format("%llds", (long long)t);
  if (t < 3600) return format("%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  const int64_t minutes = (t + 30) / 60;
  return format("%lldh%02lldm", (long long)(minutes / 60), (long long)(minutes % 60));
}

std::string format_progress_line(const Progress& p) {
  const int64_t done = p.iteration - p.start_iteration;
  if (done <= 0) return "";
  const double per_iteration = p.elapsed_seconds / double(done);
  const double to_last_iteration = per_iteration * double(p.train_iters - p.iteration);
  const double to_time_limit = p.time_limit_seconds - p.elapsed_seconds;
  if (p.time_limit_seconds > 0 && to_time_limit < to_last_iteration) {
    // The run stops after the first iteration that ends past the limit.
    const int64_t stop =
        to_time_limit <= 0
            ? p.iteration
            : std::min<int64_t>(p.train_iters,
                                p.iteration + int64_t(to_time_limit / per_iteration) + 1);
    return " progress: " + format_duration(p.elapsed_seconds) + " of the " +
           format_duration(p.time_limit_seconds) + " time limit, about " +
           format_duration(to_time_limit) + " left (the run stops near iteration " +
           std::to_string(stop) + " of " + std::to_string(p.train_iters) + ")";
  }
  return format(" progress: iteration %lld/%lld, ", (long long)p.iteration,
                (long long)p.train_iters) +
         format_duration(p.elapsed_seconds) + " elapsed, about " +
         format_duration(to_last_iteration) + " left";
}

std::string format_validation_block(const std::string& prefix, double lm_loss,
                                    std::optional<double> sop_loss) {
  std::string body = " validation loss at " + prefix + " | " +
                     "lm loss value: " + format_number(lm_loss, "%.6E") + " | " +
                     "lm loss PPL: " + format_number(perplexity(lm_loss), "%.6E") + " | ";
  if (sop_loss)
    body += "sop loss value: " + format_number(*sop_loss, "%.6E") + " | " +
            "sop loss PPL: " + format_number(perplexity(*sop_loss), "%.6E") + " | ";
  const std::string rule(body.size() + 1, '-');
  return rule + "\n" + body + "\n" + rule;
}

std::string log_timestamp() {
  return " [" + local_time_with_micros() + "]";
}

std::vector<TensorBoardScalar> tensorboard_iteration_scalars(const IterationStats& s) {
  std::vector<TensorBoardScalar> out;
  auto add = [&](const std::string& tag, double value) {
    out.push_back({tag, float(value), s.iteration});
    out.push_back({tag + " vs samples", float(value), s.consumed_samples});
  };
  add("learning-rate", s.learning_rate);
  add("batch-size", double(s.global_batch));
  if (s.lm_loss) add("lm loss", *s.lm_loss);
  if (s.sop_loss) add("sop loss", *s.sop_loss);
  for (const auto& [name, value] : s.named_losses) add(name, value);
  if (s.distillation) {
    add("total loss", s.distillation->total);
    add("logits distillation loss", s.distillation->logits);
    add("intermediate distillation loss", s.distillation->intermediate);
  }
  // Megatron writes the indexer loss against the iteration only.
  if (s.indexer_loss) out.push_back({"indexer loss", float(*s.indexer_loss), s.iteration});
  add("loss-scale", s.loss_scale);
  if (s.grad_norm) add("grad-norm", *s.grad_norm);
  if (s.num_zeros) add("num-zeros", double(*s.num_zeros));
  if (s.params_norm) add("params-norm", *s.params_norm);
  if (s.memory) {
    out.push_back({"mem-reserved-bytes", float(s.memory->reserved), s.iteration});
    out.push_back({"mem-allocated-bytes", float(s.memory->allocated), s.iteration});
    out.push_back({"mem-max-allocated-bytes", float(s.memory->max_allocated), s.iteration});
    out.push_back({"mem-allocated-count", float(s.memory->allocations), s.iteration});
  }
  return out;
}

std::string format_memory_report(int rank, int64_t iteration, const DeviceMemoryStats& m) {
  auto mb = [](size_t bytes) { return double(bytes) / double(1 << 20); };
  char line[256];
  std::snprintf(line, sizeof line,
                "[Rank %d] (after %lld iterations) memory (MB) | allocated: %.2f | max allocated: "
                "%.2f | reserved: %.2f | max reserved: %.2f",
                rank, (long long)iteration, mb(m.allocated), mb(m.max_allocated), mb(m.reserved),
                mb(m.max_reserved));
  return line;
}

TrainingLog::TrainingLog(bool writer, const std::string& metrics_file,
                         const std::string& tensorboard_dir, bool validation_ppl, bool loss_scale)
    : writer_(writer),
      metrics_path_(metrics_file),
      validation_ppl_(validation_ppl),
      loss_scale_(loss_scale) {
  if (!writer_) return;
  if (!metrics_file.empty()) {
    const auto parent = std::filesystem::path(metrics_file).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    metrics_.open(metrics_file, std::ios::app);
    MT_REQUIRE(metrics_.good(), "--metrics-file '", metrics_file, "' cannot be opened for writing");
  }
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
}

void TrainingLog::start_at(int64_t iteration) {
  if (!writer_ || !metrics_.is_open()) return;
  metrics_.close();
  const int64_t removed = truncate_metrics_file(metrics_path_, iteration);
  if (removed > 0)
    log_info(" > removed ", removed, removed == 1 ? " row" : " rows", " past iteration ", iteration,
             " from --metrics-file ", metrics_path_, " (left by an earlier run)");
  metrics_.open(metrics_path_, std::ios::app);
  MT_REQUIRE(metrics_.good(), "--metrics-file '", metrics_path_, "' cannot be opened for writing");
}

void TrainingLog::progress(const Progress& p) {
  const std::string line = format_progress_line(p);
  if (!line.empty()) log_line(line);
}

void TrainingLog::iteration(const IterationStats& s) {
  log_line(log_timestamp() + format_iteration_line(s));
  if (!writer_ || s.console_only) return;
  nlohmann::json j = {{"type", "train"},
                      {"iteration", s.iteration},
                      {"consumed_samples", s.consumed_samples},
                      {"consumed_tokens", s.consumed_tokens},
                      {"elapsed_ms", s.elapsed_ms},
                      {"learning_rate", s.learning_rate},
                      {"global_batch_size", s.global_batch},
                      {"lm_loss", s.lm_loss ? json_number(*s.lm_loss) : nullptr},
                      {"loss_scale", s.loss_scale},
                      {"grad_norm", s.grad_norm ? json_number(*s.grad_norm) : nullptr},
                      {"skipped_iterations", s.skipped_iterations},
                      {"nan_iterations", s.nan_iterations},
                      {"tokens_per_second", s.tokens_per_second},
                      {"tflops_per_process", s.tflops_per_process}};
  if (s.sop_loss) j["sop_loss"] = json_number(*s.sop_loss);
  for (const auto& [name, value] : s.named_losses) j[name] = json_number(value);
  if (s.distillation) {
    j["total_loss"] = json_number(s.distillation->total);
    j["logits_distillation_loss"] = json_number(s.distillation->logits);
    j["intermediate_distillation_loss"] = json_number(s.distillation->intermediate);
  }
  if (s.indexer_loss) j["indexer_loss"] = json_number(*s.indexer_loss);
  if (s.params_norm) j["params_norm"] = json_number(*s.params_norm);
  if (s.num_zeros) j["num_zeros"] = *s.num_zeros;
  write_json(j.dump());
  if (s.timers_to_tensorboard && tensorboard_) {
    if (!s.first_of_run)
      tensorboard_->add_scalar("iteration-time", float(s.elapsed_ms / 1000.0), s.iteration);
    if (s.log_throughput)
      tensorboard_->add_scalar("throughput", float(s.tflops_per_process), s.iteration);
    tensorboard_->flush();
  }
}

void TrainingLog::timers(int64_t iteration,
                         const std::vector<std::pair<std::string, double>>& max_ms) {
  if (!writer_ || !tensorboard_ || max_ms.empty()) return;
  for (const auto& [name, ms] : max_ms)
    tensorboard_->add_scalar(name + "-time", float(ms), iteration);
  tensorboard_->flush();
}

void TrainingLog::tensorboard_iteration(const IterationStats& s) {
  if (!writer_ || !tensorboard_) return;
  for (const TensorBoardScalar& x : tensorboard_iteration_scalars(s))
    if (loss_scale_ || x.tag.rfind("loss-scale", 0) != 0)
      tensorboard_->add_scalar(x.tag, x.value, x.step);
  tensorboard_->flush();
}

void TrainingLog::validation(const std::string& prefix, int64_t iteration, int64_t consumed_samples,
                             int64_t consumed_tokens, double lm_loss,
                             std::optional<double> sop_loss) {
  evaluation("validation", false, prefix, iteration, consumed_samples, consumed_tokens, lm_loss,
             sop_loss);
}

void TrainingLog::final_validation(const std::string& prefix, int64_t iteration,
                                   int64_t consumed_samples, int64_t consumed_tokens,
                                   double lm_loss, std::optional<double> sop_loss) {
  evaluation("validation", true, prefix, iteration, consumed_samples, consumed_tokens, lm_loss,
             sop_loss);
}

void TrainingLog::test(const std::string& prefix, int64_t iteration, int64_t consumed_samples,
                       int64_t consumed_tokens, double lm_loss, std::optional<double> sop_loss) {
  evaluation("test", false, prefix, iteration, consumed_samples, consumed_tokens, lm_loss,
             sop_loss);
}

void TrainingLog::evaluation(const char* type, bool final, const std::string& prefix,
                             int64_t iteration, int64_t consumed_samples, int64_t consumed_tokens,
                             double lm_loss, std::optional<double> sop_loss) {
  log_line(format_validation_block(prefix, lm_loss, sop_loss));
  if (!writer_) return;
  nlohmann::json j = {{"type", type},
                      {"iteration", iteration},
                      {"consumed_tokens", consumed_tokens},
                      {"lm_loss", json_number(lm_loss)},
                      {"lm_loss_ppl", json_number(perplexity(lm_loss))}};
  if (sop_loss) j["sop_loss"] = json_number(*sop_loss);
  if (final) j["final"] = true;
  write_json(j.dump());
  if (tensorboard_) {
    // Megatron's tags: "<loss> validation" and, with --log-validation-ppl-to-tensorboard,
    // "<loss> validation ppl", each also "vs samples".
    auto add = [&](const std::string& tag, double value) {
      tensorboard_->add_scalar(tag, float(value), iteration);
      tensorboard_->add_scalar(tag + " vs samples", float(value), consumed_samples);
    };
    add("lm loss validation", lm_loss);
    if (validation_ppl_) add("lm loss validation ppl", perplexity(lm_loss));
    if (sop_loss) {
      add("sop loss validation", *sop_loss);
      if (validation_ppl_) add("sop loss validation ppl", perplexity(*sop_loss));
    }
    tensorboard_->flush();
  }
}

void TrainingLog::samples(int64_t iteration, const nlohmann::json& samples) {
  // One line per sample, the text quoted as JSON: a newline the model wrote stays "\n" and
  // the continuation stays on its line.
  std::string block = " samples at iteration " + std::to_string(iteration) + ":";
  for (const nlohmann::json& s : samples)
    block.append("\n   ").append(
        s["text"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  log_line(block);
  if (!writer_) return;
  write_json(
      nlohmann::json{{"type", "samples"}, {"iteration", iteration}, {"samples", samples}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void TrainingLog::layer_grad_norms(int64_t iteration, const std::vector<double>& norms) {
  if (!writer_) return;
  nlohmann::json values = nlohmann::json::array();
  for (double n : norms) values.push_back(json_number(n));
  write_json(
      nlohmann::json{{"type", "layer_grad_norms"}, {"iteration", iteration}, {"norms", values}}
          .dump());
}

// Every row is written and flushed, and a failure (a full disk) stops the run instead of
// losing the metrics silently.
void TrainingLog::write_json(const std::string& line) {
  if (!metrics_.is_open()) return;
  errno = 0;
  metrics_ << line << '\n';
  metrics_.flush();
  MT_REQUIRE(metrics_.good(), "cannot write --metrics-file '", metrics_path_,
             "': ", io_error_reason());
}

}  // namespace megatron
