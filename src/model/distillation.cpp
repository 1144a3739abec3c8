#include "model/distillation.h"

#include <tuple>

#include "model/gpt_model.h"

namespace megatron {

std::pair<DistillationLossTerms, DistillationWeights> balance_distillation_losses(
    const DistillationConfig& config, double lm, double logits, double intermediate,
    bool training) {
  DistillationLossTerms t;
  DistillationWeights w;
  const bool skip_lm = config.skip_lm_loss && training;
  t.lm = skip_lm ? 0.0 : lm;
  t.logits = logits;
  t.intermediate = intermediate;
  // The intermediate loss is rescaled to the logits loss's magnitude (a constant factor).
  const double rescale = intermediate > 0 ? logits / intermediate : 1.0;
  const double kd = logits + intermediate * rescale;
  if (config.skip_lm_loss) {
    t.total = kd;
    w = {0.0, 1.0, rescale};
  } else {
    // kd · (lm / kd): the KD loss at the LM loss's magnitude, then weighted by kd_loss_scale
    // (left as it is when either is 0, e.g. a micro-batch with no scored token).
    const double match = kd > 0 && t.lm > 0 ? t.lm / kd : 1.0;
    t.total = t.lm + config.kd_loss_scale * kd * match;
    w = {1.0, config.kd_loss_scale * match, config.kd_loss_scale * match * rescale};
  }
  return {t, w};
}

Distillation::Distillation(DistillationConfig config, GptModel& teacher, const GptModel& student,
                           const ParallelState& ps)
    : config_(std::move(config)), teacher_(teacher), ps_(ps) {
  const GptConfig& t = teacher.config();
  const GptConfig& s = student.config();
  MT_REQUIRE(teacher.stage().whole(), "the distillation teacher must be a whole model");
  MT_REQUIRE(t.vocab_size == s.vocab_size && t.padded_vocab_size == s.padded_vocab_size,
             "the distillation teacher's vocabulary (", t.vocab_size, " entries, padded to ",
             t.padded_vocab_size, ") differs from the student's (", s.vocab_size, ", padded to ",
             s.padded_vocab_size,
             "): the teacher must share the student's tokenizer and "
             "--make-vocab-size-divisible-by");
  MT_REQUIRE(t.sequence_parallel == s.sequence_parallel && t.seq_length == s.seq_length,
             "the distillation teacher must run at the student's --seq-length and "
             "--sequence-parallel");
  MT_REQUIRE(config_.intermediate_layer_pairs.empty() || t.hidden_size == s.hidden_size,
             "--export-kd-cfg intermediate_layer_pairs compares hidden states, but the teacher's "
             "--hidden-size ",
             t.hidden_size, " differs from the student's ", s.hidden_size,
             " (Megatron's learned projection between widths is not supported): remove the "
             "pairs or distill from a teacher of the student's width");
  sequence_parallel_ = s.sequence_parallel;
  vocab_size_ = s.vocab_size;
}

void Distillation::forward(Ctx& ctx, const GptBatch& batch, const Tensor& hidden,
                           const Tensor& logits, const Tensor& loss_mask, double lm, bool training,
                           Arena& arena) {
  const GptModel::Outputs teacher = teacher_.forward_outputs(batch);
  const double logits_loss =
      vocab_parallel_kl_forward(ctx.kl, *ps_.tp, logits, teacher.logits,
                                float(config_.logit_kl_temperature), vocab_size_, loss_mask, arena);
  double intermediate = 0;
  if (!config_.intermediate_layer_pairs.empty()) {
    const int64_t h = hidden.size(2), rows = hidden.size(0) * hidden.size(1);
    // The loss mask's rows of this rank's hidden states: its sequence shard with sequence
    // parallelism (seq-major, so contiguous), else all of them.
    const int64_t shards = sequence_parallel_ ? ps_.tp_size : 1;
    const Tensor mask = loss_mask.slice(0, rows * (shards > 1 ? ps_.tp_rank : 0),
                                        rows * (shards > 1 ? ps_.tp_rank + 1 : 1));
    intermediate =
        hidden_cosine_loss_forward(ctx.cosine, *ps_.tp, hidden.view({rows, h}),
                                   teacher.hidden.view({rows, h}), mask, sequence_parallel_, arena);
  }
  std::tie(ctx.losses, ctx.weights) =
      balance_distillation_losses(config_, lm, logits_loss, intermediate, training);
}

void Distillation::backward_logits(const Ctx& ctx, float dscale, Tensor& dlogits,
                                   Arena& arena) const {
  vocab_parallel_kl_backward(ctx.kl, float(double(dscale) * ctx.weights.logits), dlogits, arena);
}

void Distillation::backward_hidden(const Ctx& ctx, float dscale, Tensor& dhidden,
                                   Arena& arena) const {
  if (config_.intermediate_layer_pairs.empty()) return;
  Tensor rows = dhidden.view({dhidden.size(0) * dhidden.size(1), dhidden.size(2)});
  hidden_cosine_loss_backward(ctx.cosine, float(double(dscale) * ctx.weights.intermediate), rows,
                              arena);
}

}  // namespace megatron
