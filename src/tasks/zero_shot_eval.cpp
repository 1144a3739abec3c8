#include "tasks/zero_shot_eval.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/logging.h"
#include "parallel/vocab_parallel_sampling.h"
#include "tasks/python_format.h"

namespace megatron {

namespace {

// This DP rank's samples, in micro-batches: visit(first, count) gets the host tensors of one.
struct HostMicroBatch {
  Tensor tokens;  // i32 [b, s]
  Tensor labels;  // i32 [b, s]
  Tensor mask;    // f32 [b, s]
};

template <typename Visit>
void for_each_micro_batch(const ParallelState& ps, const EvalSamples& samples,
                          const ZeroShotOptions& options, Visit visit) {
  MT_CHECK(options.micro_batch >= 1, "--micro-batch-size must be positive (got ",
           options.micro_batch, ")");
  std::vector<int64_t> mine;
  for (int64_t i = ps.dp_rank; i < samples.size; i += ps.dp_size) mine.push_back(i);
  int64_t iteration = 0;
  for (size_t begin = 0; begin < mine.size(); begin += size_t(options.micro_batch), ++iteration) {
    if (iteration % std::max<int64_t>(options.log_interval, 1) == 0)
      log_info("> working on iteration: ", iteration);
    const size_t end = std::min(mine.size(), begin + size_t(options.micro_batch));
    std::vector<EvalSample> batch;
    for (size_t k = begin; k < end; ++k) batch.push_back(samples.at(mine[k]));
    const int64_t b = int64_t(batch.size()), s = int64_t(batch[0].mask.size());
    std::vector<int32_t> tokens, labels;
    std::vector<float> mask;
    for (const EvalSample& sample : batch) {
      tokens.insert(tokens.end(), sample.tokens.begin(), sample.tokens.end() - 1);
      labels.insert(labels.end(), sample.tokens.begin() + 1, sample.tokens.end());
      mask.insert(mask.end(), sample.mask.begin(), sample.mask.end());
    }
    visit(HostMicroBatch{Tensor::from_vector(tokens, {b, s}), Tensor::from_vector(labels, {b, s}),
                         Tensor::from_vector(mask, {b, s})},
          batch);
  }
}

// Σ over the DP group of one double per rank, added in rank order (identical everywhere).
double dp_sum(const ParallelState& ps, double value) {
  Tensor mine = Tensor::from_vector(std::vector<int64_t>{std::bit_cast<int64_t>(value)}, {1});
  Tensor all = Tensor::empty({ps.dp_size}, DType::I64);
  ps.dp->all_gather(mine, all);
  double sum = 0;
  for (int64_t bits : all.to_vector<int64_t>()) sum += std::bit_cast<double>(bits);
  return sum;
}

}  // namespace

double evaluate_loss_sum(GptModel& model, const EvalSamples& samples,
                         const ZeroShotOptions& options) {
  const ParallelState& ps = model.parallel_state();
  double sum = 0;
  for_each_micro_batch(ps, samples, options,
                       [&](const HostMicroBatch& mb, const std::vector<EvalSample>&) {
                         sum += model.forward_loss_sum(GptBatch{mb.tokens, mb.labels, mb.mask}).sum;
                       });
  return dp_sum(ps, sum);
}

int64_t evaluate_num_correct(GptModel& model, const EvalSamples& samples,
                             const ZeroShotOptions& options) {
  const ParallelState& ps = model.parallel_state();
  const GptConfig& config = model.config();
  VocabParallelSampler sampler(*ps.tp, config.vocab_size, config.padded_vocab_size);
  const SamplingParams greedy{.top_k = 1};
  int64_t correct = 0;
  for_each_micro_batch(
      ps, samples, options, [&](const HostMicroBatch& mb, const std::vector<EvalSample>& batch) {
        const int64_t b = mb.tokens.size(0), s = mb.tokens.size(1);
        InferenceCtx ctx = model.make_inference_ctx(b, s);
        const Tensor logits = model.forward_step(ctx, mb.tokens, true);  // [s, b, V/t]
        const std::vector<uint64_t> unused_keys(size_t(s * b), 0);       // greedy draws nothing
        const std::vector<int32_t> best =
            sampler.sample(logits.view({s * b, logits.size(2)}), greedy, unused_keys, ctx.arena)
                .to_vector<int32_t>();  // [s·b], sequence-major
        for (int64_t i = 0; i < b; ++i) {
          const EvalSample& sample = batch[size_t(i)];
          bool all = true;
          for (int64_t p = 0; p < s && all; ++p)
            all = sample.mask[size_t(p)] == 0.0f ||
                  best[size_t(p * b + i)] == sample.tokens[size_t(p + 1)];
          correct += all ? 1 : 0;
        }
      });
  return int64_t(dp_sum(ps, double(correct)));
}

PerplexityResult perplexity(double loss_sum, int64_t num_tokenized_tokens,
                            int64_t num_original_tokens) {
  PerplexityResult r;
  r.avg_loss = loss_sum / double(num_tokenized_tokens - 1);
  r.ppl = std::exp(std::min(20.0, r.avg_loss));
  r.token_ratio = double(num_tokenized_tokens - 1) / double(num_original_tokens - 1);
  r.adjusted_ppl = std::exp(std::min(20.0, r.avg_loss * r.token_ratio));
  return r;
}

namespace {

std::string framed(const std::string& line) {
  const std::string rule(line.size() + 1, '-');
  return rule + "\n" + line + "\n" + rule;
}

}  // namespace

std::string perplexity_result_lines(const std::string& task, const PerplexityResult& r) {
  return framed(" validation results on " + task + " | avg loss: " +
                python_format_E(r.avg_loss, 4) + " | ppl: " + python_format_E(r.ppl, 4) +
                " | adjusted ppl: " + python_format_E(r.adjusted_ppl, 4) +
                " | token ratio: " + python_float_repr(r.token_ratio) + " |");
}

std::string accuracy_result_lines(const std::string& task, int64_t num_correct, int64_t total) {
  return framed(" validation results on " + task +
                " | number correct: " + python_format_E(double(num_correct), 4) +
                " | total examples: " + python_format_E(double(total), 4) +
                " | avg accuracy: " + python_format_E(double(num_correct) / double(total), 4));
}

}  // namespace megatron
