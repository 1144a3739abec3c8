#include "train/trainer.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/logging.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "dist/parallel_state.h"
#include "kernels/elementwise.h"
#include "train/checkpoint.h"
#include "train/grad_reduction.h"
#include "train/training_log.h"

namespace megatron {

namespace {

// The model-shape arguments a checkpoint must agree with (beyond the tensor shapes, which
// load_checkpoint checks): a different head count or sequence length loads without a shape
// error but computes another function.
nlohmann::json model_shape_json(const GptConfig& c) {
  return {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"ffn_hidden_size", c.ffn_hidden_size > 0 ? c.ffn_hidden_size : 4 * c.hidden_size},
          {"padded_vocab_size", c.padded_vocab_size},
          {"max_position_embeddings", c.max_position_embeddings}};
}

bool tracker_exists(const std::string& dir) {
  return std::filesystem::exists(std::filesystem::path(dir) / "latest_checkpointed_iteration.txt");
}

}  // namespace

struct Trainer::Impl {
  TrainerConfig cfg;
  ParallelState ps;
  ParameterStore store;
  std::unique_ptr<GptModel> model;
  std::unique_ptr<AdamW> optimizer;
  GradScaler scaler;
  LrSchedule schedule;
  std::shared_ptr<const GptSampleSource> train_source, valid_source;
  TrainingLog log;
  int64_t num_micro_batches;

  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
  uint64_t seed;

  // Accumulated between two log lines.
  Timer interval_timer;
  int64_t interval_iterations = 0;
  double interval_loss_sum = 0;
  int64_t interval_loss_count = 0, interval_skipped = 0, interval_nans = 0;
  std::optional<double> last_grad_norm;

  Impl(TrainerConfig c, std::shared_ptr<Communicator> world,
       std::shared_ptr<const GptSampleSource> train, std::shared_ptr<const GptSampleSource> valid)
      : cfg(std::move(c)),
        ps(ParallelState::create(std::move(world), cfg.tensor_parallel, 1)),
        store(ps.tp_rank, ps.tp_size),
        scaler(cfg.scaler),
        schedule(cfg.lr),
        train_source(std::move(train)),
        valid_source(std::move(valid)),
        log(ps.rank == 0, cfg.metrics_file, cfg.tensorboard_dir),
        seed(cfg.seed) {
    MT_CHECK(train_source != nullptr, "no training data");
    const int64_t per_step = cfg.micro_batch * ps.dp_size;
    MT_CHECK(cfg.global_batch % per_step == 0, "--global-batch-size ", cfg.global_batch,
             " must be a multiple of --micro-batch-size x data-parallel size (", per_step, ")");
    num_micro_batches = cfg.global_batch / per_step;
    cfg.model.validate(ps.tp_size);
    model = std::make_unique<GptModel>(cfg.model, ps, store);
    store.allocate();
    model->init_weights(cfg.seed);
    optimizer = std::make_unique<AdamW>(store, cfg.adam);
    if (cfg.fp16) model->refresh_compute_weights();  // the store now holds f16-rounded values
    log_info(" > number of parameters on (tensor, pipeline) model parallel rank (", ps.tp_rank,
             ", 0): ", store.flat_values().numel());
  }

  nlohmann::json state_json() const {
    return {{"iteration", iteration},
            {"consumed_train_samples", consumed_train_samples},
            {"consumed_valid_samples", consumed_valid_samples},
            {"scheduler", schedule.state()},
            {"grad_scaler", scaler.state()},
            {"optimizer", optimizer->state()},
            {"rng", {{"seed", seed}, {"iteration", iteration}}},
            {"model", model_shape_json(cfg.model)},
            {"args", cfg.args}};
  }

  void save() {
    save_checkpoint(cfg.save, iteration, store, optimizer->flat_buffers(), state_json(), ps);
    log_info("  successfully saved checkpoint at iteration ", iteration, " to ", cfg.save);
  }

