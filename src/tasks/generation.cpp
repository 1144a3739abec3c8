#include "tasks/generation.h"

#include <algorithm>

namespace megatron {

std::string generation_request_error(const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerationOptions& options, const GptConfig& model) {
  if (prompts.empty()) return "prompts is empty";
  if (options.tokens_to_generate < 0)
    return "tokens_to_generate must be an integer greater than or equal to 0";
  if (options.tokens_to_generate == 0 && !options.logprobs)
    return "tokens_to_generate=0 implies logprobs should be True";
  if (options.top_logprobs < 0 || options.top_logprobs > 20 ||
      (options.top_logprobs > 0 && !options.logprobs))
    return "top_logprobs must be in [0, 20], and needs logprobs";
  if (options.top_logprobs >= model.vocab_size)
    return "top_logprobs must be smaller than the vocabulary";
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return "Empty prompts require add_BOS=true";
    for (int32_t id : prompts[i])
      if (id < 0 || id >= model.vocab_size)
        return "prompt " + std::to_string(i) + " has token id " + std::to_string(id) +
               " outside the vocabulary [0, " + std::to_string(model.vocab_size) + ")";
    longest = std::max(longest, prompts[i].size());
  }
  // Compared without the sum, which a huge tokens_to_generate would overflow.
  if (options.tokens_to_generate > int64_t(model.max_position_embeddings) - int64_t(longest))
    return "Length of prompt + tokens_to_generate longer than allowed";
  const int64_t total = int64_t(longest) + options.tokens_to_generate;
  if (total * int64_t(prompts.size()) > options.max_tokens)
    return "Too many tokens.  " + std::to_string(total * int64_t(prompts.size())) +
           " is greater than " + std::to_string(options.max_tokens);
  try {
    validate_sampling_params(options.sampling, model.vocab_size);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

namespace {

// tokens[:, begin:end] of the padded batch as i32 [b, end − begin].
Tensor token_block(const std::vector<std::vector<int32_t>>& rows, int64_t begin, int64_t end) {
  const int64_t b = int64_t(rows.size()), s = end - begin;
  std::vector<int32_t> block(size_t(b * s));
  for (int64_t i = 0; i < b; ++i)
    std::copy(rows[size_t(i)].begin() + begin, rows[size_t(i)].begin() + end,
              block.begin() + i * s);
  return Tensor::from_vector(block, {b, s});
}

using TopLogprobs = std::vector<std::vector<std::vector<std::pair<int32_t, float>>>>;

// Log-probabilities of tokens[:, begin + 1 : end + 1] from the logits of positions
// [begin, end) (f32 [s, b, V/t], sequence-major), stored into logprobs[i][begin .. end); with
// `top_n` > 0 also the top_n most likely tokens of each of those positions into top[i][...].
void record_logprobs(GptModel& model, InferenceCtx& ctx, const Tensor& logits,
                     const std::vector<std::vector<int32_t>>& tokens, int64_t begin, int64_t end,
                     std::vector<std::vector<float>>& logprobs, int top_n, TopLogprobs& top) {
  const int64_t b = int64_t(tokens.size()), s = end - begin;
  std::vector<int32_t> targets(size_t(s * b));  // [s, b]
  for (int64_t j = 0; j < s; ++j)
    for (int64_t i = 0; i < b; ++i)
      targets[size_t(j * b + i)] = tokens[size_t(i)][size_t(begin + j + 1)];
  TokenScores scores =
      score_tokens(model, ctx.arena, logits.view({s * b, logits.size(2)}), targets, top_n);
  for (int64_t j = 0; j < s; ++j)
    for (int64_t i = 0; i < b; ++i) {
      logprobs[size_t(i)][size_t(begin + j)] = scores.logprobs[size_t(j * b + i)];
      if (top_n > 0)
        top[size_t(i)][size_t(begin + j)] = std::move(scores.top_logprobs[size_t(j * b + i)]);
    }
}

// The length of the stop sequence that the generated tokens row[prompt_length, end) end with, or
// 0.
int64_t stop_sequence_at_end(const std::vector<int32_t>& row, int64_t prompt_length, int64_t end,
                             const std::vector<std::vector<int32_t>>& stop_sequences) {
  for (const std::vector<int32_t>& stop : stop_sequences) {
    const int64_t n = int64_t(stop.size());
    if (n == 0 || end - prompt_length < n) continue;
    if (std::equal(stop.begin(), stop.end(), row.begin() + (end - n))) return n;
  }
  return 0;
}

}  // namespace

TokenScores score_tokens(GptModel& model, Arena& arena, const Tensor& logits,
                         const std::vector<int32_t>& targets, int top_n) {
  const int64_t n = int64_t(targets.size());
  Communicator& tp = *model.parallel_state().tp;
  const auto log_probs_of = [&](const std::vector<int32_t>& ids) {  // [n] ids
    Tensor id_tensor = Tensor::from_vector(ids, {n}).to(logits.device());
    return vocab_parallel_log_probs(tp, logits, id_tensor, model.config().vocab_size, arena)
        .to_vector<float>();
  };
  TokenScores out;
  out.logprobs = log_probs_of(targets);
  if (top_n == 0) return out;
  // The n largest logits are the n most likely tokens; their log-probabilities come from the
  // same vocab-parallel cross-entropy as the chosen tokens'.
  VocabParallelSampler sampler(tp, model.config().vocab_size, model.config().padded_vocab_size);
  Tensor values, ids;
  sampler.top_k(logits, top_n, arena, values, ids);
  const std::vector<int32_t> top_ids = ids.to_vector<int32_t>();  // [n, top_n]
  out.top_logprobs.resize(size_t(n));
  for (int k = 0; k < top_n; ++k) {
    std::vector<int32_t> column(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) column[size_t(r)] = top_ids[size_t(r * top_n + k)];
    const std::vector<float> top_lp = log_probs_of(column);
    for (int64_t r = 0; r < n; ++r)
      out.top_logprobs[size_t(r)].emplace_back(column[size_t(r)], top_lp[size_t(r)]);
  }
  return out;
}

bool generated_token_ends(const std::vector<int32_t>& row, int64_t prompt_length, int64_t position,
                          int64_t tokens_to_generate, const GenerationOptions& options,
                          int64_t& stop_sequence_tokens) {
  const int32_t t = row[size_t(position)];
  const bool eol = (options.stop_on_eol || options.stop_on_double_eol) && t >= 0 &&
                   (t == options.double_eol_token ||
                    (t == options.eol_token &&
                     (options.stop_on_eol || row[size_t(position - 1)] == options.eol_token)));
  stop_sequence_tokens =
      stop_sequence_at_end(row, prompt_length, position + 1, options.stop_sequences);
  return std::find(options.stop_tokens.begin(), options.stop_tokens.end(), t) !=
             options.stop_tokens.end() ||
         eol || stop_sequence_tokens > 0 || position + 1 == prompt_length + tokens_to_generate;
}

GenerationOutput generate_tokens(GptModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& options,
                                 const GenerationStepCallback& on_step) {
  const GptConfig& config = model.config();
  const std::string error = generation_request_error(prompts, options, config);
  MT_CHECK(error.empty(), error);
  const int64_t b = int64_t(prompts.size());
  GenerationOutput out;
  int64_t min_len = int64_t(prompts[0].size()), max_len = 0;
  for (const auto& p : prompts) {
    out.prompt_lengths.push_back(int64_t(p.size()));
    min_len = std::min(min_len, int64_t(p.size()));
    max_len = std::max(max_len, int64_t(p.size()));
  }
  const int64_t total = max_len + options.tokens_to_generate;
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(b));  // [b, total], padded
  for (int64_t i = 0; i < b; ++i) {
    tokens[size_t(i)] = prompts[size_t(i)];
    tokens[size_t(i)].resize(size_t(total), options.pad_token);
  }
  std::vector<std::vector<float>> logprobs(
      options.logprobs ? size_t(b) : 0,
      std::vector<float>(size_t(std::max<int64_t>(total - 1, 0))));
  TopLogprobs top(
      options.top_logprobs > 0 ? size_t(b) : 0,
      std::vector<std::vector<std::pair<int32_t, float>>>(size_t(std::max<int64_t>(total - 1, 0))));
  InferenceCtx ctx = model.make_inference_ctx(b, total);

  std::vector<int64_t> lengths(static_cast<size_t>(b), total);
  std::vector<int64_t> trimmed(static_cast<size_t>(b), 0);  // stop-sequence tokens dropped
  int64_t last = total - 1;                                 // the last position filled
  if (options.tokens_to_generate == 0) {
    // Scoring: one forward over the prompts, log-probabilities of every token after the first.
    Tensor logits = model.forward_step(ctx, token_block(tokens, 0, total), true);
    if (total > 1)
      record_logprobs(model, ctx, logits.slice(0, 0, total - 1), tokens, 0, total - 1, logprobs,
                      options.top_logprobs, top);
    lengths = out.prompt_lengths;
  } else {
    VocabParallelSampler sampler(*model.parallel_state().tp, config.vocab_size,
                                 config.padded_vocab_size);
    SamplingParams sampling = options.sampling;
    std::vector<char> done(static_cast<size_t>(b), 0), generated(static_cast<size_t>(b), 0);
    std::vector<uint64_t> keys(static_cast<size_t>(b));
    std::vector<int32_t> column(static_cast<size_t>(b));
    int64_t prev = 0;
    for (int64_t context = min_len; context < total; ++context) {
      last = context;
      Tensor logits = model.forward_step(ctx, token_block(tokens, prev, context), options.logprobs);
      Tensor last_logits = options.logprobs ? logits.select(0, logits.size(0) - 1) : logits;
      for (int64_t i = 0; i < b; ++i)
        keys[size_t(i)] = sampling_row_key(options.request, uint64_t(i), uint64_t(context));
      const std::vector<int32_t> drawn =
          sampler.sample(last_logits, sampling, keys, ctx.arena).to_vector<int32_t>();
      bool all_done = true;
      for (int64_t i = 0; i < b; ++i) {
        const bool started = out.prompt_lengths[size_t(i)] <= context;
        if (started) tokens[size_t(i)][size_t(context)] = drawn[size_t(i)];
        column[size_t(i)] = tokens[size_t(i)][size_t(context)];
        generated[size_t(i)] = started && !done[size_t(i)];
        // A sequence ends at a stop token or after tokens_to_generate tokens of its own.
        int64_t stop_words = 0;
        const bool stop =
            generated[size_t(i)] &&
            generated_token_ends(tokens[size_t(i)], out.prompt_lengths[size_t(i)], context,
                                 options.tokens_to_generate, options, stop_words);
        if (stop) {
          lengths[size_t(i)] = context + 1;
          trimmed[size_t(i)] = stop_words;
        }
        done[size_t(i)] = done[size_t(i)] || stop;
        all_done = all_done && done[size_t(i)];
      }
      if (options.logprobs)
        record_logprobs(model, ctx, logits, tokens, prev, context, logprobs, options.top_logprobs,
                        top);
      if (on_step) on_step(context, column, generated);
      prev = context;
      if (sampling.top_p > 0.0f && options.top_p_decay > 0.0f)
        sampling.top_p = std::max(sampling.top_p * options.top_p_decay, options.top_p_bound);
      if (all_done) break;
    }
  }

  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = std::min(lengths[size_t(i)], last + 1) - trimmed[size_t(i)];
    out.tokens.emplace_back(tokens[size_t(i)].begin(), tokens[size_t(i)].begin() + len);
    if (options.logprobs)
      out.logprobs.emplace_back(logprobs[size_t(i)].begin(),
                                logprobs[size_t(i)].begin() + std::max<int64_t>(len - 1, 0));
    if (options.top_logprobs > 0)
      out.top_logprobs.emplace_back(top[size_t(i)].begin(),
                                    top[size_t(i)].begin() + std::max<int64_t>(len - 1, 0));
  }
  return out;
}

}  // namespace megatron
