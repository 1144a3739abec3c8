// The text generation server (Megatron-LM's tools/run_text_generation_server.py, plus OpenAI's
// API): rank 0 speaks HTTP, every rank generates.
//
//   PUT  /api                  Megatron's API (tasks/text_api.h): {"prompts": [...], ...} →
//                              {"text", "segments", "logprobs"}; errors: 400 with the message
//                              as a JSON string
//   POST /v1/completions       OpenAI's API (tasks/serve/openai_api.h), streamed as server-sent
//   POST /v1/chat/completions  events with "stream": true; errors in OpenAI's error JSON
//   GET  /v1/models            the served model
//   GET  /                     a web page (prompt, sliders limited to the model's context)
//
// HTTP (tasks/serve/http_server.h) runs on one thread per connection: it checks who asks
// (tasks/serve/access.h), validates and tokenizes, queues the request (tasks/serve/job_queue.h)
// and waits, streaming the tokens as they come when asked. The main thread of rank 0 runs the
// continuous batch (tasks/continuous_batch.h): at every token boundary it ends the rows whose
// clients left, starts queued requests' rows in the free slots (tasks/serve/row_scheduler.h),
// broadcasts those changes to the other ranks, and all ranks run the step together; no other
// thread communicates. Nothing a request does can end the process: every
// exception is caught where the request is answered. SIGINT / SIGTERM (or --max-requests) stop
// the server: rank 0 answers what is queued, closes every connection and tells the other ranks
// to return.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/tokenizers/tokenizer.h"
#include "model/gpt_model.h"

namespace megatron {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 5000;        // 0: any free port (the chosen one is logged and written to port_file)
  std::string port_file;  // when set, rank 0 writes the bound port there
  size_t max_request_bytes = 1 << 20;  // larger bodies get 413
  int timeout_seconds = 30;            // reading a whole request; each write of an answer
  int max_connections = 64;            // connections served at once; more get 503
  int64_t max_queued = 64;             // requests waiting beyond this get 503
  int64_t max_num_seqs = 32;           // rows of the running batch (KV cache slots)
  int64_t max_requests = 0;            // stop after this many generations (0: never)
  int64_t max_tokens = 12000;          // --max-tokens-to-oom
  uint64_t seed = 1234;
  std::string api_key;               // non-empty: every request but GET / needs "Bearer <key>"
  std::string model_name;            // GET /v1/models, the "model" field, the page
  int64_t parameters = 0;            // the model's parameter count, for the page
  std::string chat_template;         // a Jinja chat template ("": chat completions are refused)
  std::string bos_token, eos_token;  // the template's bos_token / eos_token
};

// Collective over the model's world (= its TP group): every rank calls it, rank 0 serves.
// Returns when the server was stopped. The tokenizer is used on rank 0 only.
void run_text_generation_server(GptModel& model, const Tokenizer& tokenizer,
                                const ServerOptions& options);

// The page served at "/": self-contained HTML, no external assets; `model` ({"name",
// "parameters", "context_length"}) is shown and limits the sliders.
std::string server_page_html(const nlohmann::json& model);

}  // namespace megatron
