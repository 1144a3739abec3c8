#include "checkpoint/megatron_lm_torch_dist_writer.h"

#include <filesystem>
#include <optional>
#include <regex>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_lm_torch.h"
#include "checkpoint/megatron_lm_trainer_state.h"
#include "checkpoint/regions.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/torch_file.h"
#include "distributed/agreement.h"
#include "distributed/broadcast_bytes.h"
#include "optim/divergence_guard.h"
#include "optim/optimizer.h"

namespace megatron {

namespace {

// Where a parameter goes in Megatron-Core's sharded state dict.
struct CoreKey {
  std::string key;
  int64_t layer = -1;  // >= 0: stacked, the tensor's index on the leading layer axis
  // SwiGLU's linear_fc1: megatron-cpp's [2, ffn, ...] is Megatron's [2·ffn, ...].
  bool merge_halves = false;
};

std::optional<CoreKey> core_key(const ParamSpec& spec) {
  const std::string& name = spec.name;
  if (name == "embedding.word_embeddings.weight" ||
      name == "embedding.position_embeddings.weight" || name == "output_layer.weight")
    return CoreKey{name};
  if (name == "final_layernorm.weight" || name == "final_layernorm.bias")
    return CoreKey{"decoder." + name};
  static const std::regex layer_pattern(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(name, m, layer_pattern)) return std::nullopt;
  const std::string suffix = megatron_lm_layer_suffix(m[2].str(), MegatronLmNaming::kCore);
  if (suffix.empty()) return std::nullopt;
  const bool fc1 = m[2].str().rfind("mlp.dense_h_to_4h.", 0) == 0;
  const size_t plain_rank = m[2].str().ends_with(".weight") ? 2 : 1;
  return CoreKey{"decoder.layers." + suffix, std::stoll(m[1].str()),
                 fc1 && spec.full_shape.size() == plain_rank + 1};
}

CoreKey require_core_key(const ParamSpec& spec) {
  const std::optional<CoreKey> key = core_key(spec);
  MT_REQUIRE(key, "parameter ", spec.name,
             " has no key in Megatron-Core's GPT checkpoints as megatron-cpp writes them: "
             "--ckpt-format torch_dist saves GPT-2 and Llama-style models (no mixture of "
             "experts, multi-latent attention, QK norms, multi-token prediction or BERT yet); "
             "save in megatron-cpp's format (leave out --ckpt-format)");
  return *key;
}

// Megatron's global shape of `spec`'s full tensor.
Shape core_global_shape(const ParamSpec& spec, const CoreKey& key, int64_t num_layers) {
  Shape shape = spec.full_shape;
  if (key.merge_halves) {
    shape[1] *= shape[0];
    shape.erase(shape.begin());
  }
  if (key.layer >= 0) shape.insert(shape.begin(), num_layers);
  return shape;
}

// `t` as a contiguous host tensor: itself when it is one already (the chunks are written before
// training goes on, so the rank's state needs no copy), else a copy.
Tensor host_contiguous(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.to(Device::CPU);
  return h.is_contiguous() ? h : h.clone();
}

// The chunks of the box `box` (megatron-cpp's full-tensor coordinates) of parameter `spec`.
void add_box_chunks(const std::string& key, const ParamSpec& spec, const CoreKey& core,
                    int64_t num_layers, const PlacedBox& box, std::vector<DcpChunkToWrite>& out) {
  if (box.view.numel() == 0) return;
  const Shape global = core_global_shape(spec, core, num_layers);
  auto add = [&](Shape offsets, Tensor data) {
    if (core.layer >= 0) {
      offsets.insert(offsets.begin(), core.layer);
      Shape sizes = data.shape();
      sizes.insert(sizes.begin(), 1);
      data = data.view(sizes);
    }
    out.push_back({key, global, std::move(offsets), std::move(data)});
  };
  if (!core.merge_halves) {
    add(box.origin, host_contiguous(box.view));
    return;
  }
  // One chunk per half: rows [k·ffn + i0, k·ffn + i1) of Megatron's [2·ffn, ...].
  const int64_t ffn = spec.full_shape[1];
  for (int64_t k = 0; k < box.view.size(0); ++k) {
    Shape offsets(box.origin.begin() + 1, box.origin.end());
    offsets[0] += (box.origin[0] + k) * ffn;
    const Tensor half = host_contiguous(box.view.slice(0, k, k + 1));
    add(std::move(offsets), half.view(Shape(half.shape().begin() + 1, half.shape().end())));
  }
}

// Where the slice of `p` sits in its full tensor.
Shape slice_origin(const Parameter& p) {
  Shape origin(p.spec.full_shape.size(), 0);
  if (!p.replicated()) origin[size_t(p.spec.partition_dim)] = p.local_start;
  return origin;
}

// Megatron-Core's name of megatron-cpp's optimizer buffer, or "".
std::string optimizer_state_name(const std::string& buffer) {
  if (buffer == "exp_avg" || buffer == "exp_avg_sq") return buffer;
  if (buffer == kMasterWeightsBuffer) return "fp32_param";
  return "";
}

constexpr const char* kConfigJson =
    R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1, )"
    R"("common_backend": "torch", "common_backend_version": 1})";

}  // namespace

