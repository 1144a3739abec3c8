#include "train/bert_trainer.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/logging.h"
#include "core/timer.h"
#include "data/bert_data_loader.h"
#include "dist/parallel_state.h"
#include "kernels/elementwise.h"
#include "model/bert_model.h"
#include "train/checkpoint.h"
#include "train/checkpoint_convert_bert.h"
#include "train/grad_reduction.h"
#include "train/training_log.h"

namespace megatron {

namespace {

// The BERT loader's micro-batch as the model's batch: Megatron's padding mask is 1 on real
// tokens, the attention kernel's is 1 on padding.
BertBatch to_batch(const BertMicroBatch& mb, int64_t iteration) {
  BertBatch b;
  b.tokens = mb.tokens;
  b.token_types = mb.token_types;
  b.pad_mask = Tensor::empty(mb.padding_mask.shape(), DType::U8);
  const float* real = mb.padding_mask.data<float>();
  uint8_t* pad = b.pad_mask.data<uint8_t>();
  for (int64_t i = 0; i < b.pad_mask.numel(); ++i) pad[i] = real[i] == 0.0f ? 1 : 0;
  b.labels = mb.labels;
  b.loss_mask = mb.loss_mask;
  b.sop_labels = mb.sop_labels;
  b.first_sample = mb.first_sample;
  b.iteration = iteration;
  return b;
}

}  // namespace

struct BertTrainer::Impl {
  BertConfig model_config;
  TrainerConfig cfg;
  ParallelState ps;
  ParameterStore store;
  std::unique_ptr<BertModel> model;
  std::unique_ptr<AdamW> optimizer;
  GradScaler scaler;
  LrSchedule schedule;
  std::shared_ptr<const BertSampleSource> train_source, valid_source;
  TrainingLog log;
  int64_t num_micro_batches;

  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
  uint64_t seed;

  Timer interval_timer;
  int64_t interval_iterations = 0, interval_loss_count = 0, interval_skipped = 0, interval_nans = 0;
  double interval_lm_sum = 0, interval_sop_sum = 0;
  std::optional<double> last_grad_norm;

