#include "checkpoint/shards.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint/layout.h"
#include "core/crc32c.h"
#include "core/durable_file.h"

namespace fs = std::filesystem;

namespace megatron {
namespace {

constexpr const char* kFormat = "megatron-cpp";

std::string placement_json(const ShardPlacement& p) {
  nlohmann::ordered_json j;
  j["full_shape"] = p.full_shape;
  j["partition_dim"] = p.partition_dim;
  j["slice_start"] = p.slice_start;
  if (p.vocab_rows > 0) j["vocab_rows"] = p.vocab_rows;
  if (p.flat_end >= 0) {
    j["slice_shape"] = p.slice_shape;
    j["flat_range"] = {p.flat_begin, p.flat_end};
  }
  return j.dump();
}

uint32_t tensor_crc32c(const Tensor& t) {
  const Tensor c = t.is_contiguous() ? t : t.clone();
  return crc32c(c.raw_data(), c.nbytes());
}

// Adds each tensor's CRC-32C to its placement metadata (written by placement_json).
void add_checksums(const NamedTensors& tensors, std::map<std::string, std::string>& meta) {
  for (const auto& [name, t] : tensors) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(meta.at(name));
    j["crc32c"] = tensor_crc32c(t);
    meta[name] = j.dump();
  }
}

std::map<std::string, std::string> file_metadata(int64_t iteration, const RankCoordinates& c) {
  return {{"format", kFormat},
          {"iteration", std::to_string(iteration)},
          {"tensor_model_parallel_size", std::to_string(c.tp_size)},
          {"tensor_model_parallel_rank", std::to_string(c.tp_rank)},
          {"pipeline_model_parallel_size", std::to_string(c.pp_size)},
          {"pipeline_model_parallel_rank", std::to_string(c.pp_rank)}};
}

ShardPlacement parse_placement(const SafetensorsReader& file, const std::string& name) {
  const SafetensorsTensorInfo& info = file.info(name);
  auto where = [&] { return "checkpoint file '" + file.path() + "', tensor '" + name + "': "; };
  ShardPlacement p;
  try {
    nlohmann::json j = nlohmann::json::parse(file.metadata_value(name));
    p.full_shape = j.at("full_shape").get<Shape>();
    p.partition_dim = j.at("partition_dim").get<int>();
    p.slice_start = j.at("slice_start").get<int64_t>();
    p.vocab_rows = j.value("vocab_rows", int64_t(0));
    if (j.contains("crc32c")) p.crc32c = int64_t(j.at("crc32c").get<uint32_t>());
    if (j.contains("flat_range")) {
      p.slice_shape = j.at("slice_shape").get<Shape>();
      const auto range = j.at("flat_range").get<std::vector<int64_t>>();
      MT_REQUIRE(range.size() == 2, where(), "flat_range is not [begin, end]");
      p.flat_begin = range[0];
      p.flat_end = range[1];
    }
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(where(),
             "metadata is not {\"full_shape\", \"partition_dim\", \"slice_start\"}: ", e.what());
  } catch (const Error& e) {
    MT_THROW(where(), "no placement metadata: ", e.message());
  }
  const int nd = int(p.full_shape.size());
  // The slice the stored tensor is (a piece of).
  const bool piece = p.flat_end >= 0;
  const Shape& slice = piece ? p.slice_shape : info.shape;
  if (piece)
    MT_REQUIRE(0 <= p.flat_begin && p.flat_begin <= p.flat_end &&
                   p.flat_end <= shape_numel(slice) &&
                   info.shape == Shape{p.flat_end - p.flat_begin},
               where(), "stored shape ", shape_str(info.shape), " is not elements [", p.flat_begin,
               ", ", p.flat_end, ") of a slice ", shape_str(slice));
  MT_REQUIRE(int(slice.size()) == nd && p.partition_dim >= -1 && p.partition_dim < nd, where(),
             "slice shape ", shape_str(slice), " and partition dim ", p.partition_dim,
             " do not fit the full shape ", shape_str(p.full_shape));
  for (int d = 0; d < nd; ++d) {
    if (d == p.partition_dim) {
      MT_REQUIRE(p.slice_start >= 0 && p.slice_start + slice[d] <= p.full_shape[d], where(),
                 "slice [", p.slice_start, ", ", p.slice_start + slice[d], ") of dimension ", d,
                 " lies outside the full shape ", shape_str(p.full_shape));
    } else {
      MT_REQUIRE(slice[d] == p.full_shape[d], where(), "slice shape ", shape_str(slice),
                 " differs from the full shape ", shape_str(p.full_shape),
                 " outside partition dim ", p.partition_dim);
    }
  }
  return p;
}

int metadata_int(const SafetensorsReader& file, const std::string& key) {
  const std::string& v = file.metadata_value(key);
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    MT_THROW("checkpoint file '", file.path(), "': metadata ", key, " = '", v,
             "' is not an integer");
  }
}

