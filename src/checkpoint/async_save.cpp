#include "checkpoint/async_save.h"

#include "distributed/agreement.h"

namespace megatron {

namespace {

// A host copy of `params`: the same parameters, slices (expert grid included) and flat layout,
// with values (in their dtype) copied out of the store's device.
std::unique_ptr<ParameterStore> host_snapshot(const ParameterStore& params) {
  auto copy = std::make_unique<ParameterStore>(params.tp_rank(), params.tp_size(), Device::CPU);
  if (params.etp_size() > 0)
    copy->set_expert_grid(params.ep_rank(), params.ep_size(), params.etp_rank(), params.etp_size());
  for (const Parameter& p : params.params()) copy->add(p.spec);
  copy->allocate(1, params.flat_values().dtype());
  copy->flat_values().copy_from(params.flat_values());
  copy->copy_buffers_from(params);
  return copy;
}

}  // namespace

AsyncCheckpointSave::AsyncCheckpointSave(
    const std::string& save_dir, int64_t iteration, const ParameterStore& params,
    const std::map<std::string, Tensor>& optimizer_flat_buffers, nlohmann::json state,
    const ParallelState& ps, const OptimizerShard& optimizer_shard)
    : save_dir_(save_dir), iteration_(iteration), ps_(ps), write_ps_(ps), state_(std::move(state)) {
  // On the training thread, as every collective: with EP > 1 the experts are gathered here.
  const SaveSource source(params, optimizer_flat_buffers, ps, optimizer_shard);
  write_ps_ = source.ps();
  std::string tmp;
  transaction_ = begin_save(save_dir, iteration, ps, tmp);
  run_on_all_ranks(*ps.world, "snapshotting the checkpoint", [&] {
    params_ = host_snapshot(source.params());
    for (const auto& [name, buffer] : source.buffers()) {
      Tensor host = Tensor::empty(buffer.shape(), buffer.dtype());
      host.copy_from(buffer);
      buffers_.emplace(name, std::move(host));
    }
  });
  writer_ = std::thread([this, tmp, optimizer_shard] {
    std::exception_ptr failure;
    try {
      write_rank_files(tmp, iteration_, *params_, buffers_, state_, write_ps_, optimizer_shard);
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = failure;
    done_ = true;
  });
}

AsyncCheckpointSave::~AsyncCheckpointSave() {
  if (writer_.joinable()) writer_.join();
}

bool AsyncCheckpointSave::writer_done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

bool AsyncCheckpointSave::try_commit(bool wait, const std::function<void()>& before_commit) {
  if (wait && writer_.joinable()) writer_.join();
  // The ranks still writing, counted over the world.
  const double writing = writer_done() ? 0.0 : 1.0;
  if (ps_.world->all_reduce_scalar(writing, ReduceOp::MAX) > 0.0) return false;
  if (writer_.joinable()) writer_.join();
  run_on_all_ranks(*ps_.world, "writing the checkpoint asynchronously (--async-save)", [&] {
    if (failure_) std::rethrow_exception(failure_);
  });
  before_commit();
  run_on_all_ranks(*ps_.world, "committing the checkpoint", [&] {
    if (ps_.rank == 0) commit_save(*transaction_, save_dir_);
  });
  return true;
}

}  // namespace megatron
