// The text generation server (Megatron-LM's tools/run_text_generation_server.py): rank 0 speaks
// HTTP, every rank generates.
//
//   PUT /api   Megatron's API (tasks/text_api.h): {"prompts": [...], "tokens_to_generate", ...}
//              → {"text": [...], "segments": [...], "logprobs": [...] | null}; a bad request is
//              answered 400 with the message as a JSON string, never a crash
//   GET /      a small web page (prompt, sliders for length / temperature / top-p, the text)
//
// HTTP handler threads only validate and tokenize; they queue the request and wait. The main
// thread of rank 0 takes one request at a time (Megatron's lock), broadcasts it to the other
// ranks and generates with them; no thread but the main one communicates. SIGINT / SIGTERM
// (or --max-requests) stop the server: rank 0 tells the other ranks to return, and they do.
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizers/tokenizer.h"
#include "model/gpt_model.h"

namespace megatron {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 5000;        // 0: any free port (the chosen one is logged and written to port_file)
  std::string port_file;  // when set, rank 0 writes the bound port there
  size_t max_request_bytes = 1 << 20;  // larger bodies get 413
  int timeout_seconds = 30;            // reading a request / writing a response
  int64_t max_queued = 64;             // requests waiting beyond this get 503
  int64_t max_requests = 0;            // stop after this many generations (0: never)
  int64_t max_tokens = 12000;          // --max-tokens-to-oom
  uint64_t seed = 1234;
};

// Collective over the model's world (= its TP group): every rank calls it, rank 0 serves.
// Returns when the server was stopped. The tokenizer is used on rank 0 only.
void run_text_generation_server(GptModel& model, const Tokenizer& tokenizer,
                                const ServerOptions& options);

// The page served at "/": self-contained HTML, no external assets.
const std::string& server_page_html();

}  // namespace megatron