// The origin of a stored or requested slice in full-tensor coordinates.
Shape slice_origin(size_t ndim, int partition_dim, int64_t start) {
  Shape origin(ndim, 0);
  if (partition_dim >= 0) origin[partition_dim] = start;
  return origin;
}

}  // namespace

void write_rank_shards(const std::string& rank_dir, int64_t iteration, const ParameterStore& params,
                       const std::map<std::string, Tensor>& optimizer_flat_buffers,
                       const nlohmann::json& state, const RankCoordinates& coords) {
  MT_CHECK(params.tp_rank() == coords.tp_rank && params.tp_size() == coords.tp_size,
           "write_rank_shards: parameter store is for tensor rank ", params.tp_rank(), " of ",
           params.tp_size(), ", coordinates say ", coords.tp_rank, " of ", coords.tp_size);
  std::map<std::string, std::string> model_meta = file_metadata(iteration, coords);
  // Checkpoints are device-independent: a store on a GPU is copied to the host in one transfer
  // per flat buffer, and the shards are views of the host copy. Parameters are stored in f32
  // (bf16 values converted: a bf16 run keeps its exact weights in the optimizer's fp32_master).
  const Tensor host_values = values_on_host_f32(params.flat_values());
  NamedTensors model;
  for (const Parameter& p : params.params()) {
    if (p.spec.stage_tie == StageTie::kCopy) continue;  // saved by the first stage
    const int64_t n = shape_numel(p.local_shape);
    model.emplace_back(p.spec.name,
                       host_values.slice(0, p.flat_offset, p.flat_offset + n).view(p.local_shape));
    model_meta[p.spec.name] =
        placement_json({p.spec.full_shape, p.spec.partition_dim, p.local_start, p.spec.vocab_rows});
  }
  // Persistent model buffers (the MoE routers' expert bias), whole, beside the parameters.
  for (const Buffer& b : params.buffers()) {
    if (!b.spec.persistent) continue;
    model.emplace_back(b.spec.name, b.value.to(Device::CPU));
    model_meta[b.spec.name] = placement_json({b.spec.shape, -1, 0, 0});
  }
  add_checksums(model, model_meta);
  const std::string state_text = state.dump(2);
  model_meta["state_crc32c"] = std::to_string(crc32c(state_text.data(), state_text.size()));
  write_safetensors(rank_dir + "/" + kModelFileName, model, model_meta);

  if (!optimizer_flat_buffers.empty())
    write_optimizer_shard(rank_dir, iteration, params, optimizer_flat_buffers, {}, coords);
  write_file_durably(rank_dir + "/" + kStateFileName, state_text);
  fsync_directory(rank_dir);
}

