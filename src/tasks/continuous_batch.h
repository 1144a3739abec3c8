// Continuous batching (Orca's iteration-level scheduling, vLLM's running batch): sequences join
// the running decode batch at token boundaries and leave it when they end, each in its own row
// ("slot") of one KV cache.
//
// A step is one token boundary:
//   1. sequences cancelled since the last step end (their slots are free again);
//   2. sequences added since the last step are prefilled — their whole prompt through the model
//     in their own slots, those with prompts of one length together — and draw their first
//     token (a scoring sequence, tokens_to_generate 0, ends there with its log-probabilities);
//   3. every sequence that was already running decodes one token, as one batch over its slots,
//     each row at its own position (GptModel::forward_rows).
// Each sequence keeps what it has alone: its draws are keyed by its own (request, index) and the
// position of the draw, its sampling (top_p decay included) and stop rules are its own
// (GenerationOptions), and its positions start at 0 in its slot. So a sequence gets the tokens
// generate_tokens gives it alone, whenever it joins and whoever shares its steps.
//
// Every TP rank runs the same ContinuousBatch and makes the same calls (add, cancel, step) in the
// same order — the server broadcasts them — so all ranks fill the same slots and draw the same
// tokens; step() is a collective over the model's TP group, add() and cancel() are local.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/gpt_model.h"
#include "model/kv_cache.h"
#include "tasks/generation.h"

namespace megatron {

struct SequenceRequest {
  std::vector<int32_t> prompt;  // non-empty, ids in the vocabulary
  // This sequence's rules: tokens_to_generate (0: score the prompt, logprobs on), sampling,
  // logprobs / top_logprobs, stop tokens, stop sequences, end of line, top_p decay (its
  // `request` is not used: the draws are keyed by the two numbers below).
  GenerationOptions options;
  uint64_t request = 0, index = 0;  // key the draws: the request number, the row in it
};

// One sequence's tokens so far, as generate_tokens' output row has them.
struct SequenceState {
  SequenceRequest spec;
  std::vector<int32_t> tokens;  // the prompt, then every generated token
  // With logprobs: log p(tokens[j] | tokens[< j]) for j = 1 .. tokens.size() − 1, and with
  // top_logprobs the n most likely tokens at each of those positions.
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  SamplingParams sampling;  // the next draw's (top_p decays after each draw)
  bool prefilled = false;
  int64_t trimmed = 0;  // stop-sequence tokens the output drops
};

struct StepReport {
  std::vector<int64_t> advanced;  // slots that generated a token this step and go on
  // Slots that ended this step (stop, length, scoring done or cancelled) with their output
  // (one row, as generate_tokens gives it); their slots are free for the next add().
  std::vector<std::pair<int64_t, GenerationOutput>> finished;
  int64_t prefilled_rows = 0, decoded_rows = 0;  // the step's work
};

class ContinuousBatch {
 public:
  // `slots` rows of KV cache of `max_seq` positions each (<= the model's position table).
  ContinuousBatch(GptModel& model, int64_t slots, int64_t max_seq);

  int64_t slots() const { return int64_t(states_.size()); }
  int64_t free_slots() const;
  bool used(int64_t slot) const { return used_.at(size_t(slot)) != 0; }
  bool idle() const { return free_slots() == slots(); }
  // "" when the sequence fits a slot (generation_request_error's checks on it alone, its
  // prompt + tokens_to_generate within max_seq); else why not.
  std::string fit_error(const SequenceRequest& sequence) const;
  // Puts the sequence into the lowest free slot (it is prefilled at the next step) and returns
  // the slot. Throws Error when no slot is free or fit_error() is not "".
  int64_t add(SequenceRequest sequence);
  // The sequence in `slot` ends at the next step, before any work.
  void cancel(int64_t slot);
  StepReport step();
  // A running sequence's state (valid until it is reported finished).
  const SequenceState& sequence(int64_t slot) const;

 private:
  void prefill(const std::vector<int64_t>& slots, StepReport& report);
  void decode(const std::vector<int64_t>& slots, StepReport& report);
  // Draws each slot's next token from its logits row, records log-probabilities, applies the
  // stop rules; `logits` f32 [n, V/t] (row r is slots[r]'s), `all_logits` with logprobs the
  // prefill's every position ([s, n, V/t]) or undefined.
  void draw(const std::vector<int64_t>& slots, const Tensor& logits, StepReport& report);
  void end(int64_t slot, StepReport& report);

  GptModel& model_;
  InferenceCtx ctx_;
  std::vector<SequenceState> states_;
  std::vector<char> used_, cancelled_;
};

}  // namespace megatron