  void load() {
    if (!tracker_exists(cfg.load)) {
      log_warning("could not find a checkpoint in --load " + cfg.load +
                  " (no latest_checkpointed_iteration.txt); starting from random weights");
      return;
    }
    const bool load_optim = !cfg.no_load_optim && !cfg.finetune;
    std::map<std::string, Tensor> buffers = optimizer->flat_buffers();
    const nlohmann::json state =
        load_checkpoint(cfg.load, -1, store, load_optim ? &buffers : nullptr, ps);
    check_model_shape(state);
    if (load_optim) {
      optimizer->load_state(state.at("optimizer"));
      schedule.load_state(state.at("scheduler"));
      scaler.load_state(state.at("grad_scaler"));
      optimizer->write_model_weights();
    } else {
      optimizer->reset_master_from_store();
    }
    if (!cfg.finetune) {
      iteration = state.at("iteration").get<int64_t>();
      consumed_train_samples = state.at("consumed_train_samples").get<int64_t>();
      consumed_valid_samples = state.value("consumed_valid_samples", int64_t(0));
      if (!cfg.no_load_rng) seed = state.at("rng").at("seed").get<uint64_t>();
    }
    model->refresh_compute_weights();
    log_info("  loaded checkpoint from ", cfg.load, " at iteration ",
             state.at("iteration").get<int64_t>(), cfg.finetune ? " (finetune: weights only)" : "");
  }

  void check_model_shape(const nlohmann::json& state) const {
    if (!state.contains("model")) return;  // e.g. an imported HF checkpoint without it
    const nlohmann::json want = model_shape_json(cfg.model);
    std::string differences;
    for (const auto& [key, value] : want.items()) {
      if (!state["model"].contains(key) || state["model"][key] != value)
        differences += "\n  " + key + ": checkpoint " +
                       (state["model"].contains(key) ? state["model"][key].dump() : "missing") +
                       ", flags " + value.dump();
    }
    MT_CHECK(differences.empty(), "the checkpoint in --load ", cfg.load,
             " has another model shape than the flags:", differences);
  }

  GptBatch to_batch(const GptMicroBatch& mb) const {
    return {mb.tokens, mb.labels, mb.loss_mask, mb.first_sample, iteration};
  }

  // One iteration; returns false when the step was skipped (overflow).
  bool train_step(GptDataLoader& loader, double& loss, std::optional<double>& grad_norm) {
    store.zero_grads();
    const double loss_scale = scaler.scale();
    // Each micro-batch's loss is a mean; Megatron averages them over the global batch.
    const float grad_scale = float(loss_scale / double(num_micro_batches));
    double local_loss = 0;
    for (int64_t m = 0; m < num_micro_batches; ++m)
      local_loss += model->forward_backward(to_batch(loader.next()), grad_scale, seed);
    loss = ps.dp->all_reduce_scalar(local_loss) / double(num_micro_batches * ps.dp_size);

    // fp16 checks for overflow while the gradients are still scaled (as fp16 gradients would
    // be), then unscales; otherwise the loss scale is 1 and the average is one pass.
    const double dp_average = 1.0 / double(ps.dp_size);
    reduce_gradients_over_dp(store.flat_grads(), *ps.dp,
                             cfg.fp16 ? dp_average : dp_average / loss_scale);
    if (cfg.fp16) {
      const bool overflow = found_overflow_anywhere(store.flat_grads(), *ps.world, true);
      scaler.update(overflow);
      if (overflow) {
        grad_norm.reset();
        return false;
      }
      kernels::scale(store.flat_grads(), float(1.0 / loss_scale));
    }
    grad_norm = clip_grad_norm(store, ps, cfg.clip_grad);
    optimizer->step(schedule.lr());
    schedule.step(cfg.global_batch);
    model->refresh_compute_weights();
    return true;
  }

  // This rank's loader over the data-parallel slices, resuming after `consumed_samples`.
  GptDataLoaderOptions loader_options(int64_t consumed_samples) const {
    GptDataLoaderOptions o;
    o.micro_batch = cfg.micro_batch;
    o.global_batch = cfg.global_batch;
    o.dp_rank = ps.dp_rank;
    o.dp_size = ps.dp_size;
    o.consumed_samples = consumed_samples;
    o.eod_token = cfg.eod_token;
    o.eod_mask_loss = cfg.eod_mask_loss;
    return o;
  }

  double evaluate() {
    // Every evaluation scores the same first eval_iters global batches of the validation
    // set, so successive validation losses are comparable.
    GptDataLoader loader(valid_source, loader_options(/*consumed_samples=*/0));
    double local = 0;
    for (int64_t i = 0; i < cfg.eval_iters * num_micro_batches; ++i)
      local += model->forward_loss(to_batch(loader.next()));
    consumed_valid_samples += cfg.eval_iters * cfg.global_batch;
    return ps.dp->all_reduce_scalar(local) /
           double(cfg.eval_iters * num_micro_batches * ps.dp_size);
  }