void write_optimizer_shard(const std::string& rank_dir, int64_t iteration,
                           const ParameterStore& params,
                           const std::map<std::string, Tensor>& buffers,
                           const OptimizerShard& shard, const RankCoordinates& coords) {
  const int64_t total = params.flat_values().numel();
  const int64_t begin = shard.range.begin, end = shard.range.end < 0 ? total : shard.range.end;
  MT_CHECK(0 <= begin && begin <= end && end <= total && shard.dp_rank >= 0 &&
               shard.dp_rank < shard.dp_size && (shard.dp_size > 1 || end - begin == total),
           "write_optimizer_shard: elements [", begin, ", ", end, ") of ", total,
           " as data-parallel shard ", shard.dp_rank, " of ", shard.dp_size);
  std::map<std::string, std::string> meta = file_metadata(iteration, coords);
  if (shard.dp_size > 1) {
    meta["data_parallel_rank"] = std::to_string(shard.dp_rank);
    meta["data_parallel_size"] = std::to_string(shard.dp_size);
  }
  nlohmann::json buffer_names = nlohmann::json::array();
  NamedTensors tensors;
  for (const auto& [buffer, flat] : buffers) {
    MT_CHECK(flat.defined() && flat.dtype() == DType::F32 && flat.dim() == 1 &&
                 flat.numel() == end - begin,
             "optimizer buffer '", buffer, "' is ", flat.describe(), ", expected f32 [",
             end - begin, "] laid out like elements [", begin, ", ", end,
             ") of the flat parameter values");
    buffer_names.push_back(buffer);
    // Views of one host copy per buffer (none on a CPU): the shard is written as it is held.
    const Tensor host = flat.to(Device::CPU);
    for (const Parameter& p : params.params()) {
      if (p.spec.stage_tie == StageTie::kCopy) continue;  // saved by the first stage
      // The elements [lo, hi) of this slice that the shard holds.
      const int64_t n = shape_numel(p.local_shape);
      const int64_t lo = std::clamp<int64_t>(begin - p.flat_offset, 0, n);
      const int64_t hi = std::clamp<int64_t>(end - p.flat_offset, 0, n);
      if (lo >= hi) continue;
      ShardPlacement placement{p.spec.full_shape, p.spec.partition_dim, p.local_start,
                               p.spec.vocab_rows};
      Tensor piece = host.slice(0, p.flat_offset + lo - begin, p.flat_offset + hi - begin);
      if (hi - lo == n) {
        piece = piece.view(p.local_shape);
      } else {
        placement.slice_shape = p.local_shape;
        placement.flat_begin = lo;
        placement.flat_end = hi;
      }
      const std::string name = buffer + "." + p.spec.name;
      tensors.emplace_back(name, piece);
      meta[name] = placement_json(placement);
    }
  }
  meta["optimizer_buffers"] = buffer_names.dump();
  add_checksums(tensors, meta);
  write_safetensors(rank_dir + "/" +
                        (shard.dp_size > 1 ? optimizer_shard_file_name(shard.dp_rank, shard.dp_size)
                                           : std::string(kOptimizerFileName)),
                    tensors, meta);
  fsync_directory(rank_dir);
}

CheckpointShardReader::CheckpointShardReader(const std::string& iteration_dir)
    : iteration_dir_(iteration_dir) {
  std::vector<RankDir> dirs = list_rank_dirs(iteration_dir);
  tp_size_ = dirs.back().tp_rank + 1;
  pp_size_ = dirs.back().pp_rank + 1;
  std::vector<std::vector<std::string>> optimizer_paths;  // per rank directory
  size_t with_optimizer = 0;
  for (const RankDir& d : dirs) {
    rank_dirs_.push_back(d.path);
    optimizer_paths.push_back(optimizer_files(d.path));
    with_optimizer += !optimizer_paths.back().empty();
  }
  MT_REQUIRE(with_optimizer == 0 || with_optimizer == dirs.size(), "checkpoint '", iteration_dir,
             "': only ", with_optimizer, " of ", dirs.size(),
             " rank directories hold optimizer state (", kOptimizerFileName,
             " or distributed-optimizer shards)");

  bool have_buffer_names = false;
  for (size_t i = 0; i < dirs.size(); ++i) {
    std::vector<std::string> paths = {dirs[i].path + "/" + kModelFileName};
    paths.insert(paths.end(), optimizer_paths[i].begin(), optimizer_paths[i].end());
    for (size_t k = 0; k < paths.size(); ++k) {
      auto file = std::make_unique<SafetensorsReader>(paths[k]);
      const std::string& format = file->metadata_value("format");
      MT_REQUIRE(format == kFormat, "checkpoint file '", file->path(), "' has format '", format,
                 "', expected '", kFormat, "'");
      RankCoordinates c{metadata_int(*file, "tensor_model_parallel_rank"),
                        metadata_int(*file, "tensor_model_parallel_size"),
                        metadata_int(*file, "pipeline_model_parallel_rank"),
                        metadata_int(*file, "pipeline_model_parallel_size")};
      const RankDir& d = dirs[i];
      MT_REQUIRE(c.tp_rank == d.tp_rank && c.tp_size == tp_size_ && c.pp_rank == d.pp_rank &&
                     c.pp_size == pp_size_,
                 "checkpoint file '", file->path(), "' says it is tensor rank ", c.tp_rank, " of ",
                 c.tp_size, ", pipeline rank ", c.pp_rank, " of ", c.pp_size,
                 ", but its directory makes it tensor rank ", d.tp_rank, " of ", tp_size_,
                 ", pipeline rank ", d.pp_rank, " of ", pp_size_);
      const bool optimizer = k > 0;
      if (optimizer) {
        if (optimizer_paths[i].size() > 1) {  // shard k - 1 of the distributed optimizer's
          const int dp_rank = metadata_int(*file, "data_parallel_rank");
          const int dp_size = metadata_int(*file, "data_parallel_size");
          MT_REQUIRE(dp_rank == int(k - 1) && dp_size == int(optimizer_paths[i].size()),
                     "checkpoint file '", file->path(), "' says it is data-parallel shard ",
                     dp_rank, " of ", dp_size, ", but its name makes it shard ", k - 1, " of ",
                     optimizer_paths[i].size());
        }
        std::vector<std::string> buffers;
        try {
          buffers = nlohmann::json::parse(file->metadata_value("optimizer_buffers"))
                        .get<std::vector<std::string>>();
        } catch (const nlohmann::json::exception& e) {
          MT_THROW("checkpoint file '", file->path(),
                   "': metadata optimizer_buffers is not a list of names: ", e.what());
        }
        MT_REQUIRE(!have_buffer_names || buffers == optimizer_buffers_, "checkpoint file '",
                   file->path(), "' holds different optimizer buffers than the other ranks");
        optimizer_buffers_ = buffers;
        have_buffer_names = true;
      }
      index_file(*file, i, optimizer ? optimizer_ : model_);
      files_.push_back(std::move(file));
    }
  }
}

