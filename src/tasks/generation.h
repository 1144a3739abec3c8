// Text generation with a KV cache and tensor parallelism: Megatron-LM's
// generate_tokens_probs_and_return_on_first_stage and score_and_return_on_first_stage, on token
// ids (tokenizing and detokenizing are the caller's; tasks/text_generation_api.h).
//
// A batch of prompts of different lengths is laid out as Megatron does it: each row is its
// prompt followed by padding, all rows share positions. The prompt part every row has (the
// shortest prompt) goes through the model in one prefill step; from there one position per step
// for the whole batch: a row still inside its prompt takes its next prompt token, a row past it
// takes the token just drawn. So every row sees exactly its own tokens at their own positions,
// causal attention never looks at the padding, and each sequence gets the tokens it would get
// alone (greedy; sampled draws are keyed by the row's index in the request). Unlike Megatron,
// where a shorter prompt keeps generating until the longest one has its tokens_to_generate,
// every sequence ends after tokens_to_generate tokens of its own (or at a stop token).
//
// Every TP rank calls these with the same arguments (the server broadcasts them) and gets the
// same result; each step is a collective over the model's TP group.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/gpt_model.h"
#include "parallel/vocab_parallel_sampling.h"

namespace megatron {

struct GenerationOptions {
  int64_t tokens_to_generate = 64;  // 0: score the prompts only (logprobs must be on)
  SamplingParams sampling;          // seed included
  uint64_t request = 0;             // keys the draws together with the seed
  bool logprobs = false;            // log-probabilities of every token after the first
  int top_logprobs = 0;             // with logprobs: also the n most likely tokens at each one
  // A generated token in this set ends its sequence (Megatron: the tokenizer's EOD). The batch
  // stops when every sequence has ended.
  std::vector<int32_t> stop_tokens;
  // Megatron's stop_words, tokenized: a sequence also ends when its generated tokens end with one
  // of these, and the output drops it (Megatron's default, detokenize_stop_sequence off).
  std::vector<std::vector<int32_t>> stop_sequences;
  // Megatron's stop_on_eol (a generated "\n" or "\n\n" token ends the sequence) and
  // stop_on_double_eol ("\n\n", or "\n" after "\n"); the ids are the tokenizer's (-1: none).
  bool stop_on_eol = false, stop_on_double_eol = false;
  int32_t eol_token = -1, double_eol_token = -1;
  // Megatron's top_p_decay / top_p_bound: after each step top_p = max(top_p · decay, bound).
  float top_p_decay = 0.0f, top_p_bound = 0.0f;
  int32_t pad_token = 0;  // fills the rows past their prompts (never attended to)
  // Megatron's --max-tokens-to-oom: batch × (longest prompt + tokens_to_generate) at most.
  int64_t max_tokens = 12000;
};

struct GenerationOutput {
  // Per sequence: its prompt followed by its generated tokens, up to and including the stop
  // token that ended it (Megatron's tokens[:length]).
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int64_t> prompt_lengths;
  // With logprobs: per sequence, log p(tokens[j] | tokens[< j]) for j = 1 .. length − 1 under
  // the raw (temperature 1) distribution over the real vocabulary.
  std::vector<std::vector<float>> logprobs;
  // With top_logprobs = n: per sequence, for j = 1 .. length − 1, the n most likely tokens at
  // position j and their log-probabilities (same distribution), most likely first.
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> top_logprobs;
};

// After each step: the position just filled and every row's token there; generated[i] is 0 for
// a row still inside its prompt (its token is the prompt's) and for a row that had ended.
using GenerationStepCallback = std::function<void(
    int64_t position, const std::vector<int32_t>& tokens, const std::vector<char>& generated)>;

// The log-probabilities of targets[n] under logits f32 [n, V_padded/t] (this rank's shard) over
// the real vocabulary, and with top_n > 0 each row's top_n most likely tokens with theirs (most
// likely first). Collective over the model's TP group; the same on every rank.
struct TokenScores {
  std::vector<float> logprobs;                                       // [n]
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // [n][top_n]
};
TokenScores score_tokens(GptModel& model, Arena& arena, const Tensor& logits,
                         const std::vector<int32_t>& targets, int top_n);

// Whether the token just generated at `position` of `row` (row[position], position >=
// prompt_length) ends its sequence: a stop token, end of line, a stop sequence (its length goes
// to `stop_sequence_tokens`, which the output drops) or its tokens_to_generate-th token.
bool generated_token_ends(const std::vector<int32_t>& row, int64_t prompt_length, int64_t position,
                          int64_t tokens_to_generate, const GenerationOptions& options,
                          int64_t& stop_sequence_tokens);

// Megatron's checks of a request before any work, as its error strings: "" when the batch fits,
// else the message ("Length of prompt + tokens_to_generate longer than allowed", "Too many
// tokens.  N is greater than M", ...).
std::string generation_request_error(const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerationOptions& options, const GptConfig& model);

// Throws Error (with generation_request_error's message, or naming a bad token id) before any
// collective when the request does not fit.
GenerationOutput generate_tokens(GptModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& options,
                                 const GenerationStepCallback& on_step = {});

}  // namespace megatron
