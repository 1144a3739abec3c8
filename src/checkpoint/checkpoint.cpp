#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "checkpoint/housekeeping.h"
#include "checkpoint/layout.h"
#include "core/durable_file.h"
#include "core/logging.h"
#include "distributed/agreement.h"
#include "kernels/elementwise.h"
#include "optim/divergence_guard.h"

namespace fs = std::filesystem;

namespace megatron {

// A rank's parameters and optimizer buffers laid out as at expert-parallel size 1: every expert
// whole (dim 0 of each expert parameter), its tensor split over the given expert TP group (on
// save the TP group's, the checkpoint's layout), the other parameters as they are.
struct SaveSource::Ep1Layout {
  ParameterStore store;
  std::map<std::string, Tensor> buffers;  // name -> f32 [store's flat elements]
};

namespace {

// A vocabulary padded for another TP size: the same real rows, another number of padding
// rows (ParamSpec::vocab_rows). Only dim 0 may differ, and both must hold every real row.
bool repadded_vocabulary(const ParamSpec& spec, const Shape& stored) {
  if (spec.vocab_rows <= 0 || stored.size() != spec.full_shape.size() || stored.empty() ||
      stored[0] < spec.vocab_rows || stored == spec.full_shape)
    return false;
  return std::equal(stored.begin() + 1, stored.end(), spec.full_shape.begin() + 1);
}

uint64_t random_nonce() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(::getpid());
}

void rename_or_throw(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  MT_REQUIRE(!ec, "cannot rename '", from, "' to '", to, "': ", ec.message());
}

// The checkpoint layout holds one copy of each tensor-parallel slice per pipeline stage, saved
// by the data-parallel replica 0; expert parameters on an expert grid of their own (split over
// EP, or over an etp group other than TP: ParallelState::own_expert_grid) are brought to that
// layout (Ep1Layout) on save.

using Ep1Layout = SaveSource::Ep1Layout;

Ep1Layout ep1_layout(const ParameterStore& params, const std::vector<std::string>& buffer_names,
                     int etp_rank, int etp_size) {
  Ep1Layout out{ParameterStore(params.tp_rank(), params.tp_size(), params.device()), {}};
  out.store.set_expert_grid(0, 1, etp_rank, etp_size);
  for (const Parameter& p : params.params()) out.store.add(p.spec);
  out.store.allocate(1, params.flat_values().dtype());
  out.store.copy_buffers_from(params);  // replicated: the same at every EP size
  for (const std::string& name : buffer_names)
    out.buffers[name] =
        Tensor::zeros({out.store.flat_values().numel()}, DType::F32, params.device());
  return out;
}

// The elements of parameter `p` in a flat buffer laid out like its store's values.
Tensor param_view(const Tensor& flat, const Parameter& p) {
  return flat.slice(0, p.flat_offset, p.flat_offset + shape_numel(p.local_shape))
      .view(p.local_shape);
}

// The group an expert save gathers over: ps.ep when the experts' tensor split is TP's (each
// rank then needs its own TP slice of every expert), else tp_ep (every expert's every slice).
Communicator& expert_gather_group(const ParallelState& ps) {
  return ps.etp_size == ps.tp_size ? *ps.ep : *ps.tp_ep;
}

// dst (expert parameter `w` of the checkpoint layout: every expert, the TP slice) out of
// `mine` (the same parameter `p` on this rank: its experts, its etp slice), collective over
// expert_gather_group. At etp = TP an all-gather over ep (EP rank r's experts are rows
// [r·E/ep, (r+1)·E/ep) of dim 0). Otherwise every (ep, etp) rank's piece is gathered over tp_ep
// — the whole parameter, transiently — and the TP slice copied out of the pieces it overlaps.
void gather_expert(const Parameter& p, const Parameter& w, const Tensor& mine, Tensor dst,
                   const ParallelState& ps) {
  if (ps.etp_size == ps.tp_size) {
    ps.ep->all_gather(mine, dst);
    return;
  }
  const int64_t n = mine.numel(), members = ps.tp_ep->size();
  Tensor pieces = Tensor::empty({members * n}, mine.dtype(), mine.device());
  ps.tp_ep->all_gather(mine.view({n}), pieces);
  const int64_t experts = p.local_shape[0];
  const int d = p.spec.partition_dim;
  for (int64_t g = 0; g < members; ++g) {
    const int64_t ep_rank = g / ps.etp_size, etp_rank = g % ps.etp_size;
    Tensor piece = pieces.slice(0, g * n, (g + 1) * n).view(p.local_shape);
    Tensor rows = dst.slice(0, ep_rank * experts, (ep_rank + 1) * experts);
    if (d < 0) {  // replicated over etp: every etp rank's piece is the same
      if (etp_rank == 0) kernels::copy(piece, rows);
      continue;
    }
    // The piece holds [begin, begin + width) of dim d; the TP slice [w.local_start, + its width).
    const int64_t width = p.local_shape[d], begin = etp_rank * width;
    const int64_t lo = std::max(begin, w.local_start);
    const int64_t hi = std::min(begin + width, w.local_start + w.local_shape[d]);
    if (lo >= hi) continue;
    Tensor to = rows.slice(d, lo - w.local_start, hi - w.local_start);
    kernels::copy(piece.slice(d, lo - begin, hi - begin), to);
  }
}

// Collective over expert_gather_group: the checkpoint layout of this rank's parameters and
// buffers (Ep1Layout with the experts split over TP).
Ep1Layout gather_experts(const ParameterStore& params, const std::map<std::string, Tensor>& buffers,
                         const ParallelState& ps) {
  std::vector<std::string> names;
  for (const auto& [name, buffer] : buffers) names.push_back(name);
  Ep1Layout whole = ep1_layout(params, names, params.tp_rank(), params.tp_size());
  auto copy = [&](const Parameter& p, const Parameter& w, const Tensor& mine, Tensor dst) {
    if (p.spec.expert)
      gather_expert(p, w, mine, dst, ps);
    else
      dst.copy_from(mine);
  };
  for (size_t i = 0; i < params.params().size(); ++i) {
    const Parameter& p = params.params()[i];
    const Parameter& w = whole.store.params()[i];
    copy(p, w, p.value, w.value);
    for (const auto& [name, buffer] : buffers)
      copy(p, w, param_view(buffer, p), param_view(whole.buffers.at(name), w));
  }
  return whole;
}

// The parallel state as the checkpoint sees the experts: EP 1, split over TP like the dense
// layers.
ParallelState checkpoint_expert_view(const ParallelState& ps) {
  ParallelState view = ps;
  view.ep_size = 1;
  view.ep_rank = 0;
  view.etp_size = ps.tp_size;
  view.etp_rank = ps.tp_rank;
  return view;
}

// `tmp_iteration_dir`/mp_rank_* of these coordinates, created unless it exists: the
// distributed optimizer's DP ranks write into one directory.
std::string make_rank_dir(const std::string& tmp_iteration_dir, const RankCoordinates& coords) {
  const std::string dir =
      tmp_iteration_dir + "/" + rank_dir_name(coords.tp_rank, coords.pp_rank, coords.pp_size);
  std::error_code ec;
  fs::create_directory(dir, ec);
  MT_REQUIRE(!ec, "cannot create checkpoint directory '", dir, "': ", ec.message());
  return dir;
}

}  // namespace

