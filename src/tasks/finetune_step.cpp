#include "tasks/finetune_step.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_shape.h"
#include "checkpoint/pretrained_load.h"
#include "checkpoint/shards.h"
#include "core/logging.h"
#include "core/number_format.h"
#include "data/random_stream.h"
#include "distributed/agreement.h"
#include "train/model_step_common.h"
#include "train/pipeline_chunks.h"

namespace megatron {

namespace {

constexpr uint64_t kShuffleStream = 0x66696e6574756e65;  // "finetune": the epoch shuffle

// Rows [first, first + count) of `d` as host tensors (count samples, all their choices).
ClassifierBatch batch_of(const FinetuneDataset& d, const std::vector<int64_t>& samples,
                         int64_t first_row, int64_t iteration) {
  const int64_t n = int64_t(samples.size()), k = d.choices, s = d.seq_length;
  ClassifierBatch b;
  b.tokens = Tensor::empty({n * k, s}, DType::I32);
  b.token_types = Tensor::empty({n * k, s}, DType::I32);
  b.pad_mask = Tensor::empty({n * k, s}, DType::U8);
  b.labels = Tensor::empty({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) {
    const size_t from = size_t(samples[size_t(i)] * k * s), to = size_t(i * k * s);
    std::copy_n(d.ids.begin() + from, k * s, b.tokens.data<int32_t>() + to);
    std::copy_n(d.types.begin() + from, k * s, b.token_types.data<int32_t>() + to);
    std::copy_n(d.pad_mask.begin() + from, k * s, b.pad_mask.data<uint8_t>() + to);
    b.labels.data<int32_t>()[i] = d.labels[size_t(samples[size_t(i)])];
  }
  b.first_row = first_row;
  b.iteration = iteration;
  return b;
}

// A copy of `t` on the host.
Tensor to_host(const Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  host.copy_from(t);
  return host;
}

// Correct answers among `logits` f32 [n, classes] (host): the first maximum, as torch.argmax.
int64_t num_correct(const Tensor& logits, const Tensor& labels) {
  const int64_t n = logits.size(0), c = logits.size(1);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data<float>() + i * c;
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (row[j] > row[best]) best = j;
    correct += best == labels.data<int32_t>()[i];
  }
  return correct;
}

std::string percent(int64_t correct, int64_t total) {
  return format_number(total > 0 ? double(correct) * 100.0 / double(total) : 0.0, "%.4f");
}

class FinetuneStep final : public ModelStep {
 public:
  FinetuneStep(FinetuneStepConfig config, std::shared_ptr<const FinetuneDataset> train,
               std::vector<std::shared_ptr<const FinetuneDataset>> valid, const ParallelState& ps,
               ParameterStore& store)
      : cfg_(std::move(config)),
        train_(std::move(train)),
        valid_(std::move(valid)),
        ps_(ps),
        store_(store),
        chunks_(
            PipelineSplit{.num_layers = cfg_.model.bert.num_layers, .pipeline_size = ps.pp_size},
            /*microbatch_group=*/0, ps,
            [&](const StageRange& stage) {
              return std::make_unique<BertClassifier>(cfg_.model, ps, store, stage);
            },
            [this](const BertClassifier& model, const BertClassifier::StageCtx& ctx) {
              return model.stage().last ? score(model.stage_output(ctx)) : LossTerms{};
            }) {
    MT_CHECK(train_->choices == model_.choices(), "the training data has ", train_->choices,
             " rows per sample, the model's head ", model_.choices());
    for (const auto& v : valid_)
      MT_CHECK(v->choices == model_.choices(), "validation set ", v->name, " has ", v->choices,
               " rows per sample, the model's head ", model_.choices());
  }

  void init_weights(uint64_t seed) override {
    model_.init_weights(seed);
    if (cfg_.pretrained_checkpoint.empty()) return;
    // Every rank reads its own shards; a missing or mismatched parameter fails all together.
    // Only the last pipeline stage holds the head that stays fresh.
    std::vector<std::string> fresh;
    if (model_.stage().last) fresh.push_back(cfg_.model.head_name + ".");
    PretrainedLoadReport report;
    run_on_all_ranks(*ps_.world, "", [&] {
      check_pretrained_shape();
      report = load_pretrained(cfg_.pretrained_checkpoint, -1, store_, fresh);
    });
    if (ps_.pp_size > 1) report = merge_stage_reports(report, *ps_.pp);
    log_pretrained_load(report);
    model_.refresh_compute_weights();
  }
  void refresh_compute_weights() override { model_.refresh_compute_weights(); }

