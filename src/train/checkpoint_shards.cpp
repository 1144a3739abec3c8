#include "train/checkpoint_shards.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/durable_file.h"
#include "train/checkpoint_layout.h"

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
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(where(),
             "metadata is not {\"full_shape\", \"partition_dim\", \"slice_start\"}: ", e.what());
  } catch (const Error& e) {
    MT_THROW(where(), "no placement metadata: ", e.message());
  }
  const int nd = int(p.full_shape.size());
  MT_REQUIRE(int(info.shape.size()) == nd && p.partition_dim >= -1 && p.partition_dim < nd, where(),
             "stored shape ", shape_str(info.shape), " and partition dim ", p.partition_dim,
             " do not fit the full shape ", shape_str(p.full_shape));
  for (int d = 0; d < nd; ++d) {
    if (d == p.partition_dim) {
      MT_REQUIRE(p.slice_start >= 0 && p.slice_start + info.shape[d] <= p.full_shape[d], where(),
                 "slice [", p.slice_start, ", ", p.slice_start + info.shape[d], ") of dimension ",
                 d, " lies outside the full shape ", shape_str(p.full_shape));
    } else {
      MT_REQUIRE(info.shape[d] == p.full_shape[d], where(), "stored shape ", shape_str(info.shape),
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

// dst = src (same shape); rows along the last dimension are contiguous in both (slices of
// contiguous tensors), so copy them whole instead of element by element.
void copy_rows(Tensor& dst, const Tensor& src) {
  const int64_t nd = dst.dim();
  if (nd == 0 || dst.stride(nd - 1) != 1 || src.stride(nd - 1) != 1 ||
      (dst.is_contiguous() && src.is_contiguous())) {
    dst.copy_from(src);
    return;
  }
  const int64_t row = dst.size(nd - 1), rows = dst.numel() / std::max<int64_t>(row, 1);
  const size_t bytes = size_t(row) * dtype_size(dst.dtype());
  char* d = static_cast<char*>(dst.raw_data());
  const char* s = static_cast<const char*>(src.raw_data());
  const int64_t esize = int64_t(dtype_size(dst.dtype()));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t od = 0, os = 0;
    for (int64_t k = nd - 2, rem = r; k >= 0; --k) {
      const int64_t i = rem % dst.size(k);
      rem /= dst.size(k);
      od += i * dst.stride(k);
      os += i * src.stride(k);
    }
    std::memcpy(d + od * esize, s + os * esize, bytes);
  }
}

// Copies the part of `src` (placed at `src_origin`) that overlaps `dst` (placed at
// `dst_origin`) and returns the number of elements copied.
int64_t copy_overlap(const Tensor& src, const Shape& src_origin, Tensor& dst,
                     const Shape& dst_origin) {
  Tensor s = src, d = dst;
  for (size_t k = 0; k < src_origin.size(); ++k) {
    int64_t lo = std::max(src_origin[k], dst_origin[k]);
    int64_t hi = std::min(src_origin[k] + src.size(k), dst_origin[k] + dst.size(k));
    if (hi <= lo) return 0;
    s = s.slice(k, lo - src_origin[k], hi - src_origin[k]);
    d = d.slice(k, lo - dst_origin[k], hi - dst_origin[k]);
  }
  copy_rows(d, s);
  return d.numel();
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
  // per flat buffer, and the shards are views of the host copy.
  const Tensor host_values = params.flat_values().to(Device::CPU);
  NamedTensors model;
  for (const Parameter& p : params.params()) {
    if (p.spec.stage_tie == StageTie::kCopy) continue;  // saved by the first stage
    const int64_t n = shape_numel(p.local_shape);
    model.emplace_back(p.spec.name,
                       host_values.slice(0, p.flat_offset, p.flat_offset + n).view(p.local_shape));
    model_meta[p.spec.name] =
        placement_json({p.spec.full_shape, p.spec.partition_dim, p.local_start, p.spec.vocab_rows});
  }
  add_checksums(model, model_meta);
  const std::string state_text = state.dump(2);
  model_meta["state_crc32c"] = std::to_string(crc32c(state_text.data(), state_text.size()));
  write_safetensors(rank_dir + "/" + kModelFileName, model, model_meta);

  if (!optimizer_flat_buffers.empty()) {
    int64_t total = 0;  // elements in the flat buffers
    for (const Parameter& p : params.params()) total += shape_numel(p.local_shape);
    std::map<std::string, std::string> meta = file_metadata(iteration, coords);
    nlohmann::json buffer_names = nlohmann::json::array();
    NamedTensors tensors;
    for (const auto& [buffer, flat] : optimizer_flat_buffers) {
      MT_CHECK(
          flat.defined() && flat.dtype() == DType::F32 && flat.dim() == 1 && flat.numel() == total,
          "optimizer buffer '", buffer, "' is ", flat.describe(), ", expected f32 [", total,
          "] laid out like the flat parameter values");
      buffer_names.push_back(buffer);
      const Tensor host = flat.to(Device::CPU);
      for (const Parameter& p : params.params()) {
        if (p.spec.stage_tie == StageTie::kCopy) continue;
        int64_t n = shape_numel(p.local_shape);
        std::string name = buffer + "." + p.spec.name;
        tensors.emplace_back(name,
                             host.slice(0, p.flat_offset, p.flat_offset + n).view(p.local_shape));
        meta[name] = placement_json(
            {p.spec.full_shape, p.spec.partition_dim, p.local_start, p.spec.vocab_rows});
      }
    }
    meta["optimizer_buffers"] = buffer_names.dump();
    add_checksums(tensors, meta);
    write_safetensors(rank_dir + "/" + kOptimizerFileName, tensors, meta);
  }
  write_file_durably(rank_dir + "/" + kStateFileName, state_text);
  fsync_directory(rank_dir);
}

CheckpointShardReader::CheckpointShardReader(const std::string& iteration_dir)
    : iteration_dir_(iteration_dir) {
  std::vector<RankDir> dirs = list_rank_dirs(iteration_dir);
  tp_size_ = dirs.back().tp_rank + 1;
  pp_size_ = dirs.back().pp_rank + 1;
  size_t with_optimizer = 0;
  for (const RankDir& d : dirs) {
    rank_dirs_.push_back(d.path);
    with_optimizer += fs::exists(d.path + "/" + kOptimizerFileName);
  }
  MT_REQUIRE(with_optimizer == 0 || with_optimizer == dirs.size(), "checkpoint '", iteration_dir,
             "': only ", with_optimizer, " of ", dirs.size(), " rank directories hold ",
             kOptimizerFileName);

  for (const RankDir& d : dirs) {
    std::vector<std::string> kinds = {kModelFileName};
    if (with_optimizer) kinds.push_back(kOptimizerFileName);
    for (const std::string& kind : kinds) {
      auto file = std::make_unique<SafetensorsReader>(d.path + "/" + kind);
      const std::string& format = file->metadata_value("format");
      MT_REQUIRE(format == kFormat, "checkpoint file '", file->path(), "' has format '", format,
                 "', expected '", kFormat, "'");
      RankCoordinates c{metadata_int(*file, "tensor_model_parallel_rank"),
                        metadata_int(*file, "tensor_model_parallel_size"),
                        metadata_int(*file, "pipeline_model_parallel_rank"),
                        metadata_int(*file, "pipeline_model_parallel_size")};
      MT_REQUIRE(c.tp_rank == d.tp_rank && c.tp_size == tp_size_ && c.pp_rank == d.pp_rank &&
                     c.pp_size == pp_size_,
                 "checkpoint file '", file->path(), "' says it is tensor rank ", c.tp_rank, " of ",
                 c.tp_size, ", pipeline rank ", c.pp_rank, " of ", c.pp_size,
                 ", but its directory makes it tensor rank ", d.tp_rank, " of ", tp_size_,
                 ", pipeline rank ", d.pp_rank, " of ", pp_size_);
      if (kind == kOptimizerFileName) {
        std::vector<std::string> buffers;
        try {
          buffers = nlohmann::json::parse(file->metadata_value("optimizer_buffers"))
                        .get<std::vector<std::string>>();
        } catch (const nlohmann::json::exception& e) {
          MT_THROW("checkpoint file '", file->path(),
                   "': metadata optimizer_buffers is not a list of names: ", e.what());
        }
        MT_REQUIRE(files_.size() == 1 || buffers == optimizer_buffers_, "checkpoint file '",
                   file->path(), "' holds different optimizer buffers than the other ranks");
        optimizer_buffers_ = buffers;
      }
      index_file(*file, kind == kModelFileName ? model_ : optimizer_);
      files_.push_back(std::move(file));
    }
  }
}

CheckpointShardReader::~CheckpointShardReader() = default;

void CheckpointShardReader::index_file(const SafetensorsReader& file,
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
    it->second.pieces.push_back({&file, p.slice_start, p.crc32c});
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
  read(model_, name, std::move(dst), partition_dim, start);
}

void CheckpointShardReader::read_optimizer(const std::string& buffer, const std::string& name,
                                           Tensor dst, int partition_dim, int64_t start) const {
  MT_REQUIRE(!optimizer_buffers_.empty(), "checkpoint '", iteration_dir_,
             "' holds no optimizer state (", kOptimizerFileName, ")");
  read(optimizer_, buffer + "." + name, std::move(dst), partition_dim, start);
}

void CheckpointShardReader::read(const std::map<std::string, ShardedTensor>& index,
                                 const std::string& name, Tensor dst, int partition_dim,
                                 int64_t start) const {
  auto it = index.find(name);
  MT_REQUIRE(it != index.end(), "checkpoint '", iteration_dir_, "' has no tensor '", name, "'");
  const ShardedTensor& t = it->second;
  const Shape& full = t.placement.full_shape;
  const Shape dst_origin = slice_origin(full.size(), partition_dim, start);
  bool fits = dst.dim() == int64_t(full.size());
  for (size_t k = 0; fits && k < full.size(); ++k)
    fits = dst_origin[k] + dst.size(k) <= full[k] &&
           (int(k) == partition_dim || dst.size(k) == full[k]);
  MT_REQUIRE(fits, "checkpoint '", iteration_dir_, "', tensor '", name, "': cannot read a slice ",
             shape_str(dst.shape()), " at ", start, " along dim ", partition_dim,
             " from the full shape ", shape_str(full));
  int64_t covered = 0;
  for (const Piece& piece : t.pieces) {
    verify(piece, name);
    Tensor src = piece.file->get(name);
    MT_REQUIRE(src.dtype() == dst.dtype(), "checkpoint file '", piece.file->path(), "', tensor '",
               name, "' is ", dtype_name(src.dtype()), ", expected ", dtype_name(dst.dtype()));
    covered +=
        copy_overlap(src, slice_origin(full.size(), t.placement.partition_dim, piece.slice_start),
                     dst, dst_origin);
    if (t.placement.partition_dim < 0) break;  // any one replica is the whole tensor
  }
  MT_REQUIRE(covered == dst.numel(), "checkpoint '", iteration_dir_, "', tensor '", name,
             "': the stored shards cover ", covered, " of the ", dst.numel(),
             " elements requested (missing or overlapping slices)");
}

void CheckpointShardReader::verify(const Piece& piece, const std::string& name) const {
  if (piece.crc32c < 0 || verified_.count({piece.file, name})) return;
  const Tensor t = piece.file->get(name);
  const uint32_t actual = tensor_crc32c(t);
  char hex[64];
  std::snprintf(hex, sizeof hex, "0x%08x, recorded 0x%08x", actual, uint32_t(piece.crc32c));
  MT_REQUIRE(actual == uint32_t(piece.crc32c), "checkpoint file '", piece.file->path(),
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