SaveSource::SaveSource(const ParameterStore& params,
                       const std::map<std::string, Tensor>& optimizer_flat_buffers,
                       const ParallelState& ps, const OptimizerShard& optimizer_shard)
    : params_(params), buffers_(optimizer_flat_buffers), ps_(ps) {
  if (!ps.own_expert_grid()) return;
  // The distributed optimizer's expert shards are gathered whole first (the trainer's
  // gathered_optimizer_state): the experts are brought to the EP 1 layout from whole buffers.
  MT_CHECK(optimizer_shard.dp_size == 1,
           "save_checkpoint: optimizer shards with an expert grid of its own (EP ", ps.ep_size,
           ", ETP ", ps.etp_size, "); pass the optimizer state whole");
  // Only the gather groups holding a rank that writes (dp × cp rank 0) gather.
  Communicator& group = expert_gather_group(ps);
  if (group.all_reduce_scalar(ps.dp_cp_rank == 0 ? 1.0 : 0.0, ReduceOp::MAX) > 0.0)
    gathered_ = std::make_unique<Ep1Layout>(gather_experts(params, optimizer_flat_buffers, ps));
  ps_ = checkpoint_expert_view(ps);
}

SaveSource::~SaveSource() = default;

const ParameterStore& SaveSource::params() const {
  return gathered_ ? gathered_->store : params_;
}

const std::map<std::string, Tensor>& SaveSource::buffers() const {
  return gathered_ ? gathered_->buffers : buffers_;
}