  nlohmann::json shape_json() const override {
    nlohmann::json shape = bert_model_shape_json(cfg_.model.bert);
    shape["finetune_head"] = cfg_.model.head_name;
    shape["finetune_classes"] = cfg_.model.classes;
    return shape;
  }
  bool has_sop_loss() const override { return false; }
  int64_t seq_length() const override { return cfg_.model.bert.seq_length; }
  // Megatron's transformer FLOP formula over every row (a RACE sample is 4 rows); its
  // vocabulary term overstates the work a little (no MLM head here).
  double flops_per_iteration(int64_t global_batch) const override {
    return config_flops_per_iteration(cfg_.model.bert, global_batch * model_.choices(),
                                      chunks_.split());
  }

  bool has_validation_data() const override { return false; }
  void start_training_data(const LoaderPlacement& p) override {
    MT_CHECK(p.global_batch == p.micro_batch * p.dp_size,
             "finetuning takes one micro-batch per data-parallel rank and iteration: the global "
             "batch must be --micro-batch-size x data-parallel size (",
             p.micro_batch * p.dp_size, "), got ", p.global_batch);
    placement_ = p;
    consumed_ = p.consumed_samples;
    samples_per_epoch_ =
        finetune_iterations_per_epoch(train_->size(), p.micro_batch, p.dp_size) * p.global_batch;
  }
  void start_validation_data(const LoaderPlacement&) override {
    MT_CHECK(false, "finetuning evaluates accuracy at the end of each epoch, not a loss");
  }
  bool has_test_data() const override { return false; }
  void start_test_data(const LoaderPlacement&) override {
    MT_CHECK(false, "finetuning has no test split");
  }

  LossTerms train_micro_batch(float grad_scale, uint64_t seed, int64_t iteration) override {
    return train_micro_batches(1, grad_scale, seed, iteration);
  }
  // Through the pipeline schedule (1F1B; no pipelining at PP = 1). The losses are the last
  // stage's; the Trainer broadcasts them to the other stages.
  LossTerms train_micro_batches(int64_t micro_batches, float grad_scale, uint64_t seed,
                                int64_t iteration) override {
    return chunks_.train(
        micro_batches, placement_.micro_batch, [&] { return next_training_batch(seed, iteration); },
        grad_scale, seed);
  }
  LossTerms valid_micro_batch(int64_t) override {
    MT_CHECK(false, "finetuning evaluates accuracy at the end of each epoch, not a loss");
    return {};
  }

  std::optional<double> end_of_epoch(int64_t epoch) override {
    log_info("calculating metrics ...");
    int64_t correct = 0, total = 0;
    for (const auto& v : valid_) {
      const auto start = std::chrono::steady_clock::now();
      const auto [c, t] = evaluate(*v);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      log_info(" > |epoch: ", epoch, "| metrics for ", v->name, ": correct / total = ", c, " / ", t,
               " = ", percent(c, t), " %, elapsed time (sec): ", format_number(seconds, "%.3f"));
      correct += c;
      total += t;
    }
    log_info(" >> |epoch: ", epoch, "| overall: correct / total = ", correct, " / ", total, " = ",
             percent(correct, total), " %");
    if (total == 0) return std::nullopt;
    return double(correct) * 100.0 / double(total);
  }

 private:
  // The last stage's share of a micro-batch: its loss, and during evaluate() its correct
  // answers.
  LossTerms score(const ClassifierOutput& out) {
    if (eval_correct_) *eval_correct_ += num_correct(to_host(out.logits), to_host(out.labels));
    return {out.loss, 0.0};
  }

  // This DP rank's micro-batch of the next iteration (every pipeline stage reads the same).
  ClassifierBatch next_training_batch(uint64_t seed, int64_t iteration) {
    MT_CHECK(samples_per_epoch_ > 0, "the training data has ", train_->size(),
             " samples: not one micro-batch of ", placement_.micro_batch,
             " per data-parallel rank (", placement_.dp_size, ")");
    const int64_t epoch = consumed_ / samples_per_epoch_;
    if (epoch != order_epoch_) shuffle(epoch, seed);
    const int64_t start =
        consumed_ % samples_per_epoch_ + placement_.dp_rank * placement_.micro_batch;
    std::vector<int64_t> samples(order_.begin() + start,
                                 order_.begin() + start + placement_.micro_batch);
    const int64_t first_row =
        (consumed_ + placement_.dp_rank * placement_.micro_batch) * train_->choices;
    consumed_ += placement_.global_batch;
    return batch_of(*train_, samples, first_row, iteration);
  }

