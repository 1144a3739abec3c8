// ModelStep: what the Trainer's loop needs from a model family (GPT, BERT) — its weights'
// initialisation and compute copies, its data loaders and one micro-batch's forward(+backward),
// returning the loss terms Megatron logs. Everything else (accumulation, DP reduction, fp16
// overflow skip, clipping, AdamW, LR schedule, logging, evaluation, checkpoints, exit) is the
// Trainer's and identical for every model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/parallel_state.h"
#include "parallel/parameter.h"

namespace megatron {

class GptModel;

// One micro-batch's losses, or a mean of them: Megatron's `lm loss` and, for a BERT with a
// sentence-order head, `sop loss` (0 otherwise). The optimizer minimises their sum. With the
// per-token loss (--calculate-per-token-loss, GPT) `lm` is the micro-batch's masked loss SUM
// and `tokens` its token count (Σ loss mask), so that the mean is taken over the global batch.
// With knowledge distillation (GPT, docs/distillation.md) Megatron's report adds `total loss`
// (what the optimizer minimises), `logits distillation loss` and `intermediate distillation
// loss`, the same kind of value as `lm`. With DSA's indexer loss (--dsa-indexer-loss-coeff > 0)
// `indexer` is Megatron's `indexer loss`: the layers' indexer losses summed over this rank's
// pipeline stages and divided by the model's layer count (their mean; the stages' shares add up).
struct LossTerms {
  double lm = 0;
  double sop = 0;
  double tokens = 0;  // per-token loss only
  double total = 0, logits_distillation = 0, intermediate_distillation = 0;
  double indexer = 0;
  // The MoE router losses (model/moe_router.h, MoeLosses), summed over this rank's MoE layers;
  // every pipeline stage adds its own. Logged, never part of the loss the optimizer minimises
  // (their gradients enter the backward directly, as Megatron's MoEAuxLossAutoScaler).
  double load_balancing = 0, seq_load_balancing = 0, z_loss = 0;
  // global_aux_loss's "global_load_balancing_loss": each rank holds the dp × cp sum already.
  double global_load_balancing = 0;
  // Multi-token prediction (GPT, --mtp-num-layers): each depth's loss, a mean over its shifted
  // loss mask as Megatron logs `mtp_<k> loss` (also with the per-token loss); the last stage's,
  // empty elsewhere and without MTP.
  std::vector<double> mtp{};

  // Term by term: sums over micro-batches and over a log interval.
  LossTerms& operator+=(const LossTerms& other) {
    lm += other.lm;
    sop += other.sop;
    tokens += other.tokens;
    total += other.total;
    logits_distillation += other.logits_distillation;
    intermediate_distillation += other.intermediate_distillation;
    indexer += other.indexer;
    load_balancing += other.load_balancing;
    seq_load_balancing += other.seq_load_balancing;
    z_loss += other.z_loss;
    global_load_balancing += other.global_load_balancing;
    if (mtp.size() < other.mtp.size()) mtp.resize(other.mtp.size(), 0.0);
    for (size_t k = 0; k < other.mtp.size(); ++k) mtp[k] += other.mtp[k];
    return *this;
  }
  // Whether every term is finite (an inf/NaN iteration otherwise).
  bool finite() const;
};

// Where this data-parallel rank reads: Megatron's sampler order over global batches of
// `global_batch` samples, split into micro-batches of `micro_batch` per rank.
struct LoaderPlacement {
  int64_t micro_batch = 1;
  int64_t global_batch = 1;
  int dp_rank = 0;
  int dp_size = 1;
  int64_t consumed_samples = 0;  // where to start (resume)
};

class ModelStep {
 public:
  virtual ~ModelStep() = default;

  // Fills the (allocated) parameter store from `seed`, then refresh_compute_weights().
  virtual void init_weights(uint64_t seed) = 0;
  // Rebuilds the compute-dtype copies after the store's values changed (step, load).
  virtual void refresh_compute_weights() = 0;