int64_t resolve_checkpoint_iteration(const std::string& load_dir, int64_t iteration) {
  if (iteration >= 0) return iteration;
  std::optional<int64_t> latest = read_latest_iteration(load_dir);
  MT_REQUIRE(latest.has_value(), "no checkpoint to load in '", load_dir, "': ", kTrackerFileName,
             " not found");
  return *latest;
}

std::string checkpoint_iteration_dir(const std::string& load_dir, int64_t iteration) {
  iteration = resolve_checkpoint_iteration(load_dir, iteration);
  std::string dir = load_dir + "/" + iteration_dir_name(iteration);
  MT_REQUIRE(fs::is_directory(dir), "checkpoint directory '", dir, "' does not exist");
  return dir;
}

void check_checkpoint_matches(const CheckpointShardReader& reader, const ParameterStore& params,
                              bool model_is_complete, const ParameterFilter& skip) {
  std::ostringstream diffs;
  int count = 0;
  for (const Parameter& p : params.params()) {
    if (skip && skip(p.spec.name)) continue;
    if (!reader.contains(p.spec.name)) {
      diffs << "\n  " << p.spec.name << ": missing in the checkpoint (model shape "
            << shape_str(p.spec.full_shape) << ")";
      ++count;
    } else if (reader.placement(p.spec.name).full_shape != p.spec.full_shape &&
               !repadded_vocabulary(p.spec, reader.placement(p.spec.name).full_shape)) {
      diffs << "\n  " << p.spec.name << ": checkpoint shape "
            << shape_str(reader.placement(p.spec.name).full_shape) << ", model shape "
            << shape_str(p.spec.full_shape);
      ++count;
    } else if (const int64_t rows = reader.placement(p.spec.name).vocab_rows;
               rows > 0 && p.spec.vocab_rows > 0 && rows != p.spec.vocab_rows) {
      diffs << "\n  " << p.spec.name << ": checkpoint vocabulary of " << rows
            << " entries, model vocabulary of " << p.spec.vocab_rows << " (another tokenizer?)";
      ++count;
    }
  }
  for (const Buffer& b : params.buffers()) {
    if (!b.spec.persistent || (skip && skip(b.spec.name))) continue;
    if (!reader.contains(b.spec.name)) {
      diffs << "\n  " << b.spec.name << ": missing in the checkpoint (model buffer of shape "
            << shape_str(b.spec.shape) << ")";
      ++count;
    } else if (reader.placement(b.spec.name).full_shape != b.spec.shape) {
      diffs << "\n  " << b.spec.name << ": checkpoint shape "
            << shape_str(reader.placement(b.spec.name).full_shape) << ", model buffer shape "
            << shape_str(b.spec.shape);
      ++count;
    }
  }
  if (model_is_complete) {
    for (const std::string& name : reader.names()) {
      if (params.contains(name) || params.contains_persistent_buffer(name)) continue;
      diffs << "\n  " << name << ": not in the model (checkpoint shape "
            << shape_str(reader.placement(name).full_shape) << ")";
      ++count;
    }
  }
  MT_REQUIRE(count == 0, "checkpoint '", reader.iteration_dir(), "' does not match the model (",
             count, " difference", count == 1 ? "" : "s", "):", diffs.str());
}

