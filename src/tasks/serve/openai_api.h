// OpenAI's API (POST /v1/completions, POST /v1/chat/completions, GET /v1/models) as plain
// functions, independent of HTTP: requests checked field by field (type and range before any
// arithmetic), turned into the generation request of Megatron's API (tasks/text_api.h), and the
// answers — whole or as server-sent-event chunks — built from the generated tokens.
//
// Mapping: each prompt is repeated n times (choice index = prompt × n + j; sampled draws are
// keyed by that row, so the n choices differ); temperature 0 is greedy (top-k 1); top_p 1 is
// off; top_k (vLLM's extension) and top_p < 1 together are refused, as Megatron's sampler
// refuses them; seed replaces the server's seed (reproducible, as Megatron's random_seed);
// `stop` strings end a choice at their first occurrence in its text (the text excludes them;
// generation also stops there when the string's tokens are generated as the tokenizer encodes
// it alone); the tokenizer's end-of-document token ends a choice and is not part of its text.
// logprobs: the chosen tokens' log-probabilities under the model's raw distribution, with the n
// most likely tokens at each position (completions: logprobs n in 0..5; chat: logprobs true,
// top_logprobs n in 0..20); streamed too, each chunk with its tokens' (not with echo).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizers/tokenizer.h"
#include "tasks/generation.h"
#include "tasks/text_api.h"

namespace megatron {

// An error answer: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct OpenAIError {
  int status = 0;  // 0: no error
  std::string message;
  std::string param;  // the request field at fault ("" → null)
  std::string code;   // "" → null
  explicit operator bool() const { return status != 0; }
};
nlohmann::json openai_error_json(const OpenAIError& error);

struct ChatMessage {
  std::string role, content;
};

struct OpenAIRequest {
  bool chat = false;
  std::vector<std::string> prompts;   // completions: the prompts; chat: filled by the template
  std::vector<ChatMessage> messages;  // chat only
  std::optional<int64_t> max_tokens;  // absent: 16 (completions), as many as fit (chat)
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  int64_t n = 1;
  std::vector<std::string> stop;
  std::optional<int64_t> seed;
  bool logprobs = false;  // the chosen tokens' log-probabilities
  int top_logprobs = 0;   // and the n most likely tokens' at each position
  bool echo = false;      // completions: the prompt before the completion
  bool stream = false, include_usage = false;
};

// Checks a decoded body of /v1/completions (chat = false) or /v1/chat/completions. `model` is
// the served model's name: a request naming another model is a 404.
OpenAIError parse_openai_request(const nlohmann::json& body, bool chat, const std::string& model,
                                 OpenAIRequest& out);

// A rendered conversation as prompt text. transformers tokenizes chat prompts without special
// tokens, so the template's own bos_token is the only BOS; a tokenizer here adds its special
// tokens to every text (an HF post-processor's BOS), so when it does and the text starts with
// bos_token, that text is left out: the model sees one BOS either way.
std::string chat_prompt_text(std::string rendered, const std::string& bos_token,
                             const Tokenizer& tokenizer);

// The Megatron request (prompts repeated n times) for prepare_generation, and the stop strings'
// tokens for GenerationOptions::stop_sequences. `context` is the model's position count (a chat
// request without max_tokens generates up to it).
ApiRequest to_api_request(const OpenAIRequest& request, int64_t longest_prompt, int64_t context);
std::vector<std::vector<int32_t>> stop_token_sequences(const OpenAIRequest& request,
                                                       const Tokenizer& tokenizer);

// One choice's final text and why it ended ("stop" or "length"): the generated tokens without a
// final stop token, decoded, cut at the first stop string.
struct ChoiceText {
  std::string text;
  std::string finish_reason;
};
ChoiceText choice_text(const Tokenizer& tokenizer, const std::vector<int32_t>& generated,
                       const std::vector<std::string>& stop,
                       const std::vector<int32_t>& stop_tokens, int64_t max_tokens);

// A choice's text as it is generated: update() returns the text that has become final (whole
// UTF-8 characters, nothing that could still turn out to start a stop string), finish() the
// rest; their concatenation is choice_text()'s text.
class ChoiceTextStream {
 public:
  ChoiceTextStream(const Tokenizer& tokenizer, std::vector<std::string> stop,
                   std::vector<int32_t> stop_tokens, int64_t max_tokens)
      : tokenizer_(tokenizer),
        stop_(std::move(stop)),
        stop_tokens_(std::move(stop_tokens)),
        max_tokens_(max_tokens) {}
  std::string update(const std::vector<int32_t>& generated);
  std::string finish(const std::vector<int32_t>& generated, std::string& finish_reason);

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  std::vector<int32_t> stop_tokens_;
  int64_t max_tokens_;
  size_t sent_ = 0;  // bytes of the text sent so far
  bool stopped_ = false;
};

// The length of the longest prefix of `text` that does not end inside a UTF-8 character.
size_t utf8_complete_prefix(const std::string& text);

// The whole answer of a non-streamed request, from the generation of its n × prompts rows.
nlohmann::json openai_response(const OpenAIRequest& request, const GenerationOutput& output,
                               const Tokenizer& tokenizer, const std::vector<int32_t>& stop_tokens,
                               const std::string& id, const std::string& model, int64_t created);

// Streamed answers: one chunk's JSON (a choice's text delta, or its finish_reason when given,
// and `logprobs` — openai_stream_logprobs() — for the tokens generated since the last chunk),
// the final usage chunk (stream_options.include_usage), and the usage object of both kinds.
nlohmann::json openai_stream_chunk(bool chat, const std::string& id, const std::string& model,
                                   int64_t created, int64_t index, const std::string& text,
                                   const std::string& finish_reason, bool first,
                                   const nlohmann::json& logprobs = nullptr);
// The logprobs of a chunk: generated `tokens` with their log-probabilities (and, with
// top_logprobs, the most likely tokens at each), the first at `text_offset` of the choice's
// text; the same shape as a whole answer's, so a stream's chunks join to its logprobs.
using TopTokens = std::vector<std::pair<int32_t, float>>;
nlohmann::json openai_stream_logprobs(const OpenAIRequest& request, const Tokenizer& tokenizer,
                                      const std::vector<int32_t>& tokens,
                                      const std::vector<float>& logprobs,
                                      const std::vector<TopTokens>& top_logprobs,
                                      size_t text_offset);
nlohmann::json openai_usage(const OpenAIRequest& request, const GenerationOutput& output);

// GET /v1/models: the one served model.
nlohmann::json openai_models(const std::string& model, int64_t created);

}  // namespace megatron
