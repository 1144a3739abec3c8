#include "tasks/continuous_batch.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "kernels/elementwise.h"

namespace megatron {

namespace {

// The rows that may share one sampler call: the same sampling parameters.
using SamplingKey = std::tuple<float, int, float, uint64_t>;
SamplingKey sampling_key(const SamplingParams& p) {
  return {p.temperature, p.top_k, p.top_p, p.seed};
}

}  // namespace

ContinuousBatch::ContinuousBatch(GptModel& model, int64_t slots, int64_t max_seq)
    : model_(model),
      ctx_(model.make_inference_ctx(slots, max_seq)),
      states_(size_t(slots)),
      used_(size_t(slots), 0),
      cancelled_(size_t(slots), 0) {}

int64_t ContinuousBatch::free_slots() const {
  return int64_t(std::count(used_.begin(), used_.end(), 0));
}

std::string ContinuousBatch::fit_error(const SequenceRequest& sequence) const {
  if (std::string error =
          generation_request_error({sequence.prompt}, sequence.options, model_.config());
      !error.empty())
    return error;
  // Compared without the sum (generation_request_error bounds both by the position table).
  if (sequence.options.tokens_to_generate > ctx_.cache.max_seq() - int64_t(sequence.prompt.size()))
    return "prompt + tokens to generate exceed the server's sequence slots of " +
           std::to_string(ctx_.cache.max_seq()) + " positions";
  return "";
}

int64_t ContinuousBatch::add(SequenceRequest sequence) {
  const std::string error = fit_error(sequence);
  MT_CHECK(error.empty(), error);
  const auto free = std::find(used_.begin(), used_.end(), 0);
  MT_CHECK(free != used_.end(), "continuous batch: no free slot (check free_slots() first)");
  const int64_t slot = free - used_.begin();
  SequenceState& state = states_[size_t(slot)];
  state = SequenceState{};
  state.tokens = sequence.prompt;
  state.sampling = sequence.options.sampling;
  state.spec = std::move(sequence);
  used_[size_t(slot)] = 1;
  cancelled_[size_t(slot)] = 0;
  ctx_.cache.clear_row(slot);
  return slot;
}

void ContinuousBatch::cancel(int64_t slot) {
  MT_CHECK(slot >= 0 && slot < slots() && used_[size_t(slot)], "continuous batch: slot ", slot,
           " holds no sequence");
  cancelled_[size_t(slot)] = 1;
}

const SequenceState& ContinuousBatch::sequence(int64_t slot) const {
  MT_CHECK(slot >= 0 && slot < slots() && used_[size_t(slot)], "continuous batch: slot ", slot,
           " holds no sequence");
  return states_[size_t(slot)];
}

void ContinuousBatch::end(int64_t slot, StepReport& report) {
  SequenceState& state = states_[size_t(slot)];
  GenerationOutput out;
  const int64_t length = int64_t(state.tokens.size()) - state.trimmed;
  out.tokens.emplace_back(state.tokens.begin(), state.tokens.begin() + length);
  out.prompt_lengths.push_back(int64_t(state.spec.prompt.size()));
  const size_t scored = size_t(std::max<int64_t>(length - 1, 0));
  if (state.spec.options.logprobs) {
    state.logprobs.resize(scored);
    out.logprobs.push_back(std::move(state.logprobs));
  }
  if (state.spec.options.top_logprobs > 0) {
    state.top_logprobs.resize(scored);
    out.top_logprobs.push_back(std::move(state.top_logprobs));
  }
  report.finished.emplace_back(slot, std::move(out));
  state = SequenceState{};
  used_[size_t(slot)] = 0;
  cancelled_[size_t(slot)] = 0;
  ctx_.cache.clear_row(slot);
}

StepReport ContinuousBatch::step() {
  StepReport report;
  std::map<int64_t, std::vector<int64_t>> newcomers;  // by prompt length
  std::vector<int64_t> running;
  for (int64_t slot = 0; slot < slots(); ++slot) {
    if (!used_[size_t(slot)]) continue;
    if (cancelled_[size_t(slot)]) {
      end(slot, report);
    } else if (!states_[size_t(slot)].prefilled) {
      newcomers[int64_t(states_[size_t(slot)].tokens.size())].push_back(slot);
    } else {
      running.push_back(slot);
    }
  }
  for (const auto& [length, group] : newcomers) prefill(group, report);
  if (!running.empty()) decode(running, report);
  return report;
}

void ContinuousBatch::prefill(const std::vector<int64_t>& slots, StepReport& report) {
  const int64_t n = int64_t(slots.size()), s = int64_t(states_[size_t(slots[0])].tokens.size());
  std::vector<int32_t> block;  // [n, s]
  bool logprobs = false;
  for (int64_t slot : slots) {
    const SequenceState& state = states_[size_t(slot)];
    block.insert(block.end(), state.tokens.begin(), state.tokens.end());
    logprobs = logprobs || state.spec.options.logprobs;
  }
  // With log-probabilities, every position's logits (as generate_tokens takes them).
  const Tensor logits =
      model_.forward_rows(ctx_, slots, Tensor::from_vector(block, {n, s}), logprobs);
  report.prefilled_rows += n;
  for (int64_t slot : slots) states_[size_t(slot)].prefilled = true;
  if (logprobs && s > 1) {
    // log p of the prompt's tokens after the first, from the logits of positions [0, s − 1).
    std::vector<int32_t> targets(size_t((s - 1) * n));  // [s − 1, n]
    int top_n = 0;
    for (int64_t r = 0; r < n; ++r) {
      const SequenceState& state = states_[size_t(slots[size_t(r)])];
      top_n = std::max(top_n, state.spec.options.top_logprobs);
      for (int64_t j = 0; j + 1 < s; ++j) targets[size_t(j * n + r)] = state.tokens[size_t(j + 1)];
    }
    TokenScores scores =
        score_tokens(model_, ctx_.arena,
                     logits.slice(0, 0, s - 1).view({(s - 1) * n, logits.size(2)}), targets, top_n);
    for (int64_t r = 0; r < n; ++r) {
      SequenceState& state = states_[size_t(slots[size_t(r)])];
      if (!state.spec.options.logprobs) continue;
      const int want = state.spec.options.top_logprobs;
      for (int64_t j = 0; j + 1 < s; ++j) {
        state.logprobs.push_back(scores.logprobs[size_t(j * n + r)]);
        if (want == 0) continue;
        auto& top = scores.top_logprobs[size_t(j * n + r)];
        state.top_logprobs.emplace_back(top.begin(), top.begin() + want);
      }
    }
  }
  // Scoring sequences end here; the others draw their first token.
  std::vector<int64_t> drawing;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t slot = slots[size_t(r)];
    if (states_[size_t(slot)].spec.options.tokens_to_generate == 0) {
      end(slot, report);
    } else {
      drawing.push_back(slot);
      rows.push_back(r);
    }
  }
  if (drawing.empty()) return;
  Tensor last = logprobs ? logits.select(0, s - 1) : logits;  // [n, V/t]
  if (int64_t(drawing.size()) == n) return draw(drawing, last, report);
  // Only some rows draw: their logits rows, gathered (rows of one prompt length are few).
  std::vector<Tensor> parts;
  for (int64_t r : rows) parts.push_back(last.slice(0, r, r + 1));
  Tensor gathered = ctx_.arena.alloc({int64_t(rows.size()), last.size(1)}, DType::F32);
  for (size_t i = 0; i < rows.size(); ++i) {
    Tensor dst = gathered.slice(0, int64_t(i), int64_t(i) + 1);
    kernels::copy(parts[i], dst);
  }
  draw(drawing, gathered, report);
}