CheckpointShardReader::~CheckpointShardReader() = default;

void CheckpointShardReader::index_file(const SafetensorsReader& file, size_t rank_dir,
                                       std::map<std::string, ShardedTensor>& index) {
  for (const std::string& name : file.names()) {
    ShardPlacement p = parse_placement(file, name);
    auto [it, inserted] = index.try_emplace(name, ShardedTensor{p, {}});
    const ShardPlacement& first = it->second.placement;
    MT_REQUIRE(
        inserted || (first.full_shape == p.full_shape && first.partition_dim == p.partition_dim),
        "checkpoint file '", file.path(), "', tensor '", name, "': full shape ",
        shape_str(p.full_shape), " partition dim ", p.partition_dim,
        " disagrees with other ranks' ", shape_str(first.full_shape), " partition dim ",
        first.partition_dim);
    it->second.pieces.push_back({&file, p, rank_dir});
  }
}

std::vector<std::string> CheckpointShardReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : model_) out.push_back(name);
  return out;
}

const ShardPlacement& CheckpointShardReader::placement(const std::string& name) const {
  auto it = model_.find(name);
  MT_REQUIRE(it != model_.end(), "checkpoint '", iteration_dir_, "' has no parameter '", name, "'");
  return it->second.placement;
}

void CheckpointShardReader::read_model(const std::string& name, Tensor dst, int partition_dim,
                                       int64_t start) const {
  const SlicePart part = SlicePart::whole(dst.shape());
  read(model_, name, std::move(dst), partition_dim, start, part);
}

void CheckpointShardReader::read_model(const std::string& name, Tensor dst, int partition_dim,
                                       int64_t start, const SlicePart& part) const {
  read(model_, name, std::move(dst), partition_dim, start, part);
}

void CheckpointShardReader::read_optimizer(const std::string& buffer, const std::string& name,
                                           Tensor dst, int partition_dim, int64_t start,
                                           const SlicePart& part) const {
  MT_REQUIRE(!optimizer_buffers_.empty(), "checkpoint '", iteration_dir_,
             "' holds no optimizer state (", kOptimizerFileName, ")");
  read(optimizer_, buffer + "." + name, std::move(dst), partition_dim, start, part);
}

