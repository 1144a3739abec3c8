#include "tasks/serve/batch.h"

#include <algorithm>

namespace megatron {

namespace {

// Everything but the prompts and the length: what every row of a batch shares.
bool same_rules(const GenerationOptions& a, const GenerationOptions& b) {
  return a.sampling.temperature == b.sampling.temperature && a.sampling.top_k == b.sampling.top_k &&
         a.sampling.top_p == b.sampling.top_p && a.sampling.seed == b.sampling.seed &&
         a.logprobs == b.logprobs && a.top_logprobs == b.top_logprobs &&
         a.stop_tokens == b.stop_tokens && a.stop_sequences == b.stop_sequences &&
         a.stop_on_eol == b.stop_on_eol && a.stop_on_double_eol == b.stop_on_double_eol &&
         a.eol_token == b.eol_token && a.double_eol_token == b.double_eol_token &&
         a.top_p_decay == b.top_p_decay && a.top_p_bound == b.top_p_bound &&
         a.pad_token == b.pad_token && a.max_tokens == b.max_tokens;
}

// A job's rows as batch rows: its request number, each row's index in it, its length.
void append_rows(GenerationOptions& to, const GenerationOptions& job, size_t rows) {
  for (size_t r = 0; r < rows; ++r) {
    to.row_requests.push_back(job.request);
    to.row_indices.push_back(r);
    to.row_tokens_to_generate.push_back(job.tokens_to_generate);
  }
}

}  // namespace

bool Batch::try_join(const std::shared_ptr<Job>& job, const GptConfig& model) {
  if (jobs.empty()) {
    jobs = {job};
    first = {0, job->prompts.size()};
    prompts = job->prompts;
    options = job->options;
    options.cancellable = true;  // any client can leave
    return true;
  }
  // Scoring requests (no tokens to generate) run alone, as do requests whose rules differ and
  // those with top_p_decay (the decay counts the batch's steps, which start at its shortest
  // prompt, not the request's).
  if (options.tokens_to_generate == 0 || job->options.tokens_to_generate == 0 ||
      options.top_p_decay > 0.0f || !same_rules(options, job->options))
    return false;
  std::vector<std::vector<int32_t>> joined = prompts;
  joined.insert(joined.end(), job->prompts.begin(), job->prompts.end());
  GenerationOptions o = options;
  if (o.row_requests.empty()) append_rows(o, options, prompts.size());
  append_rows(o, job->options, job->prompts.size());
  o.tokens_to_generate = std::max(options.tokens_to_generate, job->options.tokens_to_generate);
  if (joined.size() > 128 || !generation_request_error(joined, o, model).empty()) return false;
  jobs.push_back(job);
  first.push_back(joined.size());
  prompts = std::move(joined);
  options = std::move(o);
  return true;
}

bool Batch::streaming() const {
  return std::any_of(jobs.begin(), jobs.end(), [](const auto& j) { return j->streaming; });
}

std::vector<char> Batch::cancelled_rows() const {
  std::vector<char> rows(prompts.size(), 0);
  for (size_t k = 0; k < jobs.size(); ++k)
    if (jobs[k]->cancelled) std::fill(rows.begin() + first[k], rows.begin() + first[k + 1], 1);
  return rows;
}

size_t Batch::cancelled_jobs() const {
  return size_t(
      std::count_if(jobs.begin(), jobs.end(), [](const auto& j) { return j->cancelled.load(); }));
}

void Batch::record_step(const std::vector<int32_t>& tokens, const std::vector<char>& generated) {
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (!jobs[k]->streaming) continue;
    jobs[k]->record_step({tokens.begin() + first[k], tokens.begin() + first[k + 1]},
                         {generated.begin() + first[k], generated.begin() + first[k + 1]});
  }
}

void Batch::finish(const std::string& error, const GenerationOutput& output) {
  for (size_t k = 0; k < jobs.size(); ++k) {
    GenerationOutput part;
    if (error.empty()) {
      const auto rows = [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        return v.empty() ? V() : V(v.begin() + first[k], v.begin() + first[k + 1]);
      };
      part.tokens = rows(output.tokens);
      part.prompt_lengths = rows(output.prompt_lengths);
      part.logprobs = rows(output.logprobs);
      part.top_logprobs = rows(output.top_logprobs);
    }
    jobs[k]->finish(error, std::move(part));
  }
}

}  // namespace megatron
