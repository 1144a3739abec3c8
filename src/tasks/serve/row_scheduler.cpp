#include "tasks/serve/row_scheduler.h"

#include <algorithm>

namespace megatron {

std::optional<RowScheduler::Row> RowScheduler::next_row(
    const std::function<std::shared_ptr<Job>()>& next_job) {
  while (!admitting_) {
    std::shared_ptr<Job> job = next_job();
    if (!job) return std::nullopt;
    if (job->cancelled) {  // its client left while it waited: nothing to run
      job->finish("the client left", {});
      continue;
    }
    Progress progress;
    const size_t rows = job->prompts.size();
    progress.output.tokens.resize(rows);
    progress.output.prompt_lengths.resize(rows);
    if (job->options.logprobs) progress.output.logprobs.resize(rows);
    if (job->options.top_logprobs > 0) progress.output.top_logprobs.resize(rows);
    progress_.emplace(job.get(), std::move(progress));
    admitting_ = std::move(job);
  }
  return Row{admitting_, progress_.at(admitting_.get()).started};
}

void RowScheduler::started(int64_t slot, Row row) {
  MT_CHECK(!running_.at(size_t(slot)), "row scheduler: slot ", slot, " is taken");
  Progress& progress = progress_.at(row.job.get());
  MT_CHECK(row.job == admitting_ && row.row == progress.started,
           "row scheduler: rows start in order, as next_row() hands them out");
  ++progress.started;
  if (progress.started == row.job->prompts.size()) admitting_.reset();
  running_[size_t(slot)] = std::move(row);
}

std::vector<int64_t> RowScheduler::cancelled_slots() {
  if (admitting_ && admitting_->cancelled) {
    // No more of its rows start; it is answered when the running ones have ended.
    Progress& progress = progress_.at(admitting_.get());
    const size_t never = admitting_->prompts.size() - progress.started;
    progress.started += never;
    progress.ended += never;
    Job* job = admitting_.get();
    admitting_.reset();
    if (progress.ended == job->prompts.size()) {
      job->finish("the client left", {});
      progress_.erase(job);
    }
  }
  std::vector<int64_t> slots;
  for (size_t slot = 0; slot < running_.size(); ++slot)
    if (running_[slot] && running_[slot]->job->cancelled) slots.push_back(int64_t(slot));
  return slots;
}

void RowScheduler::advanced(int64_t slot, const SequenceState& sequence) {
  const Row& row = running_.at(size_t(slot)).value();
  if (!row.job->streaming) return;
  row.job->record_row(row.row, sequence.tokens, int64_t(sequence.spec.prompt.size()),
                      sequence.logprobs, sequence.top_logprobs);
}

bool RowScheduler::finished(int64_t slot, GenerationOutput output) {
  MT_CHECK(running_.at(size_t(slot)), "row scheduler: slot ", slot, " runs no row");
  const Row row = std::move(*running_[size_t(slot)]);
  running_[size_t(slot)].reset();
  Job& job = *row.job;
  Progress& progress = progress_.at(&job);
  if (job.streaming && !output.tokens.empty())
    job.record_row(row.row, output.tokens[0], output.prompt_lengths[0],
                   output.logprobs.empty() ? std::vector<float>() : output.logprobs[0],
                   output.top_logprobs.empty()
                       ? std::vector<std::vector<std::pair<int32_t, float>>>()
                       : output.top_logprobs[0]);
  GenerationOutput& all = progress.output;
  all.tokens[row.row] = std::move(output.tokens.at(0));
  all.prompt_lengths[row.row] = output.prompt_lengths.at(0);
  if (!all.logprobs.empty()) all.logprobs[row.row] = std::move(output.logprobs.at(0));
  if (!all.top_logprobs.empty()) all.top_logprobs[row.row] = std::move(output.top_logprobs.at(0));
  if (++progress.ended < job.prompts.size()) return false;
  job.finish(job.cancelled ? "the client left" : "", std::move(all));
  progress_.erase(&job);
  return true;
}

void RowScheduler::fail_all(const std::string& error) {
  for (auto& [job, progress] : progress_) job->finish(error, {});
  progress_.clear();
  admitting_.reset();
  std::fill(running_.begin(), running_.end(), std::nullopt);
}

int64_t RowScheduler::running_rows() const {
  return int64_t(
      std::count_if(running_.begin(), running_.end(), [](const auto& r) { return r.has_value(); }));
}

}  // namespace megatron
