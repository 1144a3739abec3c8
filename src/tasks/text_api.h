// Megatron-LM's text generation REST API (megatron/text_generation_server.py, PUT /api) as
// plain functions, independent of HTTP: request validation with Megatron's error messages, and
// the response {"text", "segments", "logprobs"} built with the tokenizer.
//
// Differences, on purpose: every rejected request is answered 400 (Megatron answers many with
// 200 and the message); a request that could not fit (too long for the position table, more
// than --max-tokens-to-oom tokens) is rejected before any work rather than raised from the
// generation; top_p may be any JSON number (Megatron takes only a float, so 0 or 1 from a
// browser's JSON.stringify failed); a shorter prompt of a batch gets tokens_to_generate tokens
// like the others (tasks/generation.h); stop_token defaults to the tokenizer's end of document.
// Beam search (beam_width) and prevent_newline_after_colon are refused as not implemented.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizers/tokenizer.h"
#include "tasks/generation.h"

namespace megatron {

struct ApiRequest {
  std::vector<std::string> prompts;
  int64_t tokens_to_generate = 64;
  bool logprobs = false;
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 0.0f, top_p_decay = 0.0f, top_p_bound = 0.0f;
  bool add_bos = false;
  bool stop_on_eol = false, stop_on_double_eol = false;
  std::optional<uint64_t> random_seed;  // Megatron's random_seed (>= 0)
  std::optional<int64_t> stop_token;
  bool no_log = false;
};

// Validates a decoded JSON body as Megatron does, field by field in its order. Returns "" and
// fills `out`, or the error message for a 400 answer.
std::string parse_api_request(const nlohmann::json& body, ApiRequest& out);

// Tokenizes the prompts (with BOS = the end-of-document token when add_BOS) and sets the
// generation options. `max_tokens` is --max-tokens-to-oom; `seed`/`request` key the draws
// (random_seed, when given, replaces the seed and the request number 0, so that a request with
// a random_seed is reproducible). Returns "" or the error message for a 400 answer (prompts that
// do not fit the model, a stop token outside the vocabulary, ...).
std::string prepare_generation(const ApiRequest& request, const Tokenizer& tokenizer,
                               const GptConfig& model, int64_t max_tokens, uint64_t seed,
                               uint64_t request_number, std::vector<std::vector<int32_t>>& prompts,
                               GenerationOptions& options);

// Each token's text (Megatron's "segments": the token decoded on its own).
std::vector<std::string> token_segments(const Tokenizer& tokenizer,
                                        const std::vector<int32_t>& tokens);

// {"text": [prompt + generation], "segments": [[token texts]], "logprobs": [[...]] or null}.
nlohmann::json api_response(const GenerationOutput& output, const Tokenizer& tokenizer,
                            bool logprobs);

}  // namespace megatron
