// Knowledge distillation as Megatron-LM's ModelOpt integration runs it (--export-kd-teacher-load,
// --export-kd-cfg; docs/distillation.md): a frozen teacher GptModel runs forward on the
// student's micro-batch, at the student's TP layout, and the student's last stage adds
//   - the logits loss: KL(p_teacher ‖ p_student) at temperature T per token, vocab-parallel
//     (parallel/vocab_parallel_kl_divergence.h), Megatron's "output_layer" pair;
//   - the intermediate loss: the cosine loss (parallel/hidden_cosine_loss.h) between the two
//     final norms' outputs, Megatron's "decoder.final_layernorm" pair — the one module pair
//     supported here, so every listed pair is that one and their mean is its loss;
// each a masked sum over the micro-batch's tokens, combined by ModelOpt's
// LogitsAndIntermediatesLossBalancer:
//   intermediate' = intermediate · (logits / intermediate)      (when intermediate > 0)
//   skip_lm_loss:  total = logits + intermediate'   (the LM loss is not computed in training)
//   otherwise:     kd = logits + intermediate';  total = lm + kd_loss_scale · kd · (lm / kd)
//                  (the factor lm / kd only when both are positive)
// where the ratios are constants (detached), so each term's gradient is scaled by them. The
// teacher gets no gradients; the student's backward starts from `total` (in training).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "parallel/hidden_cosine_loss.h"
#include "parallel/vocab_parallel_kl_divergence.h"

namespace megatron {

class GptModel;
struct GptBatch;

// --export-kd-cfg's settings (Megatron's DistillationConfig; defaults as Megatron's when no
// file is given: logits-only, scale and temperature 1, no LM loss).
struct DistillationConfig {
  // Megatron's module names, validated by the parser: ["output_layer", "output_layer"].
  std::pair<std::string, std::string> logit_layers{"output_layer", "output_layer"};
  // Each ["decoder.final_layernorm", "decoder.final_layernorm"].
  std::vector<std::pair<std::string, std::string>> intermediate_layer_pairs;
  bool skip_lm_loss = true;
  double kd_loss_scale = 1.0;
  double logit_kl_temperature = 1.0;
};

// One micro-batch's losses as logged (Megatron's report): "lm loss" (0 in training with
// skip_lm_loss), "total loss", "logits distillation loss", "intermediate distillation loss".
// Masked sums over the micro-batch's tokens, like LossSum::sum.
struct DistillationLossTerms {
  double lm = 0, total = 0, logits = 0, intermediate = 0;
};

// The balancer's gradient coefficients of each masked-sum term in `total`.
struct DistillationWeights {
  double lm = 0, logits = 0, intermediate = 0;
};

// ModelOpt's LogitsAndIntermediatesLossBalancer over masked sums (see above); `training`:
// skip_lm_loss drops the LM loss (reported as 0) only in training, as Megatron's.
std::pair<DistillationLossTerms, DistillationWeights> balance_distillation_losses(
    const DistillationConfig& config, double lm, double logits, double intermediate, bool training);

class Distillation {
 public:
  struct Ctx {
    VocabParallelKlCtx kl;
    HiddenCosineLossCtx cosine;
    DistillationLossTerms losses;
    DistillationWeights weights;
  };

  // `teacher`: a whole model (no pipeline split), weights loaded, at the student's TP layout
  // (same TP size, sequence parallelism and padded vocabulary); it must outlive this object.
  // Throws Error when the two models cannot be compared (vocabulary, hidden size for an
  // intermediate pair, sequence length).
  Distillation(DistillationConfig config, GptModel& teacher, const GptModel& student,
               const ParallelState& ps);

  const DistillationConfig& config() const { return config_; }

  // On the student's last stage after its forward: runs the teacher on `batch` (no dropout),
  // then the losses. `hidden`: the student's final norm output [s, b, h] ([s/t, b, h] with
  // sequence parallelism); `logits` f32 [s·b, V/t]; `loss_mask` f32 [s·b] (sequence-major);
  // `lm`: the student's masked LM loss sum. Collective over TP.
  void forward(Ctx& ctx, const GptBatch& batch, const Tensor& hidden, const Tensor& logits,
               const Tensor& loss_mask, double lm, bool training, Arena& arena);
  // The student's gradients of `dscale` · total beyond the LM loss's (whose weight is
  // ctx.weights.lm): dlogits f32 [s·b, V/t] and dhidden [s, b, h] (as `hidden`) accumulate.
  void backward_logits(const Ctx& ctx, float dscale, Tensor& dlogits, Arena& arena) const;
  void backward_hidden(const Ctx& ctx, float dscale, Tensor& dhidden, Arena& arena) const;

 private:
  DistillationConfig config_;
  GptModel& teacher_;
  ParallelState ps_;
  bool sequence_parallel_ = false;
  int64_t vocab_size_ = 0;
};

}  // namespace megatron