void read_parameters(const CheckpointShardReader& reader, ParameterStore& params,
                     std::map<std::string, Tensor>* optimizer_flat_buffers,
                     const ParameterFilter& skip, FlatRange optimizer_range) {
  const int64_t total = params.flat_values().numel();
  const FlatRange range{optimizer_range.begin,
                        optimizer_range.end < 0 ? total : optimizer_range.end};
  MT_CHECK(0 <= range.begin && range.begin <= range.end && range.end <= total,
           "read_parameters: optimizer elements [", range.begin, ", ", range.end, ") of ", total);
  if (optimizer_flat_buffers) {
    std::string stored;  // "exp_avg, exp_avg_sq" for the messages
    for (const std::string& b : reader.optimizer_buffer_names())
      stored += (stored.empty() ? "" : ", ") + b;
    for (const auto& [buffer, flat] : *optimizer_flat_buffers) {
      const std::vector<std::string>& names = reader.optimizer_buffer_names();
      MT_REQUIRE(std::find(names.begin(), names.end(), buffer) != names.end() ||
                     (buffer == kMasterWeightsBuffer && !names.empty()),
                 "checkpoint '", reader.iteration_dir(), "' holds no optimizer buffer '", buffer,
                 "' (stored: ", stored.empty() ? "none" : stored, ")",
                 stored.empty() ? "; a checkpoint saved with --no-save-optim (or imported) loads "
                                  "with --no-load-optim"
                                : "");
      MT_REQUIRE(flat.dtype() == DType::F32 && flat.is_contiguous() &&
                     flat.numel() == range.end - range.begin,
                 "optimizer buffer '", buffer, "' is ", flat.describe(), ", expected f32 [",
                 range.end - range.begin, "] laid out like elements [", range.begin, ", ",
                 range.end, ") of the flat parameter values");
    }
  }
  // Checkpoints are device-independent: buffers on a GPU are filled through a host copy
  // (read shard by shard on the host, then one transfer per flat buffer). The copy starts
  // from the buffer's values when some parameters are skipped, so that they keep them.
  // Parameters are stored in f32; bf16 values are read through an f32 host copy.
  auto on_host = [&](const Tensor& flat) {
    if (flat.device().is_cpu()) return flat;
    Tensor host = Tensor::empty(flat.shape(), flat.dtype());
    if (skip) host.copy_from(flat);
    return host;
  };
  const Tensor host_values = values_on_host_f32(params.flat_values());
  auto stored = [&](const std::string& buffer) {
    const std::vector<std::string>& names = reader.optimizer_buffer_names();
    return std::find(names.begin(), names.end(), buffer) != names.end();
  };
  std::map<std::string, Tensor> host_buffers;
  if (optimizer_flat_buffers)
    for (const auto& [buffer, flat] : *optimizer_flat_buffers) host_buffers[buffer] = on_host(flat);
  for (Parameter& p : params.params()) {
    if (skip && skip(p.spec.name)) continue;
    const int64_t n = shape_numel(p.local_shape);
    // The slice's local elements the checkpoint holds: all of them, or for a vocabulary padded
    // for another TP size (the checkpoint's padding may be shorter or longer than the model's)
    // the rows up to the stored ones; the padding rows past them are zero.
    Shape held = p.local_shape;
    if (const Shape& stored = reader.placement(p.spec.name).full_shape;
        repadded_vocabulary(p.spec, stored))
      held[0] = std::clamp<int64_t>(stored[0] - p.local_start, 0, p.local_shape[0]);
    const int64_t cut = shape_numel(held);
    // Local elements [lo, hi) of the slice into `dst` (f32 [hi - lo]) through read(dst, part).
    auto read = [&](Tensor dst, int64_t lo, int64_t hi, auto&& read_part) {
      if (hi > cut) {
        Tensor padding = dst.slice(0, std::max(lo, cut) - lo, hi - lo);
        kernels::fill(padding, 0.0f);
      }
      if (lo < cut)
        read_part(dst.slice(0, 0, std::min(hi, cut) - lo), {held, lo, std::min(hi, cut)});
    };
    read(host_values.slice(0, p.flat_offset, p.flat_offset + n), 0, n,
         [&](Tensor dst, const SlicePart& part) {
           reader.read_model(p.spec.name, dst, p.spec.partition_dim, p.local_start, part);
         });
    // The part of the slice the optimizer buffers hold.
    const int64_t lo = std::clamp<int64_t>(range.begin - p.flat_offset, 0, n);
    const int64_t hi = std::clamp<int64_t>(range.end - p.flat_offset, 0, n);
    if (lo >= hi) continue;
    for (auto& [buffer, host] : host_buffers) {
      Tensor dst =
          host.slice(0, p.flat_offset + lo - range.begin, p.flat_offset + hi - range.begin);
      if (!stored(buffer)) {  // fp32 master weights from a run without them: its f32 values
        kernels::copy(host_values.slice(0, p.flat_offset + lo, p.flat_offset + hi), dst);
        continue;
      }
      read(dst, lo, hi, [&](Tensor part_dst, const SlicePart& part) {
        reader.read_optimizer(buffer, p.spec.name, part_dst, p.spec.partition_dim, p.local_start,
                              part);
      });
    }
  }
  for (Buffer& b : params.buffers()) {
    if (!b.spec.persistent || (skip && skip(b.spec.name))) continue;
    Tensor host = Tensor::empty(b.spec.shape, DType::F32);
    reader.read_model(b.spec.name, host, -1, 0);
    b.value.copy_from(host);
  }
  assign_values_from_host_f32(params.flat_values(), host_values);
  for (auto& [buffer, host] : host_buffers) {
    Tensor& flat = optimizer_flat_buffers->at(buffer);
    if (!flat.device().is_cpu()) flat.copy_from(host);
  }
}

