// Megatron's zero-shot GPT evaluation (tasks/zeroshot_gpt/evaluate.py): the summed loss over a
// corpus's scored targets (WikiText-103 perplexity) or the number of samples whose every
// target token is the arg-max prediction (LAMBADA accuracy), and the result lines.
//
// Data parallelism splits the samples (sample i goes to DP rank i mod dp, in micro-batches of
// `micro_batch`) and never repeats one; tensor parallelism splits the model. Sums are reduced
// over DP in double precision in rank order, so every rank ends with the same values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/gpt_model.h"
#include "tasks/zero_shot_datasets.h"

namespace megatron {

struct EvalSamples {
  int64_t size = 0;
  std::function<EvalSample(int64_t index)> at;
};

struct ZeroShotOptions {
  int64_t micro_batch = 1;
  int64_t log_interval = 100;  // "> working on iteration: N" every this many micro-batches
};

// Σ cross-entropy over every scored target (the masks), without dropout. Collective over the
// model's whole rank grid.
double evaluate_loss_sum(GptModel& model, const EvalSamples& samples,
                         const ZeroShotOptions& options);

// Number of samples whose scored targets are all the arg-max of the logits over the real
// vocabulary (padding excluded; ties to the smaller id, as torch.argmax). The arg-max is
// found across the vocabulary shards without gathering the logits. Collective.
int64_t evaluate_num_correct(GptModel& model, const EvalSamples& samples,
                             const ZeroShotOptions& options);

// The metrics Megatron derives from the loss sum (with its clamp at exp(20)).
struct PerplexityResult {
  double avg_loss = 0;      // loss_sum / (tokenized − 1)
  double ppl = 0;           // exp(min(20, avg_loss))
  double adjusted_ppl = 0;  // exp(min(20, avg_loss · token_ratio))
  double token_ratio = 0;   // (tokenized − 1) / (original − 1)
};
PerplexityResult perplexity(double loss_sum, int64_t num_tokenized_tokens,
                            int64_t num_original_tokens);

// Megatron's result lines, character for character: a rule of dashes, the line, the rule.
//   " validation results on WIKITEXT103 | avg loss: 3.1234E+00 | ppl: ... | adjusted ppl:
//    ... | token ratio: 1.1358 |"
//   " validation results on LAMBADA | number correct: 1.0000E+00 | total examples: ... |
//    avg accuracy: ..."
std::string perplexity_result_lines(const std::string& task, const PerplexityResult& r);
std::string accuracy_result_lines(const std::string& task, int64_t num_correct, int64_t total);

}  // namespace megatron