std::string megatron_lm_torch_dist_unwritable(const ParameterStore& params,
                                              const std::vector<std::string>& optimizer_buffers) {
  for (const Parameter& p : params.params())
    if (p.spec.stage_tie != StageTie::kCopy && !core_key(p.spec))
      return "parameter " + p.spec.name +
             " has no key in Megatron-Core's GPT checkpoints as megatron-cpp writes them (GPT-2 "
             "and Llama-style models are written; mixture of experts, multi-latent attention, QK "
             "norms, multi-token prediction and BERT not yet)";
  for (const std::string& buffer : optimizer_buffers)
    if (optimizer_state_name(buffer).empty())
      return "the optimizer state '" + buffer +
             "' has no name in Megatron-Core's torch_dist checkpoints (Adam's exp_avg, "
             "exp_avg_sq and fp32 main params do)";
  return "";
}

std::vector<DcpChunkToWrite> megatron_lm_torch_dist_chunks(
    const ParameterStore& params, const std::map<std::string, Tensor>& optimizer_flat_buffers,
    FlatRange optimizer_range, int64_t num_layers, bool write_model) {
  std::vector<DcpChunkToWrite> out;
  const int64_t total = params.flat_values().numel();
  const int64_t range_begin = optimizer_range.begin;
  const int64_t range_end = optimizer_range.end < 0 ? total : optimizer_range.end;
  for (const auto& [buffer, data] : optimizer_flat_buffers)
    MT_REQUIRE(!optimizer_state_name(buffer).empty(), "the optimizer state '", buffer,
               "' has no name in Megatron-Core's torch_dist checkpoints (Adam's exp_avg, "
               "exp_avg_sq and fp32 main params do): save in megatron-cpp's format (leave out "
               "--ckpt-format), or with --no-save-optim");
  for (const Parameter& p : params.params()) {
    // The last stage's copy of a tied embedding is the embedding's replica in Megatron; a
    // replicated tensor's main replica is TP rank 0's.
    if (p.spec.stage_tie == StageTie::kCopy) continue;
    const CoreKey core = require_core_key(p.spec);
    if (p.replicated() && params.tp_rank() != 0) continue;
    const Shape origin = slice_origin(p);
    if (write_model)
      for (const PlacedBox& box : part_boxes(origin, SlicePart::whole(p.local_shape), p.value))
        add_box_chunks(core.key, p.spec, core, num_layers, box, out);
    const int64_t begin = std::max(p.flat_offset, range_begin);
    const int64_t end = std::min(p.flat_offset + p.value.numel(), range_end);
    if (begin >= end) continue;
    for (const auto& [buffer, data] : optimizer_flat_buffers) {
      const Tensor piece = data.slice(0, begin - range_begin, end - range_begin);
      const SlicePart part{p.local_shape, begin - p.flat_offset, end - p.flat_offset};
      for (const PlacedBox& box : part_boxes(origin, part, piece))
        add_box_chunks("optimizer.state." + optimizer_state_name(buffer) + "." + core.key, p.spec,
                       core, num_layers, box, out);
    }
  }
  return out;
}