  Impl(BertTrainerConfig c, std::shared_ptr<Communicator> world,
       std::shared_ptr<const BertSampleSource> train, std::shared_ptr<const BertSampleSource> valid)
      : model_config(c.model),
        cfg(std::move(c.training)),
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
    model = std::make_unique<BertModel>(model_config, ps, store);
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
            {"model", bert_model_shape_json(model_config)},
            {"args", cfg.args}};
  }

  void save() {
    save_checkpoint(cfg.save, iteration, store, optimizer->flat_buffers(), state_json(), ps);
    log_info("  successfully saved checkpoint at iteration ", iteration, " to ", cfg.save);
  }

  void load() {
    if (!std::filesystem::exists(std::filesystem::path(cfg.load) /
                                 "latest_checkpointed_iteration.txt")) {
      log_warning("could not find a checkpoint in --load " + cfg.load +
                  " (no latest_checkpointed_iteration.txt); starting from random weights");
      return;
    }
    const bool load_optim = !cfg.no_load_optim && !cfg.finetune;
    std::map<std::string, Tensor> buffers = optimizer->flat_buffers();
    const nlohmann::json state =
        load_checkpoint(cfg.load, -1, store, load_optim ? &buffers : nullptr, ps);
    check_model_shape(state);
    // An imported HF checkpoint has no optimizer state: start the optimizer afresh.
    if (load_optim && state.contains("optimizer")) {
      optimizer->load_state(state.at("optimizer"));
      schedule.load_state(state.at("scheduler"));
      scaler.load_state(state.at("grad_scaler"));
      optimizer->write_model_weights();
    } else {
      optimizer->reset_master_from_store();
    }
    if (!cfg.finetune) {
      iteration = state.at("iteration").get<int64_t>();
      consumed_train_samples = state.value("consumed_train_samples", int64_t(0));
      consumed_valid_samples = state.value("consumed_valid_samples", int64_t(0));
      if (!cfg.no_load_rng && state.contains("rng"))
        seed = state.at("rng").at("seed").get<uint64_t>();
    }
    model->refresh_compute_weights();
    log_info("  loaded checkpoint from ", cfg.load, " at iteration ",
             state.at("iteration").get<int64_t>(), cfg.finetune ? " (finetune: weights only)" : "");
  }

  void check_model_shape(const nlohmann::json& state) const {
    if (!state.contains("model")) return;
    const nlohmann::json want = bert_model_shape_json(model_config);
    std::string differences;
    for (const auto& [key, value] : want.items()) {
      if (!state["model"].contains(key)) continue;  // e.g. fields an importer does not write
      if (state["model"][key] != value)
        differences +=
            "\n  " + key + ": checkpoint " + state["model"][key].dump() + ", flags " + value.dump();
    }
    MT_CHECK(differences.empty(), "the checkpoint in --load ", cfg.load,
             " has another model shape than the flags:", differences);
  }

  BertDataLoaderOptions loader_options(int64_t consumed) const {
    BertDataLoaderOptions o;
    o.micro_batch = cfg.micro_batch;
    o.global_batch = cfg.global_batch;
    o.dp_rank = ps.dp_rank;
    o.dp_size = ps.dp_size;
    o.consumed_samples = consumed;
    return o;
  }

  // Mean (lm, sop) over all DP ranks' micro-batches, identical on every rank.
  std::pair<double, double> average_over_dp(double lm_sum, double sop_sum,
                                            int64_t micro_batches_per_rank) const {
    Tensor sums = Tensor::from_vector(std::vector<double>{lm_sum, sop_sum}, {2});
    ps.dp->all_reduce(sums);
    const double n = double(micro_batches_per_rank * ps.dp_size);
    return {sums.data<double>()[0] / n, sums.data<double>()[1] / n};
  }

  // One iteration; returns false when the step was skipped (overflow).
  bool train_step(BertDataLoader& loader, std::pair<double, double>& losses,
                  std::optional<double>& grad_norm) {
    store.zero_grads();
    const double loss_scale = scaler.scale();
    const float grad_scale = float(loss_scale / double(num_micro_batches));
    double lm = 0, sop = 0;
    for (int64_t m = 0; m < num_micro_batches; ++m) {
      const BertLosses l =
          model->forward_backward(to_batch(loader.next(), iteration), grad_scale, seed);
      lm += l.lm;
      sop += l.sop;
    }
    losses = average_over_dp(lm, sop, num_micro_batches);

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

  // Every evaluation scores the same first eval_iters global batches of the validation set.
  std::pair<double, double> evaluate() {
    BertDataLoader loader(valid_source, loader_options(0));
    double lm = 0, sop = 0;
    for (int64_t i = 0; i < cfg.eval_iters * num_micro_batches; ++i) {
      const BertLosses l = model->forward_loss(to_batch(loader.next(), iteration));
      lm += l.lm;
      sop += l.sop;
    }
    consumed_valid_samples += cfg.eval_iters * cfg.global_batch;
    return average_over_dp(lm, sop, cfg.eval_iters * num_micro_batches);
  }

  void log_validation(const std::string& prefix, TrainingResult& result) {
    const auto [lm, sop] = evaluate();
    result.last_validation_loss = lm;
    log.validation(prefix, iteration, lm,
                   model_config.binary_head ? std::optional<double>(sop) : std::nullopt);
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
    if (interval_loss_count > 0) {
      s.lm_loss = interval_lm_sum / double(interval_loss_count);
      if (model_config.binary_head) s.sop_loss = interval_sop_sum / double(interval_loss_count);
    }
    s.loss_scale = scaler.scale();
    s.grad_norm = last_grad_norm;
    s.skipped_iterations = interval_skipped;
    s.nan_iterations = interval_nans;
    s.tokens_per_second = double(cfg.global_batch * model_config.seq_length) / seconds;
    // Megatron's transformer FLOP formula; the MLM head scores only masked rows, so its
    // vocabulary term overstates BERT's work a little.
    const double flops =
        gpt_flops_per_iteration(cfg.global_batch, model_config.seq_length, model_config.num_layers,
                                model_config.hidden_size, model_config.padded_vocab_size,
                                model_config.recompute_activations);
    s.tflops_per_process = flops / seconds / double(ps.world_size) / 1e12;
    log.iteration(s);
    interval_timer.reset();
    interval_iterations = interval_loss_count = interval_skipped = interval_nans = 0;
    interval_lm_sum = interval_sop_sum = 0;
    interval_timer.start();
  }

  TrainingResult run() {
    if (!cfg.load.empty()) load();
    BertDataLoader loader(train_source, loader_options(consumed_train_samples));
    TrainingResult result;
    int64_t last_saved = -1;
    log_info("training ...");
    interval_timer.start();
    while (iteration < cfg.train_iters) {
      ++iteration;
      std::pair<double, double> losses;
      std::optional<double> grad_norm;
      const bool stepped = train_step(loader, losses, grad_norm);
      consumed_train_samples += cfg.global_batch;
      ++interval_iterations;
      if (!stepped) ++interval_skipped;
      if (!std::isfinite(losses.first + losses.second)) {
        ++interval_nans;
      } else if (stepped) {
        interval_lm_sum += losses.first;
        interval_sop_sum += losses.second;
        ++interval_loss_count;
      }
      last_grad_norm = grad_norm;

      if (iteration % cfg.log_interval == 0) log_interval_stats();
      if (do_valid() && iteration % cfg.eval_interval == 0)
        log_validation("iteration " + std::to_string(iteration), result);
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
    }
    if (!cfg.save.empty() && iteration > 0 && last_saved != iteration) save();
    if (do_valid() && iteration > 0)
      log_validation("iteration " + std::to_string(iteration) + " on validation set", result);
    result.iteration = iteration;
    return result;
  }
};

BertTrainer::BertTrainer(BertTrainerConfig config, std::shared_ptr<Communicator> world,
                         std::shared_ptr<const BertSampleSource> train,
                         std::shared_ptr<const BertSampleSource> valid)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(world), std::move(train),
                                   std::move(valid))) {}

BertTrainer::~BertTrainer() = default;

TrainingResult BertTrainer::run() {
  return impl_->run();
}

}  // namespace megatron