  // The pretrained body must have the flags' shape. Its heads may differ (a pretraining
  // checkpoint has the binary head, the classifier a task head), and the vocabulary padding
  // depends on the TP size (re-padded on load).
  void check_pretrained_shape() const {
    const nlohmann::json state =
        CheckpointShardReader(checkpoint_iteration_dir(cfg_.pretrained_checkpoint, -1)).state(0, 0);
    if (!state.contains("model")) return;
    const std::string differences =
        model_shape_differences(state["model"], bert_model_shape_json(cfg_.model.bert),
                                {"padded_vocab_size", "binary_head"});
    MT_REQUIRE(differences.empty(), "the checkpoint in --pretrained-checkpoint ",
               cfg_.pretrained_checkpoint, " has another model shape than the flags:", differences);
  }

  // The epoch's order: a Philox shuffle of the samples, padded by its first ones to a whole
  // number of samples per DP rank (DistributedSampler's padding).
  void shuffle(int64_t epoch, uint64_t seed) {
    const int64_t n = train_->size(), dp = placement_.dp_size;
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) perm[size_t(i)] = i;
    RandomStream rng(seed, philox_key({kShuffleStream, uint64_t(epoch)}));
    rng.shuffle(perm);
    const int64_t padded = (n + dp - 1) / dp * dp;
    order_ = perm;
    for (int64_t i = n; i < padded; ++i) order_.push_back(perm[size_t((i - n) % n)]);
    order_epoch_ = epoch;
  }

  // (correct, total) over `d`, summed over the DP ranks and known on every rank; each DP rank
  // scores a contiguous share, its whole micro-batches in one pass of the forward-only
  // schedule and the remainder (another activation shape) in a second. The last pipeline stage
  // counts, and broadcasts the count to the other stages.
  std::pair<int64_t, int64_t> evaluate(const FinetuneDataset& d) {
    const int64_t n = d.size(), dp = ps_.dp_size, r = ps_.dp_rank;
    const int64_t begin = n * r / dp, end = n * (r + 1) / dp, mb = cfg_.eval_micro_batch;
    int64_t next = begin;
    auto take = [&](int64_t count) {
      return [&, count] {
        std::vector<int64_t> samples;
        for (int64_t i = next; i < next + count; ++i) samples.push_back(i);
        const ClassifierBatch b = batch_of(d, samples, next * d.choices, 0);
        next += count;
        return b;
      };
    };
    eval_correct_ = 0;
    chunks_.evaluate((end - begin) / mb, mb, take(mb));
    if ((end - begin) % mb > 0) chunks_.evaluate(1, (end - begin) % mb, take((end - begin) % mb));
    double counts[2] = {double(*eval_correct_), double(end - begin)};
    eval_correct_.reset();
    Tensor t = Tensor::from_blob(counts, {2}, DType::F64);
    ps_.dp->all_reduce(t);
    if (ps_.pp_size > 1) ps_.pp->broadcast(t, ps_.pp_size - 1);
    return {int64_t(counts[0]), int64_t(counts[1])};
  }

  FinetuneStepConfig cfg_;
  std::shared_ptr<const FinetuneDataset> train_;
  std::vector<std::shared_ptr<const FinetuneDataset>> valid_;
  ParallelState ps_;
  ParameterStore& store_;
  PipelineChunks<BertClassifier, ClassifierBatch> chunks_;  // this rank's stage
  BertClassifier& model_ = *chunks_.models().front();       // the one stage it holds
  LoaderPlacement placement_;
  int64_t consumed_ = 0, samples_per_epoch_ = 0;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;           // the current epoch's padded sample order
  std::optional<int64_t> eval_correct_;  // during evaluate(): correct answers so far
};

}  // namespace

int64_t finetune_iterations_per_epoch(int64_t samples, int64_t micro_batch, int64_t dp_size) {
  MT_CHECK(micro_batch > 0 && dp_size > 0, "micro-batch and data-parallel size must be positive");
  return (samples + dp_size - 1) / dp_size / micro_batch;
}

ModelStepFactory finetune_step_factory(FinetuneStepConfig config,
                                       std::shared_ptr<const FinetuneDataset> train,
                                       std::vector<std::shared_ptr<const FinetuneDataset>> valid) {
  return [config = std::move(config), train = std::move(train), valid = std::move(valid)](
             const ParallelState& ps, ParameterStore& store) -> std::unique_ptr<ModelStep> {
    MT_REQUIRE(train != nullptr, "no training data");
    return std::make_unique<FinetuneStep>(config, train, valid, ps, store);
  };
}

}  // namespace megatron
