// Requests that run together: the queued jobs whose generation options agree (sampling, seed,
// stop rules, logprobs) are joined into one batch, so concurrent clients share the model's
// steps instead of waiting for each other. Each row keeps the draws, the length and the stop
// rules it has alone (GenerationOptions' per-row keys and lengths), so every request gets
// exactly what it gets served alone. Requests join between batches, not inside a running one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/gpt_model.h"
#include "tasks/generation.h"
#include "tasks/serve/job_queue.h"

namespace megatron {

struct Batch {
  std::vector<std::shared_ptr<Job>> jobs;  // in order; job k has rows [first[k], first[k + 1])
  std::vector<size_t> first = {0};
  std::vector<std::vector<int32_t>> prompts;
  GenerationOptions options;

  // Adds `job` when its options agree and the joined batch still fits the model and
  // --max-tokens-to-oom; false (and nothing changed) otherwise.
  bool try_join(const std::shared_ptr<Job>& job, const GptConfig& model);
  // The batch's step, handed to each streaming job as its own rows.
  void record_step(const std::vector<int32_t>& tokens, const std::vector<char>& generated);
  bool streaming() const;
  // Per row, whether its client has left (GenerationCancelCheck).
  std::vector<char> cancelled_rows() const;
  size_t cancelled_jobs() const;
  // Each job gets its rows of the output (or the error).
  void finish(const std::string& error, const GenerationOutput& output);
};

}  // namespace megatron