  bool do_valid() const { return valid_source != nullptr && cfg.eval_iters > 0; }

  void log_interval_stats() {
    interval_timer.stop();
    IterationStats s;
    s.iteration = iteration;
    s.train_iters = cfg.train_iters;
    s.consumed_samples = consumed_train_samples;
    const double seconds = interval_timer.seconds() / double(interval_iterations);
    s.elapsed_ms = seconds * 1000.0;
    s.learning_rate = schedule.lr();
    s.global_batch = cfg.global_batch;
    if (interval_loss_count > 0) s.lm_loss = interval_loss_sum / double(interval_loss_count);
    s.loss_scale = scaler.scale();
    s.grad_norm = last_grad_norm;
    s.skipped_iterations = interval_skipped;
    s.nan_iterations = interval_nans;
    s.tokens_per_second = double(cfg.global_batch * cfg.model.seq_length) / seconds;
    const double flops = gpt_flops_per_iteration(
        cfg.global_batch, cfg.model.seq_length, cfg.model.num_layers, cfg.model.hidden_size,
        cfg.model.padded_vocab_size, cfg.model.recompute_activations);
    s.tflops_per_process = flops / seconds / double(ps.world_size) / 1e12;
    log.iteration(s);
    interval_timer.reset();
    interval_iterations = interval_loss_count = interval_skipped = interval_nans = 0;
    interval_loss_sum = 0;
    interval_timer.start();
  }

  TrainingResult run() {
    if (!cfg.load.empty()) load();
    GptDataLoader loader(train_source, loader_options(consumed_train_samples));

    TrainingResult result;
    int64_t last_saved = -1;
    log_info("training ...");
    interval_timer.start();
    Timer training_time;
    training_time.start();
    while (iteration < cfg.train_iters) {
      ++iteration;
      double loss = 0;
      std::optional<double> grad_norm;
      const bool stepped = train_step(loader, loss, grad_norm);
      consumed_train_samples += cfg.global_batch;
      ++interval_iterations;
      if (!stepped) ++interval_skipped;
      if (!std::isfinite(loss)) {
        ++interval_nans;
      } else if (stepped) {
        interval_loss_sum += loss;
        ++interval_loss_count;
      }
      last_grad_norm = grad_norm;
      if (cfg.on_iteration_end) cfg.on_iteration_end(iteration);

      if (iteration % cfg.log_interval == 0) log_interval_stats();
      if (do_valid() && iteration % cfg.eval_interval == 0) {
        result.last_validation_loss = evaluate();
        log.validation("iteration " + std::to_string(iteration), iteration,
                       result.last_validation_loss);
      }
      if (!cfg.save.empty() && cfg.save_interval > 0 && iteration % cfg.save_interval == 0) {
        save();
        last_saved = iteration;
      }
      if (cfg.exit_interval > 0 && iteration % cfg.exit_interval == 0) {
        if (!cfg.save.empty() && last_saved != iteration) save();
        log_info("exiting program at iteration ", iteration);
        result.iteration = iteration;
        return result;
      }
      if (cfg.exit_duration_seconds > 0) {
        // Clocks differ between ranks: rank decisions are merged (MAX) so all stop together.
        const double over = training_time.seconds() > cfg.exit_duration_seconds ? 1.0 : 0.0;
        if (ps.world->all_reduce_scalar(over, ReduceOp::MAX) > 0.0) {
          log_info("exiting training after ", cfg.exit_duration_seconds / 60.0,
                   " minutes at iteration ", iteration);
          break;
        }
      }
    }
    if (!cfg.save.empty() && iteration > 0 && last_saved != iteration) save();
    if (do_valid() && iteration > 0) {
      result.last_validation_loss = evaluate();
      log.validation("iteration " + std::to_string(iteration) + " on validation set", iteration,
                     result.last_validation_loss);
    }
    result.iteration = iteration;
    return result;
  }
};

Trainer::Trainer(TrainerConfig config, std::shared_ptr<Communicator> world,
                 std::shared_ptr<const GptSampleSource> train,
                 std::shared_ptr<const GptSampleSource> valid)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(world), std::move(train),
                                   std::move(valid))) {}

Trainer::~Trainer() = default;

TrainingResult Trainer::run() {
  return impl_->run();
}

}  // namespace megatron
