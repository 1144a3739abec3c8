// What the request handlers of `megatron serve` share (rank 0 only): the queue to the generating
// thread, the tokenizer, the model's shape and the server's options.
#pragma once

#include <atomic>
#include <cstdint>

#include "data/tokenizers/tokenizer.h"
#include "model/gpt_model.h"
#include "tasks/serve/job_queue.h"
#include "tasks/server.h"

namespace megatron {

struct ServeContext {
  JobQueue& queue;
  const Tokenizer& tokenizer;
  const GptConfig& config;
  const ServerOptions& options;
  int64_t started = 0;                      // Unix time the server started ("created")
  std::atomic<uint64_t> request_number{0};  // keys the draws of requests without a seed
};

}  // namespace megatron