nlohmann::json load_checkpoint(const std::string& load_dir, int64_t iteration,
                               ParameterStore& params,
                               std::map<std::string, Tensor>* optimizer_flat_buffers,
                               const ParallelState& ps, FlatRange optimizer_range) {
  if (ps.own_expert_grid()) {
    // The optimizer range is the whole flat space: with an expert grid of its own the
    // distributed optimizer reads its state whole and keeps its shards (train/trainer.cpp).
    const int64_t flat = params.flat_values().numel();
    MT_CHECK(optimizer_range.begin == 0 && (optimizer_range.end < 0 || optimizer_range.end == flat),
             "load_checkpoint: the distributed optimizer's shards with expert parallelism");
    std::vector<std::string> names;
    if (optimizer_flat_buffers != nullptr)
      for (const auto& [name, buffer] : *optimizer_flat_buffers) names.push_back(name);
    // Every expert, each in this rank's etp slice, read from any TP split the checkpoint has.
    Ep1Layout whole = ep1_layout(params, names, ps.etp_rank, ps.etp_size);
    const nlohmann::json state = load_checkpoint(load_dir, iteration, whole.store,
                                                 optimizer_flat_buffers ? &whole.buffers : nullptr,
                                                 checkpoint_expert_view(ps));
    // This rank's experts out of the whole ones.
    auto keep = [](const Parameter& p, const Tensor& full, Tensor dst) {
      if (p.spec.expert)
        dst.copy_from(full.slice(0, p.expert_start, p.expert_start + p.local_shape[0]));
      else
        dst.copy_from(full);
    };
    for (size_t i = 0; i < params.params().size(); ++i) {
      Parameter& p = params.params()[i];
      const Parameter& w = whole.store.params()[i];
      keep(p, w.value, p.value);
      if (optimizer_flat_buffers != nullptr)
        for (auto& [name, buffer] : *optimizer_flat_buffers)
          keep(p, param_view(whole.buffers.at(name), w), param_view(buffer, p));
    }
    for (size_t i = 0; i < params.buffers().size(); ++i)
      params.buffers()[i].value.copy_from(whole.store.buffers()[i].value);
    return state;
  }
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  check_checkpoint_matches(reader, params, ps.pp_size == 1);
  read_parameters(reader, params, optimizer_flat_buffers, {}, optimizer_range);
  return reader.state(ps.tp_rank, ps.pp_rank);
}

// ---- CheckpointTransaction ----

std::string CheckpointTransaction::tmp_dir(const std::string& save_dir, int64_t iteration,
                                           uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
  return save_dir + "/" + iteration_dir_name(iteration) + ".tmp-" + hex;
}

CheckpointTransaction::CheckpointTransaction(const std::string& save_dir, int64_t iteration,
                                             uint64_t nonce)
    : save_dir_(save_dir), tmp_dir_(tmp_dir(save_dir, iteration, nonce)), iteration_(iteration) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  MT_REQUIRE(!ec, "cannot create checkpoint directory '", save_dir, "': ", ec.message());
  fs::remove_all(tmp_dir_, ec);  // a stale directory of a crashed save with the same nonce
  fs::create_directory(tmp_dir_, ec);
  MT_REQUIRE(!ec, "cannot create checkpoint directory '", tmp_dir_, "': ", ec.message());
}

CheckpointTransaction::~CheckpointTransaction() {
  if (committed_) return;
  std::error_code ec;  // best effort: a leftover is harmless, loaders ignore it
  fs::remove_all(tmp_dir_, ec);
}

void CheckpointTransaction::commit() {
  MT_CHECK(!committed_, "checkpoint '", tmp_dir_, "' committed twice");
  fsync_directory(tmp_dir_);
  const std::string final_dir = save_dir_ + "/" + iteration_dir_name(iteration_);
  if (!fs::exists(final_dir)) {
    rename_or_throw(tmp_dir_, final_dir);
  } else if (::renameat2(AT_FDCWD, tmp_dir_.c_str(), AT_FDCWD, final_dir.c_str(),
                         RENAME_EXCHANGE) == 0) {
    // Swapped atomically: the old checkpoint now sits at the temporary name.
    fsync_directory(save_dir_);
    fs::remove_all(tmp_dir_);
  } else {
    // Filesystems without RENAME_EXCHANGE: move the old one aside first. A crash between
    // the two renames leaves this iteration missing but every other checkpoint intact.
    const std::string old_dir = tmp_dir_ + ".old";
    rename_or_throw(final_dir, old_dir);
    rename_or_throw(tmp_dir_, final_dir);
    fsync_directory(save_dir_);
    fs::remove_all(old_dir);
  }
  committed_ = true;
  fsync_directory(save_dir_);
  write_latest_iteration(save_dir_, iteration_);
}