void CheckpointShardReader::read(const std::map<std::string, ShardedTensor>& index,
                                 const std::string& name, Tensor dst, int partition_dim,
                                 int64_t start, const SlicePart& part) const {
  auto it = index.find(name);
  MT_REQUIRE(it != index.end(), "checkpoint '", iteration_dir_, "' has no tensor '", name, "'");
  const ShardedTensor& t = it->second;
  const Shape& full = t.placement.full_shape;
  const Shape dst_origin = slice_origin(full.size(), partition_dim, start);
  bool fits = part.shape.size() == full.size();
  for (size_t k = 0; fits && k < full.size(); ++k)
    fits = dst_origin[k] + part.shape[k] <= full[k] &&
           (int(k) == partition_dim || part.shape[k] == full[k]);
  MT_REQUIRE(fits, "checkpoint '", iteration_dir_, "', tensor '", name, "': cannot read a slice ",
             shape_str(part.shape), " at ", start, " along dim ", partition_dim,
             " from the full shape ", shape_str(full));
  const std::vector<PlacedBox> wanted = part_boxes(dst_origin, part, dst);
  const int64_t requested = part.end - part.begin;
  int64_t covered = 0;
  for (const Piece& piece : t.pieces) {
    // A replicated tensor is stored whole (or in DP shards) by every TP rank: read one rank's.
    if (t.placement.partition_dim < 0 && piece.rank_dir != t.pieces.front().rank_dir) continue;
    const ShardPlacement& p = piece.placement;
    const Tensor src = piece.file->get(name);
    const SlicePart stored = p.flat_end >= 0 ? SlicePart{p.slice_shape, p.flat_begin, p.flat_end}
                                             : SlicePart::whole(src.shape());
    bool checked = false;  // only pieces that overlap the request are checksummed and read
    for (const PlacedBox& from :
         part_boxes(slice_origin(full.size(), p.partition_dim, p.slice_start), stored, src)) {
      for (const PlacedBox& to : wanted) {
        if (!overlaps(from, to)) continue;
        if (!checked) {
          MT_REQUIRE(src.dtype() == dst.dtype(), "checkpoint file '", piece.file->path(),
                     "', tensor '", name, "' is ", dtype_name(src.dtype()), ", expected ",
                     dtype_name(dst.dtype()));
          verify(piece, name);
          checked = true;
        }
        covered += copy_overlap(from, to);
      }
    }
  }
  MT_REQUIRE(covered == requested, "checkpoint '", iteration_dir_, "', tensor '", name,
             "': the stored shards cover ", covered, " of the ", requested,
             " elements requested (missing or overlapping slices)");
}

void CheckpointShardReader::verify(const Piece& piece, const std::string& name) const {
  const int64_t recorded = piece.placement.crc32c;
  if (recorded < 0 || verified_.count({piece.file, name})) return;
  const Tensor t = piece.file->get(name);
  const uint32_t actual = tensor_crc32c(t);
  char hex[64];
  std::snprintf(hex, sizeof hex, "0x%08x, recorded 0x%08x", actual, uint32_t(recorded));
  MT_REQUIRE(actual == uint32_t(recorded), "checkpoint file '", piece.file->path(),
             "' is corrupt: the data of tensor '", name, "' does not match its checksum (CRC-32C ",
             hex,
             "); the file was damaged after it was written. Load another checkpoint "
             "iteration, or restore the file from a copy");
  verified_.insert({piece.file, name});
}

nlohmann::json CheckpointShardReader::state(int tp_rank, int pp_rank) const {
  std::string dir = iteration_dir_ + "/" + rank_dir_name(tp_rank, pp_rank, pp_size_);
  if (tp_rank >= tp_size_ || pp_rank >= pp_size_) dir = rank_dirs_.front();
  std::string path = dir + "/" + kStateFileName;
  const std::string text = read_file(path, "checkpoint state file");
  // The model file of the same rank directory records the state's checksum.
  for (const auto& file : files_) {
    if (fs::path(file->path()).parent_path() != fs::path(dir) ||
        fs::path(file->path()).filename() != kModelFileName ||
        !file->metadata().count("state_crc32c"))
      continue;
    const std::string& recorded = file->metadata_value("state_crc32c");
    MT_REQUIRE(std::to_string(crc32c(text.data(), text.size())) == recorded,
               "checkpoint state file '", path, "' is corrupt: it does not match the checksum ",
               "recorded in '", file->path(), "'; the file was damaged after it was written");
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    MT_THROW("checkpoint state file '", path, "' is not valid JSON: ", e.what());
  }
}

}  // namespace megatron