  // The model-shape arguments a checkpoint must agree with: a different head count or
  // sequence length loads without a tensor-shape error but computes another function.
  virtual nlohmann::json shape_json() const = 0;
  virtual bool has_sop_loss() const = 0;
  // Whether the losses include knowledge distillation's terms (LossTerms::total ...).
  virtual bool has_distillation_loss() const { return false; }
  // Whether the losses include DSA's indexer loss (LossTerms::indexer).
  virtual bool has_indexer_loss() const { return false; }
  // The MoE router losses the iteration line reports, as Megatron names them
  // ("load_balancing_loss", "seq_load_balancing_loss", "z_loss"), each with the LossTerms field
  // it averages, and the number of MoE layers they are averaged over. None without MoE.
  struct MoeLossLog {
    std::vector<std::pair<std::string, double LossTerms::*>> losses;
    int layers = 0;
  };
  virtual MoeLossLog moe_loss_log() const { return {}; }
  // The depths of multi-token prediction (LossTerms::mtp, logged as "mtp_<k> loss"); 0: none.
  virtual int mtp_depths() const { return 0; }
  virtual int64_t seq_length() const = 0;
  // Megatron's FLOP count of one iteration over `global_batch` samples.
  virtual double flops_per_iteration(int64_t global_batch) const = 0;

  virtual bool has_validation_data() const = 0;
  // (Re)starts this rank's training / validation loader at `placement`.
  virtual void start_training_data(const LoaderPlacement& placement) = 0;
  virtual void start_validation_data(const LoaderPlacement& placement) = 0;

  // Next training micro-batch: forward + backward, gradients (scaled by `grad_scale`)
  // accumulated into the store; `seed` and `iteration` key the dropout masks.
  virtual LossTerms train_micro_batch(float grad_scale, uint64_t seed, int64_t iteration) = 0;
  // Next evaluation micro-batch (validation, or test after start_test_data): forward only.
  virtual LossTerms valid_micro_batch(int64_t iteration) = 0;

  // One iteration's `micro_batches` training micro-batches (forward + backward, gradients
  // accumulated) in the model's schedule, and the SUM of their losses on the ranks that
  // compute the loss (the last pipeline stage), zeros on the others. The default is the
  // no-pipelining schedule: train_micro_batch, micro_batches times.
  virtual LossTerms train_micro_batches(int64_t micro_batches, float grad_scale, uint64_t seed,
                                        int64_t iteration);
  // A training step's statistics that are not gradients — what the MoE routers routed, for
  // aux-loss-free balancing (model/moe_router.h): reset before each run of the step's
  // micro-batches (a rerun counts afresh), applied once after them, before the optimizer step
  // and whether or not it is then skipped (Megatron's finalize_model_grads). Collective over
  // the data- and context-parallel group. Default: none.
  virtual void reset_step_statistics() {}
  virtual void apply_step_statistics() {}
  // The same for `micro_batches` validation micro-batches, forward only.
  virtual LossTerms valid_micro_batches(int64_t micro_batches, int64_t iteration);

  // Megatron's final evaluation "on test set": whether the run has a test split, and
  // (re)starting the evaluation loader on it at `placement`.
  virtual bool has_test_data() const = 0;
  virtual void start_test_data(const LoaderPlacement& placement) = 0;

  // The evaluation at the end of training epoch `epoch` (0-based; -1: evaluation only, no
  // training) of a model trained in epochs (TrainerConfig::iterations_per_epoch), e.g.
  // finetuning's validation accuracy: prints its result and returns a score, higher is
  // better, identical on every rank; nullopt: no score. Collective. Default: none.
  virtual std::optional<double> end_of_epoch(int64_t epoch) { return std::nullopt; }

  // The model being trained, for generating text from it during training (--sample-interval):
  // a GPT whose every layer is on this rank (one pipeline stage, one model chunk); else null.
  virtual GptModel* whole_gpt_model() { return nullptr; }
};

// Builds the model's parameters into `store` (still unallocated) for this rank's TP slice.
using ModelStepFactory =
    std::function<std::unique_ptr<ModelStep>(const ParallelState& ps, ParameterStore& store)>;

}  // namespace megatron
