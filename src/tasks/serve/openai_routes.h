// The HTTP side of OpenAI's API in `megatron serve`: POST /v1/completions and
// /v1/chat/completions (whole answers, or server-sent events: one "data: {chunk}" per piece of
// text that has become final, then "data: [DONE]"), GET /v1/models, and OpenAI's error JSON.
#pragma once

#include "tasks/serve/http_server.h"
#include "tasks/serve/openai_api.h"
#include "tasks/serve/serve_context.h"

namespace megatron {

void reply_openai_error(HttpResponder& responder, const OpenAIError& error);

// Answers a POST of `body` to /v1/completions (chat = false) or /v1/chat/completions.
void serve_openai_completion(const HttpRequest& request, HttpResponder& responder,
                             ServeContext& context, bool chat);

void serve_openai_models(HttpResponder& responder, const ServeContext& context);

}  // namespace megatron