PyValue megatron_lm_torch_dist_common_state(const nlohmann::json& state,
                                            const ParameterStore& params, int tp, int pp,
                                            bool mixed_precision) {
  const nlohmann::json args = megatron_lm_saved_args(state, tp, pp, "torch_dist");
  PyValue root = PyValue::dict();
  PyDict& d = root.as_dict("");
  d.set(PyValue::str("args"), megatron_lm_args_namespace(args));
  d.set(PyValue::str("checkpoint_version"), PyValue::real(3.0));
  d.set(PyValue::str("num_floating_point_operations_so_far"), PyValue::integer(0));
  // How Megatron-Core (2025+) laid the sharded keys out: one stacked tensor per layer module,
  // optimizer keys without a chained-optimizer prefix.
  PyValue content = PyValue::dict();
  content.as_dict("").set(PyValue::str("singleton_local_shards"), PyValue::boolean(false));
  content.as_dict("").set(PyValue::str("chained_optim_avoid_prefix"), PyValue::boolean(true));
  d.set(PyValue::str("content_metadata"), content);
  std::pair<int64_t, int64_t> groups{0, 0};
  for (const Parameter& p : params.params()) ++(p.spec.weight_decay ? groups.first : groups.second);
  add_megatron_lm_trainer_state(d, state, args, mixed_precision, groups);
  return root;
}

void write_megatron_lm_torch_dist_common(const std::string& iteration_dir, const PyValue& common) {
  torch_save(iteration_dir + "/common.pt", common);
  write_file_durably(iteration_dir + "/metadata.json", kConfigJson);
}

void save_megatron_lm_torch_dist(const std::string& save_dir, int64_t iteration,
                                 const ParameterStore& params,
                                 const std::map<std::string, Tensor>& optimizer_flat_buffers,
                                 const nlohmann::json& state, const ParallelState& ps,
                                 const OptimizerShard& optimizer_shard) {
  MT_CHECK(ps.world != nullptr, "save_megatron_lm_torch_dist: no world communicator");
  MT_REQUIRE(ps.ep_size == 1,
             "--ckpt-format torch_dist saves no mixture-of-experts model yet "
             "(expert parallelism); leave out --ckpt-format");
  std::string tmp;
  std::unique_ptr<CheckpointTransaction> transaction = begin_save(save_dir, iteration, ps, tmp);
  const bool sharded = optimizer_shard.dp_size > 1;
  std::string mine;  // this rank's item records
  run_on_all_ranks(*ps.world, "writing the checkpoint", [&] {
    // Data-parallel replicas hold identical values (and, unless sharded, optimizer state).
    const bool model = ps.dp_cp_rank == 0;
    if (!model && !sharded) return;
    check_finite_for_checkpoint(iteration, params, optimizer_flat_buffers, optimizer_shard.range);
    const int64_t num_layers = state.at("model").at("num_layers").get<int64_t>();
    const std::vector<DcpChunkToWrite> chunks = megatron_lm_torch_dist_chunks(
        params, model || sharded ? optimizer_flat_buffers : std::map<std::string, Tensor>{},
        optimizer_shard.range, num_layers, model);
    if (chunks.empty()) return;
    mine = dcp_items_text(
        write_dcp_data_file(tmp, "__" + std::to_string(ps.rank) + "_0.distcp", chunks, {}));
  });
  // Every rank's records to rank 0, one broadcast per rank.
  std::vector<DcpWrittenItem> items;
  for (int r = 0; r < ps.world->size(); ++r) {
    const std::string text = broadcast_string(*ps.world, mine, r);
    if (ps.rank != 0 || text.empty()) continue;
    for (DcpWrittenItem& i : dcp_items_from_text(text)) items.push_back(std::move(i));
  }
  run_on_all_ranks(*ps.world, "committing the checkpoint", [&] {
    if (ps.rank != 0) return;
    write_megatron_lm_torch_dist_common(
        tmp,
        megatron_lm_torch_dist_common_state(state, params, ps.tp_size, ps.pp_size,
                                            optimizer_flat_buffers.count(kMasterWeightsBuffer)));
    const std::string final_dir =
        std::filesystem::absolute(save_dir + "/" + iteration_dir_name(iteration)).string();
    write_dcp_metadata(tmp, items, final_dir, tmp.substr(tmp.rfind(".tmp-") + 5));
    fsync_directory(tmp);
    commit_save(*transaction, save_dir);
  });
}

}  // namespace megatron