void write_checkpoint_rank(const std::string& tmp_iteration_dir, int64_t iteration,
                           const ParameterStore& params,
                           const std::map<std::string, Tensor>& optimizer_flat_buffers,
                           const nlohmann::json& state, const RankCoordinates& coords) {
  write_rank_shards(make_rank_dir(tmp_iteration_dir, coords), iteration, params,
                    optimizer_flat_buffers, state, coords);
  fsync_directory(tmp_iteration_dir);
}

std::unique_ptr<CheckpointTransaction> begin_save(const std::string& save_dir, int64_t iteration,
                                                  const ParallelState& ps, std::string& tmp_dir) {
  MT_CHECK(ps.world != nullptr, "begin_save: ParallelState has no world communicator");
  Communicator& world = *ps.world;
  std::unique_ptr<CheckpointTransaction> transaction;  // rank 0 only
  int64_t nonce = 0;  // rank 0's, broadcast as a host i64 [1] over this variable
  Tensor nonce_tensor = Tensor::from_blob(&nonce, {1}, DType::I64);
  run_on_all_ranks(world, "creating the checkpoint directory", [&] {
    if (ps.rank != 0) return;
    uint64_t n = random_nonce();
    transaction = std::make_unique<CheckpointTransaction>(save_dir, iteration, n);
    nonce = int64_t(n);
  });
  world.broadcast(nonce_tensor, 0);
  tmp_dir = CheckpointTransaction::tmp_dir(save_dir, iteration, uint64_t(nonce));
  return transaction;
}

void write_rank_files(const std::string& tmp_dir, int64_t iteration, const ParameterStore& params,
                      const std::map<std::string, Tensor>& optimizer_flat_buffers,
                      const nlohmann::json& state, const ParallelState& ps,
                      const OptimizerShard& optimizer_shard) {
  const bool sharded = optimizer_shard.dp_size > 1;
  // Data-parallel replicas hold identical values (and, unless sharded, optimizer state).
  if (ps.dp_cp_rank != 0 && !sharded) return;
  check_finite_for_checkpoint(iteration, params, optimizer_flat_buffers, optimizer_shard.range);
  const RankCoordinates coords{ps.tp_rank, ps.tp_size, ps.pp_rank, ps.pp_size};
  if (ps.dp_cp_rank == 0)
    write_checkpoint_rank(tmp_dir, iteration, params,
                          sharded ? std::map<std::string, Tensor>{} : optimizer_flat_buffers, state,
                          coords);
  if (sharded && !optimizer_flat_buffers.empty()) {
    write_optimizer_shard(make_rank_dir(tmp_dir, coords), iteration, params, optimizer_flat_buffers,
                          optimizer_shard, coords);
    fsync_directory(tmp_dir);
  }
}

void commit_save(CheckpointTransaction& transaction, const std::string& save_dir) {
  transaction.commit();
  // Killed saves leave their temporary directories behind; this one succeeded, so any
  // other is stale.
  const RemovedTemporaries removed = remove_stale_checkpoint_temporaries(save_dir);
  if (removed.count > 0)
    log_info("  removed ", removed.count, " stale temporary checkpoint director",
             removed.count == 1 ? "y" : "ies", " (", removed.bytes / 1000000,
             " MB) of earlier, interrupted saves from ", save_dir);
}

void save_checkpoint(const std::string& save_dir, int64_t iteration, const ParameterStore& params,
                     const std::map<std::string, Tensor>& optimizer_flat_buffers,
                     const nlohmann::json& state, const ParallelState& ps,
                     const OptimizerShard& optimizer_shard) {
  MT_CHECK(ps.world != nullptr, "save_checkpoint: ParallelState has no world communicator");
  const SaveSource source(params, optimizer_flat_buffers, ps, optimizer_shard);
  std::string tmp;
  std::unique_ptr<CheckpointTransaction> transaction = begin_save(save_dir, iteration, ps, tmp);
  run_on_all_ranks(*ps.world, "writing the checkpoint", [&] {
    write_rank_files(tmp, iteration, source.params(), source.buffers(), state, source.ps(),
                     optimizer_shard);
  });
  run_on_all_ranks(*ps.world, "committing the checkpoint", [&] {
    if (ps.rank == 0) commit_save(*transaction, save_dir);
  });
}

}  // namespace megatron