void ContinuousBatch::decode(const std::vector<int64_t>& slots, StepReport& report) {
  // In slot order: rows in consecutive slots share their attention GEMMs.
  std::vector<int32_t> column;
  for (int64_t slot : slots) column.push_back(states_[size_t(slot)].tokens.back());
  const Tensor logits = model_.forward_rows(
      ctx_, slots, Tensor::from_vector(column, {int64_t(slots.size()), 1}), false);
  report.decoded_rows += int64_t(slots.size());
  draw(slots, logits, report);
}

void ContinuousBatch::draw(const std::vector<int64_t>& slots, const Tensor& logits,
                           StepReport& report) {
  const int64_t n = int64_t(slots.size());
  const GptConfig& config = model_.config();
  VocabParallelSampler sampler(*model_.parallel_state().tp, config.vocab_size,
                               config.padded_vocab_size);
  // One sampler call per set of rows that sample alike; their logits rows gathered into one
  // block when they are not one already.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  const auto key_of = [&](int64_t r) {
    return sampling_key(states_[size_t(slots[size_t(r)])].sampling);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return key_of(a) < key_of(b); });
  std::vector<int32_t> drawn(static_cast<size_t>(n));
  for (int64_t begin = 0; begin < n;) {
    int64_t end = begin + 1;
    while (end < n && key_of(order[size_t(end)]) == key_of(order[size_t(begin)])) ++end;
    const int64_t first = order[size_t(begin)], count = end - begin;
    bool block = true;
    for (int64_t i = begin; i < end; ++i) block = block && order[size_t(i)] == first + (i - begin);
    Tensor rows = block ? logits.slice(0, first, first + count)
                        : ctx_.arena.alloc({count, logits.size(1)}, DType::F32);
    if (!block)
      for (int64_t i = begin; i < end; ++i) {
        Tensor row = rows.slice(0, i - begin, i - begin + 1);
        kernels::copy(logits.slice(0, order[size_t(i)], order[size_t(i)] + 1), row);
      }
    std::vector<uint64_t> keys;
    for (int64_t i = begin; i < end; ++i) {
      const SequenceState& state = states_[size_t(slots[size_t(order[size_t(i)])])];
      // Keyed by the position the token takes, as generate_tokens keys it.
      keys.push_back(
          sampling_row_key(state.spec.request, state.spec.index, uint64_t(state.tokens.size())));
    }
    const std::vector<int32_t> part =
        sampler.sample(rows, states_[size_t(slots[size_t(first)])].sampling, keys, ctx_.arena)
            .to_vector<int32_t>();
    for (int64_t i = begin; i < end; ++i) drawn[size_t(order[size_t(i)])] = part[size_t(i - begin)];
    begin = end;
  }
  // Log-probabilities of the drawn tokens, for the rows that want them.
  int top_n = 0;
  bool logprobs = false;
  for (int64_t slot : slots) {
    logprobs = logprobs || states_[size_t(slot)].spec.options.logprobs;
    top_n = std::max(top_n, states_[size_t(slot)].spec.options.top_logprobs);
  }
  TokenScores scores;
  if (logprobs) scores = score_tokens(model_, ctx_.arena, logits, drawn, top_n);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t slot = slots[size_t(r)];
    SequenceState& state = states_[size_t(slot)];
    const GenerationOptions& o = state.spec.options;
    state.tokens.push_back(drawn[size_t(r)]);
    if (o.logprobs) {
      state.logprobs.push_back(scores.logprobs[size_t(r)]);
      if (o.top_logprobs > 0) {
        auto& top = scores.top_logprobs[size_t(r)];
        state.top_logprobs.emplace_back(top.begin(), top.begin() + o.top_logprobs);
      }
    }
    if (state.sampling.top_p > 0.0f && o.top_p_decay > 0.0f)
      state.sampling.top_p = std::max(state.sampling.top_p * o.top_p_decay, o.top_p_bound);
    const int64_t position = int64_t(state.tokens.size()) - 1;
    if (generated_token_ends(state.tokens, int64_t(state.spec.prompt.size()), position,
                             o.tokens_to_generate, o, state.trimmed)) {
      end(slot, report);
    } else {
      report.advanced.push_back(slot);
    }
  }
}

}  // namespace megatron
